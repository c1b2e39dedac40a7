"""The classic members of consumer groups (Kafka 4's online migration): their
JoinGroup, SyncGroup, Heartbeat and LeaveGroup, as Kafka's
classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup answer them.

`ClassicMembers` is a part of ConsumerGroupCoordinator (consumer_coordinator.py):
the coordinator owns the groups and the steps of its state machine (topics,
epochs, target assignment, timers, records, conversions), declared below for the
type checker, and these methods drive a classic member through them:

- JoinGroup is answered at once with no leader: the member's subscription and
  owned partitions come from its first protocol's metadata (a
  ConsumerProtocolSubscription), a changed subscription bumps the group epoch, and
  the member is reconciled as a ConsumerGroupHeartbeat would reconcile it
  (revoke before assign). Its generation is its member epoch. v4+ dynamic members
  get MEMBER_ID_REQUIRED first. A static member replacing the last member that
  speaks the consumer protocol may turn the group classic again.
- SyncGroup gives the partitions it may own now, in the version of its metadata;
  REBALANCE_IN_PROGRESS while it must join again (the group epoch moved on and it
  is not giving partitions up).
- Heartbeat restarts its session (the timeout it joined with) and says
  REBALANCE_IN_PROGRESS when it is behind the group epoch, must give partitions
  up, or may take partitions that were freed for it.
- LeaveGroup removes it (by member id, or by instance id).
- A member that does not SyncGroup after its JoinGroup, or does not join again
  after being told to, within its rebalance timeout is removed (Kafka's sync and
  join timeouts).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from .consumer_errors import (
    FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    NONE,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    HeartbeatError,
)
from .consumer_group import (
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    reconcile,
)
from .consumer_protocol import PROTOCOL_TYPE, encode_assignment, parse_subscription, version_of
from .group import JoinResult, SyncResult

if TYPE_CHECKING:
    import asyncio

log = structlog.get_logger("strata.kafka.consumer_groups")


@dataclass(slots=True)
class ClassicJoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True


class ClassicMembers:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members of consumer groups."""

    config: Any
    closed: bool
    loop: asyncio.AbstractEventLoop

    if TYPE_CHECKING:  # what ConsumerGroupCoordinator supplies
        @property
        def groups(self) -> dict[str, ConsumerGroup]: ...
        def _refresh_topics(self, group: ConsumerGroup) -> bool: ...
        @staticmethod
        def _bump(group: ConsumerGroup, reason: str) -> None: ...
        def _compute_target(self, group: ConsumerGroup) -> None: ...
        def _schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None: ...
        def _schedule_revocation(self, group: ConsumerGroup, member: ConsumerMember, was_unrevoked: bool) -> None: ...
        def _expire(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None: ...
        def _changed(self, group_id: str, *, from_timer: bool = False) -> None: ...
        def _replace_static(self, group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember: ...
        def _maybe_downgrade(self, group: ConsumerGroup, leaving: str | None) -> bool: ...
        def remove_member(self, group: ConsumerGroup, member_id: str, reason: str, *,
                          downgrade: bool = False) -> None: ...

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def classic_join(self, req: ClassicJoinRequest) -> JoinResult:
        """JoinGroup of a classic member into a consumer group with members (Kafka's
        classicGroupJoinToConsumerGroup): answered at once, the member's subscription and
        owned partitions read from its first protocol's metadata; it is reconciled as a
        heartbeat would be, and its SyncGroup gets what it may own."""
        try:
            return self._classic_join(req)
        except HeartbeatError as e:
            log.info("consumer_group_classic_join_refused", group=req.group_id, member=req.member_id,
                     error=e.code, reason=e.message)
            return JoinResult(e.code, req.member_id)

    def _classic_join(self, req: ClassicJoinRequest) -> JoinResult:
        group = self.groups[req.group_id]
        if self.closed:
            raise HeartbeatError(NOT_COORDINATOR, "the broker is shutting down")
        if req.protocol_type != PROTOCOL_TYPE or not req.protocols or not self._supports_protocols(group, req):
            raise HeartbeatError(INCONSISTENT_GROUP_PROTOCOL, f"Member {req.member_id}'s protocols are not supported.")
        member_id = req.member_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not req.member_id and req.instance_id is None and req.require_known_member_id:
            return JoinResult(MEMBER_ID_REQUIRED, member_id)
        try:
            subscription = parse_subscription(req.protocols[0][1])
        except ValueError as e:
            raise HeartbeatError(INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s subscription is malformed: "
                                                              f"{e}.") from e
        replacing = req.instance_id is not None and not req.member_id and req.instance_id in group.static_members
        member, changed = self._classic_member(group, req, member_id)
        member.rack_id = subscription.rack_id
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.server_assignor = None
        member.client_id, member.client_host = req.client_id, req.client_host
        member.classic = ClassicMetadata(req.session_timeout_ms, tuple(req.protocols))
        names = tuple(sorted(set(subscription.topics)))
        if names != member.subscribed_names:
            member.subscribed_names = names
            changed = True
        if self._refresh_topics(group) or changed:
            self._bump(group, f"classic member {member.member_id} joined or changed its subscription")
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        was_unrevoked = member.state == UNREVOKED_PARTITIONS
        reconcile(member, group.target.get(member.member_id, set()), group.assignment_epoch, set(subscription.owned),
                  lambda p: group.owner(p, member.member_id) is None)
        self._schedule_revocation(group, member, was_unrevoked)
        self._schedule_session(group, member)
        self._schedule_classic(group, member, "did not sync in time after joining")
        self._changed(group.group_id)
        result = JoinResult(NONE, member.member_id, member.member_epoch, PROTOCOL_TYPE, member.classic.protocol_name)
        if replacing:
            self._maybe_downgrade(group, None)
        return result

    @staticmethod
    def _supports_protocols(group: ConsumerGroup, req: ClassicJoinRequest) -> bool:
        """A joining classic member shares a protocol with every classic member (Kafka's
        supportsClassicProtocols); the member it replaces or rejoins as does not count."""
        others = [m.classic for m in group.members.values()
                  if m.classic is not None and m.member_id != req.member_id
                  and (req.instance_id is None or m.instance_id != req.instance_id)]
        names = {name for name, _ in req.protocols}
        for classic in others:
            names &= {name for name, _ in classic.protocols}
        return bool(names)

    def _classic_member(self, group: ConsumerGroup, req: ClassicJoinRequest,
                        member_id: str) -> tuple[ConsumerMember, bool]:
        """The member a classic JoinGroup is from, and whether it is new."""
        if req.instance_id is not None:
            holder_id = group.static_members.get(req.instance_id)
            holder = group.members.get(holder_id) if holder_id is not None else None
            if holder is not None:
                if not req.member_id:
                    return self._replace_static(group, holder, member_id), False
                if holder.member_id != req.member_id:
                    raise HeartbeatError(FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                                             f"{req.instance_id} was fenced by another member.")
        member = group.members.get(member_id)
        if member is not None:
            if member.classic is None:
                raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Member {member_id} does not use the classic protocol.")
            return member, False
        if len(group.members) >= self.config["group.consumer.max.size"]:
            raise HeartbeatError(GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of "
                                                         f"{self.config['group.consumer.max.size']} members.")
        member = ConsumerMember(member_id, instance_id=req.instance_id)
        group.add(member)
        log.info("consumer_group_classic_member_joined", group=group.group_id, member=member_id,
                 instance_id=req.instance_id)
        return member, True

    def _classic_member_of(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """The classic member a SyncGroup, Heartbeat or LeaveGroup names (Kafka's
        validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol)."""
        if instance_id is not None:
            held_by = group.static_members.get(instance_id)
            member = group.members.get(held_by) if held_by is not None else None
            if member is None:
                raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Member with instance id {instance_id} is not a member "
                                                        f"of group {group.group_id}.")
            if member_id and member.member_id != member_id:
                raise HeartbeatError(FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                                         f"{instance_id} was fenced by another member.")
        else:
            found = group.members.get(member_id)
            if found is None:
                raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                                        f"{group.group_id}.")
            member = found
        if member.classic is None:
            raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        return member

    def classic_sync(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                     protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        """SyncGroup of a classic member of a consumer group: its assigned partitions, in
        the version of its metadata; REBALANCE_IN_PROGRESS while it must join again."""
        group = self.groups[group_id]
        try:
            member = self._classic_member_of(group, member_id, instance_id)
            classic = member.classic
            assert classic is not None  # _classic_member_of checked
            if generation_id != member.member_epoch:
                raise HeartbeatError(ILLEGAL_GENERATION, f"The request generation id {generation_id} is not equal "
                                                         f"to the member epoch {member.member_epoch}.")
            if protocol_type is not None and protocol_type != PROTOCOL_TYPE or \
                    protocol_name is not None and protocol_name != classic.protocol_name:
                raise HeartbeatError(INCONSISTENT_GROUP_PROTOCOL, "protocol type or name differs from the join's")
            if group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
                self._schedule_classic(group, member, "did not join again in time", if_absent=True)
                raise HeartbeatError(REBALANCE_IN_PROGRESS, f"A new rebalance is triggered in group {group_id}.")
        except HeartbeatError as e:
            return SyncResult(e.code)
        self._schedule_classic(group, member, None)
        self._schedule_session(group, member)
        version = version_of(classic.protocols[0][1])
        return SyncResult(NONE, encode_assignment(member.assigned, version), PROTOCOL_TYPE, classic.protocol_name)

    def classic_heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        """Heartbeat of a classic member of a consumer group: REBALANCE_IN_PROGRESS when it
        is behind the group epoch, must give partitions up, or may take freed ones."""
        group = self.groups[group_id]
        try:
            member = self._classic_member_of(group, member_id, instance_id)
        except HeartbeatError as e:
            return e.code
        if generation_id != member.member_epoch:
            return ILLEGAL_GENERATION
        self._schedule_session(group, member)
        rejoin = member.member_epoch < group.group_epoch or member.state == UNREVOKED_PARTITIONS or (
            member.state == UNRELEASED_PARTITIONS and any(
                group.owner(p, member.member_id) is None
                for p in group.target.get(member.member_id, set()) - member.assigned))
        if not rejoin:
            return NONE
        self._schedule_classic(group, member, "did not join again in time", if_absent=True)
        return REBALANCE_IN_PROGRESS

    def classic_leave(self, group_id: str, members: list[tuple[str, str | None, str | None]]
                      ) -> list[tuple[str, str | None, int]]:
        """LeaveGroup of classic members of a consumer group: [(member id, instance id, error)]."""
        group = self.groups[group_id]
        results = []
        for member_id, instance_id, reason in members:
            try:
                member = self._classic_member_of(group, member_id, instance_id)
            except HeartbeatError as e:
                results.append((member_id, instance_id, e.code))
                continue
            self.remove_member(group, member.member_id, f"left the group ({reason or 'no reason given'})")
            results.append((member.member_id, instance_id, NONE))
        return results

    def _schedule_classic(self, group: ConsumerGroup, member: ConsumerMember, reason: str | None,
                          *, if_absent: bool = False) -> None:
        """A classic member's join or sync timeout (its rebalance timeout): it is removed
        when it does not join again (or sync) in time; `reason` None cancels the timer."""
        if member.classic_timer is not None:
            if if_absent:
                return
            member.classic_timer.cancel()
            member.classic_timer = None
        if reason is not None:
            member.classic_timer = self.loop.call_later(member.rebalance_timeout_ms / 1000, self._expire, group,
                                                        member, reason)


__all__ = ["ClassicJoinRequest", "ClassicMembers"]
