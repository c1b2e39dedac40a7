"""Error codes and the one exception the codec raises for bad bytes.

Contract:
- `ErrorCode` holds Kafka's numbers for every code the native protocol uses
  (the table in NATIVE-PROTOCOL.md plus the codes storage raises beyond it:
  KAFKA_STORAGE_ERROR, INVALID_TIMESTAMP, the idempotent-producer codes 45-47, and Kafka's SASL
  state codes 33-34 that SASL_AUTHENTICATE answers).
- `ProtocolError(code, message)` is the only exception the codec raises for bytes
  it cannot accept. `code` is INVALID_REQUEST (a malformed request or frame) or
  CORRUPT_MESSAGE (a malformed response, seen by the client side). The server
  turns it into a wire error at its boundary; nothing in `protocol` does I/O.
- Caller mistakes on the encoding side (a value out of range, a None where the
  wire has no null) raise ValueError, not ProtocolError: those are bugs, not bytes.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    MESSAGE_TOO_LARGE = 10
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    INVALID_RECORD = 87


def as_error_code(value: int) -> ErrorCode | int:
    """`ErrorCode(value)` when the code is known, else the plain int (a newer peer
    may send a Kafka code this table does not list; keep it rather than fail)."""
    try:
        return ErrorCode(value)
    except ValueError:
        return value


class ProtocolError(Exception):
    """Bytes that do not follow the wire format. `code` says what to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = ErrorCode(code)
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} ({self.code.name})"
