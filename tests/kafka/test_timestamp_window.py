"""Per-record timestamp errors (KIP-937, Kafka 3.6+): a CreateTime record whose
timestamp lies more than `message.timestamp.before.max.ms` behind or
`message.timestamp.after.max.ms` ahead of the broker's clock (or, where those are
Long.MAX, the deprecated `message.timestamp.difference.max.ms` either way)
refuses its batch whole with INVALID_TIMESTAMP; a Kafka Produce names each such
record in `record_errors`, the native protocol answers the code (and on version 2
the message)."""

from __future__ import annotations

import re
import time

import pytest
from kio.schema.errors import ErrorCode

from kafka_format import build_batch
from kafka_format.codecs import Codec
from protocol import CreateTopicRequest, ProduceRequest
from tests.broker.wire import NativeClient
from tests.kafka.test_wire import fetch_request, only_partition, produce_request

HOUR = 3_600_000
WINDOW = {"message.timestamp.before.max.ms": str(HOUR), "message.timestamp.after.max.ms": str(HOUR)}
OUT_OF_RANGE = re.compile(r"Timestamp (-?\d+) of message with offset (\d+) is out of range\. "
                          r"The timestamp should be within \[(-?\d+), (-?\d+)\]")
INVALID_DIFFERENT_RECORD = -138  # librdkafka's local KafkaError._INVALID_DIFFERENT_RECORD
SUMMARY = "One or more records have been rejected due to invalid timestamp"


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_produce_names_each_record_outside_the_window(wire, new_topic, codec):
    topic = new_topic(configs=WINDOW)
    conn = wire()
    now = now_ms()
    stamps = [now, now - 2 * HOUR, now + 60_000, now + 2 * HOUR]
    batch = build_batch([(b"k", b"v%d" % i, ts, ()) for i, ts in enumerate(stamps)], codec=codec)
    (part,) = conn.call(produce_request(9, topic, 0, batch)).responses[0].partition_responses
    assert (part.error_code, part.base_offset) == (ErrorCode.invalid_timestamp, -1)
    assert part.error_message == SUMMARY
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    for error, ts in zip(part.record_errors, (stamps[1], stamps[3]), strict=True):
        found = OUT_OF_RANGE.fullmatch(error.batch_index_error_message)
        assert found is not None, error.batch_index_error_message
        stamp, offset, low, high = map(int, found.groups())
        assert (stamp, offset) == (ts, error.batch_index)
        assert high - low == 2 * HOUR and low <= now - HOUR + 60_000
    assert only_partition(conn.call(fetch_request(12, [(topic, 0, 0, 1 << 20)]))).high_watermark == 0

    inside = build_batch([(b"k", b"ok", now - HOUR // 2, ()), (b"k", b"ok", now + HOUR // 2, ())], codec=codec)
    (part,) = conn.call(produce_request(9, topic, 0, inside)).responses[0].partition_responses
    assert (part.error_code, part.base_offset, part.record_errors) == (0, 0, ())


def test_difference_max_ms_is_honoured_where_before_and_after_are_unset(wire, new_topic):
    topic = new_topic(configs={"message.timestamp.difference.max.ms": str(HOUR),
                               "message.timestamp.after.max.ms": str(3 * HOUR)})
    conn = wire()
    now = now_ms()
    batch = build_batch([(b"k", b"old", now - 2 * HOUR, ()), (b"k", b"ahead", now + 2 * HOUR, ())])
    (part,) = conn.call(produce_request(9, topic, 0, batch)).responses[0].partition_responses
    # before: difference.max.ms (1 h) refuses the old one; after (3 h) is set and accepts the other.
    assert part.error_code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in part.record_errors] == [0]


def test_log_append_time_topics_take_any_timestamp(wire, new_topic):
    topic = new_topic(configs={**WINDOW, "message.timestamp.type": "LogAppendTime"})
    batch = build_batch([(b"k", b"v", now_ms() - 10 * HOUR, ())])
    (part,) = wire().call(produce_request(9, topic, 0, batch)).responses[0].partition_responses
    assert part.error_code == 0


def test_confluent_producer_fails_the_records_outside_the_window(bootstrap, new_topic):
    from confluent_kafka import KafkaError, Producer

    topic = new_topic(configs=WINDOW)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "enable.idempotence": False})
    reports: dict[bytes, KafkaError | None] = {}
    producer.produce(topic, value=b"warm", partition=0)
    assert producer.flush(30) == 0
    now = now_ms()
    for i, ts in enumerate([now, now - 3 * HOUR, now, now + 3 * HOUR]):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=ts,
                         on_delivery=lambda err, msg: reports.__setitem__(msg.value(), err))
    assert producer.flush(30) == 0
    codes = {value: None if err is None else err.code() for value, err in reports.items()}
    # librdkafka fails the records `record_errors` names as INVALID_RECORD, the rest
    # of the batch as _INVALID_DIFFERENT_RECORD (as test_record_errors.py shows).
    assert codes == {b"v0": INVALID_DIFFERENT_RECORD, b"v1": KafkaError.INVALID_RECORD,
                     b"v2": INVALID_DIFFERENT_RECORD, b"v3": KafkaError.INVALID_RECORD}


def test_kafka_python_producer_gets_invalid_timestamp(bootstrap, new_topic):
    from kafka import KafkaProducer
    from kafka.errors import InvalidTimestampError

    topic = new_topic(configs=WINDOW)
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        future = producer.send(topic, value=b"old", partition=0, timestamp_ms=now_ms() - 5 * HOUR)
        with pytest.raises(InvalidTimestampError):
            future.get(timeout=30)
        assert producer.send(topic, value=b"now", partition=0).get(timeout=30).offset == 0
    finally:
        producer.close()


def test_broker_defaults_and_the_native_protocol(broker):
    process = broker("--set", f"log.message.timestamp.after.max.ms={HOUR}")
    with NativeClient(*process.address) as conn:
        assert conn.call(CreateTopicRequest("ahead", 1)).error == 0
        batch = build_batch([(b"k", b"v", now_ms() + 2 * HOUR, ())])
        response = conn.call(ProduceRequest("ahead", 0, batch))
        assert response.error == ErrorCode.invalid_timestamp
        assert conn.call(ProduceRequest("ahead", 0, build_batch([(b"k", b"v")]))).error == 0
    with NativeClient(*process.address) as conn:
        conn.handshake(2)
        response = conn.call(ProduceRequest("ahead", 0, batch))
        assert response.error == ErrorCode.invalid_timestamp
        assert response.message == SUMMARY
