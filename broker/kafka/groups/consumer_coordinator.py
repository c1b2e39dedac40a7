"""Kafka's consumer group protocol (KIP-848) as a state machine on the broker's loop.

`ConsumerGroupCoordinator.heartbeat` is ConsumerGroupHeartbeat with plain values
(partitions are (topic name, index) pairs; the handlers, consumer_handlers.py, translate
topic ids): it joins, fences, rejoins and removes members by their epochs, bumps the
group epoch when subscriptions, members or the subscribed topics change, computes the
target assignment with the assignor the members ask for most (assignors.py), and
reconciles each member (consumer_group.reconcile: revoke before assign). Session and
rebalance timers remove members that stop heartbeating or keep revoked partitions.

The request checks and types: consumer_heartbeat.py. Classic members of a consumer group
and the change of kind between classic and consumer groups: consumer_classic_members.py
(a part of this class) and consumer_classic.py. The records kept in `__consumer_offsets`:
consumer_records.py; `pending()` / `written()` hand the writer (consumer_handlers.py) the
records that differ from what the log holds. The behaviour and errors as Kafka's:
broker/kafka/KAFKA.md (ConsumerGroupHeartbeat / ConsumerGroupDescribe).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping

import structlog

from kafka_format.errors import StrataError

from . import assignors, consumer_classic, consumer_records
from .assignors import Partition
from .consumer_assignment import TargetAssignment
from .consumer_classic_members import ClassicJoinRequest, ClassicMembers
from .consumer_errors import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NON_EMPTY_GROUP,
    NONE,
    NOT_COORDINATOR,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    HeartbeatError,
)
from .consumer_group import (
    DEAD,
    EMPTY,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    MEMBER_STABLE,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerMember,
    reconcile,
)
from .consumer_heartbeat import HeartbeatRequest, HeartbeatResult, check_request, log_refusal

log = structlog.get_logger("strata.kafka.consumer_groups")

UPGRADE_POLICIES = ("upgrade", "bidirectional")
DOWNGRADE_POLICIES = ("downgrade", "bidirectional")


class ConsumerGroupCoordinator(ClassicMembers, TargetAssignment):
    def __init__(self, config, loop: asyncio.AbstractEventLoop, topics: Callable[[], Mapping[str, int]],
                 group_settings: Callable[[str], Mapping[str, int]], classic_groups=None, *,
                 records: Callable[[], Mapping[bytes, bytes]] = dict,
                 topic_id: Callable[[str], str | None] = lambda name: None,
                 topic_name: Callable[[str], str | None] = lambda topic_id: None,
                 write_records: Callable[[str, list], Awaitable[None]] | None = None):
        """`topics()`: partition count of every non-internal topic; `group_settings(group)`:
        its consumer.session.timeout.ms and consumer.heartbeat.interval.ms;
        `classic_groups`: the classic GroupCoordinator (ids are shared); `records()`:
        the stored group records, read on first use; `topic_id`/`topic_name` map
        topic names and ids for them; `write_records(group_id, rows)` stores a group's
        changed records (None: they stay pending)."""
        self.config = config
        self.loop = loop
        self.topics = topics
        self.group_settings = group_settings
        self.classic = classic_groups
        self.closed = False
        self._write_records = write_records
        self._write_lock = asyncio.Lock()
        self._write_tasks: set[asyncio.Task] = set()
        self._records = records
        self._topic_id = topic_id
        self._topic_name = topic_name
        self._groups: dict[str, ConsumerGroup] | None = None
        self._written: dict[str, dict[bytes, bytes]] = {}  # group -> its records in the log
        self._dirty: set[str] = set()
        self._regexes: dict[str, re.Pattern] = {}

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        if self._groups is None:
            self._groups = self._load()
        return self._groups

    def _load(self) -> dict[str, ConsumerGroup]:
        groups = consumer_records.load(self._records(), self._topic_name)
        counts = self.topics()
        for group in groups.values():
            self._written[group.group_id] = consumer_records.snapshot(group, self._topic_id)
            wanted: set[str] = set()
            for m in group.members.values():
                m.resolved_topics = frozenset(self.subscribed_topics(m, counts))
                wanted |= m.resolved_topics
                self._schedule_session(group, m)
            group.topic_partitions = {t: counts[t] for t in sorted(wanted)}
            group.topic_ids = {t: self._topic_id(t) for t in group.topic_partitions}
        if groups:
            log.info("consumer_groups_loaded", groups=len(groups),
                     members=sum(len(g.members) for g in groups.values()))
        return groups

    # ---- what the log must get -----------------------------------------------------------------

    def pending(self) -> list[tuple[str, list[tuple[bytes, bytes | None]], dict[bytes, bytes]]]:
        """(group, rows to append (None = tombstone), the group's records once written) of
        every changed group."""
        out = []
        for group_id in sorted(self._dirty):
            group = self.groups.get(group_id)
            now = consumer_records.snapshot(group, self._topic_id) if group is not None else {}
            before = self._written.get(group_id, {})
            rows: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in now.items() if before.get(k) != v]
            rows += [(k, None) for k in before if k not in now]
            out.append((group_id, rows, now))
        return out

    def written(self, group_id: str, records: dict[bytes, bytes]) -> None:
        """The log holds `records` of `group_id` (from `pending`)."""
        if records:
            self._written[group_id] = records
        else:
            self._written.pop(group_id, None)
        group = self.groups.get(group_id)
        current = consumer_records.snapshot(group, self._topic_id) if group is not None else {}
        if current == records:  # nothing changed while the records were written
            self._dirty.discard(group_id)

    def _changed(self, group_id: str, *, from_timer: bool = False) -> None:
        """Mark a group's records for writing; `from_timer`: no request will write them,
        so the writer is told (`on_change`)."""
        self._dirty.add(group_id)
        if from_timer:
            self._write_later()

    async def write(self) -> None:
        """Write the records of every changed group (raises StrataError when a write
        fails); the handlers call it after a request changed groups."""
        if self._write_records is None:
            return
        async with self._write_lock:
            for group_id, rows, records in self.pending():
                if rows:
                    await self._write_records(group_id, rows)
                self.written(group_id, records)

    def _write_later(self) -> None:
        """A timer or a deletion changed a group and no request will write it: write now."""
        if self._write_records is None:
            return
        task = self.loop.create_task(self._write_logged())
        self._write_tasks.add(task)
        task.add_done_callback(self._write_tasks.discard)

    async def _write_logged(self) -> None:
        try:
            await self.write()
        except (StrataError, OSError, RuntimeError) as e:  # RuntimeError: the executor is shut down
            log.warning("consumer_group_records_not_written", error=str(e))

    # ---- settings ----------------------------------------------------------------------------

    @property
    def assignor_names(self) -> list[str]:
        """The short names of group.consumer.assignors' entries (Kafka's class names map to them)."""
        return assignors.configured_assignors(self.config["group.consumer.assignors"])

    @property
    def migration_policy(self) -> str:
        return self.config["group.consumer.migration.policy"].lower()

    def partition_racks(self, partition: Partition) -> frozenset[str]:
        """The racks of a partition's replicas: this broker's `broker.rack`, when set."""
        rack = self.config["broker.rack"]
        return frozenset((rack,)) if rack else frozenset()

    def _session_ms(self, group_id: str) -> int:
        return self.group_settings(group_id)["consumer.session.timeout.ms"]

    def _interval_ms(self, group_id: str) -> int:
        return self.group_settings(group_id)["consumer.heartbeat.interval.ms"]

    # ---- group kinds -------------------------------------------------------------------------

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def take_for_classic(self, group_id: str) -> int:
        """NONE when a classic JoinGroup may use `group_id` (an empty consumer group is
        dropped whatever the migration policy, which governs groups with members, as
        Kafka's maybeDeleteEmptyConsumerGroup), else the error."""
        group = self.groups.get(group_id)
        if group is None:
            return NONE
        if group.members:
            return INCONSISTENT_GROUP_PROTOCOL  # its classic members join through classic_join
        self.delete(group_id)
        log.info("consumer_group_converted", group=group_id, to="classic")
        return NONE

    def _group_for_join(self, group_id: str) -> ConsumerGroup:
        """The consumer group a first heartbeat creates: a new one, or the classic group of
        that id converted (an empty one is dropped; one with members is upgraded online
        when the migration policy allows it); else HeartbeatError GROUP_ID_NOT_FOUND."""
        classic = self.classic
        old = classic.groups.get(group_id) if classic is not None else None
        if classic is None or old is None or old.state == "Dead":
            group = self.groups[group_id] = ConsumerGroup(group_id)
            return group
        if old.state == "Empty":  # whatever the policy, as Kafka's maybeDeleteEmptyClassicGroup
            classic.delete(group_id)
            log.info("classic_group_converted", group=group_id, to="consumer")
            group = self.groups[group_id] = ConsumerGroup(group_id)
            return group
        if self.migration_policy not in UPGRADE_POLICIES or not consumer_classic.upgradable(old) or \
                len(old.members) > self.config["group.consumer.max.size"]:
            raise HeartbeatError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        counts = self.topics()
        try:
            group = consumer_classic.from_classic(old, counts.__contains__)
        except ValueError as e:
            raise HeartbeatError(GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {group_id}: {e}.") from e
        classic.hand_over(group_id)
        self.groups[group_id] = group
        self._refresh_topics(group)
        for m in group.members.values():
            self._schedule_session(group, m)
        log.info("classic_group_converted", group=group_id, to="consumer", members=len(group.members),
                 epoch=group.group_epoch)
        return group

    def _maybe_downgrade(self, group: ConsumerGroup, leaving: str | None) -> bool:
        """When the group without `leaving` is classic members only, it goes back to the
        classic coordinator if the migration policy allows it, at the current group epoch;
        True when it did. `leaving`: a member leaving with ConsumerGroupHeartbeat or fenced
        by a timer (Kafka's validateOnlineDowngradeWithFencedMember; the classic group then
        rebalances), or None after a classic static member took the place of the last
        other one (validateOnlineDowngradeWithReplacedMemberId; the classic group rebalances
        unless every member holds its target at the group epoch)."""
        classic = self.classic
        if classic is None or self.migration_policy not in DOWNGRADE_POLICIES:
            return False
        remaining = len(group.members) - (leaving is not None)
        if not consumer_classic.downgradable(group, leaving) or remaining > classic.max_size:
            return False
        try:
            converted = consumer_classic.to_classic(group, leaving, int(time.time() * 1000))
        except ValueError as e:
            log.warning("consumer_group_not_downgraded", group=group.group_id, error=str(e))
            return False
        settled = leaving is None and group.assignment_epoch == group.group_epoch and all(
            m.member_epoch == group.group_epoch and m.state == MEMBER_STABLE for m in group.members.values())
        self.delete(group.group_id)
        classic.adopt(converted, rebalance=not settled)
        log.info("consumer_group_converted", group=group.group_id, to="classic", members=len(converted.members),
                 generation=converted.generation_id)
        return True

    # ---- ConsumerGroupHeartbeat --------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        try:
            result = self._heartbeat(req)
        except HeartbeatError as e:
            log_refusal(req, e)
            return HeartbeatResult(e.code, e.message)
        self._changed(req.group_id)
        return result

    def _validate(self, req: HeartbeatRequest) -> None:
        """NOT_COORDINATOR while shutting down; else consumer_heartbeat.check_request, and the
        subscribed regex must compile."""
        if self.closed:
            raise HeartbeatError(NOT_COORDINATOR, "the broker is shutting down")
        check_request(req, self.assignor_names)
        if req.subscribed_regex:
            self._regex(req.subscribed_regex)

    def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        self._validate(req)
        if req.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
            return self._leave(req)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                raise self._group_not_found(req.group_id)
            group = self._group_for_join(req.group_id)
        member, joined = self._member(group, req)
        member.client_id = req.client_id
        member.client_host = req.client_host
        member.may_describe = req.may_describe
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor or None
        changed = joined
        if req.subscribed_names is not None and tuple(sorted(req.subscribed_names)) != member.subscribed_names:
            member.subscribed_names = tuple(sorted(req.subscribed_names))
            changed = True
        if req.subscribed_regex is not None and (req.subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex = req.subscribed_regex or None
            changed = True
        if self._refresh_topics(group) or changed:  # one new group epoch for all of this heartbeat's changes
            self._bump(group, f"member {member.member_id} joined or changed its subscription, or the "
                              f"subscribed topics changed")
        self._schedule_session(group, member)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        before = set(member.assigned)
        was_unrevoked = member.state == UNREVOKED_PARTITIONS
        reconcile(member, group.target.get(member.member_id, set()), group.assignment_epoch, req.owned,
                  lambda p: group.owner(p, member.member_id) is None)
        self._schedule_revocation(group, member, was_unrevoked)
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.owned is not None and (
            req.subscribed_names is not None or req.subscribed_regex is not None))
        send = full or member.resend or member.assigned != before
        member.resend = False
        return HeartbeatResult(NONE, None, member.member_id, member.member_epoch, self._interval_ms(group.group_id),
                               set(member.assigned) if send else None)

    def _group_not_found(self, group_id: str) -> HeartbeatError:
        """GROUP_ID_NOT_FOUND for a heartbeat or leave (not a join) naming no consumer group."""
        classic = self.classic.groups.get(group_id) if self.classic is not None else None
        if classic is not None and classic.state != "Dead":
            return HeartbeatError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        return HeartbeatError(GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")

    def _member(self, group: ConsumerGroup, req: HeartbeatRequest) -> tuple[ConsumerMember, bool]:
        """The member this heartbeat is from, and whether it just joined."""
        member = group.members.get(req.member_id)
        if req.member_epoch != 0:
            if req.instance_id is not None:  # Kafka: the instance id's member first
                holder_id = group.static_members.get(req.instance_id)
                if holder_id is None:
                    raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
                if holder_id != req.member_id:
                    raise HeartbeatError(FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                                             f"{req.instance_id} was fenced by member {holder_id}.")
            if member is None:
                raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group "
                                                        f"{group.group_id}.")
            self._check_epoch(member, req)
            return member, False
        if req.instance_id is not None:
            holder_id = group.static_members.get(req.instance_id)
            holder = group.members.get(holder_id) if holder_id is not None else None
            if holder is not None and holder.member_id != req.member_id:
                if holder.member_epoch != LEAVE_STATIC_EPOCH:
                    raise HeartbeatError(UNRELEASED_INSTANCE_ID, f"Static member {holder.member_id} with instance "
                                                                 f"id {req.instance_id} is not released yet.")
                return self._replace_static(group, holder, req.member_id), False
        if member is None:
            if len(group.members) >= self.config["group.consumer.max.size"]:
                raise HeartbeatError(GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum "
                                                             f"capacity of {self.config['group.consumer.max.size']} "
                                                             f"members.")
            member = ConsumerMember(req.member_id, instance_id=req.instance_id)
            group.add(member)
            log.info("consumer_group_member_joined", group=group.group_id, member=req.member_id,
                     instance_id=req.instance_id)
        else:  # a known member joining again owns nothing now
            member.assigned.clear()
            member.revoking.clear()
            member.member_epoch = member.previous_member_epoch = 0
            member.state = MEMBER_STABLE
            return member, False
        return member, True

    def _replace_static(self, group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member's new member id takes over the instance id, its assignment and epoch."""
        target = group.target.get(old.member_id, set(old.assigned))  # read before `remove` drops it
        group.remove(old.member_id)
        epoch = old.previous_member_epoch if old.member_epoch == LEAVE_STATIC_EPOCH else old.member_epoch
        member = ConsumerMember(member_id, instance_id=old.instance_id, rack_id=old.rack_id, member_epoch=epoch,
                                previous_member_epoch=old.previous_member_epoch, state=old.state,
                                assigned=set(old.assigned), revoking=set(old.revoking),
                                subscribed_names=old.subscribed_names, subscribed_regex=old.subscribed_regex,
                                server_assignor=old.server_assignor, rebalance_timeout_ms=old.rebalance_timeout_ms,
                                classic=old.classic)
        group.add(member)
        group.target[member_id] = target
        log.info("consumer_group_static_member_replaced", group=group.group_id, instance_id=old.instance_id,
                 old=old.member_id, new=member_id)
        return member

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
        if req.member_epoch == member.member_epoch:
            return
        if req.member_epoch < member.member_epoch and req.member_epoch == member.previous_member_epoch and (
                req.owned is None or req.owned <= member.assigned):
            return
        raise HeartbeatError(FENCED_MEMBER_EPOCH, f"The consumer group member has a member epoch "
                                                  f"({req.member_epoch}) different from the one known by the "
                                                  f"group coordinator ({member.member_epoch}).")

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        if group is None:
            raise self._group_not_found(req.group_id)
        member_id = req.member_id
        if req.instance_id is not None:
            member_id = group.static_members.get(req.instance_id, "")
            if member_id and member_id != req.member_id:
                raise HeartbeatError(FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                                                         f"{req.instance_id} was fenced by another member.")
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group "
                                                    f"{group.group_id}.")
        if req.member_epoch == LEAVE_STATIC_EPOCH:
            if member.member_epoch != LEAVE_STATIC_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_STATIC_EPOCH
            log.info("consumer_group_static_member_left", group=group.group_id, member=member_id,
                     instance_id=req.instance_id)
        else:
            self.remove_member(group, member_id, "left the group", downgrade=True)
        return HeartbeatResult(NONE, None, req.member_id, req.member_epoch, self._interval_ms(group.group_id))

    def remove_member(self, group: ConsumerGroup, member_id: str, reason: str, *, downgrade: bool = False) -> None:
        """Remove a member; `downgrade`: the group may become classic again (a member that
        left with ConsumerGroupHeartbeat or was fenced by a timer, as Kafka)."""
        if member_id not in group.members:
            return
        if downgrade and self._maybe_downgrade(group, member_id):
            log.info("consumer_group_member_removed", group=group.group_id, member=member_id, reason=reason)
            return
        group.remove(member_id)
        log.info("consumer_group_member_removed", group=group.group_id, member=member_id, reason=reason)
        self._bump(group, f"member {member_id} {reason}")
        self._changed(group.group_id)

    # ---- timers ------------------------------------------------------------------------------

    def _schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Restart a member's session: the group's session timeout, or the one a classic
        member joined with."""
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout_ms = member.classic.session_timeout_ms if member.classic else self._session_ms(group.group_id)
        member.session_timer = self.loop.call_later(timeout_ms / 1000, self._expire, group, member,
                                                    "session timed out")

    def _schedule_revocation(self, group: ConsumerGroup, member: ConsumerMember, was_unrevoked: bool) -> None:
        unrevoked = member.state == UNREVOKED_PARTITIONS
        if unrevoked and not was_unrevoked:
            member.rebalance_timer = self.loop.call_later(member.rebalance_timeout_ms / 1000, self._expire,
                                                          group, member, "did not revoke its partitions in time")
        elif not unrevoked and member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None

    def _expire(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        if self.closed or group.members.get(member.member_id) is not member:
            return
        self.remove_member(group, member.member_id, reason, downgrade=True)
        self._changed(group.group_id, from_timer=True)

    # ---- offsets -----------------------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int, api_version: int) -> int:
        """NONE when an OffsetCommit to a consumer group may be written (Kafka's
        ConsumerGroup.validateOffsetCommit), else the error of every partition."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return NONE
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return STALE_MEMBER_EPOCH if api_version >= 9 and member.classic is None else ILLEGAL_GENERATION
        return NONE

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        group = self.groups[group_id]
        if member_epoch < 0 and not member_id:
            return NONE
        member = group.members.get(member_id or "")
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return STALE_MEMBER_EPOCH
        return NONE

    def subscribed_topic_names(self, group_id: str) -> set[str]:
        group = self.groups.get(group_id)
        return set(group.topic_partitions) if group is not None else set()

    # ---- listing -----------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every consumer-protocol group."""
        return [(g.group_id, g.state) for g in self.groups.values()]

    def delete(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.cancel_timers()
            self._changed(group_id, from_timer=True)

    def validate_delete(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return GROUP_ID_NOT_FOUND
        return NON_EMPTY_GROUP if group.members else NONE

    def close(self) -> None:
        self.closed = True
        for group in self.groups.values():
            group.cancel_timers()


__all__ = ["DEAD", "EMPTY", "FENCED_INSTANCE_ID", "FENCED_MEMBER_EPOCH", "GROUP_ID_NOT_FOUND",
           "GROUP_MAX_SIZE_REACHED", "ILLEGAL_GENERATION", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_REGULAR_EXPRESSION",
           "INVALID_REQUEST", "NONE", "NON_EMPTY_GROUP", "STALE_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID",
           "UNRELEASED_INSTANCE_ID", "UNSUPPORTED_ASSIGNOR", "ClassicJoinRequest", "ConsumerGroupCoordinator"]
