"""One log, two protocols: whatever one protocol writes, the other reads at the same
offsets, byte for byte; topics created through one exist for the other."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from client import Admin as NativeAdmin
from client import Consumer as NativeConsumer
from kafka_format import build_batch, iter_entries
from protocol import FetchRequest, ProduceRequest
from tests.broker.wire import NativeClient
from tests.kafka.conftest import unique_name
from tests.kafka.test_wire import fetch_request, only_partition, produce_request

TIMEOUT = 30


def native_fetch_bytes(broker, topic: str, partition: int = 0, offset: int = 0) -> bytes:
    conn = NativeClient(*broker.address)
    try:
        response = conn.call(FetchRequest(topic, partition, offset, 50 << 20, 0))
        assert response.error == 0
        return bytes(response.message_set)
    finally:
        conn.close()


def native_bootstrap(broker) -> str:
    return f"{broker.host}:{broker.port}"


def test_native_produce_then_kafka_fetch(kafka_broker, new_topic, wire):
    topic = new_topic()
    conn = NativeClient(*kafka_broker.address)
    try:
        for values in ([b"n0", b"n1"], [b"n2"], [b"n3", b"n4", b"n5"]):
            assert conn.call(ProduceRequest(topic, 0, build_batch([(None, v) for v in values]))).error == 0
    finally:
        conn.close()
    stored = native_fetch_bytes(kafka_broker, topic)
    part = only_partition(wire().call(fetch_request(12, [(topic, 0, 0, 1 << 20)])))
    assert part.records == stored  # the same bytes from the same file
    assert part.high_watermark == 6

    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "unused"})
    try:
        consumer.assign([TopicPartition(topic, 0, 2)])
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None
                got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert got == [(2, b"n2"), (3, b"n3"), (4, b"n4"), (5, b"n5")]


def test_kafka_produce_then_native_fetch(kafka_broker, new_topic, wire):
    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "compression.type": "lz4",
                         "linger.ms": 20})
    delivered = []
    for i in range(30):
        producer.produce(topic, key=b"k%d" % i, value=b"kafka-%d" % i,
                         on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert producer.flush(TIMEOUT) == 0
    assert sorted(o for _, o in delivered) == list(range(30)) and all(e is None for e, _ in delivered)

    stored = native_fetch_bytes(kafka_broker, topic)
    part = only_partition(wire().call(fetch_request(12, [(topic, 0, 0, 1 << 20)])))
    assert stored == part.records
    records = [(r.offset, r.key, r.value) for entry in iter_entries(stored) for r in entry.records()]
    assert records == [(i, b"k%d" % i, b"kafka-%d" % i) for i in range(30)]

    with NativeConsumer(native_bootstrap(kafka_broker), auto_offset_reset="earliest") as consumer:
        consumer.assign(topic, [0])
        consumer.seek_to_beginning(topic, 0)
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 30 and time.monotonic() < deadline:
            got += [(r.offset, r.value) for r in consumer.poll(timeout_ms=500)]
    assert got == [(i, b"kafka-%d" % i) for i in range(30)]


def test_interleaved_writers_share_offsets(kafka_broker, new_topic, wire):
    topic = new_topic()
    kafka = wire()
    native = NativeClient(*kafka_broker.address)
    try:
        offsets = []
        for i in range(6):
            batch = build_batch([(None, b"w%d" % i)])
            if i % 2:
                (p,) = kafka.call(produce_request(9, topic, 0, batch)).responses[0].partition_responses
                offsets.append(p.base_offset)
            else:
                offsets.append(native.call(ProduceRequest(topic, 0, batch)).base_offset)
    finally:
        native.close()
    assert offsets == list(range(6))
    entries = list(iter_entries(native_fetch_bytes(kafka_broker, topic)))
    assert [(e.base_offset, e.records()[0].value) for e in entries] == [(i, b"w%d" % i) for i in range(6)]


def test_topics_are_shared(kafka_broker):
    name = unique_name("shared")
    with NativeAdmin(native_bootstrap(kafka_broker)) as admin:
        admin.create_topic(name, partitions=2, configs={"retention.ms": "5000000"})
    from confluent_kafka.admin import AdminClient, ConfigResource

    client = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    assert len(client.list_topics(timeout=TIMEOUT).topics[name].partitions) == 2
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    assert client.describe_configs([resource])[resource].result(TIMEOUT)["retention.ms"].value == "5000000"
    client.delete_topics([name])[name].result(TIMEOUT)
    with NativeAdmin(native_bootstrap(kafka_broker)) as admin:
        assert name not in admin.list_topics()
