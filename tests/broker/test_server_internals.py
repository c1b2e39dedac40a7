"""The server's own state, observed in-process: zero-copy FETCH and flow-control bounds.

The broker runs in a thread of the test process (tests/broker/inprocess.py) so the
tests can read `broker.net.server.sendfile_stats` (counted at the one os.sendfile call)
and each connection's queue and write buffer. Nothing is mocked.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
import structlog

from broker.core import appends as appends_module
from broker.net import server as server_module
from kafka_format import build_batch, iter_records
from protocol import (
    CreateTopicRequest,
    ErrorCode,
    FetchItem,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    OffsetsRequest,
    ProduceRequest,
    encode_request,
)
from tests.broker.inprocess import InProcessBroker
from tests.broker.wire import NativeClient

MAX_QUEUED = 4
WRITE_HIGH = 64 * 1024
RECORD = b"r" * 100_000


@pytest.fixture
def inprocess(tmp_path):
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    b = InProcessBroker(tmp_path, f"connection.max.queued.requests={MAX_QUEUED}",
                        f"connection.write.buffer.bytes={WRITE_HIGH}").start()
    try:
        yield b
    finally:
        b.stop()
        structlog.configure(**saved)


def fill(b, topic: str, batches: int) -> int:
    """`batches` batches of 5 x 100 kB; returns the log size in bytes."""
    with NativeClient(*b.address) as c:
        assert c.call(CreateTopicRequest(topic, 1)).error == ErrorCode.NONE
        size = 0
        for _ in range(batches):
            data = build_batch([(None, RECORD)] * 5)
            assert c.call(ProduceRequest(topic, 0, data)).error == ErrorCode.NONE
            size += len(data)
    return size


def test_fetch_bytes_go_out_with_sendfile(inprocess):
    size = fill(inprocess, "zero", 40)  # ~20 MB
    stats = server_module.sendfile_stats
    before = stats.as_dict()
    fetched = 0
    with NativeClient(*inprocess.address) as c:
        offset = 0
        while offset < 200:
            response = c.call(FetchRequest("zero", 0, offset, 4 << 20, 0))
            records = list(iter_records(bytes(response.message_set)))
            fetched += len(response.message_set)
            offset = records[-1].offset + 1
        multi = c.call(MultiFetchRequest([FetchItem("zero", 0, 0, 1 << 20), FetchItem("zero", 0, 100, 1 << 20)]))
        fetched += sum(len(i.message_set) for i in multi.items)
    after = stats.as_dict()
    sent_zero_copy = after["bytes"] - before["bytes"]
    copied = after["copied_bytes"] - before["copied_bytes"]
    assert fetched >= size
    assert sent_zero_copy + copied == fetched  # every message-set byte went one of the two ways
    share = sent_zero_copy / fetched
    print(f"\nzero-copy share {share:.1%}: sendfile {sent_zero_copy} B in "
          f"{after['calls'] - before['calls']} calls, copied {copied} B in "
          f"{after['copied_writes'] - before['copied_writes']} writes after "
          f"{after['would_block'] - before['would_block']} EAGAINs")
    # Only a 16 KiB piece per stall is copied; the rest is sendfile.
    assert copied <= (after["would_block"] - before["would_block"]) * server_module.SENDFILE_FALLBACK_CHUNK
    assert share > 0.5


def test_a_stalled_reader_holds_bounded_state_and_recovers(inprocess):
    fill(inprocess, "slow", 8)  # ~4 MB
    fetch = encode_request(FetchRequest("slow", 0, 0, 1 << 20, 0))
    count = 48
    slow = socket.create_connection(inprocess.address)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    slow.sendall(fetch * count)  # tiny requests: they all fit the socket buffers at once

    def snapshot():
        conns = list(inprocess.server.connections)
        return [(c.in_flight, len(c.queue), c.reading, c.transport.get_write_buffer_size(), c.decoder.buffered)
                for c in conns]

    deadline = time.monotonic() + 30  # a guard
    while time.monotonic() < deadline:
        state = inprocess.call_in_loop(snapshot)
        if state and not state[0][2]:  # the broker stopped reading from it
            break
        time.sleep(0.02)
    else:
        raise AssertionError(f"reading never paused: {state}")
    for _ in range(10):  # and it stays bounded while the client sleeps
        (in_flight, queued, reading, write_buffer, undecoded), = inprocess.call_in_loop(snapshot)
        assert in_flight <= MAX_QUEUED and queued <= MAX_QUEUED
        assert write_buffer <= WRITE_HIGH + server_module.SENDFILE_FALLBACK_CHUNK
        assert not reading
        time.sleep(0.02)
    assert inprocess.server.stats.read_pauses >= 1
    # Another connection is served meanwhile.
    with NativeClient(*inprocess.address) as other:
        assert other.call(FetchRequest("slow", 0, 0, 100, 0)).error == ErrorCode.NONE
    # Now read everything: every answer arrives, whole and in order.
    slow.settimeout(30)
    client = NativeClient.__new__(NativeClient)
    client.sock, client.decoder, client.pending = slow, __import__("protocol").FrameDecoder(2**31 - 1), \
        __import__("collections").deque([1] * count)
    for _ in range(count):
        response = client.recv()
        assert response.error == ErrorCode.NONE and len(response.message_set) > 900_000
    slow.close()
    deadline = time.monotonic() + 30
    while inprocess.call_in_loop(lambda: len(inprocess.server.connections)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert inprocess.call_in_loop(lambda: len(inprocess.server.connections)) == 0


def test_an_unexpected_failure_answers_unknown_server_error_and_keeps_the_connection(inprocess):
    handlers = inprocess.app.handlers

    async def broken(request, session):
        raise RuntimeError("a bug")

    # A handler that fails as a bug would: swapped into the request type's dispatch entry,
    # which Handlers builds once and offers no public way to replace.
    dispatch = handlers._dispatch  # noqa: SLF001
    original = dispatch[MetadataRequest]
    dispatch[MetadataRequest] = broken
    try:
        with NativeClient(*inprocess.address) as c:
            assert c.call(MetadataRequest()).error == ErrorCode.UNKNOWN_SERVER_ERROR
            assert c.call(CreateTopicRequest("still-fine", 1)).error == ErrorCode.NONE
    finally:
        dispatch[MetadataRequest] = original


# ---- large PRODUCEs: received into pooled buffers, streamed through the partition's appender ----

def big_batch(tag: int) -> bytes:
    return build_batch([(None, bytes([tag]) * 100_000)])  # over INLINE_APPEND_MAX_BYTES


@pytest.fixture
def executor_appends(monkeypatch):
    """Appends over INLINE_APPEND_MAX_BYTES go to the executor (as during an inline
    back-off), so big_batch() PRODUCEs stream through the partition's appender."""
    monkeypatch.setattr(appends_module, "LARGE_INLINE_APPEND_MAX_BYTES", appends_module.INLINE_APPEND_MAX_BYTES)


def test_pipelined_large_produces_are_begun_early_and_answered_in_order(inprocess, executor_appends):
    with NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("stream", 2)).error == ErrorCode.NONE
        requests = [ProduceRequest("stream", 0, big_batch(1)), ProduceRequest("stream", 0, big_batch(2)),
                    ProduceRequest("stream", 0, big_batch(3)),
                    ProduceRequest("stream", 1, big_batch(4)),  # another partition: a new streak
                    FetchRequest("stream", 0, 0, 10 << 20, 0),  # sees the three appends before it
                    ProduceRequest("stream", 0, build_batch([(None, b"small")])),  # inline
                    ProduceRequest("stream", 0, big_batch(5)), ProduceRequest("stream", 0, big_batch(6)),
                    OffsetsRequest("stream", 0, -1, 1)]
        c.sock.sendall(b"".join(encode_request(r) for r in requests))  # all at once: pipelined
        for r in requests:
            c.pending.append(r.TYPE)
        answers = [c.recv() for _ in requests]
    assert all(a.error == ErrorCode.NONE for a in answers)
    assert [a.base_offset for a in answers[:4]] == [0, 1, 2, 0]
    fetched = [r.value for r in iter_records(answers[4].message_set)]
    assert [v[:1] for v in fetched] == [b"\x01", b"\x02", b"\x03"]
    assert [a.base_offset for a in answers[5:8]] == [3, 4, 5]
    assert answers[8].offsets == (6,)
    # Begun before their turn: the 2nd and 3rd PRODUCE of the first streak and the
    # 2nd of the last one (whatever the timing: queued behind a begun one, or read
    # while the streak lasts).
    assert inprocess.server.stats.begun_early == 3
    with NativeClient(*inprocess.address) as c:
        fetched = c.call(FetchRequest("stream", 0, 0, 10 << 20, 0)).message_set
    assert [r.value[:1] for r in iter_records(fetched)] == [b"\x01", b"\x02", b"\x03", b"s", b"\x05", b"\x06"]


def test_a_failed_append_in_a_streak_answers_its_error_and_the_rest_goes_on(inprocess, executor_appends):
    good = big_batch(7)
    corrupt = bytearray(big_batch(8))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches: nothing of it may reach the log
    with NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("streak-error", 1)).error == ErrorCode.NONE
        requests = [ProduceRequest("streak-error", 0, good), ProduceRequest("streak-error", 0, bytes(corrupt)),
                    ProduceRequest("streak-error", 0, good), ProduceRequest("nowhere", 0, good)]
        c.sock.sendall(b"".join(encode_request(r) for r in requests))
        for r in requests:
            c.pending.append(r.TYPE)
        answers = [c.recv() for _ in requests]
        assert [a.error for a in answers] == [ErrorCode.NONE, ErrorCode.CORRUPT_MESSAGE, ErrorCode.NONE,
                                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert [answers[0].base_offset, answers[2].base_offset] == [0, 1]
        assert c.call(OffsetsRequest("streak-error", 0, -1, 1)).offsets == (2,)


def test_a_large_frame_split_across_many_reads_is_whole(inprocess):
    with NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("split", 1)).error == ErrorCode.NONE
        wire = encode_request(ProduceRequest("split", 0, big_batch(9)))
        for pos in (0, 2, 7, 1000, 50_000, len(wire) - 1):  # pauses let each piece arrive alone
            end = next(p for p in (2, 7, 1000, 50_000, len(wire) - 1, len(wire)) if p > pos)
            c.sock.sendall(wire[pos:end])
            time.sleep(0.01)
        c.pending.append(ProduceRequest.TYPE)
        assert c.recv().base_offset == 0
        fetched = c.call(FetchRequest("split", 0, 0, 1 << 20, 0)).message_set
    assert [r.value for r in iter_records(fetched)] == [bytes([9]) * 100_000]


@pytest.mark.parametrize("path", ["inline", "executor"])
def test_a_flood_of_large_produces_holds_bounded_state_and_is_answered_in_order(inprocess, path, monkeypatch):
    if path == "executor":
        monkeypatch.setattr(appends_module, "LARGE_INLINE_APPEND_MAX_BYTES", appends_module.INLINE_APPEND_MAX_BYTES)
    with NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("flood", 1)).error == ErrorCode.NONE
    count = 100
    wire = encode_request(ProduceRequest("flood", 0, big_batch(1)))
    flood = socket.create_connection(inprocess.address)
    sender = threading.Thread(target=flood.sendall, args=(wire * count,))
    sender.start()

    def snapshot():
        return [(conn.in_flight, conn.decoder.buffered, inprocess.server.frame_pool.pooled_bytes)
                for conn in inprocess.server.connections]

    while sender.is_alive():
        for in_flight, buffered, pooled in inprocess.call_in_loop(snapshot):
            assert in_flight <= MAX_QUEUED
            assert buffered <= 2 * len(wire)  # one socket read + the frame being received
            assert pooled <= 16 << 20
        time.sleep(0.005)
    sender.join()
    flood.settimeout(30)
    client = NativeClient.__new__(NativeClient)
    client.sock, client.decoder, client.pending = flood, __import__("protocol").FrameDecoder(2**31 - 1), \
        __import__("collections").deque([ProduceRequest.TYPE] * count)
    assert [client.recv().base_offset for _ in range(count)] == list(range(count))
    flood.close()
    stats = inprocess.app.partitions.append_stats
    assert (stats.inline, stats.executor) == ((count, 0) if path == "inline" else (0, count))
