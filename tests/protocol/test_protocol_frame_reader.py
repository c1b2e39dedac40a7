"""FrameReader (the BufferedProtocol side of framing) and FramePool: whole, byte by byte,
pipelined, with trailing data, split anywhere, oversized and tiny frames, large frames
received straight into their own buffer, and pooled buffers reused only once free."""

import gc
import random

import pytest

from protocol import (
    FetchRequest,
    FrameTooLarge,
    MetadataRequest,
    ProduceRequest,
    ProtocolError,
    encode_request,
    parse_request,
)
from protocol.framing import DIRECT_MIN_BYTES, SCRATCH_BYTES, FramePool, FrameReader

REQUESTS = [
    ProduceRequest("t", 0, b"x" * 100),
    FetchRequest("t", 1, 2, 3, 4),
    MetadataRequest(()),
    ProduceRequest("u", 3, b""),
    ProduceRequest("big", 7, bytes(range(256)) * 400),  # 100 KiB: received directly
    FetchRequest("t", 5, 6, 7, 8),
    ProduceRequest("big", 7, b"y" * (DIRECT_MIN_BYTES - 20)),  # just under the direct size
]
WIRE = [encode_request(r) for r in REQUESTS]
STREAM = b"".join(WIRE)
FRAMES = [w[4:] for w in WIRE]


def drain(reader):
    return [bytes(f) for f in reader.frames()]


def receive(reader, data: bytes, limit: int | None = None) -> None:
    """What uvloop does: get_buffer, write at most its length (or `limit`), buffer_updated."""
    view = memoryview(data)
    while view:
        buf = reader.get_buffer(-1)
        n = min(len(buf), len(view), limit or len(view))
        buf[:n] = view[:n]
        buf.release()
        reader.buffer_updated(n)
        view = view[n:]


@pytest.fixture(params=[None, "pool"])
def reader(request):
    return FrameReader(pool=FramePool() if request.param else None)


def test_whole_stream(reader):
    reader.feed(STREAM)
    frames = list(reader.frames())
    assert [parse_request(f) for f in frames] == REQUESTS
    assert reader.next_frame() is None
    assert reader.buffered == 0


def test_byte_by_byte(reader):
    got = []
    for i in range(len(STREAM)):
        reader.feed(STREAM[i:i + 1])
        got += drain(reader)
    assert got == FRAMES
    assert reader.buffered == 0


def test_byte_by_byte_without_taking_frames_in_between(reader):
    for i in range(len(STREAM)):
        reader.feed(STREAM[i:i + 1])
    assert drain(reader) == FRAMES


def test_received_in_small_reads(reader):
    got = []
    for limit in (1, 7, 4096):
        receive(reader, STREAM, limit)
        got += drain(reader)
    assert got == FRAMES * 3


def test_trailing_partial_frame_stays_until_complete(reader):
    reader.feed(STREAM + WIRE[4][:5000])
    assert drain(reader) == FRAMES
    assert reader.buffered == 5000
    reader.feed(WIRE[4][5000:] + WIRE[1][:3])
    assert drain(reader) == [FRAMES[4]]
    reader.feed(WIRE[1][3:])
    assert drain(reader) == [FRAMES[1]]
    assert reader.buffered == 0


@pytest.mark.parametrize("seed", range(20))
def test_random_splits(seed, reader):
    rng = random.Random(seed)
    stream = STREAM * 3
    got, pos = [], 0
    while pos < len(stream):
        n = rng.choice([1, 2, 3, 5, 100, 4096, 70000])
        receive(reader, stream[pos:pos + n], rng.choice([None, 1, 999]))
        pos += n
        if rng.random() < 0.7:
            got += drain(reader)
    got += drain(reader)
    assert got == FRAMES * 3


def test_split_inside_size_field(reader):
    reader.feed(WIRE[4][:2])
    assert reader.next_frame() is None
    reader.feed(WIRE[4][2:])
    assert drain(reader) == [FRAMES[4]]


def test_a_large_frame_is_received_into_its_own_buffer_and_nothing_else_lands_there(reader):
    big = WIRE[4]
    first = 1000  # the size field and a first piece arrive in the scratch buffer
    receive(reader, big[:first])
    assert reader.next_frame() is None  # now the frame has a buffer of its own
    buf = reader.get_buffer(-1)
    assert len(buf) == len(big) - first  # exactly the rest: the next frame never lands in it
    target = buf.obj
    buf[:] = big[first:]
    buf.release()
    reader.buffer_updated(len(big) - first)
    receive(reader, WIRE[1])  # the next frame goes to the scratch buffer
    frame = reader.next_frame()
    assert frame.obj is target and bytes(frame) == FRAMES[4]
    assert not frame.readonly
    assert drain(reader) == [FRAMES[1]]


def test_small_frames_are_writable_copies(reader):
    reader.feed(WIRE[0] + WIRE[1])
    first, second = reader.next_frame(), reader.next_frame()
    assert not first.readonly and bytes(first) == FRAMES[0] and bytes(second) == FRAMES[1]
    first[:] = bytes(len(first))  # patching one frame touches nothing else
    reader.feed(WIRE[2])
    assert bytes(second) == FRAMES[1] and drain(reader) == [FRAMES[2]]


def test_scratch_buffer_grows_when_nobody_takes_frames():
    reader = FrameReader()
    stream = STREAM * (3 * SCRATCH_BYTES // len(STREAM) + 1)
    receive(reader, stream, 1500)
    assert drain(reader) == FRAMES * (len(stream) // len(STREAM))


def test_size_at_limit_is_fine_and_over_limit_breaks_the_reader():
    reader = FrameReader(max_frame_bytes=10)
    reader.feed((10).to_bytes(4, "big") + b"\x00\x02" + b"x" * 8)
    assert bytes(reader.next_frame()) == b"\x00\x02" + b"x" * 8
    reader.feed((11).to_bytes(4, "big") + b"\x00\x02")
    with pytest.raises(FrameTooLarge) as e:
        reader.next_frame()
    assert (e.value.size, e.value.limit) == (11, 10)
    with pytest.raises(FrameTooLarge):  # broken for good
        reader.next_frame()
    with pytest.raises(FrameTooLarge):
        reader.feed(WIRE[1])
    assert len(reader.get_buffer(-1)) > 0  # a socket read after it never fails


def test_over_limit_after_good_frames_in_one_read():
    reader = FrameReader(max_frame_bytes=1000)
    reader.feed(WIRE[1] + (5000).to_bytes(4, "big") + b"\x00\x00" + b"z" * 100)
    assert bytes(reader.next_frame()) == FRAMES[1]
    with pytest.raises(FrameTooLarge):
        reader.next_frame()


def test_negative_size():
    reader = FrameReader()
    reader.feed((-1).to_bytes(4, "big", signed=True))
    with pytest.raises(FrameTooLarge):
        reader.next_frame()


@pytest.mark.parametrize("tiny", [b"", b"\x07"])
def test_frame_without_type_is_invalid_but_framing_goes_on(tiny, reader):
    reader.feed(len(tiny).to_bytes(4, "big") + tiny + WIRE[2])
    with pytest.raises(ProtocolError):
        reader.next_frame()
    assert parse_request(reader.next_frame()) == REQUESTS[2]


def test_one_byte_frame_split(reader):
    reader.feed(b"\x00\x00\x00")
    assert reader.next_frame() is None
    reader.feed(b"\x01")
    assert reader.next_frame() is None
    reader.feed(b"\x09")
    with pytest.raises(ProtocolError):
        reader.next_frame()
    assert reader.next_frame() is None


# ---- FramePool ----------------------------------------------------------------------------------

def test_pool_reuses_a_buffer_only_once_nothing_refers_to_it():
    pool = FramePool(max_bytes=8 << 20)
    a = pool.take(100_000)
    owner = id(a.obj)  # (holding the bytearray itself would keep it in use)
    b = pool.take(100_000)
    assert id(b.obj) != owner  # a is still held
    del a
    c = pool.take(100_000)
    assert id(c.obj) == owner and len(c) == 100_000 and not c.readonly
    part = c[10:20]  # a slice of a frame (a message set) keeps it in use
    del c
    d = pool.take(100_000)
    other = id(d.obj)
    assert other != owner
    del part, d
    gc.collect()
    x, y, z = pool.take(99_000), pool.take(99_000), pool.take(99_000)
    assert {id(x.obj), id(y.obj)} == {owner, other}  # close sizes reuse free buffers
    assert id(z.obj) not in {owner, other, id(b.obj)}  # all three in use now


def test_pool_stays_within_its_bound_and_never_pools_huge_frames():
    pool = FramePool(max_bytes=1 << 20)
    held = [pool.take(200_000) for _ in range(10)]
    assert pool.pooled_bytes <= 1 << 20
    huge = pool.take(600_000)  # over half the pool: never kept
    assert pool.pooled_bytes <= 1 << 20
    del held, huge
    for _ in range(20):
        pool.take(300_000)  # free buffers make room, oldest first
    assert pool.pooled_bytes <= 1 << 20


def test_a_held_frame_is_never_overwritten_by_later_frames():
    reader = FrameReader(pool=FramePool(max_bytes=4 << 20))
    wires = [encode_request(ProduceRequest("t", 0, bytes([i]) * 200_000)) for i in range(6)]
    kept = []
    for i, wire in enumerate(wires):
        receive(reader, wire, 65536)
        frame = reader.next_frame()
        if i % 2 == 0:
            kept.append((frame, wire[4:]))  # held: its buffer must stay ours
        del frame
    for frame, expected in kept:
        assert bytes(frame) == expected
