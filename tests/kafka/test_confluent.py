"""confluent-kafka (librdkafka 2.16) against the Kafka listener: produce/consume
round trips with every codec, the idempotent producer, large messages, and the
admin calls. Consumption uses assign() with explicit offsets (no group)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, OffsetSpec

from tests.kafka.conftest import unique_name

TIMEOUT = 30


def produce(bootstrap: str, topic: str, messages, **config) -> list:
    """Produce (key, value[, partition]) tuples; returns the delivered messages in order."""
    delivered, errors = [], []

    def on_delivery(err, msg):
        (errors if err else delivered).append(err or msg)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for item in messages:
        key, value, *rest = item
        kwargs = {"partition": rest[0]} if rest else {}
        producer.produce(topic, value=value, key=key, on_delivery=on_delivery, **kwargs)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert errors == []
    return delivered


def consume(bootstrap: str, partitions: list[TopicPartition], count: int, **config) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-no-commits",
                         "enable.auto.commit": False, "enable.auto.offset.store": False, **config})
    try:
        consumer.assign(partitions)
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        return got
    finally:
        consumer.close()


def test_client_version():
    assert libversion()[0].startswith("2.16")


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_every_codec(bootstrap, new_topic, codec):
    topic = new_topic(partitions=2)
    messages = [(f"key{i}".encode(), f"value-{codec}-{i}".encode() * (i % 7 + 1), i % 2) for i in range(500)]
    delivered = produce(bootstrap, topic, messages, **{"compression.type": codec, "batch.size": 16384})
    assert sorted((m.partition(), m.offset()) for m in delivered) == \
        sorted([(0, i) for i in range(250)] + [(1, i) for i in range(250)])
    got = consume(bootstrap, [TopicPartition(topic, 0, OFFSET_BEGINNING), TopicPartition(topic, 1, 0)], 500)
    by_partition = {p: [(m.offset(), m.key(), m.value()) for m in got if m.partition() == p] for p in (0, 1)}
    for p in (0, 1):
        expected = [(i, k, v) for i, (k, v, _) in enumerate(m for m in messages if m[2] == p)]
        assert by_partition[p] == expected


def test_idempotent_producer(bootstrap, new_topic):
    topic = new_topic()
    delivered = produce(bootstrap, topic, [(None, b"i%d" % i) for i in range(200)],
                        **{"enable.idempotence": True, "acks": "all", "compression.type": "lz4"})
    assert [m.offset() for m in delivered] == list(range(200))
    got = consume(bootstrap, [TopicPartition(topic, 0, 0)], 200)
    assert [m.value() for m in got] == [b"i%d" % i for i in range(200)]


def test_acks_zero_and_all(bootstrap, new_topic):
    topic = new_topic()
    produce(bootstrap, topic, [(None, b"zero")], acks=0)
    produce(bootstrap, topic, [(None, b"all")], acks="all")
    got = consume(bootstrap, [TopicPartition(topic, 0, 0)], 2)
    assert [m.value() for m in got] == [b"zero", b"all"]


def test_message_larger_than_fetch_limits(bootstrap, new_topic):
    topic = new_topic(configs={"max.message.bytes": str(3 << 20)})
    big = b"B" * (2 << 20)
    produce(bootstrap, topic, [(None, big), (None, b"after")], **{"message.max.bytes": 4 << 20})
    got = consume(bootstrap, [TopicPartition(topic, 0, 0)], 2,
                  **{"fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 65536,
                     "receive.message.max.bytes": 8 << 20})
    assert [len(m.value()) for m in got] == [len(big), 5]


def test_headers_keys_and_timestamps_survive(bootstrap, new_topic):
    topic = new_topic()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=b"v", key=b"k", headers=[("h1", b"x"), ("h2", None)], timestamp=1_600_000_000_123)
    assert producer.flush(TIMEOUT) == 0
    (msg,) = consume(bootstrap, [TopicPartition(topic, 0, 0)], 1)
    assert (msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]) == \
        (b"k", b"v", [("h1", b"x"), ("h2", None)], 1_600_000_000_123)


def test_auto_created_topic_on_produce(bootstrap):
    topic = unique_name("auto")
    delivered = produce(bootstrap, topic, [(None, b"first")])
    assert delivered[0].offset() == 0


# ---- admin --------------------------------------------------------------------------------------

def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def test_create_describe_delete_topics(bootstrap):
    client = admin(bootstrap)
    name = unique_name("adm")
    client.create_topics([NewTopic(name, 3, 1, config={"retention.ms": "3600000"})])[name].result(TIMEOUT)
    meta = client.list_topics(timeout=TIMEOUT)
    assert len(meta.topics[name].partitions) == 3
    assert meta.brokers[0].id == 0 and meta.controller_id == 0
    # Again: TOPIC_ALREADY_EXISTS; bad replication factor; validate_only creates nothing.
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        client.create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT)
    other = unique_name("adm")
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        client.create_topics([NewTopic(other, 1, 3)])[other].result(TIMEOUT)
    client.create_topics([NewTopic(other, 1, 1)], validate_only=True)[other].result(TIMEOUT)
    assert other not in client.list_topics(timeout=TIMEOUT).topics
    client.delete_topics([name], operation_timeout=10)[name].result(TIMEOUT)
    assert name not in client.list_topics(timeout=TIMEOUT).topics
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        client.delete_topics([name])[name].result(TIMEOUT)


def describe_topic(client: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return client.describe_configs([resource])[resource].result(TIMEOUT)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_describe_alter_and_incremental_alter_configs(bootstrap, new_topic):
    topic = new_topic(configs={"retention.ms": "3600000"})
    client = admin(bootstrap)
    configs = describe_topic(client, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824" and configs["segment.bytes"].is_default

    # Legacy AlterConfigs replaces every override.
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"cleanup.policy": "compact"})
    client.alter_configs([resource])[resource].result(TIMEOUT)
    configs = describe_topic(client, topic)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "604800000"  # the override went away

    # Incremental: SET, DELETE, APPEND on a list.
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    client.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    configs = describe_topic(client, topic)
    assert configs["retention.ms"].value == "7200000"
    assert set(configs["cleanup.policy"].value.split(",")) == {"compact", "delete"}
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    client.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert describe_topic(client, topic)["retention.ms"].value == "604800000"

    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "not-a-number", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        client.incremental_alter_configs([bad])[bad].result(TIMEOUT)


def test_describe_broker_configs(bootstrap):
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    client = admin(bootstrap)  # kept alive until the result is in
    configs = client.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["num.partitions"].value == "1" and configs["num.partitions"].is_read_only


def test_list_offsets_and_delete_records(bootstrap, new_topic):
    topic = new_topic()
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=b"m%d" % i, timestamp=base + i * 1000)
        producer.flush(TIMEOUT)  # one batch per message: each has its own timestamp index entry
    client = admin(bootstrap)
    tp = TopicPartition(topic, 0)

    def offset_of(spec):
        return client.list_offsets({tp: spec})[tp].result(TIMEOUT).offset

    assert offset_of(OffsetSpec.earliest()) == 0
    assert offset_of(OffsetSpec.latest()) == 10
    assert offset_of(OffsetSpec.for_timestamp(base + 4500)) == 5
    assert offset_of(OffsetSpec.for_timestamp(base + 99_000)) == -1
    assert offset_of(OffsetSpec.max_timestamp()) == 9

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 2000)], timeout=TIMEOUT)
        assert found[0].offset == 2
    finally:
        consumer.close()

    deleted = client.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)]
    assert deleted.result(TIMEOUT).low_watermark == 4
    assert offset_of(OffsetSpec.earliest()) == 4
    got = consume(bootstrap, [TopicPartition(topic, 0, OFFSET_BEGINNING)], 6)
    assert [m.offset() for m in got] == list(range(4, 10))
    beyond = TopicPartition(topic, 0, 11)
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        client.delete_records([beyond])[beyond].result(TIMEOUT)
