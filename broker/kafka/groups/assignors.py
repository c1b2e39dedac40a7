"""Server-side partition assignors of the consumer group protocol (KIP-848):
`uniform` and `range`, as Kafka's group coordinator names them
(org.apache.kafka.coordinator.group.assignor).

An assignor is a pure function of the group's members, what each is subscribed
to, what each is currently targeted with, and the subscribed topics' partition
counts; it returns the new target assignment of every member. Partitions are
(topic name, partition index) pairs.

- `uniform` (Kafka's default): balanced and sticky. Every member keeps what its
  current target holds while the topic still exists, the member is still
  subscribed to it and no other member kept the partition first. With identical
  subscriptions (the common case, in O(P log P)) every member gets floor(P/N) or
  ceil(P/N) partitions, the larger shares going to the members that kept the
  most: a member gives up only what it holds beyond its share, and the freed and
  new partitions fill the members below theirs. With different subscriptions the
  partitions nobody holds go one at a time to the least loaded subscribed member
  (ties to the smaller member id); then partitions move from the most loaded
  member to a subscribed member holding at least two fewer, until no such move
  exists.
  Racks (Kafka's RackInfo of the uniform assignor's builders): with the members'
  rack ids and the racks of each partition's replicas, rack matching applies when
  some member has a rack, some partition lies in a member's rack and not every
  partition lies in the same racks (so never on one broker, whose partitions
  all share `broker.rack`). It then ranks after balance and before stickiness: a
  member keeps a current partition only in the partition's rack; free partitions
  go first to the least loaded member of their rack with room (the partitions
  with the fewest such members first), then to their previous owner, then as
  above; a balancing move prefers a member of the partition's rack.
- `range`: per topic, the subscribed members in member-id order get contiguous
  ranges (the first P mod N members one partition more). Topics with the same
  partition count and the same subscribers are co-partitioned: a member gets
  the same partition indexes of each (what joins of co-partitioned topics need).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set

Partition = tuple[str, int]
Assignment = dict[str, set[Partition]]  # member id -> partitions
PartitionRacks = Callable[[Partition], Set[str]]  # the racks of a partition's replicas

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)
# group.consumer.assignors takes the short names or Kafka's class names of its built-in assignors
CLASS_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE}


def assignor_name(configured: str) -> str | None:
    """The short name (`uniform`, `range`) of an entry of group.consumer.assignors, None when
    it names no assignor of Strata's."""
    text = configured.strip()
    if text in ASSIGNORS:
        return text
    return CLASS_NAMES.get(text)


def configured_assignors(value: str) -> list[str]:
    """The short names of group.consumer.assignors' entries (a comma-separated list), in order,
    each once; entries that name no assignor are left out (the config check refuses them)."""
    out: list[str] = []
    for entry in value.split(","):
        name = assignor_name(entry)
        if name is not None and name not in out:
            out.append(name)
    return out


def assign(name: str, subscriptions: Mapping[str, Set[str]], current: Mapping[str, Set[Partition]],
           partition_counts: Mapping[str, int], member_racks: Mapping[str, str | None] | None = None,
           partition_racks: PartitionRacks | None = None) -> Assignment:
    """The target assignment by assignor `name` (a name of ASSIGNORS); `range`, as Kafka's,
    does not match racks."""
    if name == UNIFORM:
        return uniform(subscriptions, current, partition_counts, member_racks, partition_racks)
    if name == RANGE:
        return range_assign(subscriptions, partition_counts)
    raise ValueError(f"unknown assignor {name}")


class Racks:
    """Which members share a rack with which partitions, and whether rack matching applies."""

    def __init__(self, member_racks: Mapping[str, str | None] | None, partition_racks: PartitionRacks | None,
                 partitions: Iterable[Partition]):
        by_rack: dict[str, list[str]] = {}
        for member, rack in sorted((member_racks or {}).items()):
            if rack:
                by_rack.setdefault(rack, []).append(member)
        self.members_in_rack: dict[Partition, list[str]] = {}
        self.active = False
        if not by_rack or partition_racks is None:
            return
        racks = {p: frozenset(partition_racks(p)) for p in partitions}
        every_rack = frozenset().union(*racks.values())
        if every_rack.isdisjoint(by_rack) or all(r == every_rack for r in racks.values()):
            return
        self.active = True
        self.members_in_rack = {p: sorted({m for rack in rs for m in by_rack.get(rack, ())})
                                for p, rs in racks.items()}

    def matches(self, member: str, partition: Partition) -> bool:
        return member in self.members_in_rack.get(partition, ())


def uniform(subscriptions: Mapping[str, Set[str]], current: Mapping[str, Set[Partition]],
            partition_counts: Mapping[str, int], member_racks: Mapping[str, str | None] | None = None,
            partition_racks: PartitionRacks | None = None) -> Assignment:
    result: Assignment = {m: set() for m in subscriptions}
    every = [(t, i) for t in sorted(partition_counts)
             for i in range(partition_counts[t])
             if any(t in topics for topics in subscriptions.values())]
    racks = Racks(member_racks, partition_racks, every)
    taken: set[Partition] = set()
    previous: dict[Partition, str] = {}  # kept back for a rack mismatch: its owner, for the fill
    for member in sorted(subscriptions):
        topics = subscriptions[member]
        for p in sorted(current.get(member, ())):
            topic, index = p
            if topic in topics and index < partition_counts.get(topic, 0) and p not in taken:
                if racks.active and not racks.matches(member, p):
                    previous.setdefault(p, member)
                    continue
                result[member].add(p)
                taken.add(p)
    if len({frozenset(topics) for topics in subscriptions.values()}) == 1:
        _fill_shares(result, [p for p in every if p not in taken], racks, previous)
        return result
    for p in every:
        if p in taken:
            continue
        eligible = [m for m in subscriptions if p[0] in subscriptions[m]]
        target = min(eligible, key=lambda m: (racks.active and not racks.matches(m, p), len(result[m]),
                                              m != previous.get(p), m))
        result[target].add(p)
        taken.add(p)
    _balance(result, subscriptions, racks)
    return result


def _fill_shares(result: Assignment, free: list[Partition], racks: Racks, previous: Mapping[Partition, str]) -> None:
    """Identical subscriptions: trim every member to its share and hand out the rest
    (to a member of the partition's rack first, then to its previous owner)."""
    total = sum(len(parts) for parts in result.values()) + len(free)
    share, extra = divmod(total, len(result))
    order = sorted(result, key=lambda m: (-len(result[m]), m))
    quota = {m: share + (1 if i < extra else 0) for i, m in enumerate(order)}
    pool = list(free)
    for m in order:
        if len(result[m]) > quota[m]:
            surplus = sorted(result[m])[quota[m]:]
            result[m].difference_update(surplus)
            pool.extend(surplus)
    if racks.active:
        for p in sorted(pool, key=lambda p: (len(racks.members_in_rack.get(p, ())), p)):
            room = [m for m in racks.members_in_rack.get(p, ()) if len(result[m]) < quota[m]]
            if room:
                result[min(room, key=lambda m: (len(result[m]), m))].add(p)
                pool.remove(p)
    for p in sorted(pool):
        owner = previous.get(p)
        if owner is not None and len(result[owner]) < quota[owner]:
            result[owner].add(p)
            pool.remove(p)
    pool.sort(reverse=True)
    for m in sorted(result):
        while len(result[m]) < quota[m]:
            result[m].add(pool.pop())


def _balance(result: Assignment, subscriptions: Mapping[str, Set[str]], racks: Racks) -> None:
    """Move partitions from heavier to lighter subscribed members while a move
    narrows a gap of two or more (heaviest member first, its partitions in order;
    a member of the partition's rack first)."""
    moved = True
    while moved:
        moved = False
        for heavy in sorted(result, key=lambda m: (-len(result[m]), m)):
            for p in sorted(result[heavy], reverse=True):
                lighter = [m for m in subscriptions
                           if p[0] in subscriptions[m] and len(result[m]) + 1 < len(result[heavy])]
                if lighter:
                    target = min(lighter, key=lambda m: (racks.active and not racks.matches(m, p),
                                                         len(result[m]), m))
                    result[heavy].discard(p)
                    result[target].add(p)
                    moved = True
            if moved:
                break


def range_assign(subscriptions: Mapping[str, Set[str]], partition_counts: Mapping[str, int]) -> Assignment:
    result: Assignment = {m: set() for m in subscriptions}
    for topic in sorted(partition_counts):
        members = sorted(m for m in subscriptions if topic in subscriptions[m])
        if not members:
            continue
        count = partition_counts[topic]
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            result[member].update((topic, p) for p in range(start, start + size))
            start += size
    return result


__all__ = ["ASSIGNORS", "CLASS_NAMES", "RANGE", "UNIFORM", "Assignment", "Partition", "PartitionRacks", "Racks",
           "assign", "assignor_name", "configured_assignors", "range_assign", "uniform"]
