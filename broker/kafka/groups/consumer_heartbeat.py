"""A ConsumerGroupHeartbeat request and answer as the consumer coordinator
(consumer_coordinator.py) sees them, and the checks Kafka makes of a request before
the group state machine reads it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from .assignors import Partition
from .consumer_errors import INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, HeartbeatError
from .consumer_group import LEAVE_STATIC_EPOCH

log = structlog.get_logger("strata.kafka.consumer_groups")


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: tuple[str, ...] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: set[Partition] | None = None
    client_id: str = ""
    client_host: str = ""
    # Whether the caller may DESCRIBE a topic (ACLs); None: every topic.
    may_describe: Callable[[str], bool] | None = None


@dataclass(slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: set[Partition] | None = None


def check_request(req: HeartbeatRequest, assignor_names: list[str]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: INVALID_REQUEST for a
    blank id (only whitespace counts as empty, as Java's trim), a join (epoch 0)
    without its rebalance timeout, without an empty TopicPartitions list, or with
    neither topic names nor a regex (an empty list and an empty regex are nothing),
    a static leave (-2) without an instance id, or an epoch below -2."""
    if blank(req.member_id):
        raise HeartbeatError(INVALID_REQUEST, "MemberId can't be empty.")
    if blank(req.group_id):
        raise HeartbeatError(INVALID_REQUEST, "GroupId can't be empty.")
    if req.instance_id is not None and blank(req.instance_id):
        raise HeartbeatError(INVALID_REQUEST, "InstanceId can't be empty.")
    if req.rack_id is not None and blank(req.rack_id):
        raise HeartbeatError(INVALID_REQUEST, "RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise HeartbeatError(INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise HeartbeatError(INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_names and not req.subscribed_regex:
            raise HeartbeatError(INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be "
                                                  "set in first request.")
    elif req.member_epoch == LEAVE_STATIC_EPOCH and req.instance_id is None:
        raise HeartbeatError(INVALID_REQUEST, "InstanceId can't be null.")
    elif req.member_epoch < LEAVE_STATIC_EPOCH:
        raise HeartbeatError(INVALID_REQUEST, "MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignor_names:
        raise HeartbeatError(UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                                                   f"Supported assignors: {', '.join(assignor_names)}.")


def log_refusal(req: HeartbeatRequest, e: HeartbeatError) -> None:
    """Log a refused heartbeat with its reason: INVALID_REQUEST (a client bug, or a
    rule Strata applies differently from Kafka) at info with the request's fields,
    the routine answers of the protocol (fenced, unknown member, ...) at debug."""
    fields = {"group": req.group_id, "member": req.member_id, "epoch": req.member_epoch,
              "error": e.code, "reason": e.message, "client_id": req.client_id, "client_host": req.client_host}
    if e.code != INVALID_REQUEST:
        log.debug("consumer_group_heartbeat_refused", **fields)
        return
    owned = sorted(req.owned) if req.owned is not None else None
    log.info("consumer_group_heartbeat_refused", **fields, instance_id=req.instance_id, rack_id=req.rack_id,
             rebalance_timeout_ms=req.rebalance_timeout_ms, subscribed_names=req.subscribed_names,
             subscribed_regex=req.subscribed_regex, server_assignor=req.server_assignor, owned=owned)


_JAVA_WHITESPACE = "".join(map(chr, range(0x21)))  # what Java's String.trim() strips


def blank(text: str) -> bool:
    """Empty once trimmed as Kafka's throwIfEmptyString trims."""
    return not text.strip(_JAVA_WHITESPACE)


_NOT_RE2 = re.compile(r"\(\?<?[=!]|\(\?\(|\(\?P=|\\[1-9]")


def not_re2(text: str) -> str | None:
    """What makes `text` something RE2 (Kafka's regex engine) refuses though Python
    accepts it: lookaround, backreferences, conditionals; None when nothing does."""
    found = _NOT_RE2.search(text)
    if found is None:
        return None
    return f"`{found.group()}` at {found.start()} (lookaround, backreferences and conditionals are not RE2)"
