"""CreatePartitions (API 37) end to end against the broker process:
confluent-kafka's AdminClient, consumer and producer, kafka-python and aiokafka, the
native protocol's view of the grown topic, and Kafka's error codes."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.create_partitions.v0.request import CreatePartitionsAssignment as Assignment0
from kio.schema.create_partitions.v0.request import CreatePartitionsRequest as Request0
from kio.schema.create_partitions.v0.request import CreatePartitionsTopic as Topic0
from kio.schema.create_partitions.v3.request import CreatePartitionsAssignment as Assignment3
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.errors import ErrorCode

from client import Admin as NativeAdmin
from client import Consumer as NativeConsumer
from client import Producer as NativeProducer
from client import partition_for_key

TIMEOUT = 30


def native_bootstrap(broker) -> str:
    return f"{broker.host}:{broker.port}"


def grow(bootstrap: str, topic: str, count: int, *, assignments=None, validate_only: bool = False):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewPartitions(topic, count) if assignments is None else NewPartitions(topic, count, assignments)
    futures = admin.create_partitions([new],
                                      validate_only=validate_only, request_timeout=TIMEOUT)
    return futures[topic].result(TIMEOUT)


def grow_error(bootstrap: str, topic: str, count: int, **kwargs) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        grow(bootstrap, topic, count, **kwargs)
    return info.value.args[0]


def partition_count(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=TIMEOUT)
    return len(metadata.topics[topic].partitions)


def test_grow_shows_in_metadata_directories_and_the_native_protocol(kafka_broker, bootstrap, new_topic):
    topic = new_topic(partitions=2)
    grow(bootstrap, topic, 5, validate_only=True)  # checks, changes nothing
    assert partition_count(bootstrap, topic) == 2
    grow(bootstrap, topic, 5)
    assert partition_count(bootstrap, topic) == 5
    for partition in range(5):
        assert os.path.isdir(os.path.join(kafka_broker.data_dir, f"{topic}-{partition}"))
    with NativeAdmin(native_bootstrap(kafka_broker)) as native:
        assert native.partition_count(topic) == 5
        assert [p.partition for p in native.describe_topic(topic).partitions] == [0, 1, 2, 3, 4]
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=b"on the new partition", partition=4)
    assert producer.flush(TIMEOUT) == 0
    with NativeAdmin(native_bootstrap(kafka_broker)) as native:
        assert native.describe_topic(topic).partitions[4].log_end_offset == 1


def test_kafka_errors(bootstrap, new_topic):
    topic = new_topic(partitions=3)
    same = grow_error(bootstrap, topic, 3)
    assert same.code() == KafkaError.INVALID_PARTITIONS and "already has 3 partition(s)" in same.str()
    fewer = grow_error(bootstrap, topic, 2)
    assert fewer.code() == KafkaError.INVALID_PARTITIONS and "would not be an increase" in fewer.str()
    assert grow_error(bootstrap, "no-such-topic-cp", 4).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # Manual assignments: only broker 0 exists and the topic has one replica per partition.
    for assignments in ([[1]], [[0, 0]], [[0, 1]], [[0], [0]]):  # an empty list: the wire test
        error = grow_error(bootstrap, topic, 4, assignments=assignments)
        assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, assignments
    assert grow_error(bootstrap, "__consumer_offsets", 60).code() == KafkaError.INVALID_REQUEST
    assert partition_count(bootstrap, topic) == 3  # nothing changed by any of them
    grow(bootstrap, topic, 4, assignments=[[0]], validate_only=True)
    assert partition_count(bootstrap, topic) == 3
    grow(bootstrap, topic, 4, assignments=[[0]])
    assert partition_count(bootstrap, topic) == 4


def test_every_version_and_duplicates_on_the_wire(wire, new_topic):
    topic = new_topic(partitions=1)
    conn = wire()
    on_broker_0 = (Assignment0(broker_ids=(0,)),)
    answer = conn.call(Request0(topics=(Topic0(name=topic, count=2, assignments=on_broker_0),),
                                timeout=timedelta(seconds=5), validate_only=False))
    assert [(r.name, r.error_code) for r in answer.results] == [(topic, ErrorCode.none)]
    for version in (1, 2, 3):
        module = __import__(f"kio.schema.create_partitions.v{version}.request", fromlist=["x"])
        answer = conn.call(module.CreatePartitionsRequest(
            topics=(module.CreatePartitionsTopic(name=topic, count=2 + version, assignments=None),),
            timeout=timedelta(seconds=5), validate_only=False))
        assert [(r.name, r.error_code, r.error_message) for r in answer.results] == \
            [(topic, ErrorCode.none, None)]
    empty = CreatePartitionsTopic(name=topic, count=6, assignments=(Assignment3(broker_ids=()),))
    answer = conn.call(CreatePartitionsRequest(topics=(empty,), timeout=timedelta(seconds=5),
                                               validate_only=False))
    assert [(r.error_code, r.error_message) for r in answer.results] == \
        [(ErrorCode.invalid_replica_assignment,
          "The manual partition assignment includes an empty replica list.")]
    twice = CreatePartitionsTopic(name=topic, count=9, assignments=None)
    answer = conn.call(CreatePartitionsRequest(topics=(twice, twice), timeout=timedelta(seconds=5),
                                               validate_only=False))
    assert [(r.name, r.error_code, r.error_message) for r in answer.results] == \
        [(topic, ErrorCode.invalid_request, "Duplicate topic name.")]


def test_classic_group_rebalances_onto_the_new_partitions(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    group = f"grow-{topic}"
    assigned: list[list[int]] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 200,
                         "session.timeout.ms": 10000})
    consumer.subscribe([topic],
                       on_assign=lambda c, parts: assigned.append(sorted(p.partition for p in parts)))
    try:
        deadline = time.monotonic() + TIMEOUT
        while not assigned and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert assigned == [[0]]
        grow(bootstrap, topic, 3)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, value=b"p2", partition=2)
        assert producer.flush(TIMEOUT) == 0
        got = []
        deadline = time.monotonic() + TIMEOUT
        while not got and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append((message.partition(), message.value()))
        assert assigned[-1] == [0, 1, 2]
        assert got == [(2, b"p2")]
    finally:
        consumer.close()


def test_keys_map_by_the_new_count(kafka_broker, bootstrap, new_topic):
    """murmur2: the Java default partitioner's mapping, in librdkafka's murmur2 partitioner
    and in the native producer, whose cached partition count expires (metadata.max.age.ms)."""
    topic = new_topic(partitions=2)
    keys = [b"key-%d" % i for i in range(40)]
    moved = [k for k in keys if partition_for_key(k, 2) != partition_for_key(k, 7)]
    assert moved  # the test means something
    with NativeProducer(native_bootstrap(kafka_broker), linger_ms=0, metadata_max_age_ms=0) as native:
        before = [native.send(topic, b"v", key=k).result(TIMEOUT).partition for k in keys]
        assert before == [partition_for_key(k, 2) for k in keys]
        grow(bootstrap, topic, 7)
        after = [native.send(topic, b"v", key=k).result(TIMEOUT).partition for k in keys]
        assert after == [partition_for_key(k, 7) for k in keys]
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2"})
    delivered = []
    for key in keys:
        producer.produce(topic, value=b"v", key=key,
                         on_delivery=lambda err, msg: delivered.append((msg.key(), msg.partition())))
    assert producer.flush(TIMEOUT) == 0
    assert sorted(delivered) == sorted((k, partition_for_key(k, 7)) for k in keys)


def test_native_consumer_takes_the_new_partitions(kafka_broker, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    with NativeConsumer(native_bootstrap(kafka_broker), auto_offset_reset="earliest",
                        metadata_max_age_ms=0) as consumer:
        consumer.subscribe(topic)
        assert consumer.assignment() == [(topic, 0)]
        grow(bootstrap, topic, 3)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, value=b"new", partition=2)
        assert producer.flush(TIMEOUT) == 0
        got = []
        deadline = time.monotonic() + TIMEOUT
        while not got and time.monotonic() < deadline:
            got = [(r.partition, r.value) for r in consumer.poll(200)]
        assert got == [(2, b"new")]
        assert sorted(consumer.assignment()) == [(topic, 0), (topic, 1), (topic, 2)]


def test_kafka_python_and_aiokafka(bootstrap, new_topic):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions

    topic = new_topic(partitions=1)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_partitions({topic: KpNewPartitions(total_count=3)})
    finally:
        admin.close()
    assert partition_count(bootstrap, topic) == 3

    async def with_aiokafka() -> None:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.admin import NewPartitions as AioNewPartitions

        client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await client.start()
        try:
            await client.create_partitions({topic: AioNewPartitions(total_count=6)})
        finally:
            await client.close()

    asyncio.run(with_aiokafka())
    assert partition_count(bootstrap, topic) == 6
