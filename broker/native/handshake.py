"""Version 2's connection setup: HANDSHAKE and SASL_AUTHENTICATE (NATIVE-PROTOCOL.md).

Contract:
- HANDSHAKE settles the version (`NativeSession.agree`), keeps the client id
  (client quotas) and lists the connection's listener's SASL mechanisms
  (`listener_sasl_mechanisms`).
- SASL_AUTHENTICATE runs one round of the connection's SaslSession
  (broker/security/sasl.py; the gate before success is SessionHandlers'); any
  failure answers SASL_AUTHENTICATION_FAILED with its reason after
  connection.failed.authentication.delay.ms and closes the connection. On a
  listener without SASL it answers ILLEGAL_SASL_STATE before a version-2
  HANDSHAKE, else UNSUPPORTED_SASL_MECHANISM.
"""

from __future__ import annotations

from broker.net.request_handlers import CloseAfterReply, Reply
from kafka_format.errors import StrataError
from protocol import (
    ErrorCode,
    HandshakeRequest,
    HandshakeResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    encode_response,
)

from ..security.errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from ..security.sasl import sasl_failure_delay
from .base import NativeApiBase
from .session_state import NativeSession, listener_sasl_mechanisms


class HandshakeApi(NativeApiBase):
    """HANDSHAKE, SASL_AUTHENTICATE."""

    async def handshake(self, req: HandshakeRequest, session: NativeSession) -> Reply:
        version = session.agree(req.version)
        session.client_id = req.client_id
        mechanisms = listener_sasl_mechanisms(session.context)
        return [encode_response(HandshakeResponse(ErrorCode.NONE, version, mechanisms))]

    async def sasl_authenticate(self, req: SaslAuthenticateRequest, session: NativeSession) -> Reply:
        sasl = session.context.sasl
        if sasl is None:  # a listener that requires no SASL
            if session.version < 2:
                raise IllegalSaslStateError("SASL_AUTHENTICATE before a HANDSHAKE of version 2")
            raise UnsupportedSaslMechanismError(
                f"SASL mechanism {req.mechanism!r} is not enabled on this listener (enabled: none)")
        try:
            if session.version < 2:
                raise SaslAuthenticationFailedError("SASL_AUTHENTICATE before a HANDSHAKE of version 2")
            reply, lifetime = sasl.authenticate(req.mechanism, bytes(req.auth_bytes))
        except StrataError as e:  # any failed authentication: SASL_AUTHENTICATION_FAILED, then close
            await sasl_failure_delay(sasl)
            raise CloseAfterReply(session.error(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e))) from None
        return [encode_response(SaslAuthenticateResponse(ErrorCode.NONE, reply, lifetime))]

