"""Unit checks of the wire limits: the Kafka request check,
the bad-request log limiter, the request memory pool, frame buffers that grow as
bytes arrive, and the connection limits."""

from __future__ import annotations

import dataclasses
import struct
import typing

import pytest
from kio.index import load_request_schema

from broker.kafka import codec, request_check
from broker.net.bad_request_log import BadRequestLog
from tests.robust.wire_fuzz import Mutator, sample_requests

# The APIs whose handlers met None for a null array before the check.
NULL_ARRAY_APIS = [(0, 3, 13), (19, 2, 7), (20, 1, 6), (32, 1, 4), (2, 1, 10), (21, 0, 2), (15, 0, 6),
                   (42, 0, 2)]


def _none_where_not_nullable(entity) -> list[str]:
    found = []
    hints = typing.get_type_hints(type(entity))
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        hint = hints[field.name]
        if value is None and typing.get_origin(hint) is tuple:
            found.append(f"{type(entity).__name__}.{field.name}")
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                found += _none_where_not_nullable(item)
    return found


def test_well_formed_requests_pass_the_check():
    for frame in sample_requests("t", NULL_ARRAY_APIS):
        key, version, _ = codec.peek_header(frame)
        codec.decode_request(memoryview(frame), load_request_schema(key, version))


def test_mutated_requests_are_refused_or_decode_without_none_in_non_nullable_arrays():
    samples = sample_requests("t", NULL_ARRAY_APIS)
    mutator = Mutator(7)
    refused = decoded = 0
    for i in range(20_000):
        frame = mutator.mutate(samples[i % len(samples)])
        if len(frame) < 8:
            continue
        key, version, _ = codec.peek_header(frame)
        try:
            cls = load_request_schema(key, version)
        except Exception:  # an api key or version kio has no schema for
            continue
        try:
            _, request = codec.decode_request(memoryview(frame), cls)
        except codec.MalformedRequest:
            refused += 1
            continue
        decoded += 1
        assert not _none_where_not_nullable(request), (key, version, frame.hex())
    assert refused > 1000 and decoded > 1000


def _produce_frame(version: int, topics_count: bytes) -> bytes:
    """A Produce request with no topics whose topic count is replaced by `topics_count`."""
    from tests.robust.wire_fuzz import encode_frame

    cls = load_request_schema(0, version)
    frame = encode_frame(codec.make(cls, acks=1, timeout=100, topic_data=()), 1)
    if cls.__flexible__:  # ... | count+1 (uvarint 1) | no tagged fields (0)
        assert frame[-2:] == b"\x01\x00"
        return frame[:-2] + topics_count + b"\x00"
    assert frame[-4:] == b"\x00\x00\x00\x00"
    return frame[:-4] + topics_count


@pytest.mark.parametrize("version, count, message", [
    (3, struct.pack(">i", -1), "non-nullable field ProduceRequest.topic_data was serialized as null"),
    (9, b"\x00", "non-nullable field ProduceRequest.topic_data was serialized as null"),
    (3, struct.pack(">i", -2), "invalid length -2"),
    (3, struct.pack(">i", 2**31 - 1), "Tried to allocate a collection of size 2147483647"),
    # kio aborts the whole process on this one: a count of 2**32 - 2 items.
    (9, b"\xff\xff\xff\xff\x0f", "Tried to allocate a collection of size 4294967294"),
    (9, b"\xff\xff\xff\xff\xff\x01", "too long"),
])
def test_null_and_huge_arrays_are_malformed(version, count, message):
    frame = _produce_frame(version, count)
    with pytest.raises(codec.MalformedRequest, match=message):
        codec.decode_request(memoryview(frame), load_request_schema(0, version))


def test_every_registered_schema_has_a_plan():
    for key, low, high in NULL_ARRAY_APIS:
        for version in range(low, high + 1):
            request_check.plan(load_request_schema(key, version))


# ---- the bad-request log limiter -----------------------------------------------------------------

class _Lines:
    def __init__(self):
        self.lines: list[tuple[str, dict]] = []

    def warning(self, event, **fields):
        self.lines.append((event, fields))


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_first_bad_request_of_a_connection_is_logged_then_counted():
    out, clock = _Lines(), _Clock()
    limiter = BadRequestLog(out, interval_s=10, max_lines=100, clock=clock)
    for _ in range(1000):
        limiter.record("c1", "bad_request", error="x")
    assert out.lines == [("bad_request", {"error": "x"})]
    clock.now = 10
    limiter.record("c1", "bad_request", error="y")
    assert out.lines[-1] == ("bad_request", {"error": "y", "repeated": 1000, "interval_s": 10})
    limiter.record("c1", "other_reason")
    assert len(out.lines) == 3


def test_broker_wide_cap_and_summary():
    out, clock = _Lines(), _Clock()
    limiter = BadRequestLog(out, interval_s=10, max_lines=5, clock=clock)
    for i in range(100_000):
        limiter.record(f"c{i}", "kafka_bad_request")
        limiter.connection_closed(f"c{i}")
    assert len(out.lines) == 5
    clock.now = 10
    limiter.record("late", "bad_frame")
    event, fields = out.lines[5]
    assert event == "bad_requests_not_logged" and fields["counts"] == {"kafka_bad_request": 99_995}
    assert limiter.lines == len(out.lines) == 7


def test_unreported_counts_of_a_closed_connection_reach_the_summary():
    out, clock = _Lines(), _Clock()
    limiter = BadRequestLog(out, interval_s=10, max_lines=5, clock=clock)
    for _ in range(50):
        limiter.record("c1", "bad_request")
    limiter.connection_closed("c1")
    limiter.close()
    assert out.lines[-1][0] == "bad_requests_not_logged"
    assert out.lines[-1][1]["counts"] == {"bad_request": 49}


# ---- request memory and frames that grow as bytes arrive ---------------------------------------

from broker.net.connection_limits import ConnectionLimits, parse_overrides  # noqa: E402
from broker.net.request_memory import RequestMemory, give_back_memory  # noqa: E402
from protocol.framing import INITIAL_FRAME_BYTES, WHOLE_FRAME_BYTES, FramePool, FrameReader, ScratchBuffers  # noqa: E402


def test_announced_frame_buffer_grows_with_what_arrives():
    reader = FrameReader(max_frame_bytes=200 << 20)
    reader.feed(struct.pack(">ih", 100 << 20, 0) + b"x" * 1000)
    assert reader.next_frame() is None
    assert len(reader.get_buffer()) == INITIAL_FRAME_BYTES - 1002  # not 100 MB
    reader.feed(b"y" * INITIAL_FRAME_BYTES)
    assert len(reader.get_buffer()) == 2 * INITIAL_FRAME_BYTES - 1002 - INITIAL_FRAME_BYTES


def test_a_frame_of_up_to_one_mib_gets_its_whole_buffer_at_once():
    """The clients' default produce requests are received without a growth copy."""
    reader = FrameReader()
    reader.feed(struct.pack(">ih", WHOLE_FRAME_BYTES, 0) + b"x" * 1000)
    assert reader.next_frame() is None
    assert len(reader.get_buffer()) == WHOLE_FRAME_BYTES - 1002


def test_grown_frame_is_whole_and_exact():
    payload = bytes(range(256)) * 8200  # ~2 MiB: grows 256 KiB -> 512 KiB -> 1 MiB -> 2 MiB
    for pool in (None, FramePool()):
        reader = FrameReader(pool=pool)
        wire = struct.pack(">i", len(payload) + 2) + b"\x00\x01" + payload
        for at in range(0, len(wire), 70_000):
            reader.feed(wire[at:at + 70_000])
        frame = reader.next_frame()
        assert len(frame) == len(payload) + 2 and bytes(frame[2:]) == payload


def test_frames_reserve_their_announced_size_and_wait_when_the_pool_is_spent():
    memory = RequestMemory(1 << 20)
    first, second = FrameReader(memory=memory), FrameReader(memory=memory)
    first.feed(struct.pack(">ih", 3 << 20, 0) + b"a" * 100)  # non-strict, as Kafka: room left, taken
    assert first.next_frame() is None and memory.used == 3 << 20 and not first.waiting_for_memory
    second.feed(struct.pack(">ih", 100_000, 0) + b"b" * 100)
    assert second.next_frame() is None and second.waiting_for_memory
    woken = []
    memory.wait(lambda: woken.append(second.retry_memory()))
    first.feed(b"a" * ((3 << 20) - 102))  # a frame once begun always completes
    assert len(first.next_frame()) == 3 << 20
    memory.release(first.take_reserved())
    assert woken == [True] and memory.used == 100_000 and second.reserved_in_progress == 100_000


class LentScratch(ScratchBuffers):
    """ScratchBuffers that count the buffers lent and not yet given back."""

    def __init__(self) -> None:
        super().__init__(keep=1)
        self.lent = 0

    def take(self, size: int):
        self.lent += 1
        return super().take(size)

    def give(self, buf, view) -> None:
        self.lent -= 1
        super().give(buf, view)


def test_small_frames_take_no_pool_memory_and_idle_readers_hold_no_scratch():
    memory = RequestMemory(10)
    scratch = LentScratch()
    reader = FrameReader(memory=memory, scratch=scratch)
    reader.feed(struct.pack(">ih", 4, 1) + b"zz")
    assert bytes(reader.next_frame()) == b"\x00\x01zz" and reader.next_frame() is None
    assert memory.used == 0 and scratch.lent == 0  # given back once empty


def test_unbounded_memory_and_trim():
    memory = RequestMemory(-1)
    assert memory.reserve(1 << 40) and memory.available
    give_back_memory()  # glibc: malloc_trim(0); elsewhere a no-op


def test_connection_limits_per_ip_overrides_and_total():
    limits = ConnectionLimits(max_connections=4, max_per_ip=1, overrides="127.0.0.1:3, [::1]:0")
    assert limits.admit("10.0.0.1") is None
    assert "max.connections.per.ip 1" in limits.admit("10.0.0.1")
    assert [limits.admit("127.0.0.1") for _ in range(3)] == [None, None, None]
    assert "max.connections.per.ip 3" in limits.admit("127.0.0.1")
    assert "max.connections.per.ip 0" in limits.admit("::1")
    assert "max.connections 4" in limits.admit("10.0.0.2")
    limits.release("127.0.0.1")
    assert limits.admit("10.0.0.2") is None and limits.total == 4


@pytest.mark.parametrize("text", ["nohost", "host:", "host:x", ":5"])
def test_bad_overrides(text):
    with pytest.raises(ValueError):
        parse_overrides(text)
