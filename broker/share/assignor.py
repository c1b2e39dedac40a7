"""The share-group assignor: Kafka 4.2's SimpleAssignor ("simple").

Unlike a consumer group, a partition of a share group may go to several members.
With M members and P target partitions (every partition of the subscribed
topics), each partition goes to `ceil(M / P)` members (its desired sharing) and
member i gets `ceil(x*(i+1)) - ceil(x*i)` partitions, x = sharing * P / M, so
counts differ by at most one (Kafka's SimpleHomogeneousAssignmentBuilder).
Balance comes first, then stickiness: a member keeps what it held as far as the
sharing and its count allow, and the rest is handed out to the least-loaded
eligible members. A member is eligible for a partition only when it subscribes
to its topic; with different subscriptions each member subscribed to a topic
with partitions gets at least one of them.

Members are taken in sorted member-id order, so the result is a function of its
inputs. Input and output: member id -> {topic id: set of partitions}.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping

Assignment = dict[uuid.UUID, set[int]]
NAME = "simple"


def assign(subscriptions: Mapping[str, set[uuid.UUID]], partitions: Mapping[uuid.UUID, int],
           current: Mapping[str, Assignment] | None = None) -> dict[str, Assignment]:
    """The target assignment of members with `subscriptions` (member -> topic ids)
    over topics with `partitions` (topic id -> partition count), from `current`."""
    current = current or {}
    members = sorted(subscriptions)
    result: dict[str, Assignment] = {m: {} for m in members}
    targets = [(t, p) for t in sorted(partitions, key=str) if any(t in subscriptions[m] for m in members)
               for p in range(partitions[t])]
    if not members or not targets:
        return result
    m_count, p_count = len(members), len(targets)
    sharing = math.ceil(m_count / p_count)
    precise = sharing * p_count / m_count
    desired = {m: math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i, m in enumerate(members)}
    holders: dict[tuple[uuid.UUID, int], set[str]] = {tp: set() for tp in targets}
    counts = dict.fromkeys(members, 0)

    def give(member: str, tp: tuple[uuid.UUID, int]) -> None:
        holders[tp].add(member)
        result[member].setdefault(tp[0], set()).add(tp[1])
        counts[member] += 1

    # Stickiness: keep what is still subscribed, within the sharing and the member's count.
    for m in members:
        for topic, held in sorted(current.get(m, {}).items(), key=lambda kv: str(kv[0])):
            if topic not in subscriptions[m]:
                continue
            for p in sorted(held):
                tp = (topic, p)
                if tp in holders and len(holders[tp]) < sharing and counts[m] < desired[m]:
                    give(m, tp)
    # Balance: every partition up to its sharing, least-loaded eligible members first.
    for tp in targets:
        while len(holders[tp]) < sharing:
            eligible = [m for m in members if tp[0] in subscriptions[m] and m not in holders[tp]
                        and counts[m] < desired[m]]
            if not eligible:
                break
            give(min(eligible, key=lambda m: (counts[m], members.index(m))), tp)
    # Different subscriptions: a subscribed member left without work shares the least-shared partition.
    for m in members:
        if counts[m] == 0:
            mine = [tp for tp in targets if tp[0] in subscriptions[m]]
            if mine:
                give(m, min(mine, key=lambda tp: (len(holders[tp]), targets.index(tp))))
    return result


__all__ = ["NAME", "Assignment", "assign"]
