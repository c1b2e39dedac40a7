"""The client's exceptions: one family, so callers can catch `StrataClientError`.

Contract:
- `StrataClientError(message, code=None)`: `code` is the broker's error code (an
  `ErrorCode` member, or a plain int for a code the table does not know) and
  `name` its name (`"UNKNOWN_TOPIC_OR_PARTITION"`, or None when the failure is
  not a broker answer). `str(e)` is one line that ends with the name in
  parentheses when there is one, ready to print.
- `BrokerUnreachable`: no connection could be made, or the connection broke
  while requests were outstanding. Retriable: the producer retries it.
- `RequestTimedOut`: no answer within the request timeout. The connection is
  closed (answers come back in order, so a late one would be matched to the
  wrong request); also retriable.
- `OffsetOutOfRange`, `NoOffsetForPartition`: consumer position problems
  (`auto_offset_reset="none"`).
- `raise_for(code, context, reason=None)` turns a non-NONE code from a response
  into the matching exception; every response the client reads goes through it.
  `reason` is the broker's own words (native protocol version 2's `message`,
  e.g. `retention.ms: 'abc' is not a valid long`): the message says it in place
  of the code's generic explanation, and `e.reason` keeps it.
"""

from __future__ import annotations

from protocol import ErrorCode
from protocol.errors import as_error_code

__all__ = ["StrataClientError", "BrokerUnreachable", "RequestTimedOut", "OffsetOutOfRange",
           "NoOffsetForPartition", "AuthenticationFailed", "error_name", "raise_for"]


def error_name(code: int | None) -> str | None:
    if code is None:
        return None
    known = as_error_code(code)
    return known.name if isinstance(known, ErrorCode) else f"UNKNOWN_ERROR_CODE_{code}"


class StrataClientError(Exception):
    """Any failure the client reports; `code`/`name` set when the broker said so."""

    retriable = False

    def __init__(self, message: str, code: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = as_error_code(code) if code is not None else None
        self.name = error_name(code)
        self.reason = reason  # the broker's words, when it gave any

    def __str__(self) -> str:
        return f"{self.message} ({self.name})" if self.name else self.message


class BrokerUnreachable(StrataClientError):
    retriable = True


class RequestTimedOut(StrataClientError):
    retriable = True


class AuthenticationFailed(StrataClientError):
    """SASL authentication failed (SASL_AUTHENTICATION_FAILED, or no usable credentials);
    not retriable: the same credentials fail again."""

    def __init__(self, message: str):
        super().__init__(message)


class OffsetOutOfRange(StrataClientError):
    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message, ErrorCode.OFFSET_OUT_OF_RANGE, reason)


class NoOffsetForPartition(StrataClientError):
    """No committed offset and `auto_offset_reset="none"`."""


# Short, human explanations for the codes users meet most; the name follows anyway.
_EXPLAIN: dict[int, str] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "unknown topic or partition",
    ErrorCode.TOPIC_ALREADY_EXISTS: "topic already exists",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "invalid topic name",
    ErrorCode.INVALID_PARTITIONS: "invalid number of partitions",
    ErrorCode.INVALID_CONFIG: "invalid config",
    ErrorCode.OFFSET_OUT_OF_RANGE: "offset out of range",
    ErrorCode.MESSAGE_TOO_LARGE: "message too large",
    ErrorCode.RECORD_LIST_TOO_LARGE: "message set too large",
    ErrorCode.CORRUPT_MESSAGE: "corrupt message",
    ErrorCode.INVALID_RECORD: "invalid record",
    ErrorCode.INVALID_REQUEST: "invalid request",
}


def raise_for(code: int, context: str, reason: str | None = None) -> None:
    """Raise the exception for `code` (a no-op for NONE); `context` says what was
    asked, `reason` is the broker's explanation when it sent one."""
    if code == ErrorCode.NONE:
        return
    what = reason or _EXPLAIN.get(code, "broker error")
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        raise OffsetOutOfRange(f"{context}: {what}", reason)
    raise StrataClientError(f"{context}: {what}", code, reason)
