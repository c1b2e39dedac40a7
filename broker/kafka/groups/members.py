"""The classic group coordinator's members: what a JoinGroup does to a group in
each state, adding a member, updating one, and a static member replacing its
old member id.

Contract: `GroupMembership` sits between GroupRebalance (rebalance.py, below,
whose rebalance every change here may start) and GroupCoordinator
(coordinator.py, above, which checks the JoinGroup and calls `_join_new_member`
or `_join_existing_member`). Its methods run on the loop, answer parked JoinGroup
futures with `complete` and never raise for a request's sake.

Semantics (Kafka's GroupMetadataManager/ClassicGroup, classic protocol):

- JoinGroup, new member (empty member id): v4+ dynamic members get a member id
  (`client_id-uuid4`) with MEMBER_ID_REQUIRED and are "pending" until they join
  again with it (or their session timeout passes); older versions and static
  members (group.instance.id) are added at once. Adding a member or a changed
  member prepares a rebalance. The first member of a group fixes its protocol
  type; a member whose protocol type differs, or who shares no protocol with
  every member, gets INCONSISTENT_GROUP_PROTOCOL. The leader is the first member
  added (the next one in join order when it goes).
- JoinGroup, known member: during PreparingRebalance it rejoins; in
  CompletingRebalance with unchanged protocols it gets the current generation
  again (it probably missed the answer); in Stable the leader's rejoin or changed
  metadata rebalances, anything else gets the current generation.
- Static membership: a JoinGroup with a known group.instance.id and an empty
  member id replaces the old member id (whose parked requests get
  FENCED_INSTANCE_ID); in a Stable group with the same selected protocol it gets
  the current generation without a rebalance.
"""

from __future__ import annotations

import asyncio
import uuid

import structlog

from .group import (
    COMPLETING_REBALANCE,
    COORDINATOR_NOT_AVAILABLE,
    DEAD,
    EMPTY,
    FENCED_INSTANCE_ID,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    NO_LEADER,
    PREPARING_REBALANCE,
    REBALANCE_IN_PROGRESS,
    STABLE,
    UNKNOWN_MEMBER_ID,
    Group,
    JoinRequest,
    JoinResult,
    Member,
    SyncResult,
    complete,
)
from .rebalance import GroupRebalance

log = structlog.get_logger("strata.kafka.groups")


class GroupMembership(GroupRebalance):
    """Joins: new, known and static members (see the module contract)."""

    new_member_join_timeout_ms: int

    # ---- joining members ---------------------------------------------------------------------

    def _join_new_member(self, group: Group, req: JoinRequest, future: asyncio.Future) -> None:
        if group.is_(DEAD):
            complete(future, JoinResult(COORDINATOR_NOT_AVAILABLE, ""))
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            complete(future, JoinResult(INCONSISTENT_GROUP_PROTOCOL, ""))
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
            complete(future, JoinResult(MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, req, new_id, future)

    def _join_existing_member(self, group: Group, req: JoinRequest, future: asyncio.Future) -> None:
        member_id = req.member_id
        if group.is_(DEAD):
            complete(future, JoinResult(COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            complete(future, JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members and req.group_instance_id is None:
            self._add_member_and_rebalance(group, req, member_id, future)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error:
            complete(future, JoinResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, future, "member rejoins during rebalance")
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # it probably missed the JoinGroup response: the current generation again
                complete(future, self._join_result(group, member, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, req, future, "member metadata changed")
        elif group.is_(STABLE):
            if group.is_leader(member_id):
                self._update_member_and_rebalance(group, member, req, future, "leader rejoins")
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, future, "member metadata changed")
            else:
                complete(future, self._join_result(group, member, with_members=False))
        else:
            complete(future, JoinResult(UNKNOWN_MEMBER_ID, member_id))

    def _add_member_and_rebalance(self, group: Group, req: JoinRequest, member_id: str,
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

    def _update_member_and_rebalance(self, group: Group, member: Member, req: JoinRequest,
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
            complete(member.join_future, JoinResult(REBALANCE_IN_PROGRESS, member.member_id))
        member.join_future = future

    def _update_static_member_and_rebalance(self, group: Group, req: JoinRequest, old_id: str, new_id: str,
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
                complete(future, result)
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
        complete(old.join_future, JoinResult(FENCED_INSTANCE_ID, old_id))
        complete(old.sync_future, SyncResult(FENCED_INSTANCE_ID))
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


__all__ = ["GroupMembership"]
