"""The classic group coordinator's timers, all `loop.call_later` handles on the
broker's loop: members' sessions, the join phase's deadline and the sync deadline.

Contract: `GroupTimers` is the bottom of GroupCoordinator (coordinator.py, over
rebalance.py). It arms and cancels the timers and says what their expiry does;
the group changes that follow (removing a member, completing the join phase,
preparing a rebalance) are rebalance.py's, declared at the bottom of the class.
A timer callback that fails is logged (`group_timer_failed`) and changes nothing
more. Nothing is armed after `close()` (`closed`).

Semantics (Kafka's GroupMetadataManager/ClassicGroup, classic protocol):

- Sessions: a member's session timer restarts on every Heartbeat and answered
  JoinGroup/SyncGroup. A member whose session timer runs out is removed (not
  while its JoinGroup/SyncGroup is parked: the rebalance or sync deadline governs
  it then) and the group rebalances. A new member whose first JoinGroup is parked
  runs on group.classic.new.member.join.timeout (5 minutes) instead, since it
  cannot heartbeat; a pending member (MEMBER_ID_REQUIRED handed out) that does
  not join again within its session timeout is forgotten.
- Join phase: a rebalance waits for every member up to the rebalance timeout
  (the members' largest). A rebalance of an Empty group first waits
  group.initial.rebalance.delay.ms, extended (up to the rebalance timeout) while
  new members keep arriving, so a starting group forms in one generation.
- Sync deadline: members that do not SyncGroup within the rebalance timeout of a
  generation are removed (their parked SyncGroup answered UNKNOWN_MEMBER_ID) and
  the group rebalances.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from .group import (
    COMPLETING_REBALANCE,
    DEAD,
    PREPARING_REBALANCE,
    STABLE,
    UNKNOWN_MEMBER_ID,
    Group,
    Member,
    SyncResult,
    complete,
)

log = structlog.get_logger("strata.kafka.groups")


class GroupTimers:
    """Arms, cancels and expires the groups' timers (see the module contract)."""

    _loop: asyncio.AbstractEventLoop | None
    _clock: Callable[[], int]
    closed: bool
    initial_rebalance_delay_ms: int

    # ---- loop --------------------------------------------------------------------------------

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

    # ---- join timer --------------------------------------------------------------------------

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

    # ---- sync deadline -----------------------------------------------------------------------

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

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync and group.sync_timer is not None:
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
                complete(member.sync_future, SyncResult(UNKNOWN_MEMBER_ID))
        self._prepare_rebalance(group, f"members {late} did not sync in time")

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

    # ---- what expiry changes (rebalance.py) -------------------------------------------------

    def _complete_join(self, group: Group) -> None:
        raise NotImplementedError

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        raise NotImplementedError

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        raise NotImplementedError


__all__ = ["GroupTimers"]
