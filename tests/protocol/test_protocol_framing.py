"""FrameDecoder: whole, byte by byte, pipelined, partial, oversized, tiny frames."""

import random
import time

import pytest

from protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    ErrorCode,
    FetchRequest,
    FrameDecoder,
    FrameTooLarge,
    MetadataRequest,
    ProduceRequest,
    ProduceResponse,
    ProtocolError,
    RequestType,
    encode_request,
    encode_response,
    parse_request,
    parse_response,
)

REQUESTS = [
    ProduceRequest("t", 0, b"x" * 100),
    FetchRequest("t", 1, 2, 3, 4),
    MetadataRequest(()),
    ProduceRequest("u", 3, b""),
]
WIRE = [encode_request(r) for r in REQUESTS]
STREAM = b"".join(WIRE)


def drain(decoder):
    return [bytes(f) for f in decoder.frames()]


def test_whole_frame():
    d = FrameDecoder()
    d.feed(WIRE[0])
    frame = d.next_frame()
    assert bytes(frame) == WIRE[0][4:]
    assert parse_request(frame) == REQUESTS[0]
    assert d.next_frame() is None
    assert d.buffered == 0


def test_byte_by_byte():
    d = FrameDecoder()
    got = []
    for i in range(len(STREAM)):
        d.feed(STREAM[i:i + 1])
        got += drain(d)
    assert got == [w[4:] for w in WIRE]
    assert d.buffered == 0


def test_byte_by_byte_without_polling_in_between():
    d = FrameDecoder()
    for i in range(len(STREAM)):
        d.feed(STREAM[i:i + 1])
    assert drain(d) == [w[4:] for w in WIRE]


def test_pipelined_in_one_chunk():
    d = FrameDecoder()
    d.feed(STREAM)
    frames = list(d.frames())
    assert [parse_request(f) for f in frames] == REQUESTS
    # each frame is a zero-copy view of the chunk it arrived in
    assert all(isinstance(f, memoryview) and f.obj is STREAM for f in frames)


def test_pipelined_with_trailing_partial_frame():
    d = FrameDecoder()
    d.feed(STREAM + WIRE[1][:7])
    assert drain(d) == [w[4:] for w in WIRE]
    assert d.next_frame() is None
    assert d.buffered == 7
    d.feed(WIRE[1][7:] + WIRE[2][:2])
    assert drain(d) == [WIRE[1][4:]]
    d.feed(WIRE[2][2:])
    assert drain(d) == [WIRE[2][4:]]
    assert d.buffered == 0


@pytest.mark.parametrize("seed", range(5))
def test_random_splits(seed):
    rng = random.Random(seed)
    stream = STREAM * 3
    d = FrameDecoder()
    got, pos = [], 0
    while pos < len(stream):
        n = rng.randint(1, 40)
        d.feed(stream[pos:pos + n])
        pos += n
        if rng.random() < 0.7:
            got += drain(d)
    got += drain(d)
    assert got == [w[4:] for w in WIRE] * 3


def test_split_inside_size_field():
    d = FrameDecoder()
    d.feed(WIRE[1][:2])
    assert d.next_frame() is None
    d.feed(WIRE[1][2:])
    assert bytes(d.next_frame()) == WIRE[1][4:]


def test_fed_bytearray_is_copied():
    buf = bytearray(WIRE[1])
    d = FrameDecoder()
    d.feed(buf)
    buf[:] = b"\x00" * len(buf)
    assert parse_request(d.next_frame()) == REQUESTS[1]


def test_feeding_memoryview_and_empty_chunks():
    d = FrameDecoder()
    d.feed(b"")
    d.feed(memoryview(WIRE[2]))
    d.feed(bytearray())
    assert drain(d) == [WIRE[2][4:]]


def test_response_direction():
    wire = encode_response(ProduceResponse(0, 7, -1)) + encode_response(ProduceResponse(3))
    d = FrameDecoder()
    d.feed(wire)
    assert [parse_response(RequestType.PRODUCE, f) for f in d.frames()] == \
        [ProduceResponse(0, 7, -1), ProduceResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


# ---- limits ----

def test_default_limit():
    assert FrameDecoder().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES == 104857600


def test_size_at_limit_is_fine_and_over_limit_breaks_the_decoder():
    d = FrameDecoder(max_frame_bytes=10)
    d.feed((10).to_bytes(4, "big") + b"\x00\x06" + b"\x00" * 8)
    assert len(d.next_frame()) == 10
    d.feed((11).to_bytes(4, "big"))  # raised as soon as the size field is in
    with pytest.raises(FrameTooLarge) as e:
        d.next_frame()
    assert isinstance(e.value, ProtocolError)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert (e.value.size, e.value.limit) == (11, 10)
    with pytest.raises(FrameTooLarge):
        d.next_frame()
    with pytest.raises(FrameTooLarge):
        d.feed(WIRE[1])


def test_over_default_limit():
    d = FrameDecoder()
    d.feed((104857601).to_bytes(4, "big") + b"\x00\x00")
    with pytest.raises(FrameTooLarge):
        d.next_frame()


def test_negative_size():
    d = FrameDecoder()
    d.feed(b"\xff\xff\xff\xff")
    with pytest.raises(FrameTooLarge) as e:
        list(d.frames())
    assert e.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("tiny", [b"\x00\x00\x00\x00", b"\x00\x00\x00\x01\x07"])
def test_frame_without_type_is_invalid_but_framing_goes_on(tiny):
    d = FrameDecoder()
    d.feed(tiny + WIRE[1])
    with pytest.raises(ProtocolError) as e:
        d.next_frame()
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert not isinstance(e.value, FrameTooLarge)
    assert parse_request(d.next_frame()) == REQUESTS[1]


def test_empty_frame_alone():
    d = FrameDecoder()
    d.feed(b"\x00\x00\x00\x00")
    with pytest.raises(ProtocolError) as e:
        d.next_frame()
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert d.next_frame() is None and d.buffered == 0


def test_one_byte_frame_split():
    d = FrameDecoder()
    d.feed(b"\x00\x00\x00\x01")
    assert d.next_frame() is None
    d.feed(b"\x07" + WIRE[2])
    with pytest.raises(ProtocolError):
        d.next_frame()
    assert parse_request(d.next_frame()) == REQUESTS[2]


def test_100mb_frame_in_64k_chunks_is_linear():
    size = DEFAULT_MAX_FRAME_BYTES  # exactly at the limit: allowed
    wire = size.to_bytes(4, "big") + b"\x00\x01" + bytes(size - 3) + b"!"
    chunk = 65536
    d = FrameDecoder()
    frames = []
    start = time.perf_counter()
    for pos in range(0, len(wire), chunk):
        d.feed(wire[pos:pos + chunk])
        frames += d.frames()
    elapsed = time.perf_counter() - start
    assert len(frames) == 1 and len(frames[0]) == size
    assert frames[0][:2] == b"\x00\x01" and frames[0][-1:] == b"!"
    # 1600 chunks: re-joining the buffer per chunk would copy ~80 GB
    assert elapsed < 5, f"{elapsed:.1f}s: quadratic buffering?"


def test_large_frame_assembled_once():
    size = 5 * 65536
    frame = b"\x00\x01" + bytes(range(256)) * (size // 256 - 1) + bytes(254)
    wire = len(frame).to_bytes(4, "big") + frame
    d = FrameDecoder()
    got = []
    for pos in range(0, len(wire), 65536):
        d.feed(wire[pos:pos + 65536])
        got += drain(d)
    assert got == [frame]
