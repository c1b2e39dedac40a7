"""The consumer group protocol (KIP-848) without the wire: the server-side assignors
(broker/kafka/groups/assignors.py), the reconciliation of one member
(consumer_group.reconcile) and the heartbeat state machine
(consumer_coordinator.ConsumerGroupCoordinator) on a real asyncio loop.
"""

from __future__ import annotations

import asyncio

import pytest

from broker.kafka.groups import assignors
from broker.kafka.groups import consumer_coordinator as cc
from broker.kafka.groups.consumer_coordinator import ConsumerGroupCoordinator
from broker.kafka.groups.consumer_group import (
    MEMBER_STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerMember,
    reconcile,
)
from broker.kafka.groups.consumer_heartbeat import HeartbeatRequest


def parts(topic: str, *indexes: int) -> set[tuple[str, int]]:
    return {(topic, i) for i in indexes}


# ---- assignors -------------------------------------------------------------------------------


def test_uniform_balances_identical_subscriptions():
    subs = {m: {"a", "b"} for m in ("m1", "m2", "m3")}
    result = assignors.uniform(subs, {}, {"a": 5, "b": 3})
    sizes = sorted(len(p) for p in result.values())
    assert sizes == [2, 3, 3]
    every = set().union(*result.values())
    assert every == parts("a", *range(5)) | parts("b", *range(3))
    assert sum(sizes) == len(every)  # no partition twice


def test_uniform_is_sticky_when_a_member_joins_and_leaves():
    counts = {"t": 6}
    first = assignors.uniform({"m1": {"t"}, "m2": {"t"}}, {}, counts)
    second = assignors.uniform({"m1": {"t"}, "m2": {"t"}, "m3": {"t"}}, first, counts)
    assert [len(second[m]) for m in ("m1", "m2", "m3")] == [2, 2, 2]
    assert second["m1"] <= first["m1"] and second["m2"] <= first["m2"]  # only moved what m3 needs
    third = assignors.uniform({"m1": {"t"}, "m3": {"t"}}, second, counts)
    assert third["m1"] >= second["m1"] and third["m3"] >= second["m3"]
    assert len(third["m1"]) == len(third["m3"]) == 3


def test_uniform_heterogeneous_subscriptions_stay_within_subscriptions():
    subs = {"m1": {"a"}, "m2": {"a", "b"}, "m3": {"b"}}
    result = assignors.uniform(subs, {}, {"a": 4, "b": 4})
    for member, topics in subs.items():
        assert {t for t, _ in result[member]} <= topics
    assert set().union(*result.values()) == parts("a", 0, 1, 2, 3) | parts("b", 0, 1, 2, 3)
    assert max(len(p) for p in result.values()) - min(len(p) for p in result.values()) <= 1


def test_uniform_drops_partitions_of_unsubscribed_or_gone_topics_and_adds_new_partitions():
    current = {"m1": parts("a", 0, 1) | parts("gone", 0)}
    result = assignors.uniform({"m1": {"a"}}, current, {"a": 3, "other": 2})
    assert result == {"m1": parts("a", 0, 1, 2)}


def test_range_co_partitions_topics_with_equal_partition_counts():
    subs = {"m2": {"x", "y"}, "m1": {"x", "y"}, "m3": {"x", "y"}}
    result = assignors.range_assign(subs, {"x": 7, "y": 7})
    for member, assigned in result.items():
        assert {i for t, i in assigned if t == "x"} == {i for t, i in assigned if t == "y"}, member
    assert result["m1"] == parts("x", 0, 1, 2) | parts("y", 0, 1, 2)  # member-id order, extra first
    assert result["m3"] == parts("x", 5, 6) | parts("y", 5, 6)


def test_uniform_matches_racks_when_partitions_lie_in_different_racks():
    """Kafka's RackInfo: members in rack a get the partitions with a replica in a,
    members in b those in b, balance first, and a current owner in the wrong rack
    gives its partitions up."""
    racks = {("t", i): {"a"} if i % 2 == 0 else {"b"} for i in range(8)}
    members = {"m1": "a", "m2": "b", "m3": "a", "m4": "b"}
    subs = {m: {"t"} for m in members}
    result = assignors.uniform(subs, {}, {"t": 8}, members, racks.__getitem__)
    for member, assigned in result.items():
        assert len(assigned) == 2 and all(members[member] in racks[p] for p in assigned), (member, assigned)
    wrong = {"m1": parts("t", 1, 3), "m2": parts("t", 0, 2)}  # everything in the other rack
    moved = assignors.uniform({"m1": {"t"}, "m2": {"t"}}, wrong, {"t": 4}, {"m1": "a", "m2": "b"},
                              racks.__getitem__)
    assert moved == {"m1": parts("t", 0, 2), "m2": parts("t", 1, 3)}
    # different subscriptions: the rack decides, then balance moves one of m1's t partitions to m2
    mixed = assignors.uniform({"m1": {"t", "u"}, "m2": {"t"}}, {}, {"t": 4, "u": 2}, {"m1": "a", "m2": "b"},
                              lambda p: racks[p] if p[0] == "t" else {"b"})
    assert sorted(len(p) for p in mixed.values()) == [3, 3]
    assert parts("t", 1, 3) <= mixed["m2"] and parts("u", 0, 1) | parts("t", 0) <= mixed["m1"]


def test_uniform_ignores_racks_where_kafka_does():
    """No rack matching when every partition lies in the same racks (one broker with
    broker.rack), when no member has a rack, or when no member shares a partition's rack."""
    subs = {m: {"t"} for m in ("m1", "m2")}
    current = {"m1": parts("t", 0, 1, 2), "m2": parts("t", 3)}
    plain = assignors.uniform(subs, current, {"t": 6})
    same_rack = assignors.uniform(subs, current, {"t": 6}, {"m1": "r1", "m2": "r2"}, lambda p: {"r1"})
    no_member_rack = assignors.uniform(subs, current, {"t": 6}, {"m1": None, "m2": ""},
                                       lambda p: {"a"} if p[1] % 2 else {"b"})
    disjoint = assignors.uniform(subs, current, {"t": 6}, {"m1": "x", "m2": "y"},
                                 lambda p: {"a"} if p[1] % 2 else {"b"})
    assert plain == same_rack == no_member_rack == disjoint
    assert current["m1"] <= plain["m1"] and current["m2"] <= plain["m2"]  # sticky as without racks


async def test_the_coordinator_gives_the_assignor_member_racks_and_broker_rack(monkeypatch):
    seen = []
    real = assignors.assign

    def spy(name, subs, current, counts, member_racks=None, partition_racks=None):
        seen.append((dict(member_racks or {}), partition_racks(("t", 0)) if partition_racks else None))
        return real(name, subs, current, counts, member_racks, partition_racks)

    coord = ConsumerGroupCoordinator({**CONFIG, "broker.rack": "rack-1"}, asyncio.get_running_loop(),
                                     Topics(t=2), lambda group: SETTINGS)
    monkeypatch.setattr(assignors, "assign", spy)
    coord.heartbeat(HeartbeatRequest("g", "A", 0, rack_id="rack-1", rebalance_timeout_ms=1000,
                                     subscribed_names=("t",), owned=set()))
    coord.close()
    assert seen == [({"A": "rack-1"}, frozenset({"rack-1"}))]


def test_assign_by_name_and_unknown_name():
    assert assignors.assign("range", {"m": {"t"}}, {}, {"t": 2}) == {"m": parts("t", 0, 1)}
    with pytest.raises(ValueError):
        assignors.assign("sticky", {}, {}, {})


# ---- reconciliation --------------------------------------------------------------------------


def test_reconcile_revokes_before_assigning():
    member = ConsumerMember("m1", member_epoch=1, assigned=parts("t", 0, 1, 2, 3))
    reconcile(member, parts("t", 0, 1), 2, None, lambda p: True)
    assert member.state == UNREVOKED_PARTITIONS and member.member_epoch == 1
    assert member.assigned == parts("t", 0, 1) and member.revoking == parts("t", 2, 3)
    reconcile(member, parts("t", 0, 1), 2, parts("t", 0, 1, 2, 3), lambda p: True)  # still owns them
    assert member.state == UNREVOKED_PARTITIONS and member.member_epoch == 1
    reconcile(member, parts("t", 0, 1), 2, parts("t", 0, 1), lambda p: True)  # gave them up
    assert member.state == MEMBER_STABLE and member.member_epoch == 2 and not member.revoking
    assert member.previous_member_epoch == 1


def test_reconcile_waits_for_partitions_another_member_still_holds():
    held = parts("t", 2, 3)
    member = ConsumerMember("m2", member_epoch=0)
    reconcile(member, parts("t", 2, 3), 2, set(), lambda p: p not in held)
    assert member.state == UNRELEASED_PARTITIONS and member.member_epoch == 2 and member.assigned == set()
    held.discard(("t", 2))
    reconcile(member, parts("t", 2, 3), 2, set(), lambda p: p not in held)
    assert member.state == UNRELEASED_PARTITIONS and member.assigned == parts("t", 2)
    held.clear()
    reconcile(member, parts("t", 2, 3), 2, parts("t", 2), lambda p: p not in held)
    assert member.state == MEMBER_STABLE and member.assigned == parts("t", 2, 3)


# ---- the heartbeat state machine ---------------------------------------------------------------


class Topics:
    def __init__(self, **counts: int):
        self.counts = dict(counts)

    def __call__(self) -> dict[str, int]:
        return dict(self.counts)


CONFIG = {"group.consumer.assignors": "uniform,range", "group.consumer.max.size": 3,
          "group.consumer.migration.policy": "bidirectional", "broker.rack": None}
SETTINGS = {"consumer.session.timeout.ms": 200, "consumer.heartbeat.interval.ms": 50}


def coordinator(topics: Topics, **config) -> ConsumerGroupCoordinator:
    return ConsumerGroupCoordinator({**CONFIG, **config}, asyncio.get_running_loop(), topics,
                                    lambda group: SETTINGS)


def hb(coord, member, epoch, owned=None, *, names=("t",), regex=None, group="g", instance=None, full=None):
    joining = epoch == 0 if full is None else full
    return coord.heartbeat(HeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
        rebalance_timeout_ms=5000 if joining else -1, subscribed_names=names if joining else None,
        subscribed_regex=regex if joining else None, owned=set() if epoch == 0 else owned))


async def test_two_members_split_and_the_new_owner_waits_for_the_revocation():
    coord = coordinator(Topics(t=4))
    a = hb(coord, "A", 0)
    assert a.error == 0 and a.member_epoch == 1 and a.assignment == parts("t", 0, 1, 2, 3)
    b = hb(coord, "B", 0)
    assert b.error == 0 and b.member_epoch == 2 and b.assignment == set()  # A still holds them
    a = hb(coord, "A", 1, parts("t", 0, 1, 2, 3))
    assert a.member_epoch == 1 and a.assignment is not None and len(a.assignment) == 2  # revoke first
    kept = a.assignment
    assert hb(coord, "B", 2, set()).assignment is None  # not released yet
    a = hb(coord, "A", 1, kept)  # A acknowledges the revocation
    assert a.member_epoch == 2 and a.assignment is None
    b = hb(coord, "B", 2, set())
    assert b.assignment == parts("t", 0, 1, 2, 3) - kept
    assert coord.groups["g"].state == "Stable"
    # B leaves: A gets everything at the next epoch
    assert hb(coord, "B", -1).member_epoch == -1
    a = hb(coord, "A", 2, kept)
    assert a.member_epoch == 3 and a.assignment == parts("t", 0, 1, 2, 3)


async def test_epoch_checks_and_errors():
    coord = coordinator(Topics(t=2))
    assert hb(coord, "X", 5).error == cc.GROUP_ID_NOT_FOUND  # no such group (Kafka's getOrMaybeCreateConsumerGroup)
    assert hb(coord, "X", -1).error == cc.GROUP_ID_NOT_FOUND  # a leave too
    assert hb(coord, "A", 0).member_epoch == 1
    assert hb(coord, "A", 7, set()).error == cc.FENCED_MEMBER_EPOCH
    assert hb(coord, "nobody", 1, set()).error == cc.UNKNOWN_MEMBER_ID
    assert hb(coord, "", 0).error == cc.INVALID_REQUEST
    r = coord.heartbeat(HeartbeatRequest("g", "C", 0, rebalance_timeout_ms=1000, subscribed_names=("t",),
                                         server_assignor="sticky", owned=set()))
    assert r.error == cc.UNSUPPORTED_ASSIGNOR and "uniform" in (r.message or "")
    assert hb(coord, "C", 0, regex="(unclosed").error == cc.INVALID_REGULAR_EXPRESSION
    assert hb(coord, "C", 0, regex="(a)\\1").error == cc.INVALID_REGULAR_EXPRESSION  # no backreferences in RE2
    assert hb(coord, "C", 0, regex="t(?!x)").error == cc.INVALID_REGULAR_EXPRESSION  # nor lookahead
    assert hb(coord, "B", 0).error == 0 and hb(coord, "C", 0).error == 0
    assert hb(coord, "D", 0).error == cc.GROUP_MAX_SIZE_REACHED  # group.consumer.max.size=3


async def test_offset_commit_and_fetch_check_the_member_epoch():
    coord = coordinator(Topics(t=1))
    epoch = hb(coord, "A", 0).member_epoch
    assert coord.validate_offset_commit("g", "A", epoch, 9) == 0
    assert coord.validate_offset_commit("g", "A", epoch - 1, 9) == cc.STALE_MEMBER_EPOCH
    assert coord.validate_offset_commit("g", "A", epoch - 1, 8) == cc.ILLEGAL_GENERATION
    assert coord.validate_offset_commit("g", "Z", epoch, 9) == cc.UNKNOWN_MEMBER_ID
    assert coord.validate_offset_commit("g", "", -1, 9) == cc.UNKNOWN_MEMBER_ID  # the group has members
    assert coord.validate_offset_fetch("g", "A", epoch) == 0
    assert coord.validate_offset_fetch("g", "A", epoch + 1) == cc.STALE_MEMBER_EPOCH
    assert coord.validate_offset_fetch("g", None, -1) == 0  # an admin fetch
    hb(coord, "A", -1)
    assert coord.validate_offset_commit("g", "", -1, 9) == 0  # empty group: simple commits


async def test_regex_subscription_and_new_partitions_bump_the_group_epoch():
    topics = Topics(orders1=1, orders2=1, other=1)
    coord = coordinator(topics)
    a = hb(coord, "A", 0, names=None, regex="orders.*")
    assert a.assignment == parts("orders1", 0) | parts("orders2", 0)
    topics.counts["orders1"] = 3
    topics.counts["orders3"] = 1
    a = hb(coord, "A", a.member_epoch, a.assignment)
    assert a.member_epoch == 2
    assert a.assignment == parts("orders1", 0, 1, 2) | parts("orders2", 0) | parts("orders3", 0)


async def test_regex_matches_are_only_the_topics_each_member_may_describe():
    """Each member's regex matches are filtered by its own DESCRIBE permission (the
    heartbeat's `may_describe`), checked again at every refresh: a permission
    granted later bumps the group epoch and brings the topic in. A member without
    the permission is never assigned the topic, though another member's regex
    takes it in."""
    coord = coordinator(Topics(orders1=2, orders2=2))
    allowed = {"A": {"orders1"}, "B": {"orders1", "orders2"}}

    def hb_as(member, epoch, owned=None, *, joining=False):
        return coord.heartbeat(HeartbeatRequest(
            group_id="g", member_id=member, member_epoch=epoch, rebalance_timeout_ms=5000 if joining else -1,
            subscribed_regex="orders.*" if joining else None, owned=set() if joining else owned,
            may_describe=allowed[member].__contains__))

    a = hb_as("A", 0, joining=True)
    assert a.assignment == parts("orders1", 0, 1)
    b = hb_as("B", 0, joining=True)
    assert b.member_epoch == 2
    a = hb_as("A", a.member_epoch, a.assignment)
    a = hb_as("A", a.member_epoch, a.assignment or coord.groups["g"].members["A"].assigned)
    b = hb_as("B", b.member_epoch, set())
    group = coord.groups["g"]
    assert {t for t, _ in group.target["A"]} == {"orders1"}
    assert parts("orders2", 0, 1) <= group.target["B"]
    allowed["A"].add("orders2")
    epoch = group.group_epoch
    hb_as("A", group.members["A"].member_epoch, group.members["A"].assigned)
    assert group.group_epoch == epoch + 1
    assert {t for t, _ in group.target["A"]} <= {"orders1", "orders2"}
    assert set().union(*group.target.values()) == parts("orders1", 0, 1) | parts("orders2", 0, 1)


async def test_static_member_leaves_for_now_and_comes_back_with_its_partitions():
    coord = coordinator(Topics(t=2))
    a = hb(coord, "A1", 0, instance="i-1")
    b = hb(coord, "B", 0)
    a = hb(coord, "A1", a.member_epoch, a.assignment)
    a = hb(coord, "A1", a.member_epoch, a.assignment)
    b = hb(coord, "B", b.member_epoch, set())
    held = a.assignment or coord.groups["g"].members["A1"].assigned
    assert hb(coord, "A1", -2, instance="i-1").member_epoch == -2
    epoch = coord.groups["g"].group_epoch
    assert hb(coord, "A2", 0, instance="i-0").error == 0  # another instance: a new member
    r = hb(coord, "A3", 0, instance="i-1")
    assert r.error == 0 and r.assignment == coord.groups["g"].members["A3"].assigned
    assert coord.groups["g"].members["A3"].assigned <= held
    assert "A1" not in coord.groups["g"].members
    assert hb(coord, "A4", 0, instance="i-1").error == cc.UNRELEASED_INSTANCE_ID
    assert coord.groups["g"].group_epoch >= epoch
    # Kafka looks the instance id up first: the replaced member id is fenced, not unknown,
    # and an instance id no member holds is unknown
    stale = coord.heartbeat(HeartbeatRequest("g", "A1", 1, instance_id="i-1", owned=set()))
    assert (stale.error, stale.message) == (cc.FENCED_INSTANCE_ID, "Static member A1 with instance id i-1 was "
                                                                    "fenced by member A3.")
    assert hb(coord, "B", b.member_epoch, set(), instance="i-9").error == cc.UNKNOWN_MEMBER_ID


async def test_a_member_without_heartbeats_is_removed_after_its_session_timeout():
    coord = coordinator(Topics(t=2))
    hb(coord, "A", 0)
    b = hb(coord, "B", 0)
    for _ in range(20):  # B keeps heartbeating, A is silent
        await asyncio.sleep(0.03)
        b = hb(coord, "B", b.member_epoch, coord.groups["g"].members["B"].assigned)
    assert "A" not in coord.groups["g"].members
    assert coord.groups["g"].members["B"].assigned == parts("t", 0, 1)


async def test_empty_groups_convert_between_kinds_whatever_the_policy():
    coord = coordinator(Topics(t=1))
    hb(coord, "A", 0)
    assert coord.take_for_classic("g") == 23  # INCONSISTENT_GROUP_PROTOCOL while it has members
    hb(coord, "A", -1)
    assert coord.take_for_classic("g") == 0 and "g" not in coord.groups
    hb(coord, "A", 0)
    hb(coord, "A", -1)
    strict = coordinator(Topics(t=1), **{"group.consumer.migration.policy": "disabled"})
    hb(strict, "A", 0)
    hb(strict, "A", -1)
    assert strict.take_for_classic("g") == 0  # the policy is about groups with members (Kafka)


# ---- the records in __consumer_offsets -----------------------------------------------------------


async def test_group_records_round_trip_and_only_changes_are_written():
    from broker.kafka.groups import consumer_records

    ids = {"t": "3f1e2d4c-0000-4000-8000-000000000001", "u": "3f1e2d4c-0000-4000-8000-000000000002"}
    names = {v: k for k, v in ids.items()}
    coord = ConsumerGroupCoordinator(CONFIG, asyncio.get_running_loop(), Topics(t=3, u=1), lambda group: SETTINGS,
                                     topic_id=ids.get, topic_name=names.get)
    a = hb(coord, "A", 0, names=("t", "u"), instance="i-a")
    hb(coord, "B", 0, names=None, regex="t")
    hb(coord, "A", a.member_epoch, a.assignment)  # A revoking: a pending revocation is stored too
    (group_id, rows, records), = coord.pending()
    assert group_id == "g" and len(rows) == len(records) == 2 + 3 * 2
    assert {k[:2] for k in records} == {b"\x00\x03", b"\x00\x05", b"\x00\x06", b"\x00\x07", b"\x00\x08"}
    coord.written("g", records)
    assert coord.pending() == []  # nothing changed since

    loaded = consumer_records.load(records, names.get)["g"]
    group = coord.groups["g"]
    assert (loaded.group_epoch, loaded.assignment_epoch) == (group.group_epoch, group.assignment_epoch)
    assert loaded.target == group.target and loaded.static_members == {"i-a": "A"}
    for mid, m in group.members.items():
        lm = loaded.members[mid]
        assert (lm.member_epoch, lm.previous_member_epoch, lm.state, lm.assigned, lm.revoking) == \
            (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.revoking)
        assert (lm.subscribed_names, lm.subscribed_regex, lm.rebalance_timeout_ms) == \
            (m.subscribed_names, m.subscribed_regex, m.rebalance_timeout_ms)

    hb(coord, "B", -1)
    (_, rows, records), = coord.pending()
    tombstones = [k for k, v in rows if v is None]
    assert len(tombstones) == 3 and all(b"B" in k for k in tombstones)  # B's three records


def test_uniform_heterogeneous_rebalances_a_skewed_current_assignment():
    counts = {f"t{i}": 10 for i in range(4)}
    subs = {"m0": set(counts), "m1": {"t1", "t2", "t3"}, "m2": {"t3"}}
    current = {"m0": {(t, i) for t in counts for i in range(10)}}
    result = assignors.uniform(subs, current, counts)
    for member, topics in subs.items():
        assert {t for t, _ in result[member]} <= topics
    assert sorted(len(p) for p in result.values()) == [10, 15, 15]  # m2 can only have t3's 10
    assert set().union(*result.values()) == current["m0"]


def test_group_consumer_settings_defaults_and_checks(tmp_path):
    from broker.config.broker_config import BrokerConfig
    from kafka_format.errors import InvalidConfigError

    values = BrokerConfig.load(overrides=[], data_dir=str(tmp_path)).values
    assert (values["group.consumer.assignors"], values["group.consumer.max.size"],
            values["group.consumer.migration.policy"]) == ("uniform,range", 2**31 - 1, "bidirectional")
    with pytest.raises(InvalidConfigError, match="group.consumer.assignors.*unknown assignor.*sticky"):
        BrokerConfig.load(overrides=["group.consumer.assignors=sticky"], data_dir=str(tmp_path))
    bad_class = "org.apache.kafka.coordinator.group.assignor.StickyAssignor"
    with pytest.raises(InvalidConfigError, match=f"unknown assignor.*{bad_class} \\(known: uniform, range"):
        BrokerConfig.load(overrides=[f"group.consumer.assignors=range,{bad_class}"], data_dir=str(tmp_path))
    with pytest.raises(InvalidConfigError, match="must be one of"):
        BrokerConfig.load(overrides=["group.consumer.migration.policy=sideways"], data_dir=str(tmp_path))
    chosen = BrokerConfig.load(overrides=["group.consumer.assignors=range"], data_dir=str(tmp_path))
    assert ConsumerGroupCoordinator(chosen.values, None, Topics(), lambda g: SETTINGS).assignor_names == ["range"]
    kafka_names = ("org.apache.kafka.coordinator.group.assignor.RangeAssignor, "
                   "org.apache.kafka.coordinator.group.assignor.UniformAssignor")
    chosen = BrokerConfig.load(overrides=[f"group.consumer.assignors={kafka_names}",
                                          "group.consumer.migration.policy=UPGRADE"], data_dir=str(tmp_path))
    coord = ConsumerGroupCoordinator(chosen.values, None, Topics(), lambda g: SETTINGS)
    assert (coord.assignor_names, coord.migration_policy) == (["range", "uniform"], "upgrade")


async def test_a_topic_created_again_is_assigned_afresh_and_sent_again():
    ids = {"t": "3f1e2d4c-0000-4000-8000-000000000001"}
    coord = ConsumerGroupCoordinator(CONFIG, asyncio.get_running_loop(), Topics(t=2), lambda group: SETTINGS,
                                     topic_id=ids.get)
    a = hb(coord, "A", 0)
    assert a.assignment == parts("t", 0, 1)
    assert hb(coord, "A", a.member_epoch, a.assignment).assignment is None  # nothing new
    ids["t"] = "3f1e2d4c-0000-4000-8000-000000000009"  # deleted and created again
    again = hb(coord, "A", a.member_epoch, set())
    assert again.member_epoch == a.member_epoch + 1 and again.assignment == parts("t", 0, 1)


async def test_a_deleted_group_leaves_only_tombstones():
    coord = coordinator(Topics(t=1))
    a = hb(coord, "A", 0)
    hb(coord, "A", a.member_epoch, a.assignment)
    for group_id, _, records in coord.pending():
        coord.written(group_id, records)
    hb(coord, "A", -1)
    coord.delete("g")
    (group_id, rows, records), = coord.pending()
    assert records == {} and rows and all(value is None for _, value in rows)
    coord.written(group_id, records)
    assert coord.pending() == []
