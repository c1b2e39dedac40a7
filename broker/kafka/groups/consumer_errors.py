"""The Kafka error codes the consumer group coordinator answers with, and
HeartbeatError, which carries one with its message out of a request's handling."""

from __future__ import annotations

NONE = 0
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
NON_EMPTY_GROUP = 68
INVALID_REGULAR_EXPRESSION = 128
NOT_COORDINATOR = 16
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


__all__ = ["FENCED_INSTANCE_ID", "FENCED_MEMBER_EPOCH", "GROUP_ID_NOT_FOUND", "GROUP_MAX_SIZE_REACHED",
           "ILLEGAL_GENERATION", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_REGULAR_EXPRESSION", "INVALID_REQUEST",
           "MEMBER_ID_REQUIRED", "NONE", "NON_EMPTY_GROUP", "NOT_COORDINATOR", "REBALANCE_IN_PROGRESS",
           "STALE_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID", "UNRELEASED_INSTANCE_ID", "UNSUPPORTED_ASSIGNOR",
           "HeartbeatError"]
