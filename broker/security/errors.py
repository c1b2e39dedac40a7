"""The SASL errors both protocols answer, with Kafka's codes."""

from __future__ import annotations

from kafka_format.errors import StrataError
from protocol import ErrorCode


class SaslAuthenticationFailedError(StrataError):
    """Kafka's SASL_AUTHENTICATION_FAILED (58): the exchange failed; the connection closes."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class IllegalSaslStateError(StrataError):
    """Kafka's ILLEGAL_SASL_STATE (34): a SASL request the connection's state does not allow."""

    code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedSaslMechanismError(StrataError):
    """Kafka's UNSUPPORTED_SASL_MECHANISM (33): a mechanism this listener does not enable."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
