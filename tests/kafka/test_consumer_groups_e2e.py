"""The consumer group protocol (KIP-848) end to end: the real broker process, librdkafka
consumers with group.protocol=consumer, and raw kio requests for the answers a
client library does not show (epoch checks, DescribeGroups of a consumer group).

The broker heartbeats members every 500 ms (group.consumer.heartbeat.interval.ms);
deadlines are failure guards, not speed assumptions.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kio.index import load_request_schema

from broker.kafka.codec import make, nested
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.test_groups_e2e import GROUP_ARGS, assigned, confluent_consumer, poll_until, produce

STALE_MEMBER_EPOCH = 113
UNKNOWN_MEMBER_ID = 25
GROUP_ID_NOT_FOUND = 69


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("consumer-groups-broker"), *GROUP_ARGS,
                            "--set", "group.consumer.min.session.timeout.ms=1000")
    try:
        yield process.start()
        failures = [e for e in process.log_events() if e.get("event") == "kafka_request_failed"]
        assert not failures, failures
    finally:
        process.close()


def consumer(bootstrap: str, group: str, **extra):
    return confluent_consumer(bootstrap, group, "consumer", **extra)


def topics_of(c) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def test_regex_subscription_takes_matching_topics_also_created_later(bootstrap):
    prefix = unique_name("rx")
    first = create_topic(bootstrap, f"{prefix}-a", 2)
    create_topic(bootstrap, unique_name("other"), 1)
    group = unique_name("group")
    c = consumer(bootstrap, group, **{"topic.metadata.refresh.interval.ms": 500})
    try:
        c.subscribe([f"^{prefix}-.*"])
        poll_until([c], lambda r: topics_of(c) == {(first, 0), (first, 1)})
        later = create_topic(bootstrap, f"{prefix}-b", 1)
        poll_until([c], lambda r: topics_of(c) == {(first, 0), (first, 1), (later, 0)})
        produce(bootstrap, later, 2, 1)
        got = poll_until([c], lambda r: len(r[0]) >= 2)
        assert sorted(v for _, _, v in got[0]) == [b"m0", b"m1"]
    finally:
        c.close()


def test_new_partitions_of_a_subscribed_topic_are_assigned(bootstrap):
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = create_topic(bootstrap, unique_name("grow"), 2)
    group = unique_name("group")
    first, second = consumer(bootstrap, group), consumer(bootstrap, group)
    try:
        first.subscribe([topic])
        second.subscribe([topic])
        poll_until([first, second], lambda r: len(assigned(first)) == 1 and len(assigned(second)) == 1)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic, 6)])[topic].result(30)
        poll_until([first, second], lambda r: assigned(first) | assigned(second) == set(range(6))
                   and len(assigned(first)) == len(assigned(second)) == 3)
        assert not assigned(first) & assigned(second)
    finally:
        first.close()
        second.close()


def test_static_member_comes_back_to_its_partitions(bootstrap):
    """A static member that closes leaves with epoch -2: its partitions wait for it
    (the other member does not get them) and its next incarnation gets them back."""
    topic = create_topic(bootstrap, unique_name("gstatic"), 4)
    group = unique_name("group")
    stays = consumer(bootstrap, group, **{"group.instance.id": "stays"})
    leaves = consumer(bootstrap, group, **{"group.instance.id": "comes-back"})
    try:
        stays.subscribe([topic])
        leaves.subscribe([topic])
        poll_until([stays, leaves], lambda r: len(assigned(stays)) == 2 and len(assigned(leaves)) == 2)
        kept, held = assigned(stays), assigned(leaves)
        leaves.close()
        deadline = time.monotonic() + 3.0  # six heartbeat intervals: nothing moves
        while time.monotonic() < deadline:
            stays.poll(0.1)
        assert assigned(stays) == kept
        leaves = consumer(bootstrap, group, **{"group.instance.id": "comes-back"})
        leaves.subscribe([topic])
        poll_until([stays, leaves], lambda r: assigned(leaves) == held)
        assert assigned(stays) == kept
    finally:
        stays.close()
        leaves.close()


def test_an_empty_group_changes_protocol_both_ways_and_keeps_its_offsets(bootstrap):
    topic = create_topic(bootstrap, unique_name("gmigrate"), 1)
    produce(bootstrap, topic, 6, 1)
    group = unique_name("group")

    def consume(protocol: str, count: int) -> list[bytes]:
        c = confluent_consumer(bootstrap, group, protocol)
        try:
            c.subscribe([topic])
            got = poll_until([c], lambda r: len(r[0]) >= count)[0]
            c.commit(asynchronous=False)
            return [v for _, _, v in got]
        finally:
            c.close()

    assert consume("classic", 2)[:2] == [b"m0", b"m1"]
    assert consume("consumer", 2)[0] == b"m2"  # the empty classic group became a consumer group
    assert consume("classic", 2)[0] == b"m4"  # and back


def heartbeat_request(group: str, member_id: str, epoch: int, topic: str | None = None):
    Request = load_request_schema(68, 1)
    return make(Request, group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
                rebalance_timeout=30_000 if topic else -1, subscribed_topic_names=(topic,) if topic else None,
                subscribed_topic_regex=None, server_assignor=None, topic_partitions=() if topic else None)


def test_offsets_are_checked_against_the_member_epoch(bootstrap, wire):
    topic = create_topic(bootstrap, unique_name("gepoch"), 1)
    group = unique_name("group")
    conn = wire()
    member = str(uuid.uuid4())
    joined = conn.call(heartbeat_request(group, member, 0, topic))
    assert joined.error_code == 0 and joined.member_epoch >= 1
    epoch = joined.member_epoch

    Commit = load_request_schema(8, 9)
    TopicC = nested(Commit, "topics")
    PartC = nested(TopicC, "partitions")

    def commit(member_id: str, member_epoch: int) -> int:
        response = conn.call(make(Commit, group_id=group, generation_id_or_member_epoch=member_epoch,
                                  member_id=member_id, group_instance_id=None, topics=(
                                      make(TopicC, name=topic, partitions=(
                                          make(PartC, partition_index=0, committed_offset=5,
                                               committed_leader_epoch=-1, committed_metadata=None),)),)))
        return response.topics[0].partitions[0].error_code

    assert commit(member, epoch) == 0
    assert commit(member, epoch + 1) == STALE_MEMBER_EPOCH
    assert commit("someone-else", epoch) == UNKNOWN_MEMBER_ID

    Fetch = load_request_schema(9, 9)
    GroupF = nested(Fetch, "groups")
    TopicF = nested(GroupF, "topics")

    def fetch(member_id: str | None, member_epoch: int):
        return conn.call(make(Fetch, require_stable=False, groups=(
            make(GroupF, group_id=group, member_id=member_id, member_epoch=member_epoch,
                 topics=(make(TopicF, name=topic, partition_indexes=(0,)),)),))).groups[0]

    ok = fetch(member, epoch)
    assert ok.error_code == 0 and ok.topics[0].partitions[0].committed_offset == 5
    assert fetch(member, epoch - 1).error_code == STALE_MEMBER_EPOCH
    assert fetch(None, -1).error_code == 0  # an admin's fetch

    # DescribeGroups (v6) answers for a consumer group as Kafka 4 does; ListGroups v5 types it
    described = conn.call(make(load_request_schema(15, 6), groups=(group,),
                               include_authorized_operations=False)).groups[0]
    assert (described.error_code, described.error_message, described.group_state) == \
        (GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.", "Dead")
    listed = conn.call(make(load_request_schema(16, 5), states_filter=(), types_filter=("consumer",)))
    row = {g.group_id: g for g in listed.groups}[group]
    assert (row.protocol_type, row.group_type) == ("consumer", "consumer")

    # ConsumerGroupDescribe shows the member, its epoch and assignment
    desc = conn.call(make(load_request_schema(69, 1), group_ids=(group,),
                          include_authorized_operations=False)).groups[0]
    assert desc.error_code == 0 and desc.group_epoch == epoch and desc.assignor_name == "uniform"
    (m,) = desc.members
    assert m.member_id == member and m.member_epoch == epoch and m.subscribed_topic_names == (topic,)
    assert [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == [(topic, (0,))]

    left = conn.call(heartbeat_request(group, member, -1))
    assert (left.error_code, left.member_epoch) == (0, -1)
    assert commit("", -1) == 0  # an empty group takes simple commits


def test_describe_of_a_classic_group_through_consumer_group_describe(bootstrap, wire):
    group = unique_name("group")
    c = confluent_consumer(bootstrap, group, "classic")
    try:
        topic = create_topic(bootstrap, unique_name("gclassic"), 1)
        c.subscribe([topic])
        poll_until([c], lambda r: assigned(c) == {0})
        conn = wire()
        desc = conn.call(make(load_request_schema(69, 1), group_ids=(group, unique_name("absent")),
                              include_authorized_operations=False)).groups
        assert (desc[0].error_code, desc[0].error_message) == (GROUP_ID_NOT_FOUND,
                                                               f"Group {group} is not a consumer group.")
        assert desc[1].error_code == GROUP_ID_NOT_FOUND and desc[1].error_message.endswith("not found.")
        member_id = str(uuid.uuid4())
        joined = conn.call(heartbeat_request(group, member_id, 0, topic))
        assert joined.error_code == 0  # the classic group with its member is upgraded online
        desc = conn.call(make(load_request_schema(69, 1), group_ids=(group,), include_authorized_operations=False))
        assert sorted(m.member_type for m in desc.groups[0].members) == [0, 1]  # KIP-1099: classic, consumer
        left = conn.call(heartbeat_request(group, member_id, -1))
        assert left.error_code == 0  # and downgraded again: its only consumer-protocol member left
        desc = conn.call(make(load_request_schema(69, 1), group_ids=(group,), include_authorized_operations=False))
        assert desc.groups[0].error_code == GROUP_ID_NOT_FOUND
    finally:
        c.close()


def test_v0_join_without_a_member_id_gets_one(bootstrap, wire):
    topic = create_topic(bootstrap, unique_name("gv0"), 1)
    group = unique_name("group")
    Request = load_request_schema(68, 0)
    conn = wire()
    joined = conn.call(make(Request, group_id=group, member_id="", member_epoch=0, instance_id=None, rack_id=None,
                            rebalance_timeout=30_000, subscribed_topic_names=(topic,), server_assignor="range",
                            topic_partitions=()))
    assert joined.error_code == 0 and len(joined.member_id) == 22 and joined.member_epoch == 1
    assert len(joined.assignment.topic_partitions) == 1
    left = conn.call(make(Request, group_id=group, member_id=joined.member_id, member_epoch=-1, instance_id=None,
                          rack_id=None, rebalance_timeout=-1, subscribed_topic_names=None, server_assignor=None,
                          topic_partitions=None))
    assert left.error_code == 0


def test_range_assignor_chosen_by_the_consumers_co_partitions(bootstrap):
    left_topic = create_topic(bootstrap, unique_name("gleft"), 3)
    right_topic = create_topic(bootstrap, unique_name("gright"), 3)
    group = unique_name("group")
    members = [consumer(bootstrap, group, **{"group.remote.assignor": "range"}) for _ in range(2)]
    try:
        for c in members:
            c.subscribe([left_topic, right_topic])

        def settled(_):
            got = [topics_of(c) for c in members]
            return all(got) and len(got[0] | got[1]) == 6
        poll_until(members, settled)
        for c in members:
            by_topic = {t: {p for tt, p in topics_of(c) if tt == t} for t in (left_topic, right_topic)}
            assert by_topic[left_topic] == by_topic[right_topic]
    finally:
        for c in members:
            c.close()


def test_a_restart_keeps_the_group_epochs_and_assignments(broker):
    """The group's records in __consumer_offsets survive a crash (SIGKILL): after the
    restart the member heartbeats on with its epoch and keeps its partitions."""
    from tests.kafka.wire import KafkaWire

    process = broker(*GROUP_ARGS)
    topic = create_topic(process.bootstrap, unique_name("gdurable"), 2)
    group = unique_name("group")
    member = str(uuid.uuid4())
    with KafkaWire(*process.kafka_address) as conn:
        joined = conn.call(heartbeat_request(group, member, 0, topic))
        assert joined.error_code == 0
        owned = joined.assignment.topic_partitions
        assert [tuple(t.partitions) for t in owned] == [(0, 1)]
    process.kill()
    process.restart()
    with KafkaWire(*process.kafka_address) as conn:
        Request = load_request_schema(68, 1)
        again = conn.call(make(Request, group_id=group, member_id=member, member_epoch=joined.member_epoch,
                               instance_id=None, rack_id=None, rebalance_timeout=-1, subscribed_topic_names=None,
                               subscribed_topic_regex=None, server_assignor=None,
                               topic_partitions=tuple(make(nested(Request, "topic_partitions"), topic_id=t.topic_id,
                                                           partitions=t.partitions) for t in owned)))
        assert (again.error_code, again.member_epoch) == (0, joined.member_epoch)
        desc = conn.call(make(load_request_schema(69, 1), group_ids=(group,),
                              include_authorized_operations=False)).groups[0]
        assert (desc.group_state, desc.group_epoch, desc.assignment_epoch) == \
            ("Stable", joined.member_epoch, joined.member_epoch)
        (m,) = desc.members
        assert m.member_id == member
        assert [tuple(t.partitions) for t in m.assignment.topic_partitions] == [(0, 1)]


def test_a_silent_member_expires_after_the_group_session_timeout(bootstrap, wire):
    """The group config consumer.session.timeout.ms (2 s here) governs: a member that
    joined by hand and went silent is removed and the consumer takes its partitions."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic = create_topic(bootstrap, unique_name("gsilent"), 2)
    group = unique_name("group")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    silent = wire().call(heartbeat_request(group, str(uuid.uuid4()), 0, topic))
    assert silent.error_code == 0 and silent.heartbeat_interval.total_seconds() == 0.5
    c = consumer(bootstrap, group)
    try:
        c.subscribe([topic])
        poll_until([c], lambda r: assigned(c) == {0, 1})  # after the silent member's session ran out
    finally:
        c.close()


def test_offset_delete_and_delete_groups_of_a_consumer_group(bootstrap, wire):
    subscribed = create_topic(bootstrap, unique_name("gsub"), 1)
    other = create_topic(bootstrap, unique_name("gother"), 1)
    group = unique_name("group")
    conn = wire()
    member = str(uuid.uuid4())
    assert conn.call(heartbeat_request(group, member, 0, subscribed)).error_code == 0
    Commit = load_request_schema(8, 8)
    TopicC = nested(Commit, "topics")
    PartC = nested(TopicC, "partitions")
    commit = conn.call(make(Commit, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                            group_instance_id=None, topics=tuple(
                                make(TopicC, name=t, partitions=(make(PartC, partition_index=0, committed_offset=1,
                                                                      committed_leader_epoch=-1,
                                                                      committed_metadata=None),))
                                for t in (subscribed, other))))
    assert [t.partitions[0].error_code for t in commit.topics] == [UNKNOWN_MEMBER_ID] * 2  # it has members

    OffsetDelete = load_request_schema(47, 0)
    TopicD = nested(OffsetDelete, "topics")
    PartD = nested(TopicD, "partitions")
    deleted = conn.call(make(OffsetDelete, group_id=group, topics=tuple(
        make(TopicD, name=t, partitions=(make(PartD, partition_index=0),)) for t in (subscribed, other))))
    assert (deleted.error_code, [t.partitions[0].error_code for t in deleted.topics]) == (0, [86, 0])

    DeleteGroups = load_request_schema(42, 2)
    assert conn.call(make(DeleteGroups, groups_names=(group,))).results[0].error_code == 68  # NON_EMPTY_GROUP
    assert conn.call(heartbeat_request(group, member, -1)).error_code == 0
    assert conn.call(make(DeleteGroups, groups_names=(group,))).results[0].error_code == 0
    desc = conn.call(make(load_request_schema(69, 1), group_ids=(group,),
                          include_authorized_operations=False)).groups[0]
    assert desc.error_code == GROUP_ID_NOT_FOUND


INVALID_REQUEST = 42


@pytest.mark.parametrize(("change", "reason"), [
    ({"topic_partitions": None}, "TopicPartitions must be empty when (re-)joining."),
    ({"subscribed_topic_names": ()}, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
    ({"subscribed_topic_names": None, "subscribed_topic_regex": ""},
     "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
    ({"instance_id": ""}, "InstanceId can't be empty."),
    ({"rack_id": " "}, "RackId can't be empty."),
    ({"group_id": "  "}, "GroupId can't be empty."),
    ({"member_id": " \t"}, "MemberId can't be empty."),
])
def test_a_join_kafka_refuses_is_refused_and_logged_with_its_reason(kafka_broker, wire, change, reason):
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: a join must send an empty
    TopicPartitions list and a non-empty subscription; ids may not be blank (Java's trim).
    The refusal changes nothing (no group is created) and is logged with its fields."""
    topic = create_topic(kafka_broker.bootstrap, unique_name("ginv"), 1)
    group = unique_name("group")
    member = uuid.uuid4().hex
    Request = load_request_schema(68, 1)
    fields = dict(group_id=group, member_id=member, member_epoch=0, instance_id=None, rack_id=None,
                  rebalance_timeout=30_000, subscribed_topic_names=(topic,), subscribed_topic_regex=None,
                  server_assignor=None, topic_partitions=())
    answer = wire().call(make(Request, **{**fields, **change}))
    assert (answer.error_code, answer.error_message) == (INVALID_REQUEST, reason)
    refused = [e for e in kafka_broker.log_events()
               if e.get("event") == "consumer_group_heartbeat_refused" and e.get("reason") == reason]
    assert refused and refused[-1]["error"] == INVALID_REQUEST and "subscribed_names" in refused[-1]
    if "group_id" not in change:
        described = wire().call(make(load_request_schema(69, 0), group_ids=(group,),
                                     include_authorized_operations=False))
        assert described.groups[0].error_code == GROUP_ID_NOT_FOUND  # nothing was created


@pytest.mark.parametrize("epoch", [3, -1])
def test_a_heartbeat_or_leave_to_no_group_is_group_id_not_found(wire, epoch):
    """Kafka's getOrMaybeCreateConsumerGroup: only a join (epoch 0) creates the group; any
    other heartbeat, a leave included, naming no consumer group answers GROUP_ID_NOT_FOUND
    (librdkafka ignores it on a heartbeat still in flight when it has left)."""
    group = unique_name("nogroup")
    answer = wire().call(make(load_request_schema(68, 1), group_id=group, member_id=uuid.uuid4().hex,
                              member_epoch=epoch, instance_id=None, rack_id=None, rebalance_timeout=-1,
                              subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
                              topic_partitions=None))
    assert (answer.error_code, answer.error_message) == (GROUP_ID_NOT_FOUND, f"Consumer group {group} not found.")
