"""kafka-python and aiokafka against the Kafka listener: produce/consume round trips
with several codecs, offsets by timestamp, and admin calls (no consumer groups:
assign() with explicit offsets)."""

from __future__ import annotations

import asyncio

import pytest

from tests.kafka.conftest import unique_name

# kafka-python 3.0 loads its schemas with importlib.resources.read_text (deprecated).
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:kafka.*",
                                        "ignore::DeprecationWarning:importlib.*")

TIMEOUT_MS = 30_000


# ---- kafka-python ---------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(bootstrap, new_topic, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = new_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5)
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2) for i in range(100)]
        producer.flush()
        offsets = [(f.get(timeout=30).partition, f.get(timeout=30).offset) for f in futures]
    finally:
        producer.close()
    assert sorted(offsets) == sorted([(0, i) for i in range(50)] + [(1, i) for i in range(50)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000, group_id=None)
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.seek_to_beginning()
        got = []
        for message in consumer:
            got.append((message.partition, message.offset, message.key, message.value))
            if len(got) == 100:
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted((i % 2, i // 2, b"k%d" % i, b"v%d" % i) for i in range(100))


def test_kafka_python_offsets(bootstrap, new_topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = new_topic()
    base = 1_650_000_000_000
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i in range(5):
            producer.send(topic, value=b"t%d" % i, timestamp_ms=base + i * 10).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    tp = TopicPartition(topic, 0)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 5}
        found = consumer.offsets_for_times({tp: base + 25})[tp]
        assert (found.offset, found.timestamp) == (3, base + 30)
    finally:
        consumer.close()


def test_kafka_python_admin(bootstrap):
    from kafka import TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    name = unique_name("kpadm")
    try:
        admin.create_topics([NewTopic(name, 2, 1, topic_configs={"retention.ms": "1000000"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(name, 2, 1)])
        assert name in admin.list_topics()
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "2000000"})])
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)],
                                           config_filter="all")
        text = repr(described)
        assert "2000000" in text and "retention.ms" in text and "segment.bytes" in text
        admin.delete_records({TopicPartition(name, 0): 0})
        admin.delete_topics([name])
        assert name not in admin.list_topics()
    finally:
        admin.close()


# ---- aiokafka ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", [None, "gzip", "lz4", "zstd"])
def test_aiokafka_round_trip(bootstrap, new_topic, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = new_topic()

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5)
        await producer.start()
        try:
            batch = [await producer.send(topic, key=b"a%d" % i, value=b"b%d" % i) for i in range(50)]
            offsets = [(await f).offset for f in batch]
        finally:
            await producer.stop()
        assert offsets == list(range(50))
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 50:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                got += [(m.offset, m.key, m.value) for m in batches.get(tp, [])]
            assert (await consumer.end_offsets([tp]))[tp] == 50
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(main())
    assert got == [(i, b"a%d" % i, b"b%d" % i) for i in range(50)]


def test_aiokafka_idempotent_producer(bootstrap, new_topic):
    from aiokafka import AIOKafkaProducer

    topic = new_topic()

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            return [(await producer.send_and_wait(topic, b"x%d" % i)).offset for i in range(5)]
        finally:
            await producer.stop()

    assert asyncio.run(main()) == list(range(5))
