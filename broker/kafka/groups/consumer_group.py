"""A consumer-protocol group's data (KIP-848) and the reconciliation of one
member towards its target assignment.

States of a group (Kafka's ConsumerGroup.ConsumerGroupState): Empty (no members),
Assigning (the group epoch is ahead of the target assignment's epoch),
Reconciling (some member has not reached the target yet), Stable.

Epochs: the group epoch goes up whenever membership, a subscription or the
subscribed topics' partitions change; the target assignment is recomputed for
that epoch (the assignment epoch); a member's epoch reaches the assignment
epoch once it owns no partition the target took from it.

Reconciliation (Kafka's CurrentAssignmentBuilder), `reconcile`:
- a member that still owns partitions its target no longer holds is in
  UNREVOKED_PARTITIONS: it is answered with what it keeps and stays at its epoch
  until a heartbeat's owned partitions no longer hold any of the revoked ones;
- then it moves to the assignment epoch and gets every target partition that
  no other member holds (assigned or being revoked): a partition changes owner
  only once its previous owner's heartbeat gave it up. Partitions still held
  elsewhere leave it in UNRELEASED_PARTITIONS, and later heartbeats add them
  as they are released; with all of them it is STABLE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from .assignors import Partition

EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE = "Stable"
DEAD = "Dead"
CONSUMER = "consumer"  # ListGroups v5 group type and protocol type

# member states (Kafka's MemberState)
MEMBER_STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"

LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member of a consumer group that speaks the classic protocol joined with
    (Kafka's ClassicMemberMetadata): its session timeout and (protocol name, metadata)s."""
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup and SyncGroup answers name: its first, as Kafka."""
        return self.protocols[0][0]


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: str = MEMBER_STABLE
    assigned: set[Partition] = field(default_factory=set)
    revoking: set[Partition] = field(default_factory=set)
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    resend: bool = False  # the next answer carries the assignment (its topic ids changed)
    classic: ClassicMetadata | None = None  # set for a member that speaks the classic protocol
    # Not stored: whether the member's principal may DESCRIBE a topic (its last
    # heartbeat's connection; None: not known since a restart, every topic), and the
    # topics its subscription came to at the group's last refresh.
    may_describe: Callable[[str], bool] | None = field(default=None, repr=False)
    resolved_topics: frozenset[str] | None = field(default=None, repr=False)
    session_timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    rebalance_timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    # a classic member's join timeout (told to rejoin) or sync timeout (joined, not synced yet)
    classic_timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    def holds(self, partition: Partition) -> bool:
        return partition in self.assigned or partition in self.revoking

    def cancel_timers(self) -> None:
        for handle in (self.session_timer, self.rebalance_timer, self.classic_timer):
            if handle is not None:
                handle.cancel()
        self.session_timer = self.rebalance_timer = self.classic_timer = None


class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, set[Partition]] = {}  # member id -> target partitions
        self.topic_partitions: dict[str, int] = {}  # subscribed topic -> partition count, at group_epoch
        self.topic_ids: dict[str, str | None] = {}  # subscribed topic -> its id, to notice a topic created again
        self.assignor_name = ""

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE:
                return RECONCILING
        return STABLE

    def owner(self, partition: Partition, other_than: str) -> str | None:
        for m in self.members.values():
            if m.member_id != other_than and m.holds(partition):
                return m.member_id
        return None

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_timers()
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def cancel_timers(self) -> None:
        for m in self.members.values():
            m.cancel_timers()


def reconcile(member: ConsumerMember, target: set[Partition], target_epoch: int,
              owned: set[Partition] | None, is_free: Callable[[Partition], bool]) -> None:
    """Move `member` towards `target` (its partitions at `target_epoch`); `owned`
    is what its heartbeat says it owns (None when the heartbeat did not say)."""
    if member.state == UNREVOKED_PARTITIONS:
        if owned is not None:
            member.revoking &= owned
        if member.revoking:
            return
    elif member.member_epoch == target_epoch and member.state == MEMBER_STABLE:
        return
    kept = member.assigned & target
    revoked = member.assigned - target
    if revoked:
        member.assigned = kept
        member.revoking |= revoked
        member.state = UNREVOKED_PARTITIONS
        return
    member.assigned = kept | {p for p in target - kept if is_free(p)}
    if member.member_epoch != target_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = target_epoch
    member.state = MEMBER_STABLE if member.assigned == target else UNRELEASED_PARTITIONS


__all__ = ["ASSIGNING", "CONSUMER", "ClassicMetadata", "ConsumerGroup", "ConsumerMember", "DEAD", "EMPTY",
           "LEAVE_EPOCH", "LEAVE_STATIC_EPOCH", "MEMBER_STABLE", "RECONCILING", "STABLE", "UNRELEASED_PARTITIONS",
           "UNREVOKED_PARTITIONS", "reconcile"]
