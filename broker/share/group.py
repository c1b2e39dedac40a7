"""Share-group membership: Kafka 4.2's ShareGroupHeartbeat (76) semantics as a
pure state machine over an injected time (`now_ms` arguments) and an injected
view of the topics (name -> topic id and partition count).

- Join: MemberEpoch 0 with a member id chosen by the client (non-empty) and the
  subscribed topic names. A member id already in the group rejoins.
  group.share.max.size members at most (GROUP_MAX_SIZE_REACHED).
- Leave: MemberEpoch -1; the answer carries epoch -1 and the member's records are
  released by the caller (`removed` of the result).
- Heartbeat: an unknown member is UNKNOWN_MEMBER_ID; an epoch other than the
  member's FENCED_MEMBER_EPOCH. SubscribedTopicNames null keeps the subscription.
- A change of members, subscriptions or subscribed topics' partition counts
  bumps the group epoch and computes the target assignment (assignor.assign,
  assignment epoch = group epoch). At its next heartbeat a member takes its
  target at once (share groups have no revocation step): its epoch becomes the
  assignment epoch. The assignment is sent when it changed, and on a join.
- Session timeout (share.session.timeout.ms): `expire(now_ms)` removes members
  silent for longer, bumping the epoch. Each answer carries
  share.heartbeat.interval.ms.
- States (ShareGroupDescribe): Empty (no members), Stable, Dead (deleted).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from . import assignor
from .config import ShareGroupSettings
from .errors import (
    FENCED_MEMBER_EPOCH,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REQUEST,
    NON_EMPTY_GROUP,
    UNKNOWN_MEMBER_ID,
    ShareError,
)

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
LEAVE_EPOCH = -1
DEFAULT_MAX_SIZE = 200  # group.share.max.size


class TopicInfo(NamedTuple):
    topic_id: uuid.UUID
    partitions: int


TopicLookup = Callable[[str], TopicInfo | None]


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    assignment: assignor.Assignment = field(default_factory=dict)
    last_heartbeat_ms: int = 0
    sent_epoch: int = -1  # the member epoch of the assignment last sent


class HeartbeatResult(NamedTuple):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[uuid.UUID, list[int]] | None  # None: unchanged since the last answer
    removed: tuple[str, ...] = ()  # members that left (their acquired records are released)


@dataclass
class ShareGroup:
    group_id: str
    settings: ShareGroupSettings = field(default_factory=ShareGroupSettings)
    max_size: int = DEFAULT_MAX_SIZE
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    deleted: bool = False
    target: dict[str, assignor.Assignment] = field(default_factory=dict)  # the target assignment
    _topic_partitions: dict[uuid.UUID, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if self.deleted:
            return DEAD
        return STABLE if self.members else EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def heartbeat(self, member_id: str, member_epoch: int, subscribed: Sequence[str] | None, now_ms: int,
                  topics: TopicLookup, rack_id: str | None = None, client_id: str = "",
                  client_host: str = "") -> HeartbeatResult:
        """One ShareGroupHeartbeat; ShareError for a refused one."""
        if not member_id:
            raise ShareError(INVALID_REQUEST, "MemberId can't be empty.")
        interval = self.settings.heartbeat_interval_ms
        if member_epoch == LEAVE_EPOCH:
            if member_id not in self.members:
                raise ShareError(UNKNOWN_MEMBER_ID, f"member {member_id} is not in share group {self.group_id}")
            self._remove([member_id], topics)
            return HeartbeatResult(member_id, LEAVE_EPOCH, interval, None, (member_id,))
        if member_epoch < LEAVE_EPOCH:
            raise ShareError(INVALID_REQUEST, f"MemberEpoch {member_epoch} is invalid.")
        member = self.members.get(member_id)
        changed = False
        if member_epoch == 0:
            if member is None:
                if not subscribed:
                    raise ShareError(INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
                if len(self.members) >= self.max_size:
                    raise ShareError(GROUP_MAX_SIZE_REACHED, f"share group {self.group_id} has reached its maximum "
                                                             f"size of {self.max_size} members")
                member = self.members[member_id] = ShareMember(member_id)
                changed = True
            member.sent_epoch = -1  # a (re)join gets its assignment
        elif member is None:
            raise ShareError(UNKNOWN_MEMBER_ID, f"member {member_id} is not in share group {self.group_id}")
        elif member_epoch != member.member_epoch:
            raise ShareError(FENCED_MEMBER_EPOCH, f"member {member_id} sent epoch {member_epoch}, its epoch is "
                                                  f"{member.member_epoch}")
        self.deleted = False
        member.last_heartbeat_ms = now_ms
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            member.subscribed = tuple(sorted(set(subscribed)))
            changed = True
        if changed or self._metadata_changed(topics):
            self._rebalance(topics)
        # The member moves to its target assignment at once (share groups revoke nothing first).
        target = self.target.get(member_id, {})
        send = None
        if member.member_epoch != self.assignment_epoch:
            member.member_epoch = self.assignment_epoch
        if target != member.assignment or member.sent_epoch == -1:
            member.assignment = {t: set(ps) for t, ps in target.items()}
            send = {t: sorted(ps) for t, ps in target.items()}
        member.sent_epoch = member.member_epoch
        return HeartbeatResult(member_id, member.member_epoch, interval, send)

    def expire(self, now_ms: int, topics: TopicLookup) -> list[str]:
        """Remove the members whose session timed out; their ids."""
        timeout = self.settings.session_timeout_ms
        gone = [m for m, member in self.members.items() if now_ms - member.last_heartbeat_ms > timeout]
        if gone:
            self._remove(gone, topics)
        return gone

    def next_expiry_ms(self) -> int | None:
        if not self.members:
            return None
        return min(m.last_heartbeat_ms for m in self.members.values()) + self.settings.session_timeout_ms + 1

    def on_metadata(self, topics: TopicLookup) -> bool:
        """Recompute the assignment when subscribed topics appeared, vanished or grew."""
        if self._metadata_changed(topics):
            self._rebalance(topics)
            return True
        return False

    def delete(self) -> None:
        """DeleteGroups: only an empty group (NON_EMPTY_GROUP otherwise)."""
        if self.members:
            raise ShareError(NON_EMPTY_GROUP, f"share group {self.group_id} has members")
        self.deleted = True

    def _remove(self, member_ids: Iterable[str], topics: TopicLookup) -> None:
        for m in member_ids:
            self.members.pop(m, None)
        self._rebalance(topics)

    def _resolve(self, topics: TopicLookup) -> dict[str, TopicInfo]:
        found: dict[str, TopicInfo] = {}
        for name in self.subscribed_topic_names():
            info = topics(name)
            if info is not None and info.partitions > 0:
                found[name] = info
        return found

    def _metadata_changed(self, topics: TopicLookup) -> bool:
        return {i.topic_id: i.partitions for i in self._resolve(topics).values()} != self._topic_partitions

    def _rebalance(self, topics: TopicLookup) -> None:
        resolved = self._resolve(topics)
        self._topic_partitions = {i.topic_id: i.partitions for i in resolved.values()}
        self.group_epoch += 1
        subscriptions = {m.member_id: {resolved[t].topic_id for t in m.subscribed if t in resolved}
                         for m in self.members.values()}
        target = assignor.assign(subscriptions, self._topic_partitions,
                                 {m.member_id: m.assignment for m in self.members.values()})
        self.target = target
        self.assignment_epoch = self.group_epoch

    def assigned_members(self, topic_id: uuid.UUID, partition: int) -> list[str]:
        return sorted(m.member_id for m in self.members.values() if partition in m.assignment.get(topic_id, ()))


__all__ = ["DEAD", "EMPTY", "LEAVE_EPOCH", "STABLE", "HeartbeatResult", "ShareGroup", "ShareMember", "TopicInfo",
           "TopicLookup"]
