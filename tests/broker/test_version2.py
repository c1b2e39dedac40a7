"""Native protocol version 2 against the real broker process, over raw sockets: the
HANDSHAKE rules, error messages only from version 2, METADATA auto-creation on and
off, FETCH's version-2 answer, SASL_AUTHENTICATE before SASL exists."""

from __future__ import annotations

import struct

import pytest

from protocol import (
    CreateTopicRequest,
    ErrorCode,
    FetchRequest,
    FetchResponseV2,
    HandshakeRequest,
    MetadataRequest,
    ProduceRequest,
    RequestType,
    SaslAuthenticateRequest,
    encode_request,
)
from tests.broker.conftest import batch
from tests.broker.wire import NativeClient, raw_frame
from tests.broker_process import BrokerProcess

NONE = ErrorCode.NONE
BAD_RETENTION = "retention.ms: 'abc' is not a valid long"


def recv_bytes(c: NativeClient) -> bytes:
    """The next response frame as raw bytes (size stripped)."""
    c.pending.popleft()
    return bytes(c.recv_frame())


# ---- HANDSHAKE ------------------------------------------------------------------------------

def test_handshake_settles_on_the_lower_version_and_lists_no_mechanisms(connect):
    c = connect()
    c.send_raw(encode_request(HandshakeRequest(7, "raw")), RequestType.HANDSHAKE)
    assert recv_bytes(c) == struct.pack(">hhh", 0, 2, 0)  # NONE, version 2, no mechanisms
    one = connect()
    assert one.handshake(1).version == 1 and one.version == 1  # the client's highest is lower


def test_a_second_handshake_is_invalid_request_with_a_message(connect):
    c = connect()
    assert c.handshake(2).error == NONE
    again = c.call(HandshakeRequest(2, "again"))
    assert again.error == ErrorCode.INVALID_REQUEST and "first request" in again.message
    assert c.call(MetadataRequest()).error == NONE  # the connection stays


def test_a_handshake_after_another_request_is_invalid_request_and_the_connection_stays_v1(connect):
    c = connect()
    assert c.call(MetadataRequest()).error == NONE
    c.send(HandshakeRequest(2, "late"))
    assert recv_bytes(c) == struct.pack(">h", ErrorCode.INVALID_REQUEST)  # version 1: empty body
    c.send(CreateTopicRequest("v1-bad", 1, [("retention.ms", "abc")]))
    assert recv_bytes(c) == struct.pack(">h", ErrorCode.INVALID_CONFIG)


def test_a_handshake_below_version_1_is_invalid_request(connect):
    c = connect()
    assert c.call(HandshakeRequest(0, None)).error == ErrorCode.INVALID_REQUEST
    assert c.call(HandshakeRequest(2, None)).error == ErrorCode.INVALID_REQUEST  # it was the one


def test_pipelined_requests_behind_a_handshake_are_read_as_version_2(connect, new_topic):
    topic = new_topic()
    c = connect()
    c.sock.sendall(encode_request(HandshakeRequest(2, "pipe"))
                   + encode_request(ProduceRequest(topic, 0, batch(b"a")), 2)
                   + encode_request(FetchRequest(topic, 0, 0, 4096, 0, 0), 2))
    c.pending.extend([(RequestType.HANDSHAKE, 1), (RequestType.PRODUCE, 2), (RequestType.FETCH, 2)])
    assert c.recv().version == 2
    assert c.recv().base_offset == 0
    fetched = c.recv()
    assert isinstance(fetched, FetchResponseV2) and fetched.high_watermark == 1


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


# ---- METADATA auto-creation -----------------------------------------------------------------

def test_metadata_creates_missing_topics_when_asked_and_allowed(connect):
    c = connect()
    c.handshake()
    (created,) = c.call(MetadataRequest(["auto-created"], True)).topics
    assert created.error == NONE and len(created.partitions) == 1  # num.partitions
    (missing,) = c.call(MetadataRequest(["not-asked"], False)).topics
    assert missing.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (bad,) = c.call(MetadataRequest(["bad name"], True)).topics
    assert bad.error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.call(ProduceRequest("auto-created", 0, batch(b"a"))).error == NONE
    v1 = connect()  # version 1 never creates
    (plain,) = v1.call(MetadataRequest(["v1-never"])).topics
    assert plain.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_auto_creation_uses_the_broker_defaults_and_respects_the_switch(tmp_path):
    on = BrokerProcess(tmp_path / "on", "--set", "num.partitions=3", kafka_port=None).start()
    off = BrokerProcess(tmp_path / "off", "--set", "auto.create.topics.enable=false", kafka_port=None).start()
    try:
        with NativeClient(on.host, on.port) as c:
            c.handshake()
            (created,) = c.call(MetadataRequest(["three"], True)).topics
            assert created.error == NONE and len(created.partitions) == 3
        with NativeClient(off.host, off.port) as c:
            c.handshake()
            (refused,) = c.call(MetadataRequest(["never"], True)).topics
            assert refused.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert c.call(MetadataRequest(["never"])).topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        on.close()
        off.close()


# ---- FETCH version 2 ------------------------------------------------------------------------

@pytest.mark.parametrize("isolation", [0, 1])
def test_fetch_v2_answers_offsets_and_an_empty_aborted_list(connect, new_topic, isolation):
    topic = new_topic()
    c = connect()
    c.handshake()
    first = batch(b"a", b"b")
    assert c.call(ProduceRequest(topic, 0, first)).error == NONE
    c.send(FetchRequest(topic, 0, 0, 1 << 20, 0, isolation))
    raw = recv_bytes(c)
    error, hw, lso, start, aborted = struct.unpack_from(">hqqqi", raw)
    assert (error, hw, lso, start, aborted) == (0, 2, 2, 0, 0)
    assert len(raw) == 30 + len(first)
    at_end = c.call(FetchRequest(topic, 0, 2, 4096, 0, isolation))
    assert at_end.high_watermark == at_end.last_stable_offset == 2 and bytes(at_end.message_set) == b""


def test_fetch_v2_with_an_unknown_isolation_level_is_invalid_request(connect, new_topic):
    topic = new_topic()
    c = connect()
    c.handshake()
    bad = c.call(FetchRequest(topic, 0, 0, 4096, 0, 2))
    assert bad.error == ErrorCode.INVALID_REQUEST and "isolationLevel 2" in bad.message


def test_fetch_v1_bytes_are_the_v2_message_set_alone(connect, new_topic):
    topic = new_topic()
    c = connect()
    data = batch(b"a")
    c.call(ProduceRequest(topic, 0, data))
    c.send(FetchRequest(topic, 0, 0, 4096, 0))
    v1 = recv_bytes(c)
    v2 = connect()
    v2.handshake()
    v2.send(FetchRequest(topic, 0, 0, 4096, 0))
    assert v1 == b"\x00\x00" + recv_bytes(v2)[30:] and len(v1) == 2 + len(data)


# ---- SASL_AUTHENTICATE before SASL exists ---------------------------------------------------

def test_sasl_authenticate_answers_the_sasl_state_codes(connect):
    v1 = connect()
    v1.send(SaslAuthenticateRequest("PLAIN", b"\0u\0p"))
    assert recv_bytes(v1) == struct.pack(">h", ErrorCode.ILLEGAL_SASL_STATE)
    v2 = connect()
    assert v2.handshake().mechanisms == ()
    unsupported = v2.call(SaslAuthenticateRequest("PLAIN", b"\0u\0p"))
    assert unsupported.error == ErrorCode.UNSUPPORTED_SASL_MECHANISM and "PLAIN" in unsupported.message
    assert v2.call(MetadataRequest()).error == NONE


def test_fetch_v2_long_poll_answers_the_v2_body(connect, new_topic):
    topic = new_topic()
    c = connect()
    c.handshake()
    waited = c.call(FetchRequest(topic, 0, 0, 4096, 50, 0))
    assert isinstance(waited, FetchResponseV2) and waited.error == NONE
    assert (waited.high_watermark, waited.last_stable_offset, bytes(waited.message_set)) == (0, 0, b"")
