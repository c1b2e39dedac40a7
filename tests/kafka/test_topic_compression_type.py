"""The topic and broker compression.type: records recompressed on both protocols, a native
CREATE_TOPIC with it, a bad value refused, the broker default."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from client import Admin as NativeAdmin
from client import Producer as NativeProducer
from kafka_format import iter_entries
from kafka_format.codecs import Codec
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import unique_name
from tests.kafka.test_cross_protocol import native_fetch_bytes

TIMEOUT = 30


def native_bootstrap(broker) -> str:
    return f"{broker.host}:{broker.port}"


# ---- compression.type ------------------------------------------------------------------------

def stored_codecs(broker, topic: str) -> list[int]:
    return [e.codec for e in iter_entries(native_fetch_bytes(broker, topic))]


def consume_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("c"),
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        while len(got) < count:
            msg = consumer.poll(TIMEOUT)
            assert msg is not None and msg.error() is None
            got.append(msg.value())
        return got
    finally:
        consumer.close()


def kafka_produce(bootstrap: str, topic: str, values: list[bytes], codec: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(TIMEOUT) == 0


def test_topic_compression_type_recompresses_on_both_protocols(kafka_broker, new_topic):
    SET = AlterConfigOpType.SET
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    topic = new_topic(configs={"compression.type": "gzip", "compression.gzip.level": "9"})
    lz4_values = [b"lz4-%d" % i + b"x" * 300 for i in range(3)]  # large enough for librdkafka to compress
    kafka_produce(kafka_broker.bootstrap, topic, lz4_values, "lz4")
    with NativeProducer(native_bootstrap(kafka_broker), compression="snappy") as native:
        native.send(topic, b"native-snappy", partition=0)
        native.flush()
    assert set(stored_codecs(kafka_broker, topic)) == {Codec.GZIP}

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "uncompressed", incremental_operation=SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    kafka_produce(kafka_broker.bootstrap, topic, [b"z" * 500], "zstd")
    assert stored_codecs(kafka_broker, topic)[-1] == Codec.NONE
    assert consume_values(kafka_broker.bootstrap, topic, 5) == [*lz4_values, b"native-snappy", b"z" * 500]
    with NativeAdmin(native_bootstrap(kafka_broker)) as native_admin:
        assert native_admin.describe_config(topic)["compression.type"] == "uncompressed"
        native_admin.alter_config(topic, {"compression.type": "producer"})
        with pytest.raises(Exception, match="INVALID_CONFIG"):
            native_admin.alter_config(topic, {"compression.type": "brotli"})
    kafka_produce(kafka_broker.bootstrap, topic, [b"s" * 500], "snappy")  # librdkafka skips codecs that do not pay
    assert stored_codecs(kafka_broker, topic)[-1] == Codec.SNAPPY
    found = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    configs = next(iter(found.values())).result(TIMEOUT)
    assert configs["compression.type"].value == "producer" and configs["compression.gzip.level"].value == "9"


def test_native_create_topic_with_compression_type(kafka_broker):
    topic = unique_name("nativecodec")
    with NativeAdmin(native_bootstrap(kafka_broker)) as native_admin:
        native_admin.create_topic(topic, 1, {"compression.type": "lz4", "compression.lz4.level": "12"})
        with pytest.raises(Exception, match="INVALID_CONFIG"):
            native_admin.create_topic(unique_name("nativecodec"), 1, {"compression.lz4.level": "99"})
    kafka_produce(kafka_broker.bootstrap, topic, [b"g" * 600], "gzip")
    assert stored_codecs(kafka_broker, topic) == [Codec.LZ4]
    assert consume_values(kafka_broker.bootstrap, topic, 1) == [b"g" * 600]


def test_create_topics_refuses_a_bad_compression_type(bootstrap):
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = unique_name("badcodec")
    futures = admin.create_topics([NewTopic(name, 1, 1, config={"compression.type": "brotli"})])
    with pytest.raises(KafkaException) as raised:
        futures[name].result(TIMEOUT)
    assert raised.value.args[0].code() == 40  # INVALID_CONFIG
    assert name not in admin.list_topics(timeout=TIMEOUT).topics


def test_broker_default_compression_type(tmp_path):
    with BrokerProcess(tmp_path / "data", "--set", "compression.type=zstd",
                       "--set", "compression.zstd.level=9") as broker:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from tests.kafka.conftest import create_topic
        topic = create_topic(broker.bootstrap, "zdefault")
        kafka_produce(broker.bootstrap, topic, [b"a" * 1000], "gzip")
        assert stored_codecs(broker, topic) == [Codec.ZSTD]
        configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        entry = next(iter(configs.values())).result(TIMEOUT)["compression.type"]
        assert (entry.value, entry.source) == ("zstd", ConfigSource.STATIC_BROKER_CONFIG.value)
        assert consume_values(broker.bootstrap, topic, 1) == [b"a" * 1000]
