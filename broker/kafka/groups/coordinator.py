"""Kafka's classic consumer-group protocol as a state machine on the broker's loop.

`GroupCoordinator` knows nothing of the wire: its coroutines take plain values and
return plain results (`JoinResult`, `SyncResult`, error codes), and the handlers in
broker/kafka/groups/handlers.py translate kio requests to calls. Everything runs on
one asyncio loop, so no locks; timers are `loop.call_later` handles.

Contract: this module is the request-facing surface (JoinGroup's checks, SyncGroup,
Heartbeat, LeaveGroup, the OffsetCommit check, DeleteGroups, shutdown); it stands
on the members (members.py: what a join does in each state), which stand on the
rebalance (rebalance.py: the join phase, generations, the sync phase), which
stands on the timers (timers.py: sessions, the join and sync deadlines). The
group's data (states, `Member`, `Group`, the results, the error codes) is
broker/kafka/groups/group.py; this module re-exports those names. What the admin
APIs read of the groups (ListGroups, DescribeGroups, the checks of DeleteGroups
and OffsetDelete) is `ClassicGroupListing` in listing.py, its other base class.

Semantics (Kafka's GroupMetadataManager/ClassicGroup, classic protocol):

- States Empty, PreparingRebalance, CompletingRebalance, Stable, Dead. A group is
  created by a JoinGroup with an empty member id; Dead only after DeleteGroups.
- JoinGroup: an empty group id is INVALID_GROUP_ID, a session timeout outside
  group.min/max.session.timeout.ms INVALID_SESSION_TIMEOUT, a member id unknown
  to an unknown group UNKNOWN_MEMBER_ID, a member past group.max.size
  GROUP_MAX_SIZE_REACHED (and removed); the rest is members.py's.
- SyncGroup: in CompletingRebalance the member parks until the leader's
  assignments arrive (rebalance.py); in Stable it gets its assignment at once.
  Wrong generation ILLEGAL_GENERATION, unknown member UNKNOWN_MEMBER_ID, during
  PreparingRebalance REBALANCE_IN_PROGRESS.
- Heartbeat: restarts the member's session timer (timers.py); REBALANCE_IN_PROGRESS
  during PreparingRebalance tells members to rejoin.
- LeaveGroup (v3+ several members, by member id or group.instance.id) removes
  members at once and rebalances.
- Requests naming a group.instance.id that maps to another member id get
  FENCED_INSTANCE_ID.
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
from collections.abc import Callable, Iterable

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
    NON_EMPTY_GROUP,
    NONE,
    NOT_COORDINATOR,
    PREPARING_REBALANCE,
    REBALANCE_IN_PROGRESS,
    STABLE,
    UNKNOWN_MEMBER_ID,
    Group,
    GroupDescription,
    JoinRequest,
    JoinResult,
    MemberDescription,
    SyncResult,
    complete,
)
from .listing import ClassicGroupListing
from .members import GroupMembership

log = structlog.get_logger("strata.kafka.groups")


class GroupCoordinator(ClassicGroupListing, GroupMembership):
    """The classic protocol's requests; joins are members.py, the rebalance
    rebalance.py, the timers timers.py, what the admin APIs read listing.py."""

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

    # ---- JoinGroup ---------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, *, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                   rebalance_timeout_ms: int = -1, group_instance_id: str | None = None,
                   client_id: str = "", client_host: str = "", require_known_member_id: bool = True,
                   supports_skip_assignment: bool = False, reason: str | None = None) -> JoinResult:
        future = self.loop.create_future()
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        request = JoinRequest(group_id, member_id, group_instance_id, session_timeout_ms,
                              rebalance_timeout_ms, protocol_type, list(protocols), client_id or "",
                              client_host, require_known_member_id, supports_skip_assignment, reason)
        # shield: a client that disconnects must not cancel the member's parked future. Taken
        # before the join runs, so a JoinGroup that completes the join phase itself is answered
        # through the same callbacks as the parked ones, in the order rebalance.py answers them
        # (followers first), instead of going out ahead of them
        answer = asyncio.shield(future)
        self._join(request, future)
        return await answer

    def _join(self, req: JoinRequest, future: asyncio.Future) -> None:
        def fail(error: int, member_id: str = req.member_id) -> None:
            complete(future, JoinResult(error, member_id))

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
            complete(future, SyncResult(NOT_COORDINATOR))
            return
        if not group_id:
            complete(future, SyncResult(INVALID_GROUP_ID))
            return
        group = self.groups.get(group_id)
        if group is None:
            complete(future, SyncResult(UNKNOWN_MEMBER_ID))
            return
        if group.is_(DEAD):
            complete(future, SyncResult(COORDINATOR_NOT_AVAILABLE))
            return
        error = group.validate_member(member_id, group_instance_id)
        if not error and generation_id != group.generation_id:
            error = ILLEGAL_GENERATION
        if not error and (_inconsistent(protocol_type, group.protocol_type)
                          or _inconsistent(protocol_name, group.protocol_name)):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error:
            complete(future, SyncResult(error))
            return
        if group.is_(EMPTY):
            complete(future, SyncResult(UNKNOWN_MEMBER_ID))
        elif group.is_(PREPARING_REBALANCE):
            complete(future, SyncResult(REBALANCE_IN_PROGRESS))
        elif group.is_(COMPLETING_REBALANCE):
            self._sync_member(group, member_id, assignments, future)
        elif group.is_(STABLE):
            self._remove_pending_sync_member(group, member_id)
            member = group.members[member_id]
            complete(future, SyncResult(NONE, member.assignment, group.protocol_type, group.protocol_name))

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
        log.info("group_member_left", group=group.group_id, member=member_id, reason=reason)
        self._drop_member(group, group.members[member_id])

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
            complete(future, JoinResult(REBALANCE_IN_PROGRESS, m.member_id))
            sync, m.sync_future = m.sync_future, None
            complete(sync, SyncResult(REBALANCE_IN_PROGRESS))
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
                answered += complete(future, JoinResult(NOT_COORDINATOR, m.member_id))
                sync, m.sync_future = m.sync_future, None
                answered += complete(sync, SyncResult(NOT_COORDINATOR))
        if answered:
            log.info("group_coordinator_closed", answered=answered)

def _inconsistent(asked: str | None, actual: str | None) -> bool:
    return asked is not None and actual is not None and asked != actual


__all__ = ["COMPLETING_REBALANCE", "DEAD", "EMPTY", "FENCED_INSTANCE_ID", "GROUP_ID_NOT_FOUND",
           "GROUP_MAX_SIZE_REACHED", "ILLEGAL_GENERATION", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_GROUP_ID",
           "INVALID_SESSION_TIMEOUT", "MEMBER_ID_REQUIRED", "NON_EMPTY_GROUP", "NOT_COORDINATOR",
           "PREPARING_REBALANCE", "REBALANCE_IN_PROGRESS", "STABLE", "UNKNOWN_MEMBER_ID", "GroupCoordinator",
           "GroupDescription", "JoinResult", "MemberDescription", "SyncResult"]
