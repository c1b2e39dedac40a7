"""The classic group coordinator's rebalance: the join phase, the generation bump
and the sync phase (the leader's assignments handed out), and removing a member.

Contract: `GroupRebalance` sits between GroupTimers (timers.py, below, whose
expiries call `_complete_join`, `_prepare_rebalance` and
`_remove_member_and_update_group` here) and GroupMembership (members.py, above).
Its methods run on the loop, answer parked JoinGroup/SyncGroup futures with
`complete` and never raise for a request's sake.

Semantics (Kafka's GroupMetadataManager/ClassicGroup, classic protocol):

- Rebalance: PreparingRebalance waits until every member has rejoined (and no
  member is pending), or the rebalance timeout passes (timers.py); then dynamic
  members that did not rejoin are removed, the generation goes up, the protocol
  is chosen by vote among the protocols every member supports, and every parked
  JoinGroup is answered in one pass, the followers first and the leader (who also
  gets the members and their metadata) last: CompletingRebalance. The JoinGroup
  that completes the join phase, the leader's own included, is answered in that
  pass like the parked ones (coordinator.py), so it never goes out before them.
  A rebalance that starts while the group is CompletingRebalance first answers
  the parked SyncGroups REBALANCE_IN_PROGRESS.
  Static members that do not rejoin are not removed at the end of the join phase
  (only by session timeout or LeaveGroup).
- SyncGroup in CompletingRebalance: the member parks; the leader's assignments
  (missing members get empty bytes) answer every parked SyncGroup and the group
  is Stable.
"""

from __future__ import annotations

import asyncio

import structlog

from .group import (
    COMPLETING_REBALANCE,
    EMPTY,
    NO_LEADER,
    NONE,
    PREPARING_REBALANCE,
    REBALANCE_IN_PROGRESS,
    STABLE,
    UNKNOWN_MEMBER_ID,
    Group,
    JoinResult,
    Member,
    SyncResult,
    complete,
)
from .timers import GroupTimers

log = structlog.get_logger("strata.kafka.groups")


class GroupRebalance(GroupTimers):
    """The join phase, generations and the sync phase (see the module contract)."""

    def _join_result(self, group: Group, member: Member, *, with_members: bool, leader: str | None = None,
                     skip_assignment: bool = False) -> JoinResult:
        return JoinResult(NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                          (group.leader_id or NO_LEADER) if leader is None else leader, skip_assignment,
                          group.join_members() if with_members else ())

    # ---- the rebalance -----------------------------------------------------------------------

    def _transition(self, group: Group, state: str) -> None:
        group.transition(state, self._now())

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
        # followers first, the leader last, in this one pass: each parked JoinGroup wakes its
        # request in the order answered, so the followers' answers are written before the
        # leader's and their SyncGroups reach the group before a leader that syncs, revokes
        # and rejoins at once can start the next rebalance
        for member in sorted(group.members.values(), key=lambda m: group.is_leader(m.member_id)):
            result = self._join_result(group, member, with_members=group.is_leader(member.member_id))
            future, member.join_future = member.join_future, None
            complete(future, result)
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
                complete(future, SyncResult(error, member.assignment, ptype, pname))
                self._reschedule_heartbeat(group, member)

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self._drop_member(group, member)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)


    @staticmethod
    def _drop_member(group: Group, member: Member) -> None:
        """Answer the member's parked JoinGroup and SyncGroup UNKNOWN_MEMBER_ID and remove it."""
        future, member.join_future = member.join_future, None
        complete(future, JoinResult(UNKNOWN_MEMBER_ID, ""))
        sync, member.sync_future = member.sync_future, None
        complete(sync, SyncResult(UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)

    # ---- the sync phase ----------------------------------------------------------------------

    def _sync_member(self, group: Group, member_id: str, assignments: list[tuple[str, bytes]],
                     future: asyncio.Future) -> None:
        """A member's SyncGroup in CompletingRebalance: it parks (a parked earlier one
        is answered REBALANCE_IN_PROGRESS); the leader's assignments (missing members
        get empty bytes) answer every parked SyncGroup and the group is Stable."""
        member = group.members[member_id]
        if member.sync_future is not None and member.sync_future is not future:
            complete(member.sync_future, SyncResult(REBALANCE_IN_PROGRESS))
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


__all__ = ["GroupRebalance"]
