"""The Kafka error codes share groups answer with (Kafka's `Errors`), and
ShareError, which carries one with its message out of a share operation."""

from __future__ import annotations

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_COORDINATOR = 16
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
GROUP_AUTHORIZATION_FAILED = 30
INVALID_REQUEST = 42
INVALID_CONFIG = 40
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_LEADER_EPOCH = 74
UNKNOWN_TOPIC_ID = 100
FENCED_MEMBER_EPOCH = 110
INVALID_RECORD_STATE = 121
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
FENCED_STATE_EPOCH = 124
SHARE_SESSION_LIMIT_REACHED = 133

NAMES = {code: name for name, code in globals().items() if name.isupper() and isinstance(code, int)}


class ShareError(Exception):
    """A share operation refused with Kafka's error `code` and a message naming the problem."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"ShareError({NAMES.get(self.code, self.code)}, {self.message!r})"


__all__ = ["FENCED_LEADER_EPOCH", "FENCED_MEMBER_EPOCH", "FENCED_STATE_EPOCH", "GROUP_AUTHORIZATION_FAILED",
           "GROUP_ID_NOT_FOUND", "GROUP_MAX_SIZE_REACHED", "INVALID_CONFIG", "INVALID_GROUP_ID",
           "INVALID_RECORD_STATE", "INVALID_REQUEST", "INVALID_SESSION_TIMEOUT", "INVALID_SHARE_SESSION_EPOCH",
           "NAMES", "NONE", "NON_EMPTY_GROUP", "NOT_COORDINATOR", "OFFSET_OUT_OF_RANGE",
           "SHARE_SESSION_LIMIT_REACHED", "SHARE_SESSION_NOT_FOUND", "UNKNOWN_MEMBER_ID", "UNKNOWN_TOPIC_ID",
           "UNKNOWN_TOPIC_OR_PARTITION", "ShareError"]
