"""Native HANDSHAKE against the real broker process, over raw sockets: the version
the connection settles on, when a HANDSHAKE is refused, pipelined requests behind it, and
SASL_AUTHENTICATE before SASL exists."""

from __future__ import annotations

import struct

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
from tests.broker.wire import NativeClient

NONE = ErrorCode.NONE


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
