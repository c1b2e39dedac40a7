"""The admin APIs a single node answers (DescribeLogDirs,
DescribeProducers, OffsetForLeaderEpoch, ElectLeaders, Alter/ListPartitionReassignments,
DescribeTopicPartitions, GetTelemetrySubscriptions), end to end against the broker
process with kafka-python's admin client, confluent-kafka's admin client and consumer,
and raw kio requests for what no client exposes."""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.kafka.telemetry import subscription_id
from tests.kafka.conftest import unique_name

TIMEOUT = 30


def request(api_key: int, version: int, **values):
    """A kio request of any version from the values it has fields for."""
    from broker.kafka.codec import make
    return make(load_request_schema(api_key, version), **values)


@pytest.fixture
def kp_admin(bootstrap):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield admin
    admin.close()


def produce(bootstrap: str, topic: str, counts: dict[int, int], **config) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(topic, value=b"v" * 100 + b"%d" % i, partition=partition)
    assert producer.flush(TIMEOUT) == 0


def test_api_versions_advertise_what_is_implemented(wire):
    response = wire().call(request(18, 3, client_software_name="tests", client_software_version="1"))
    got = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    expected = {35: (1, 5), 61: (0, 0), 23: (2, 4), 43: (0, 2), 45: (0, 1), 46: (0, 0), 75: (0, 0),
                71: (0, 0), 37: (0, 3)}
    assert {k: got.get(k) for k in expected} == expected
    assert 72 not in got  # PushTelemetry: nothing is ever requested


# ---- DescribeLogDirs ---------------------------------------------------------------------------

def test_describe_log_dirs_sizes_are_the_segment_bytes(kafka_broker, bootstrap, new_topic, kp_admin):
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, {0: 7, 1: 2})
    (answer,) = kp_admin.describe_log_dirs()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == os.path.realpath(kafka_broker.data_dir)
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    sizes = {(t["name"], p["partition_index"]): p["partition_size"]
             for t in log_dir["topics"] for p in t["partitions"]}
    for partition in (0, 1):
        directory = os.path.join(kafka_broker.data_dir, f"{topic}-{partition}")
        on_disk = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)
                      if n.endswith(".log"))
        assert sizes[(topic, partition)] == on_disk > 0
    assert all(p["offset_lag"] == 0 and not p["is_future_key"]
               for t in log_dir["topics"] for p in t["partitions"])

    (answer,) = kp_admin.describe_log_dirs({topic: [1]})
    topics = answer["log_dirs"][0]["topics"]
    listed = {t["name"]: [p["partition_index"] for p in t["partitions"]] for t in topics}
    assert listed[topic] == [1]
    assert all(parts == [] for name, parts in listed.items() if name != topic)  # Kafka lists them empty


# ---- DescribeProducers -------------------------------------------------------------------------

def test_describe_producers_from_the_producer_state(bootstrap, new_topic, kp_admin):
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, {0: 5}, **{"enable.idempotence": True})
    states = kp_admin.describe_producers([KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)])
    (active,) = states[KpTopicPartition(topic, 0)].active_producers
    assert active.producer_id >= 0 and active.producer_epoch == 0 and active.last_sequence == 4
    assert active.coordinator_epoch == -1 and active.current_transaction_start_offset == -1
    assert active.last_timestamp > 0
    assert states[KpTopicPartition(topic, 1)].active_producers == []


def test_describe_producers_errors(wire, new_topic):
    topic = new_topic(partitions=1)
    answer = wire().call(request(61, 0, topics=(
        _nested_request(61, 0, "topics", name=topic, partition_indexes=(0, 3)),
        _nested_request(61, 0, "topics", name="no-such-topic-dp", partition_indexes=(0,)),
        _nested_request(61, 0, "topics", name="bad/name", partition_indexes=(0,)))))
    codes = [[(p.partition_index, p.error_code) for p in t.partitions] for t in answer.topics]
    assert codes == [[(0, ErrorCode.none), (3, ErrorCode.unknown_topic_or_partition)],
                     [(0, ErrorCode.unknown_topic_or_partition)], [(0, ErrorCode.invalid_topic_exception)]]


def _nested_request(api_key: int, version: int, field: str, **values):
    from broker.kafka.codec import make, nested
    return make(nested(load_request_schema(api_key, version), field), **values)


# ---- OffsetForLeaderEpoch ----------------------------------------------------------------------

def consume_after_commit(bootstrap: str, topic: str, offset: int, reset: str) -> list:
    """Commit `offset` with leader epoch 0, then consume: the client validates the
    position with OffsetForLeaderEpoch first. Returns the offsets read or the error."""
    group = unique_name("g-epoch")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": reset})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset, leader_epoch=0)], asynchronous=False)
        consumer.assign([TopicPartition(topic, 0)])
        got: list = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                return [message.error()]
            got.append((message.offset(), message.leader_epoch()))
            if message.offset() == 4:
                return got
        return got
    finally:
        consumer.close()


def test_consumers_validate_positions_and_detect_truncation(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    produce(bootstrap, topic, {0: 5})
    assert consume_after_commit(bootstrap, topic, 3, "earliest") == [(3, 0), (4, 0)]
    (error,) = consume_after_commit(bootstrap, topic, 8, "error")  # past the epoch-0 end offset 5
    assert error.code() == KafkaError._AUTO_OFFSET_RESET
    assert "truncation detected at offset 8" in error.str() and "broker end offset is 5" in error.str()


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_answers(wire, bootstrap, new_topic, version):
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, {0: 5})
    cases = [(0, -1, 0), (0, 0, 0), (0, -1, 1), (0, -1, -1), (0, -1, -7), (0, 1, 0), (0, -2, 0), (1, -1, 0),
             (9, -1, 0)]  # (partition, current_leader_epoch, leader_epoch)
    parts = tuple(_nested_partition(version, partition=p, current_leader_epoch=c, leader_epoch=e)
                  for p, c, e in cases)
    answer = wire().call(request(23, version, replica_id=-1, topics=(
        _nested_request(23, version, "topics", topic=topic, partitions=parts),)))
    got = [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in answer.topics[0].partitions]
    assert got == [(0, ErrorCode.none, 0, 5), (0, ErrorCode.none, 0, 5), (0, ErrorCode.none, -1, -1),
                   (0, ErrorCode.none, -1, -1), (0, ErrorCode.none, -7, 0),
                   (0, ErrorCode.unknown_leader_epoch, -1, -1), (0, ErrorCode.fenced_leader_epoch, -1, -1),
                   (1, ErrorCode.none, 0, 0), (9, ErrorCode.unknown_topic_or_partition, -1, -1)]


def _nested_partition(version: int, **values):
    from broker.kafka.codec import make, nested
    topic_class = nested(load_request_schema(23, version), "topics")
    return make(nested(topic_class, "partitions"), **values)


# ---- ElectLeaders, reassignments ---------------------------------------------------------------

def test_elect_leaders_is_never_needed(bootstrap, new_topic, kp_admin):
    topic = new_topic(partitions=2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        asked = [TopicPartition(topic, 1), TopicPartition(topic, 5)]
        result = admin.elect_leaders(election, asked).result(TIMEOUT)
        assert {tp.partition: error.code() for tp, error in result.items()} == \
            {1: KafkaError.ELECTION_NOT_NEEDED, 5: KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(TIMEOUT) == {}  # nothing needed anywhere
    answer = kp_admin.elect_leaders(0, {topic: [0]}, raise_errors=False)
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in answer.replica_election_results] == [(topic, [(0, 84)])]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_every_version(wire, new_topic, version):
    topic = new_topic(partitions=1)
    asked = (_nested_request(43, version, "topic_partitions", topic=topic, partitions=(0, 2)),)
    answer = wire().call(request(43, version, election_type=0, timeout=timedelta(seconds=5),
                                 topic_partitions=asked))
    (result,) = answer.replica_election_results
    assert [(p.partition_id, p.error_code, p.error_message) for p in result.partition_result] == \
        [(0, ErrorCode.election_not_needed, None), (2, ErrorCode.unknown_topic_or_partition,
                                                    f"No such partition as {topic}-2")]
    if version >= 1:
        bad = wire().call(request(43, version, election_type=7, timeout=timedelta(seconds=5),
                                  topic_partitions=None))
        assert bad.error_code == ErrorCode.invalid_request


def test_partition_reassignments_on_one_broker(bootstrap, new_topic, kp_admin, wire):
    topic = new_topic(partitions=2)
    result = kp_admin.alter_partition_reassignments({KpTopicPartition(topic, 0): [0],
                                                     KpTopicPartition(topic, 1): None})
    assert result[KpTopicPartition(topic, 0)] is None
    assert result[KpTopicPartition(topic, 1)].errno == 85  # NO_REASSIGNMENT_IN_PROGRESS
    assert kp_admin.list_partition_reassignments() == {}
    assert kp_admin.list_partition_reassignments({topic: [0, 1]}) == {}
    for version in (0, 1):
        cases = [(0, (0,)), (0, (1,)), (0, (0, 0)), (0, ()), (7, (0,))]
        answer = wire().call(request(45, version, timeout=timedelta(seconds=5), topics=(
            _nested_request(45, version, "topics", name=topic, partitions=tuple(
                _reassignable(version, partition_index=p, replicas=r) for p, r in cases)),)))
        assert answer.error_code == ErrorCode.none
        got = [(p.partition_index, p.error_code) for p in answer.responses[0].partitions]
        assert got == [(0, ErrorCode.none), (0, ErrorCode.invalid_replica_assignment),
                       (0, ErrorCode.invalid_replica_assignment), (0, ErrorCode.invalid_replica_assignment),
                       (7, ErrorCode.unknown_topic_or_partition)]


def _reassignable(version: int, **values):
    from broker.kafka.codec import make, nested
    return make(nested(nested(load_request_schema(45, version), "topics"), "partitions"), **values)


# ---- DescribeTopicPartitions -------------------------------------------------------------------

def test_describe_topic_partitions_pages_with_a_cursor(bootstrap, new_topic, kp_admin):
    first = new_topic(partitions=5, prefix="dtp-a")
    second = new_topic(partitions=2, prefix="dtp-b")  # named after `first`; "no-such-dtp" after both
    pages, cursor = [], None
    while True:
        answer = kp_admin.describe_topic_partitions([second, first, "no-such-dtp"],
                                                    response_partition_limit=3, cursor=cursor)
        pages.append([(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                      for t in answer["topics"]])
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert pages == [[(first, 0, [0, 1, 2])], [(first, 0, [3, 4]), (second, 0, [0])],
                     [(second, 0, [1]), ("no-such-dtp", 3, [])]]
    described = kp_admin.describe_topic_partitions([first])["topics"][0]
    partition = described["partitions"][0]
    assert (partition["leader_id"], partition["leader_epoch"], partition["replica_nodes"],
            partition["isr_nodes"]) == (0, 0, [0], [0])
    assert described["topic_authorized_operations"] > 0 and described["is_internal"] is False


def test_describe_topic_partitions_cursor_errors(wire, new_topic):
    topic = new_topic(partitions=1)
    conn = wire()
    cursor = _nested_request(75, 0, "cursor", topic_name="elsewhere", partition_index=0)
    answer = conn.call(request(75, 0, topics=(_nested_request(75, 0, "topics", name=topic),),
                               response_partition_limit=10, cursor=cursor))
    assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == \
        [(topic, ErrorCode.invalid_request, ())]
    negative = _nested_request(75, 0, "cursor", topic_name=topic, partition_index=-1)
    answer = conn.call(request(75, 0, topics=(_nested_request(75, 0, "topics", name=topic),),
                               response_partition_limit=10, cursor=negative))
    assert [t.error_code for t in answer.topics] == [ErrorCode.invalid_request]


# ---- GetTelemetrySubscriptions -----------------------------------------------------------------

def test_get_telemetry_subscriptions_is_no_subscription(wire):
    conn = wire()
    fresh = conn.call(request(71, 0, client_instance_id=uuid.UUID(int=0)))
    assert fresh.error_code == ErrorCode.none and fresh.client_instance_id not in (None, uuid.UUID(int=0))
    assert fresh.requested_metrics == () and fresh.push_interval == timedelta(minutes=5)
    assert list(fresh.accepted_compression_types) == [4, 3, 1, 2] and fresh.delta_temporality
    assert fresh.telemetry_max_bytes == 1048576
    again = conn.call(request(71, 0, client_instance_id=fresh.client_instance_id))
    assert again.client_instance_id == fresh.client_instance_id
    assert again.subscription_id == fresh.subscription_id == subscription_id(fresh.client_instance_id)


def test_subscription_id_is_kafkas():
    # Java: Crc32C("[]300000") ^ Uuid(0x0123456789abcdefL, 0x0fedcba987654321L).hashCode()
    instance = uuid.UUID(int=(0x0123456789ABCDEF << 64) | 0x0FEDCBA987654321)
    hilo = 0x0123456789ABCDEF ^ 0x0FEDCBA987654321
    java_hash = ((hilo >> 32) ^ hilo) & 0xFFFFFFFF
    import crc32c
    expected = (crc32c.crc32c(b"[]300000") ^ java_hash) & 0xFFFFFFFF
    assert subscription_id(instance) & 0xFFFFFFFF == expected
    assert -2**31 <= subscription_id(instance) < 2**31


def test_end_offset_for_is_kafkas_epoch_cache_with_epoch_0_only():
    from broker.kafka.leader_epochs import end_offset_for
    # (requested epoch) -> (epoch, end offset) for a log [start 3, end 9)
    assert [end_offset_for(e, 3, 9) for e in (0, -1, 1, 5, -2)] == [(0, 9), (-1, -1), (-1, -1), (-1, -1),
                                                                      (-2, 3)]
