"""Native error answers against the real broker process, over raw sockets: a reason
only from version 2, naming the problem, in the same words as the Kafka listener."""

from __future__ import annotations

import struct

import pytest

from protocol import (
    CreateTopicRequest,
    ErrorCode,
    FetchRequest,
    ProduceRequest,
    RequestType,
)
from tests.broker.conftest import batch
from tests.broker.wire import NativeClient, raw_frame

NONE = ErrorCode.NONE
BAD_RETENTION = "retention.ms: 'abc' is not a valid long"


def recv_bytes(c: NativeClient) -> bytes:
    """The next response frame as raw bytes (size stripped)."""
    c.pending.popleft()
    return bytes(c.recv_frame())


# ---- error messages -------------------------------------------------------------------------

def test_errors_carry_their_reason_only_from_version_2(connect):
    v1 = connect()
    v1.send(CreateTopicRequest("bad-config", 1, [("retention.ms", "abc")]))
    assert recv_bytes(v1) == struct.pack(">h", ErrorCode.INVALID_CONFIG)  # byte for byte version 1
    v2 = connect()
    v2.handshake()
    v2.send(CreateTopicRequest("bad-config", 1, [("retention.ms", "abc")]))
    raw = recv_bytes(v2)
    assert raw == struct.pack(">hh", ErrorCode.INVALID_CONFIG, len(BAD_RETENTION)) + BAD_RETENTION.encode()


def test_version_2_reasons_name_the_problem(connect, new_topic):
    c = connect()
    c.handshake()
    topic = new_topic(configs=[("max.message.bytes", "200")])
    too_large = c.call(ProduceRequest(topic, 0, batch(b"x" * 300)))
    assert too_large.error == ErrorCode.MESSAGE_TOO_LARGE
    assert "max.message.bytes 200" in too_large.message and "bytes" in too_large.message
    unknown = c.call(ProduceRequest("nope", 0, batch(b"a")))
    assert unknown.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "nope-0" in unknown.message
    out_of_range = c.call(FetchRequest(topic, 0, 99, 4096, 0))
    assert out_of_range.error == ErrorCode.OFFSET_OUT_OF_RANGE and out_of_range.message
    c.send_raw(raw_frame(99, b""), RequestType.CREATE_TOPIC)  # an unknown type
    bad = c.recv()
    assert bad.error == ErrorCode.INVALID_REQUEST and "99" in bad.message
    exists = c.call(CreateTopicRequest(topic, 1))
    assert exists.error == ErrorCode.TOPIC_ALREADY_EXISTS and topic in exists.message


def test_the_kafka_listener_gives_the_same_words(connect, shared_broker):
    from kafka.admin import KafkaAdminClient, NewTopic  # kafka-python
    from kafka.errors import InvalidConfigurationError

    c = connect()
    c.handshake()
    native = c.call(CreateTopicRequest("same-words", 1, [("retention.ms", "abc")])).message
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        with pytest.raises(InvalidConfigurationError) as e:
            admin.create_topics([NewTopic("same-words", 1, 1, topic_configs={"retention.ms": "abc"})])
    finally:
        admin.close()
    assert native == BAD_RETENTION and BAD_RETENTION in str(e.value)
