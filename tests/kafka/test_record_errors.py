"""Produce's per-record errors (KIP-467): a batch for a compacted topic holding
keyless records is refused whole, and the answer names each keyless record by
its index in the batch (`record_errors`, Produce v8+) with Kafka's message, so
a client fails those records alone and retries the others."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kafka_format import build_batch
from tests.kafka.test_wire import fetch_request, only_partition, produce_request

COMPACTED = {"cleanup.policy": "compact"}
KEYLESS = "Compacted topic cannot accept message without key"
INVALID_DIFFERENT_RECORD = -138  # librdkafka's local KafkaError._INVALID_DIFFERENT_RECORD


@pytest.mark.parametrize("version", [8, 9, 10, 11])
def test_produce_answers_the_index_and_message_of_each_keyless_record(wire, new_topic, version):
    topic = new_topic(configs=COMPACTED)
    conn = wire()
    batch = build_batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")])
    response = conn.call(produce_request(version, topic, 0, batch))
    (part,) = response.responses[0].partition_responses
    assert (part.error_code, part.base_offset) == (ErrorCode.invalid_record, -1)
    message = f"{KEYLESS} in topic partition {topic}-0"
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, message), (3, message)]
    assert part.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]")
    # Refused whole: nothing was appended.
    fetched = only_partition(conn.call(fetch_request(12, [(topic, 0, 0, 1 << 20)])))
    assert fetched.high_watermark == 0


def test_other_errors_answer_no_record_errors(wire, new_topic):
    topic = new_topic()
    conn = wire()
    response = conn.call(produce_request(9, topic, 0, b"\x00" * 70))
    (part,) = response.responses[0].partition_responses
    assert part.error_code == ErrorCode.corrupt_message
    assert part.record_errors == () and part.error_message is None


def test_confluent_producer_fails_the_keyless_records_by_their_own_error(bootstrap, new_topic):
    """librdkafka (2.10+) fails the records named in `record_errors` with
    INVALID_RECORD and the rest of the batch with _INVALID_DIFFERENT_RECORD, so
    the application knows which to send again (with a single record error it
    reports the partition's INVALID_RECORD on every record of the batch)."""
    from confluent_kafka import Consumer, KafkaError, Producer

    topic = new_topic(configs=COMPACTED)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": 100,
                         "enable.idempotence": False})
    reports: dict[bytes, KafkaError | None] = {}

    def delivered(err, msg):
        reports[msg.value()] = err

    # A first record brings the connection up, so the seven below form one batch.
    producer.produce(topic, key=b"warm", value=b"up", partition=0)
    assert producer.flush(30) == 0
    keyless = {2, 5}
    for i in range(7):  # one batch: the linger outlasts the loop
        producer.produce(topic, key=None if i in keyless else b"k%d" % i, value=b"v%d" % i, partition=0,
                         on_delivery=delivered)
    assert producer.flush(30) == 0
    codes = {value: None if err is None else err.code() for value, err in reports.items()}
    assert codes == {b"v%d" % i: KafkaError.INVALID_RECORD if i in keyless else INVALID_DIFFERENT_RECORD
                     for i in range(7)}

    # Sent again, the keyed records are appended.
    for value, code in codes.items():
        if code == INVALID_DIFFERENT_RECORD:
            producer.produce(topic, key=b"k" + value[1:], value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert [v for v, err in reports.items() if err is None] == [b"v0", b"v1", b"v3", b"v4", b"v6"]

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        while len(got) < 6:
            msg = consumer.poll(10)
            assert msg is not None
            if msg.error() is None:
                got.append(msg.value())
        assert got == [b"up", b"v0", b"v1", b"v3", b"v4", b"v6"]
    finally:
        consumer.close()
