"""Online conversion between classic groups and consumer groups (Kafka 4's
group.consumer.migration.policy) without the wire: the real classic GroupCoordinator
and ConsumerGroupCoordinator on one asyncio loop, classic members speaking the
embedded consumer protocol (kio's ConsumerProtocolSubscription/Assignment).

Every test checks the one rule that matters to applications: at no point do two
members believe they own the same partition (what each believes is what its last
SyncGroup answer, or ConsumerGroupHeartbeat assignment, gave it, minus what it gave
up before rejoining).
"""

from __future__ import annotations

import asyncio
import io
import struct

from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription, TopicPartition
from kio.serial import entity_writer

from broker.kafka.groups import consumer_coordinator as cc
from broker.kafka.groups import consumer_records
from broker.kafka.groups.consumer_coordinator import ClassicJoinRequest, ConsumerGroupCoordinator
from broker.kafka.groups.consumer_heartbeat import HeartbeatRequest
from broker.kafka.groups.consumer_protocol import encode_assignment, parse_assignment
from broker.kafka.groups.coordinator import GroupCoordinator

CONFIG = {"group.consumer.assignors": "uniform,range", "group.consumer.max.size": 10,
          "group.consumer.migration.policy": "bidirectional", "broker.rack": None}
SETTINGS = {"consumer.session.timeout.ms": 5000, "consumer.heartbeat.interval.ms": 50}
REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION = 27, 22


def subscription(topics=("t",), owned=()) -> bytes:
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", 1))
    owned_by_topic: dict[str, list[int]] = {}
    for topic, index in owned:
        owned_by_topic.setdefault(topic, []).append(index)
    entity_writer(ConsumerProtocolSubscription)(buffer, ConsumerProtocolSubscription(
        topics=tuple(topics), user_data=None,
        owned_partitions=tuple(TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in owned_by_topic.items())))
    return buffer.getvalue()


def pair(policy: str = "bidirectional", partitions: int = 4):
    loop = asyncio.get_running_loop()
    classic = GroupCoordinator(loop=loop, initial_rebalance_delay_ms=0)
    consumer = ConsumerGroupCoordinator({**CONFIG, "group.consumer.migration.policy": policy}, loop,
                                        lambda: {"t": partitions}, lambda group: SETTINGS, classic_groups=classic)
    return classic, consumer


async def classic_group(classic: GroupCoordinator, members=("A", "B"), partitions: int = 4) -> dict[str, set]:
    """A Stable classic group g whose leader spread t's partitions over `members`."""
    joins = [classic.join("g", "", protocol_type="consumer", protocols=[("range", subscription())],
                          session_timeout_ms=10_000, rebalance_timeout_ms=10_000, client_id=name,
                          require_known_member_id=False) for name in members]
    results = await asyncio.gather(*joins)
    ids = [r.member_id for r in results]
    generation = results[0].generation_id
    leader = next(r for r in results if r.leader == r.member_id)
    plan = {mid: {("t", i) for i in range(partitions) if i % len(ids) == n} for n, mid in enumerate(ids)}
    syncs = [classic.sync("g", generation, mid, assignments=[(m, encode_assignment(p, 1)) for m, p in plan.items()]
                          if mid == leader.member_id else []) for mid in ids]
    for result in await asyncio.gather(*syncs):
        assert result.error == 0
    return plan


def join(consumer, member_id, owned=()):
    return consumer.classic_join(ClassicJoinRequest("g", member_id, None, "consumer",
                                                    [("range", subscription(owned=owned))], 10_000, 10_000,
                                                    require_known_member_id=False))


def hb(consumer, member, epoch, owned=None):
    return consumer.heartbeat(HeartbeatRequest(
        group_id="g", member_id=member, member_epoch=epoch, rebalance_timeout_ms=5000 if epoch == 0 else -1,
        subscribed_names=("t",) if epoch == 0 else None, owned=set() if epoch == 0 else owned))


def no_overlap(beliefs: dict[str, set]) -> None:
    seen: dict = {}
    for member, owned in beliefs.items():
        for p in owned:
            assert p not in seen, f"{p} owned by {seen[p]} and {member}"
            seen[p] = member


async def test_a_consumer_member_upgrades_a_classic_group_and_classic_members_keep_working():
    classic, consumer = pair()
    beliefs = await classic_group(classic)
    a, b = sorted(beliefs)
    n = hb(consumer, "N", 0)
    assert n.error == 0 and "g" not in classic.groups and consumer.is_consumer_group("g")
    group = consumer.groups["g"]
    assert {m.member_id for m in group.members.values() if m.classic is not None} == {a, b}
    beliefs["N"] = n.assignment or set()
    no_overlap(beliefs)
    for _ in range(6):  # classic members rejoin as their heartbeats say; N heartbeats
        for mid in (a, b):
            generation = group.members[mid].member_epoch
            if consumer.classic_heartbeat("g", generation, mid, None) == REBALANCE_IN_PROGRESS:
                beliefs[mid] = set()  # an eager member gives up everything before it rejoins
                joined = join(consumer, mid)
                assert joined.error == 0 and joined.protocol_name == "range" and joined.leader == ""
                synced = consumer.classic_sync("g", joined.generation_id, mid, None, "consumer", "range")
                assert synced.error == 0
                beliefs[mid] = parse_assignment(synced.assignment)
                no_overlap(beliefs)
        n = hb(consumer, "N", n.member_epoch, beliefs["N"])
        if n.assignment is not None:
            beliefs["N"] = n.assignment
        no_overlap(beliefs)
    assert sorted(len(p) for p in beliefs.values()) == [1, 1, 2]
    assert set().union(*beliefs.values()) == {("t", i) for i in range(4)}
    assert consumer.validate_offset_commit("g", a, group.members[a].member_epoch, 9) == 0
    assert consumer.validate_offset_commit("g", a, -5, 9) == ILLEGAL_GENERATION  # classic: not STALE
    consumer.close()


async def test_the_last_consumer_member_leaving_downgrades_to_a_rebalancing_classic_group():
    classic, consumer = pair()
    beliefs = await classic_group(classic)
    n = hb(consumer, "N", 0)
    epoch = consumer.groups["g"].group_epoch
    hb(consumer, "N", -1)
    assert not consumer.is_consumer_group("g")
    group = classic.groups["g"]
    assert group.state == "PreparingRebalance" and group.generation_id == epoch and set(group.members) == set(beliefs)
    assert group.protocol_type == "consumer" and group.protocol_name == "range"
    member = next(iter(beliefs))
    assert classic.heartbeat("g", epoch, member) == REBALANCE_IN_PROGRESS  # rejoin, as a classic group asks
    assert n.error == 0
    consumer.close()
    classic.close()


async def test_classic_members_leave_and_the_group_stays_a_consumer_group():
    classic, consumer = pair()
    beliefs = await classic_group(classic)
    hb(consumer, "N", 0)
    results = consumer.classic_leave("g", [(mid, None, "bye") for mid in beliefs] + [("N", None, None)])
    assert [code for _, _, code in results] == [0, 0, cc.UNKNOWN_MEMBER_ID]  # N does not speak classic
    assert set(consumer.groups["g"].members) == {"N"}
    consumer.close()


async def test_the_policy_decides_whether_groups_with_members_convert():
    for policy in ("disabled", "downgrade"):
        classic, consumer = pair(policy)
        beliefs = await classic_group(classic)
        assert hb(consumer, "N", 0).error == cc.GROUP_ID_NOT_FOUND
        assert "g" in classic.groups
        classic.leave("g", [(mid, None, None) for mid in beliefs])
        assert hb(consumer, "N", 0).error == 0  # an empty group converts whatever the policy (Kafka)
        classic.close()
        consumer.close()
    classic, consumer = pair("upgrade")
    await classic_group(classic)
    hb(consumer, "N", 0)
    hb(consumer, "N", -1)
    assert consumer.is_consumer_group("g") and "g" not in classic.groups  # no downgrade
    consumer.close()


async def test_a_classic_group_of_another_protocol_type_is_not_upgraded():
    classic, consumer = pair()
    await asyncio.gather(classic.join("g", "", protocol_type="connect", protocols=[("v1", b"x")],
                                      session_timeout_ms=10_000, require_known_member_id=False))
    assert hb(consumer, "N", 0).error == cc.GROUP_ID_NOT_FOUND
    classic.close()


async def test_classic_member_metadata_survives_the_records():
    classic, consumer = pair()
    await classic_group(classic)
    hb(consumer, "N", 0)
    ids = {"t": "3f1e2d4c-0000-4000-8000-000000000001"}
    records = consumer_records.snapshot(consumer.groups["g"], ids.get)
    loaded = consumer_records.load(records, {v: k for k, v in ids.items()}.get)["g"]
    for mid, member in consumer.groups["g"].members.items():
        assert loaded.members[mid].classic == member.classic
        assert loaded.members[mid].assigned == member.assigned
    consumer.close()


async def test_classic_members_that_do_not_sync_or_rejoin_in_time_are_removed():
    """Kafka's sync and join timeouts of classic members (their rebalance timeout)."""
    classic, consumer = pair()
    await classic_group(classic)
    hb(consumer, "N", 0)
    quick = ClassicJoinRequest("g", "", None, "consumer", [("range", subscription())], 10_000, 100,
                               require_known_member_id=False)
    joined = consumer.classic_join(quick)
    assert joined.error == 0 and joined.member_id in consumer.groups["g"].members
    await asyncio.sleep(0.3)  # no SyncGroup within 100 ms
    assert joined.member_id not in consumer.groups["g"].members
    again = consumer.classic_join(quick)
    assert consumer.classic_sync("g", again.generation_id, again.member_id, None, None, None).error == 0
    hb(consumer, "M", 0)  # a new member: a new group epoch
    member = consumer.groups["g"].members[again.member_id]
    assert consumer.classic_heartbeat("g", member.member_epoch, again.member_id, None) == REBALANCE_IN_PROGRESS
    await asyncio.sleep(0.3)  # told to rejoin, it does not
    assert again.member_id not in consumer.groups["g"].members
    consumer.close()


async def settle(consumer, beliefs: dict[str, set], classic_ids, consumer_ids, rounds: int = 6) -> None:
    """Heartbeat every member `rounds` times as its client would (eager classic members
    give everything up and rejoin when told to), checking that no partition is held twice."""
    group = consumer.groups["g"]
    for _ in range(rounds):
        for mid in classic_ids:
            generation = group.members[mid].member_epoch
            if consumer.classic_heartbeat("g", generation, mid, None) == REBALANCE_IN_PROGRESS:
                beliefs[mid] = set()
                joined = join(consumer, mid)
                synced = consumer.classic_sync("g", joined.generation_id, mid, None, "consumer", "range")
                beliefs[mid] = parse_assignment(synced.assignment)
                no_overlap(beliefs)
        for mid in consumer_ids:
            member = group.members[mid]
            answer = consumer.heartbeat(HeartbeatRequest(group_id="g", member_id=mid,
                                                         member_epoch=member.member_epoch, owned=beliefs[mid]))
            if answer.assignment is not None:
                beliefs[mid] = answer.assignment
            no_overlap(beliefs)


async def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_the_group():
    classic, consumer = pair()
    beliefs = await classic_group(classic)
    a, b = sorted(beliefs)
    s = consumer.heartbeat(HeartbeatRequest(group_id="g", member_id="S", member_epoch=0, instance_id="i-1",
                                            rebalance_timeout_ms=5000, subscribed_names=("t",), owned=set()))
    beliefs["S"] = s.assignment or set()
    await settle(consumer, beliefs, (a, b), ("S",))
    assert consumer.groups["g"].state == "Stable" and beliefs["S"]
    epoch = consumer.groups["g"].group_epoch
    consumer.heartbeat(HeartbeatRequest(group_id="g", member_id="S", member_epoch=-2, instance_id="i-1"))
    joined = consumer.classic_join(ClassicJoinRequest("g", "", "i-1", "consumer", [("range", subscription())],
                                                      10_000, 10_000))
    assert joined.error == 0 and joined.generation_id == epoch
    assert not consumer.is_consumer_group("g")
    group = classic.groups["g"]
    assert group.state == "Stable" and group.generation_id == epoch  # every member held its target: no rebalance
    assert set(group.members) == {a, b, joined.member_id} and group.static_members == {"i-1": joined.member_id}
    synced = await classic.sync("g", epoch, joined.member_id, group_instance_id="i-1")
    assert parse_assignment(synced.assignment) == beliefs.pop("S")  # it takes S's partitions
    beliefs[joined.member_id] = parse_assignment(synced.assignment)
    no_overlap(beliefs)
    consumer.close()
    classic.close()


async def test_a_static_replacement_in_an_unsettled_group_downgrades_with_a_rebalance():
    classic, consumer = pair()
    await classic_group(classic)
    consumer.heartbeat(HeartbeatRequest(group_id="g", member_id="S", member_epoch=0, instance_id="i-1",
                                        rebalance_timeout_ms=5000, subscribed_names=("t",), owned=set()))
    consumer.heartbeat(HeartbeatRequest(group_id="g", member_id="S", member_epoch=-2, instance_id="i-1"))
    joined = consumer.classic_join(ClassicJoinRequest("g", "", "i-1", "consumer", [("range", subscription())],
                                                      10_000, 10_000))
    assert joined.error == 0 and classic.groups["g"].state == "PreparingRebalance"
    assert parse_assignment(classic.groups["g"].members[joined.member_id].assignment) == set()  # S held nothing
    consumer.close()
    classic.close()
