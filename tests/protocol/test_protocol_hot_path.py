"""The broker's hot-path codec helpers agree with the general codec: `parse_produce`
accepts and refuses exactly what `parse_request` does for a PRODUCE (same fields, same
error code), and `produce_response` is `encode_response(ProduceResponse(NONE, ...))`."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import (
    ErrorCode,
    FetchRequest,
    ProduceRequest,
    ProduceResponse,
    ProtocolError,
    RequestType,
    encode_request,
    encode_response,
    parse_produce,
    parse_request,
    produce_response,
)

MANY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(parse, frame):
    """(topic, partition, message set bytes) or ("error", code)."""
    try:
        result = parse(frame)
    except ProtocolError as e:
        return ("error", e.code)
    if isinstance(result, ProduceRequest):
        result = (result.topic, result.partition, result.message_set)
    topic, partition, message_set = result
    return topic, partition, bytes(message_set)


def general(frame):
    request = parse_request(frame)
    if not isinstance(request, ProduceRequest):
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "not a PRODUCE")
    return request


def body(frame_with_size: bytes) -> bytes:
    return frame_with_size[4:]  # what FrameDecoder yields: type + body


@given(st.text(max_size=20), st.integers(-2**31, 2**31 - 1), st.binary(max_size=64))
@MANY
def test_well_formed_produces_parse_the_same(topic, partition, message_set):
    frame = body(encode_request(ProduceRequest(topic, partition, message_set)))
    expected = (topic, partition, message_set)
    assert outcome(parse_produce, frame) == outcome(general, frame) == expected
    assert outcome(parse_produce, memoryview(bytearray(frame))) == expected


@given(st.text(max_size=8), st.integers(-2**31, 2**31 - 1), st.binary(max_size=16),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 255)), max_size=4),
       st.integers(0, 40), st.binary(max_size=4))
@MANY
def test_damaged_produces_are_refused_the_same(topic, partition, message_set, flips, cut, extra):
    frame = bytearray(body(encode_request(ProduceRequest(topic, partition, message_set))))
    for at, value in flips:
        if at < len(frame):
            frame[at] = value
    frame = bytes(frame[:max(2, len(frame) - cut)]) + extra
    assert outcome(parse_produce, frame) == outcome(general, frame)


@pytest.mark.parametrize("frame", [
    struct.pack(">hh", RequestType.PRODUCE, -1),  # null topic
    struct.pack(">hh", RequestType.PRODUCE, 5) + b"ab",  # topic past the end
    struct.pack(">hh", RequestType.PRODUCE, 2) + b"\xff\xfe" + struct.pack(">ii", 0, 0),  # not UTF-8
    struct.pack(">hh", RequestType.PRODUCE, 1) + b"t" + struct.pack(">ii", 0, -1),  # negative setSize
    struct.pack(">hh", RequestType.PRODUCE, 1) + b"t" + struct.pack(">ii", 0, 4) + b"abc",  # set past the end
    struct.pack(">hh", RequestType.PRODUCE, 1) + b"t" + struct.pack(">ii", 0, 1) + b"ab",  # trailing bytes
    body(encode_request(FetchRequest("t", 0, 0, 1, 0))),  # another type
    struct.pack(">h", 99),  # an unknown type
])
def test_malformed_frames_are_invalid_request(frame):
    with pytest.raises(ProtocolError) as caught:
        parse_produce(frame)
    assert caught.value.code == ErrorCode.INVALID_REQUEST


def test_the_message_set_is_a_view_of_the_frame():
    frame = bytearray(body(encode_request(ProduceRequest("t", 3, b"payload"))))
    _, _, message_set = parse_produce(memoryview(frame))
    message_set[0] = ord("P")  # the broker patches message sets in place
    assert frame.endswith(b"Payload")


@given(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1))
@MANY
def test_produce_response_is_the_encoded_response(offset, append_time):
    assert produce_response(offset, append_time) == encode_response(
        ProduceResponse(ErrorCode.NONE, offset, append_time))


def test_produce_response_out_of_range_is_value_error():
    with pytest.raises(ValueError):
        produce_response(2**63, -1)
    with pytest.raises(ValueError):
        encode_response(ProduceResponse(ErrorCode.NONE, 2**63, -1))
