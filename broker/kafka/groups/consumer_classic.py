"""Online conversion between classic groups and consumer groups (Kafka 4's
`group.consumer.migration.policy`), as Kafka's ConsumerGroup.fromClassicGroup and
ClassicGroup.fromConsumerGroup build them: plain functions from one kind's data
to the other's. The coordinators decide when (consumer_coordinator.py).

- Upgrade (`from_classic`): every classic member becomes a member of the consumer
  group that speaks the classic protocol (its JoinGroup protocols and session
  timeout kept as ClassicMetadata); its subscription is read from its metadata for
  the group's protocol, its current and target partitions from its last SyncGroup
  assignment; the group epoch, the assignment epoch and every member epoch are
  the classic generation, every member Stable. The member who asked for the
  upgrade then joins, which bumps the group epoch: the classic members are told
  to rejoin by their next Heartbeat (REBALANCE_IN_PROGRESS).
- Downgrade (`to_classic`): when the last member that speaks the consumer
  protocol leaves, the remaining members (all classic) form a Stable classic
  group of generation = the group epoch (not bumped for the leaving member),
  protocol type "consumer", the protocol chosen by vote, each member's
  assignment the partitions it holds now (Kafka gives its target; what a member
  holds is never what another one holds, a target may be), in the version of its
  metadata; the classic coordinator then rebalances it. The same happens when a
  classic static member takes the place of the last member that speaks the
  consumer protocol (its instance id), without the rebalance when every member
  already holds its target.

Malformed embedded protocol data raises ValueError: the group is not converted.
"""

from __future__ import annotations

from .consumer_group import MEMBER_STABLE, ClassicMetadata, ConsumerGroup, ConsumerMember
from .consumer_protocol import PROTOCOL_TYPE, encode_assignment, parse_assignment, parse_subscription, version_of
from .group import STABLE, Group, Member


def upgradable(classic: Group) -> bool:
    """Whether a classic group embeds the consumer protocol (what Kafka converts)."""
    return classic.protocol_type == PROTOCOL_TYPE


def from_classic(classic: Group, topic_exists) -> ConsumerGroup:
    """The consumer group a classic group becomes; `topic_exists(name)` drops assigned
    partitions of topics that are gone."""
    group = ConsumerGroup(classic.group_id)
    group.group_epoch = group.assignment_epoch = classic.generation_id
    for m in classic.members.values():
        subscription = parse_subscription(m.metadata(classic.protocol_name))
        assigned = {p for p in parse_assignment(m.assignment) if topic_exists(p[0])}
        member = ConsumerMember(
            m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id, client_id=m.client_id,
            client_host=m.client_host, member_epoch=classic.generation_id,
            previous_member_epoch=classic.generation_id, state=MEMBER_STABLE, assigned=assigned,
            subscribed_names=tuple(sorted(set(subscription.topics))), rebalance_timeout_ms=m.rebalance_timeout_ms,
            classic=ClassicMetadata(m.session_timeout_ms, tuple(m.protocols)))
        group.add(member)
        group.target[m.member_id] = set(assigned)
    return group


def downgradable(group: ConsumerGroup, leaving: str | None) -> bool:
    """Whether `group` without member `leaving` (None: none) is classic members only, and
    some remain."""
    rest = [m for mid, m in group.members.items() if mid != leaving]
    return bool(rest) and all(m.classic is not None for m in rest)


def to_classic(group: ConsumerGroup, leaving: str | None, now_ms: int) -> Group:
    """The Stable classic group of a consumer group's members but `leaving` (all classic)."""
    classic = Group(group.group_id, now_ms)
    classic.generation_id = group.group_epoch
    for m in group.members.values():
        if m.member_id == leaving:
            continue
        meta = m.classic
        if meta is None:
            raise ValueError(f"member {m.member_id} does not speak the classic protocol")
        classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                           meta.session_timeout_ms, PROTOCOL_TYPE, list(meta.protocols)), None)
    classic.protocol_type = PROTOCOL_TYPE
    classic.protocol_name = classic.select_protocol()
    for member in classic.members.values():
        version = version_of(member.metadata(classic.protocol_name))
        member.assignment = encode_assignment(group.members[member.member_id].assigned, version)
    classic.transition(STABLE, now_ms)
    return classic


__all__ = ["downgradable", "from_classic", "to_classic", "upgradable"]
