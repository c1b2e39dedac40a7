"""Share-group membership and assignment (broker/share/group.py, assignor.py):
ShareGroupHeartbeat semantics over an injected time."""

import uuid

import pytest

from broker.share import assignor
from broker.share.config import resolve
from broker.share.errors import (
    FENCED_MEMBER_EPOCH,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REQUEST,
    NON_EMPTY_GROUP,
    UNKNOWN_MEMBER_ID,
    ShareError,
)
from broker.share.group import EMPTY, STABLE, ShareGroup, TopicInfo

A, B = uuid.UUID(int=1), uuid.UUID(int=2)
NOW = 1_700_000_000_000


def sizes(result):
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


@pytest.mark.parametrize("members, partitions, each", [
    (4, 1, 1),   # four members share the one partition
    (2, 4, 2),   # two members split four partitions
    (3, 6, 2),
])
def test_homogeneous_balance(members, partitions, each):
    subs = {f"m{i}": {A} for i in range(members)}
    result = assignor.assign(subs, {A: partitions})
    assert set(sizes(result).values()) == {each}
    sharing = -(-members // partitions)
    holders = {p: sum(p in a.get(A, ()) for a in result.values()) for p in range(partitions)}
    assert set(holders.values()) == {sharing}


def test_three_members_two_partitions_each_partition_shared_twice():
    result = assignor.assign({"a": {A}, "b": {A}, "c": {A}}, {A: 2})
    assert sorted(sizes(result).values()) == [1, 1, 2]
    assert all(sum(p in a.get(A, ()) for a in result.values()) == 2 for p in range(2))


def test_two_topics_one_partition_each_split_between_two_members():
    result = assignor.assign({"a": {A, B}, "b": {A, B}}, {A: 1, B: 1})
    assert sizes(result) == {"a": 1, "b": 1}


def test_stickiness_keeps_current_partitions():
    first = assignor.assign({"a": {A}, "b": {A}}, {A: 4})
    again = assignor.assign({"a": {A}, "b": {A}, "c": {A}}, {A: 4}, first)
    for m in ("a", "b"):
        assert again[m][A] <= first[m][A]
    assert sorted(sizes(again).values()) == [1, 1, 2]


def test_heterogeneous_every_subscriber_gets_work():
    result = assignor.assign({"a": {A}, "b": {B}, "c": {A, B}}, {A: 1, B: 1})
    assert result["a"] == {A: {0}} and result["b"] == {B: {0}} and sizes(result)["c"] >= 1
    assert assignor.assign({"a": {A}}, {B: 3}) == {"a": {}}


TOPICS = {"t": TopicInfo(A, 2), "u": TopicInfo(B, 1)}


def lookup(topics=TOPICS):
    return topics.get


def test_join_heartbeat_leave():
    g = ShareGroup("g", resolve())
    r = g.heartbeat("m1", 0, ["t"], NOW, lookup())
    assert (r.member_epoch, r.heartbeat_interval_ms, r.assignment) == (1, 5000, {A: [0, 1]})
    assert g.state == STABLE
    r = g.heartbeat("m1", 1, None, NOW + 5000, lookup())
    assert (r.member_epoch, r.assignment) == (1, None)  # unchanged: not sent again
    r2 = g.heartbeat("m2", 0, ["t"], NOW, lookup())
    assert (r2.member_epoch, r2.assignment) == (2, {A: [1]})
    r = g.heartbeat("m1", 1, None, NOW + 6000, lookup())  # m1 moves to epoch 2 keeping partition 0
    assert (r.member_epoch, r.assignment) == (2, {A: [0]})
    r = g.heartbeat("m2", -1, None, NOW, lookup())
    assert (r.member_epoch, r.removed) == (-1, ("m2",))
    assert g.heartbeat("m1", 2, None, NOW + 7000, lookup()).assignment == {A: [0, 1]}


@pytest.mark.parametrize("call, code", [
    (lambda g: g.heartbeat("", 0, ["t"], NOW, lookup()), INVALID_REQUEST),
    (lambda g: g.heartbeat("m9", 0, None, NOW, lookup()), INVALID_REQUEST),
    (lambda g: g.heartbeat("m9", 3, None, NOW, lookup()), UNKNOWN_MEMBER_ID),
    (lambda g: g.heartbeat("m9", -1, None, NOW, lookup()), UNKNOWN_MEMBER_ID),
    (lambda g: g.heartbeat("m1", 7, None, NOW, lookup()), FENCED_MEMBER_EPOCH),
    (lambda g: g.heartbeat("m1", -2, None, NOW, lookup()), INVALID_REQUEST),
    (lambda g: g.heartbeat("m2", 0, ["t"], NOW, lookup()), GROUP_MAX_SIZE_REACHED),
    (lambda g: g.delete(), NON_EMPTY_GROUP),
])
def test_refused_heartbeats(call, code):
    g = ShareGroup("g", resolve(), max_size=1)
    g.heartbeat("m1", 0, ["t"], NOW, lookup())
    with pytest.raises(ShareError) as e:
        call(g)
    assert e.value.code == code and e.value.message


def test_session_timeout_removes_silent_members():
    g = ShareGroup("g", resolve({}, {"share.session.timeout.ms": "50000"}))
    g.heartbeat("m1", 0, ["t"], NOW, lookup())
    g.heartbeat("m2", 0, ["t"], NOW + 10_000, lookup())
    assert g.next_expiry_ms() == NOW + 50_001
    assert g.expire(NOW + 50_000, lookup()) == []
    assert g.expire(NOW + 50_001, lookup()) == ["m1"]
    assert g.group_epoch == 3 and list(g.members) == ["m2"]
    assert g.expire(NOW + 60_001, lookup()) == ["m2"]
    assert g.state == EMPTY
    g.delete()
    assert g.state == "Dead"


def test_subscription_change_and_new_partitions_reassign():
    g = ShareGroup("g", resolve())
    g.heartbeat("m1", 0, ["t"], NOW, lookup())
    r = g.heartbeat("m1", 1, ["t", "u"], NOW, lookup())
    assert r.member_epoch == 2 and r.assignment == {A: [0, 1], B: [0]}
    grown = {"t": TopicInfo(A, 3), "u": TopicInfo(B, 1)}
    r = g.heartbeat("m1", 2, None, NOW, lookup(grown))
    assert r.member_epoch == 3 and r.assignment == {A: [0, 1, 2], B: [0]}
    # A subscription to a topic that does not exist yet gets nothing until it appears.
    g2 = ShareGroup("g2", resolve())
    assert g2.heartbeat("m", 0, ["later"], NOW, lookup()).assignment == {}
    assert g2.on_metadata(lookup({"later": TopicInfo(B, 1)}))
    assert g2.heartbeat("m", 1, None, NOW, lookup({"later": TopicInfo(B, 1)})).assignment == {B: [0]}
