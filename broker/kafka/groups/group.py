"""A classic consumer group's data: its states, the Kafka error codes the
coordinator answers with, a JoinGroup's values (`JoinRequest`), the plain results
it returns (`JoinResult`, `SyncResult`, `GroupDescription`) and `complete`, which
answers a parked request once, a `Member`, and `Group` (members in join order,
static and pending members, leader, generation, timers) with its queries and changes.

No decisions live here: when to rebalance, whom to remove and what to answer is
the state machine in broker/kafka/groups/ (coordinator.py, rebalance.py,
timers.py). Everything runs on the broker's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
CLASSIC = "classic"  # ListGroups v5 group_type

# Kafka's error codes used here
NONE = 0
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # Kafka's group.classic.new.member.join.timeout (5 min)
NO_LEADER = ""


@dataclass(slots=True)
class JoinRequest:
    """A JoinGroup's values, as the coordinator takes them."""

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


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = NO_LEADER
    skip_assignment: bool = False
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member id, instance id, metadata)


@dataclass(slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


def complete(future: asyncio.Future | None, result) -> bool:
    """Answer a parked JoinGroup/SyncGroup with `result`, unless it is gone or answered."""
    if future is None or future.done():
        return False
    future.set_result(result)
    return True


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberDescription, ...] = ()


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    is_new: bool = False
    heartbeat: asyncio.TimerHandle | None = field(default=None, repr=False)

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol_name:
                return data
        return b""

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


class Group:
    def __init__(self, group_id: str, now_ms: int):
        self.group_id = group_id
        self.state = EMPTY
        self.previous_state = DEAD
        self.state_timestamp = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # in join order
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, asyncio.TimerHandle | None] = {}  # MEMBER_ID_REQUIRED handed out
        self.pending_sync: set[str] = set()
        self.new_member_added = False
        self.join_timer: asyncio.TimerHandle | None = None
        self.sync_timer: asyncio.TimerHandle | None = None

    # ---- queries -----------------------------------------------------------------------------

    def is_(self, state: str) -> bool:
        return self.state == state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def can_rebalance(self) -> bool:
        return self.state in (STABLE, COMPLETING_REBALANCE, EMPTY)

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        names = list(names)
        if self.is_(EMPTY):
            return bool(protocol_type) and bool(names)
        candidates = self.candidate_protocols()
        return self.protocol_type == protocol_type and any(n in candidates for n in names)

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def select_protocol(self) -> str:
        """The protocol every member supports with the most first-choice votes;
        ties go to the earliest member's preference."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id} has no common protocol")
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        order = next(iter(self.members.values())).protocol_names()
        return max(sorted(votes, key=order.index), key=lambda n: votes[n])

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return UNKNOWN_MEMBER_ID
            if existing != member_id:
                return FENCED_INSTANCE_ID
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        return NONE

    def join_members(self) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())

    # ---- changes -----------------------------------------------------------------------------

    def transition(self, state: str, now_ms: int) -> None:
        self.previous_state = self.state
        self.state = state
        self.state_timestamp = now_ms

    def add(self, member: Member, future: asyncio.Future | None) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.join_future = future
        handle = self.pending_members.pop(member.member_id, None)
        if handle is not None:
            handle.cancel()  # its pending-member session timer

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            if member.group_instance_id is not None and \
                    self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
            if member.heartbeat is not None:
                member.heartbeat.cancel()
                member.heartbeat = None
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        handle = self.pending_members.pop(member_id, None)
        if handle is not None:
            handle.cancel()
        self.pending_sync.discard(member_id)
        return member

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def cancel_timers(self) -> None:
        for handle in (self.join_timer, self.sync_timer):
            if handle is not None:
                handle.cancel()
        self.join_timer = self.sync_timer = None
        for m in self.members.values():
            if m.heartbeat is not None:
                m.heartbeat.cancel()
                m.heartbeat = None
        for handle in self.pending_members.values():
            if handle is not None:
                handle.cancel()
