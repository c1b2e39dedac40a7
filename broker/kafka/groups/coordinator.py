"""Kafka's classic consumer-group protocol as a state machine on the broker's loop.

`GroupCoordinator` knows nothing of the wire: its coroutines take plain values and
return plain results (`JoinResult`, `SyncResult`, error codes), and the handlers in
broker/kafka/groups/handlers.py translate kio requests to calls. Everything runs on
one asyncio loop, so no locks; timers are `loop.call_later` handles.
The group's data (states, `Member`, `Group`, the results, the error codes) is
broker/kafka/groups/group.py; this module re-exports those names.
What the admin APIs read of the groups (ListGroups, DescribeGroups, the checks of
DeleteGroups and OffsetDelete) is `ClassicGroupListing` in listing.py, its base class.

Semantics (Kafka's GroupMetadataManager/ClassicGroup, classic protocol):

- States Empty, PreparingRebalance, CompletingRebalance, Stable, Dead. A group is
  created by a JoinGroup with an empty member id; Dead only after DeleteGroups.
- JoinGroup, new member (empty member id): v4+ dynamic members get a member id
  (`client_id-uuid4`) with MEMBER_ID_REQUIRED and are "pending" until they join
  again with it (or their session timeout passes); older versions and static
  members (group.instance.id) are added at once. Adding a member or a changed
  member prepares a rebalance. The first member of a group fixes its protocol
  type; a member whose protocol type differs, or who shares no protocol with
  every member, gets INCONSISTENT_GROUP_PROTOCOL. The leader is the first member
  added (the next one in join order when it goes).
- Rebalance: PreparingRebalance waits until every member has rejoined (and no
  member is pending), or the rebalance timeout (the members' largest) passes;
  then dynamic members that did not rejoin are removed, the generation goes up,
  the protocol is chosen by vote among the protocols every member supports, and
  every parked JoinGroup is answered (the leader also gets the members and their
  metadata): CompletingRebalance. A rebalance of an Empty group first waits
  group.initial.rebalance.delay.ms, extended (up to the rebalance timeout) while
  new members keep arriving, so a starting group forms in one generation.
- SyncGroup: the leader's assignments (missing members get empty bytes) answer
  every parked SyncGroup and the group is Stable; followers park until then.
  Members that do not sync within the rebalance timeout are removed and the group
  rebalances. Wrong generation ILLEGAL_GENERATION, unknown member
  UNKNOWN_MEMBER_ID, during PreparingRebalance REBALANCE_IN_PROGRESS.
- Heartbeat: restarts the member's session timer; REBALANCE_IN_PROGRESS during
  PreparingRebalance tells members to rejoin. A member whose session timer runs
  out is removed (not while its JoinGroup/SyncGroup is parked; a new member whose
  first JoinGroup is parked longer than 5 minutes is removed too) and the group
  rebalances.
- LeaveGroup (v3+ several members, by member id or group.instance.id) removes
  members at once and rebalances.
- Static membership: a JoinGroup with a known group.instance.id and an empty
  member id replaces the old member id (whose parked requests get
  FENCED_INSTANCE_ID); in a Stable group with the same selected protocol it gets
  the current generation without a rebalance. Requests naming an instance id
  that maps to another member id get FENCED_INSTANCE_ID. Static members that do
  not rejoin are not removed at the end of the join phase (only by session timeout
  or LeaveGroup).
- OffsetCommit validation: generation -1 with an empty (or unknown) group is a
  simple commit; otherwise the member and generation must match (COMPLETING
  rebalance answers REBALANCE_IN_PROGRESS).
- `close()` (broker shutdown) answers every parked JoinGroup/SyncGroup with
  NOT_COORDINATOR, cancels the timers, and answers later ones the same, so
  connections drain at once; clients look for the coordinator again.
- Group metadata is kept in memory only (Kafka also writes GroupMetadataValue
  records to __consumer_offsets): after a broker restart members get
  UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION and rejoin. Committed offsets persist
  (GroupOffsets).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from .group import (
    COMPLETING_REBALANCE,
    COORDINATOR_NOT_AVAILABLE,
    DEAD,
    EMPTY,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    NO_LEADER,
    NON_EMPTY_GROUP,
    NONE,
    NOT_COORDINATOR,
    PREPARING_REBALANCE,
    REBALANCE_IN_PROGRESS,
    STABLE,
    UNKNOWN_MEMBER_ID,
    Group,
    GroupDescription,
    JoinResult,
    Member,
    MemberDescription,
    SyncResult,
)
from .listing import ClassicGroupListing

log = structlog.get_logger("strata.kafka.groups")


def _complete(future: asyncio.Future | None, result) -> bool:
    if future is None or future.done():
        return False
    future.set_result(result)
    return True


class GroupCoordinator(ClassicGroupListing):
    """The classic protocol's state machine; what the admin APIs read of it is listing.py."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None, min_session_timeout_ms: int = 6000,
                 max_session_timeout_ms: int = 1_800_000, initial_rebalance_delay_ms: int = 3000,
                 max_size: int = 2**31 - 1, new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
                 clock: Callable[[], int] | None = None):
        self._loop = loop
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.max_size = max_size
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.groups: dict[str, Group] = {}
        self.closed = False

    @classmethod
    def from_config(cls, config, loop=None) -> GroupCoordinator:
        return cls(loop=loop, min_session_timeout_ms=config.group_min_session_timeout_ms,
                   max_session_timeout_ms=config.group_max_session_timeout_ms,
                   initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                   max_size=config.group_max_size)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def _now(self) -> int:
        return self._clock()

    def _later(self, delay_ms: int, callback, *args) -> asyncio.TimerHandle:
        return self.loop.call_later(max(delay_ms, 0) / 1000, self._guarded, callback, args)

    @staticmethod
    def _guarded(callback, args) -> None:
        try:
            callback(*args)
        except Exception:
            log.exception("group_timer_failed", callback=getattr(callback, "__name__", "?"))

    def _transition(self, group: Group, state: str) -> None:
        group.transition(state, self._now())

    # ---- JoinGroup ---------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, *, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                   rebalance_timeout_ms: int = -1, group_instance_id: str | None = None,
                   client_id: str = "", client_host: str = "", require_known_member_id: bool = True,
                   supports_skip_assignment: bool = False, reason: str | None = None) -> JoinResult:
        future = self.loop.create_future()
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        request = _JoinRequest(group_id, member_id, group_instance_id, session_timeout_ms,
                               rebalance_timeout_ms, protocol_type, list(protocols), client_id or "",
                               client_host, require_known_member_id, supports_skip_assignment, reason)
        self._join(request, future)
        # shield: a client that disconnects must not cancel the member's parked future
        return await asyncio.shield(future)

    def _join(self, req: _JoinRequest, future: asyncio.Future) -> None:
        def fail(error: int, member_id: str = req.member_id) -> None:
            _complete(future, JoinResult(error, member_id))

        if self.closed:
            return fail(NOT_COORDINATOR)
        if not req.group_id:
            return fail(INVALID_GROUP_ID)
        if not self.min_session_timeout_ms <= req.session_timeout_ms <= self.max_session_timeout_ms:
            return fail(INVALID_SESSION_TIMEOUT)
        unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown:
                return fail(UNKNOWN_MEMBER_ID)
            group = self.groups[req.group_id] = Group(req.group_id, self._now())
        if not self._accept_joining_member(group, req.member_id):
            member = group.members.get(req.member_id)
            if member is not None:
                self._remove_member_and_update_group(group, member, "group over capacity")
            return fail(GROUP_MAX_SIZE_REACHED, "")
        if unknown:
            self._join_new_member(group, req, future)
        else:
            self._join_existing_member(group, req, future)

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.num_awaiting_join() < self.max_size
        return member_id in group.members or len(group.members) < self.max_size

    def _join_new_member(self, group: Group, req: _JoinRequest, future: asyncio.Future) -> None:
        if group.is_(DEAD):
            _complete(future, JoinResult(COORDINATOR_NOT_AVAILABLE, ""))
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            _complete(future, JoinResult(INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        new_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                log.info("static_member_replaced", group=group.group_id, instance=req.group_instance_id,
                         old_member=existing, member=new_id, state=group.state)
                self._update_static_member_and_rebalance(group, req, existing, new_id, future)
            else:
                self._add_member_and_rebalance(group, req, new_id, future)
        elif req.require_known_member_id:
            group.pending_members[new_id] = self._later(req.session_timeout_ms, self._expire_heartbeat,
                                                        group, new_id)
            _complete(future, JoinResult(MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, req, new_id, future)

    def _join_existing_member(self, group: Group, req: _JoinRequest, future: asyncio.Future) -> None:
        member_id = req.member_id
        if group.is_(DEAD):
            _complete(future, JoinResult(COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            _complete(future, JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members and req.group_instance_id is None:
            self._add_member_and_rebalance(group, req, member_id, future)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error:
            _complete(future, JoinResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, future, "member rejoins during rebalance")
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # it probably missed the JoinGroup response: the current generation again
                _complete(future, self._join_result(group, member, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, req, future, "member metadata changed")
        elif group.is_(STABLE):
            if group.is_leader(member_id):
                self._update_member_and_rebalance(group, member, req, future, "leader rejoins")
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, future, "member metadata changed")
            else:
                _complete(future, self._join_result(group, member, with_members=False))
        else:
            _complete(future, JoinResult(UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: Group, member: Member, *, with_members: bool, leader: str | None = None,
                     skip_assignment: bool = False) -> JoinResult:
        return JoinResult(NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                          (group.leader_id or NO_LEADER) if leader is None else leader, skip_assignment,
                          group.join_members() if with_members else ())

    def _add_member_and_rebalance(self, group: Group, req: _JoinRequest, member_id: str,
                                  future: asyncio.Future) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                        list(req.protocols), is_new=True)
        if group.is_(PREPARING_REBALANCE) and group.previous_state == EMPTY:
            group.new_member_added = True
        group.add(member, future)
        # New members cannot heartbeat while their JoinGroup is parked; if the client went away
        # they would hold the rebalance forever: they get NEW_MEMBER_JOIN_TIMEOUT instead.
        self._reschedule_heartbeat(group, member, self.new_member_join_timeout_ms)
        log.info("group_member_added", group=group.group_id, member=member_id, state=group.state,
                 reason=req.reason)
        self._maybe_prepare_rebalance_or_complete_join(group, f"adding member {member_id}")

    def _update_member_and_rebalance(self, group: Group, member: Member, req: _JoinRequest,
                                     future: asyncio.Future, reason: str) -> None:
        self._update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)
        self._maybe_prepare_rebalance_or_complete_join(group, f"{reason}: {member.member_id}")

    @staticmethod
    def _update_member(member: Member, protocols, rebalance_timeout_ms: int, session_timeout_ms: int,
                       future: asyncio.Future | None) -> None:
        member.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_future is not None and member.join_future is not future:
            # a second JoinGroup of the same member (a retry on a new connection): the old one
            # will not be read; answer it rather than leave it parked
            _complete(member.join_future, JoinResult(REBALANCE_IN_PROGRESS, member.member_id))
        member.join_future = future

    def _update_static_member_and_rebalance(self, group: Group, req: _JoinRequest, old_id: str, new_id: str,
                                            future: asyncio.Future) -> None:
        current_leader = group.leader_id or NO_LEADER
        assert req.group_instance_id is not None  # a static member's join: the caller checked
        member = self._replace_static_member(group, req.group_instance_id, old_id, new_id)
        self._reschedule_heartbeat(group, member)
        self._update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)
        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                # no rebalance: the member keeps its assignment under its new id
                if req.supports_skip_assignment and group.is_leader(new_id):
                    result = self._join_result(group, member, with_members=True, skip_assignment=True)
                else:
                    result = self._join_result(group, member, with_members=False, leader=current_leader)
                member.join_future = None
                _complete(future, result)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {new_id} changed the selected protocol")
        elif group.is_(COMPLETING_REBALANCE):
            # the leader may be assigning to the old member id: assign again
            self._prepare_rebalance(group, f"static member {new_id} replaced {old_id}")
        else:
            self._maybe_complete_join_phase(group)

    def _replace_static_member(self, group: Group, instance_id: str, old_id: str, new_id: str) -> Member:
        old = group.members.pop(old_id)
        if old.heartbeat is not None:
            old.heartbeat.cancel()
            old.heartbeat = None
        _complete(old.join_future, JoinResult(FENCED_INSTANCE_ID, old_id))
        _complete(old.sync_future, SyncResult(FENCED_INSTANCE_ID))
        member = Member(new_id, old.group_instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                        old.session_timeout_ms, old.protocol_type, list(old.protocols), old.assignment)
        group.members[new_id] = member
        if group.is_leader(old_id):
            group.leader_id = new_id
        group.static_members[instance_id] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        return member

    # ---- the rebalance -----------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: Group) -> None:
        # the initial rebalance (from Empty) always waits for its delay
        if group.is_(PREPARING_REBALANCE) and group.has_all_members_joined() and \
                group.previous_state != EMPTY:
            self._complete_join(group)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_(EMPTY)
        if initial:
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._set_join_timer(group, delay, self._try_complete_initial_rebalance, group, delay, remaining)
        self._transition(group, PREPARING_REBALANCE)
        log.info("group_rebalance_prepared", group=group.group_id, generation=group.generation_id,
                 members=len(group.members), reason=reason)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self._set_join_timer(group, group.rebalance_timeout_ms(), self._complete_join, group)

    def _set_join_timer(self, group: Group, delay_ms: int, callback, *args) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_timer = self._later(delay_ms, callback, *args)

    def _try_complete_initial_rebalance(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self._set_join_timer(group, new_delay, self._try_complete_initial_rebalance, group, new_delay,
                                 new_remaining)
        else:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        if not group.is_(PREPARING_REBALANCE):
            return
        gone = [m for m in group.members.values() if not m.awaiting_join and not m.is_static]
        for m in gone:
            group.remove(m.member_id)
        if gone:
            log.info("group_members_not_rejoined_removed", group=group.group_id,
                     members=[m.member_id for m in gone])
        if not group.maybe_elect_new_joined_leader() and group.members:
            # only static members that did not rejoin are left: wait for them again
            log.warning("group_rebalance_no_member_rejoined", group=group.group_id)
            self._set_join_timer(group, group.rebalance_timeout_ms(), self._complete_join, group)
            return
        self._init_next_generation(group)
        if group.is_(EMPTY):
            log.info("group_empty", group=group.group_id, generation=group.generation_id)
            return
        log.info("group_generation", group=group.group_id, generation=group.generation_id,
                 protocol=group.protocol_name, leader=group.leader_id, members=len(group.members))
        for member in list(group.members.values()):
            result = self._join_result(group, member, with_members=group.is_leader(member.member_id))
            future, member.join_future = member.join_future, None
            _complete(future, result)
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self._schedule_pending_sync(group)

    def _init_next_generation(self, group: Group) -> None:
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            self._transition(group, COMPLETING_REBALANCE)
        else:
            group.protocol_name = None
            self._transition(group, EMPTY)
        group.pending_sync.clear()

    def _schedule_pending_sync(self, group: Group) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
        group.sync_timer = self._later(group.rebalance_timeout_ms(), self._expire_pending_sync, group,
                                       group.generation_id)

    def _remove_sync_expiration(self, group: Group) -> None:
        group.pending_sync.clear()
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _expire_pending_sync(self, group: Group, generation_id: int) -> None:
        group.sync_timer = None
        if generation_id != group.generation_id or group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if not group.pending_sync:
            return
        late = sorted(group.pending_sync)
        for member_id in late:
            member = group.remove(member_id)
            if member is not None:
                _complete(member.sync_future, SyncResult(UNKNOWN_MEMBER_ID))
        self._prepare_rebalance(group, f"members {late} did not sync in time")

    def _reset_and_propagate_assignment_error(self, group: Group, error: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: int) -> None:
        ptype = group.protocol_type if error == NONE else None
        pname = group.protocol_name if error == NONE else None
        for member in list(group.members.values()):
            future, member.sync_future = member.sync_future, None
            if future is not None:
                _complete(future, SyncResult(error, member.assignment, ptype, pname))
                self._reschedule_heartbeat(group, member)

    # ---- sessions ----------------------------------------------------------------------------

    def _reschedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        if self.closed:
            member.heartbeat = None
            return
        member.heartbeat = self._later(member.session_timeout_ms if timeout_ms is None else timeout_ms,
                                       self._expire_heartbeat, group, member.member_id)

    def _expire_heartbeat(self, group: Group, member_id: str) -> None:
        if group.is_(DEAD) or self.closed:
            return
        if member_id in group.pending_members:
            log.info("group_pending_member_expired", group=group.group_id, member=member_id)
            group.remove(member_id)
            if group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        member.heartbeat = None
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # parked: the rebalance (or sync) timeout governs it, and reschedules
        log.info("group_member_session_expired", group=group.group_id, member=member_id,
                 session_timeout_ms=member.session_timeout_ms)
        self._remove_member_and_update_group(group, member, f"session of {member_id} expired")

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        future, member.join_future = member.join_future, None
        _complete(future, JoinResult(UNKNOWN_MEMBER_ID, ""))
        sync, member.sync_future = member.sync_future, None
        _complete(sync, SyncResult(UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    # ---- SyncGroup ---------------------------------------------------------------------------

    async def sync(self, group_id: str, generation_id: int, member_id: str, *,
                   group_instance_id: str | None = None, protocol_type: str | None = None,
                   protocol_name: str | None = None,
                   assignments: Iterable[tuple[str, bytes]] = ()) -> SyncResult:
        future = self.loop.create_future()
        self._sync(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
                   list(assignments), future)
        return await asyncio.shield(future)

    def _sync(self, group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
              assignments, future) -> None:
        if self.closed:
            _complete(future, SyncResult(NOT_COORDINATOR))
            return
        if not group_id:
            _complete(future, SyncResult(INVALID_GROUP_ID))
            return
        group = self.groups.get(group_id)
        if group is None:
            _complete(future, SyncResult(UNKNOWN_MEMBER_ID))
            return
        if group.is_(DEAD):
            _complete(future, SyncResult(COORDINATOR_NOT_AVAILABLE))
            return
        error = group.validate_member(member_id, group_instance_id)
        if not error and generation_id != group.generation_id:
            error = ILLEGAL_GENERATION
        if not error and (_inconsistent(protocol_type, group.protocol_type)
                          or _inconsistent(protocol_name, group.protocol_name)):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error:
            _complete(future, SyncResult(error))
            return
        if group.is_(EMPTY):
            _complete(future, SyncResult(UNKNOWN_MEMBER_ID))
        elif group.is_(PREPARING_REBALANCE):
            _complete(future, SyncResult(REBALANCE_IN_PROGRESS))
        elif group.is_(COMPLETING_REBALANCE):
            member = group.members[member_id]
            if member.sync_future is not None and member.sync_future is not future:
                _complete(member.sync_future, SyncResult(REBALANCE_IN_PROGRESS))
            member.sync_future = future
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                given = dict(assignments)
                missing = [m for m in group.members if m not in given]
                if missing:
                    log.warning("group_empty_assignments", group=group.group_id, members=missing,
                                generation=group.generation_id)
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                self._propagate_assignment(group, NONE)
                self._transition(group, STABLE)
                log.info("group_stable", group=group.group_id, generation=group.generation_id,
                         members=len(group.members))
        elif group.is_(STABLE):
            self._remove_pending_sync_member(group, member_id)
            member = group.members[member_id]
            _complete(future, SyncResult(NONE, member.assignment, group.protocol_type, group.protocol_name))

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    # ---- Heartbeat ---------------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> int:
        if not group_id:
            return INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        if group.is_(EMPTY):
            return UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_(PREPARING_REBALANCE):
            return REBALANCE_IN_PROGRESS
        return NONE

    # ---- LeaveGroup --------------------------------------------------------------------------

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None, str | None]]
              ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """(top-level error, [(member id, instance id, error)]) for (member id, instance id, reason)s."""
        members = list(members)
        if not group_id:
            return INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None:
            return NONE, [(mid, iid, UNKNOWN_MEMBER_ID) for mid, iid, _ in members]
        if group.is_(DEAD):
            return COORDINATOR_NOT_AVAILABLE, []
        results = []
        left = []
        for member_id, instance_id, reason in members:
            if member_id == "":
                target = group.static_members.get(instance_id) if instance_id is not None else None
                if target is None:
                    results.append((member_id, instance_id, UNKNOWN_MEMBER_ID))
                    continue
                self._remove_leaving_member(group, target, reason)
                left.append(target)
                results.append((member_id, instance_id, NONE))
            elif member_id in group.pending_members:
                group.remove(member_id)
                log.info("group_pending_member_left", group=group.group_id, member=member_id, reason=reason)
                left.append(member_id)
                results.append((member_id, instance_id, NONE))
            else:
                error = group.validate_member(member_id, instance_id)
                if not error:
                    self._remove_leaving_member(group, member_id, reason)
                    left.append(member_id)
                results.append((member_id, instance_id, error))
        if left:
            if group.state in (STABLE, COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, f"members left: {left}")
            elif group.is_(PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return NONE, results

    def _remove_leaving_member(self, group: Group, member_id: str, reason: str | None) -> None:
        member = group.members[member_id]
        log.info("group_member_left", group=group.group_id, member=member_id, reason=reason)
        future, member.join_future = member.join_future, None
        _complete(future, JoinResult(UNKNOWN_MEMBER_ID, ""))
        sync, member.sync_future = member.sync_future, None
        _complete(sync, SyncResult(UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # ---- offsets -----------------------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, group_instance_id: str | None,
                               generation_id: int, *, api_version: int = 8) -> int:
        """0 when an OffsetCommit may be written, else the error of every partition."""
        if not group_id:
            return INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                return NONE  # a simple commit: the group only stores offsets
            return GROUP_ID_NOT_FOUND if api_version >= 9 else ILLEGAL_GENERATION
        if group.is_(DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(EMPTY):
            return NONE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return ILLEGAL_GENERATION
        elif not group.is_(EMPTY):
            return UNKNOWN_MEMBER_ID
        if group.is_(COMPLETING_REBALANCE):
            return REBALANCE_IN_PROGRESS
        return NONE

    # ---- DeleteGroups ------------------------------------------------------------------------

    def delete(self, group_id: str) -> None:
        """Forget an Empty group (DeleteGroups, after its offsets were tombstoned)."""
        group = self.groups.get(group_id)
        if group is not None and group.is_(EMPTY):
            group.cancel_timers()
            self._transition(group, DEAD)
            del self.groups[group_id]

    # ---- conversion to and from consumer groups (consumer_classic.py) --------------------------

    def hand_over(self, group_id: str) -> Group | None:
        """Give up a group that becomes a consumer group: parked JoinGroup and SyncGroup
        requests are answered REBALANCE_IN_PROGRESS (their members join the consumer
        group next), the timers stop, and the group is forgotten (it is returned)."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return None
        for m in group.members.values():
            future, m.join_future = m.join_future, None
            _complete(future, JoinResult(REBALANCE_IN_PROGRESS, m.member_id))
            sync, m.sync_future = m.sync_future, None
            _complete(sync, SyncResult(REBALANCE_IN_PROGRESS))
        group.cancel_timers()
        self._transition(group, DEAD)
        return group

    def adopt(self, group: Group, *, rebalance: bool = True) -> None:
        """Take over a Stable group made of a consumer group's classic members: their
        sessions run from now, and (`rebalance`) a rebalance asks every member to join again."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._reschedule_heartbeat(group, member)
        if rebalance:
            self._prepare_rebalance(group, f"group {group.group_id} changed from the consumer protocol to classic")

    # ---- shutdown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Answer every parked JoinGroup/SyncGroup with NOT_COORDINATOR and stop the timers."""
        if self.closed:
            return
        self.closed = True
        answered = 0
        for group in self.groups.values():
            group.cancel_timers()
            for m in group.members.values():
                future, m.join_future = m.join_future, None
                answered += _complete(future, JoinResult(NOT_COORDINATOR, m.member_id))
                sync, m.sync_future = m.sync_future, None
                answered += _complete(sync, SyncResult(NOT_COORDINATOR))
        if answered:
            log.info("group_coordinator_closed", answered=answered)


@dataclass(slots=True)
class _JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str
    client_host: str
    require_known_member_id: bool
    supports_skip_assignment: bool
    reason: str | None


def _inconsistent(asked: str | None, actual: str | None) -> bool:
    return asked is not None and actual is not None and asked != actual


__all__ = ["COMPLETING_REBALANCE", "DEAD", "EMPTY", "GroupCoordinator", "GroupDescription", "JoinResult",
           "MemberDescription", "NON_EMPTY_GROUP", "PREPARING_REBALANCE", "STABLE", "SyncResult"]
