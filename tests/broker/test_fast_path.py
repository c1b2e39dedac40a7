"""The connection fast path (a request answered straight from the socket callback while
the connection is idle) and inline appends: same answers and the same order as the
request task and the executor.

End-to-end tests run against the shared broker process; the ones that look at where
appends ran (`PartitionService.append_stats`) use the in-process broker
(tests/broker/inprocess.py). Nothing is mocked; the back-off test only lowers
SLOW_INLINE_APPEND_S so that any inline append counts as slow.
"""

from __future__ import annotations

import logging
import struct
import threading
import time

import pytest
import structlog
from structlog.testing import capture_logs

from broker.core import appends as appends_module
from broker.net import server as server_module
from kafka_format import build_batch, iter_records
from protocol import (
    CreateTopicRequest,
    ErrorCode,
    FetchRequest,
    FrameDecoder,
    OffsetsRequest,
    ProduceRequest,
    encode_request,
)
from tests.broker.conftest import batch
from tests.broker.inprocess import InProcessBroker
from tests.broker.wire import NativeClient


def values(message_set) -> list[bytes]:
    return [r.value for r in iter_records(bytes(message_set))]


def big_batch(tag: int) -> bytes:
    return build_batch([(None, bytes([tag]) * 100_000)])  # over INLINE_APPEND_MAX_BYTES, under 1 MiB


# ---- against the broker process ---------------------------------------------------------------

def test_a_produce_behind_a_long_poll_waits_for_its_turn(connect, new_topic):
    """The PRODUCE arrives while the connection's long poll is waiting: it must not be
    answered, nor appended, before the FETCH ahead of it is answered."""
    c = connect()
    topic = new_topic()
    c.send(FetchRequest(topic, 0, 0, 4096, 300))
    c.send(ProduceRequest(topic, 0, batch(b"after the poll")))
    fetched = c.recv()
    assert fetched.error == ErrorCode.NONE and fetched.message_set == b""  # it timed out: nothing came
    produced = c.recv()
    assert produced.error == ErrorCode.NONE and produced.base_offset == 0
    assert values(c.call(FetchRequest(topic, 0, 0, 4096, 0)).message_set) == [b"after the poll"]


def test_pipelined_small_and_large_produces_keep_their_order(connect, new_topic):
    c = connect()
    topic = new_topic()
    sent = []
    wire = []
    for i in range(40):
        value = (b"%d" % i) * (30_000 if i % 5 == 0 else 1)  # every fifth over 64 KiB
        sent.append(value)
        wire.append(encode_request(ProduceRequest(topic, 0, build_batch([(None, value)]))))
        c.pending.append(ProduceRequest.TYPE)
    c.sock.sendall(b"".join(wire))  # one burst: the broker reads many frames at a time
    assert [c.recv().base_offset for _ in sent] == list(range(len(sent)))
    fetched = []
    while len(fetched) < len(sent):
        fetched += values(c.call(FetchRequest(topic, 0, len(fetched), 4 << 20, 0)).message_set)
    assert fetched == sent


def test_a_burst_of_pipelined_produces_read_late_is_answered_whole_and_in_order(shared_broker, new_topic):
    """Thousands of tiny PRODUCEs in one burst, answered on the fast path while the
    client reads nothing yet: the answers pile up in the socket buffers (and, past
    the high-water mark, the broker stops answering and reading until they drain).
    None is lost, duplicated or reordered."""
    topic = new_topic()
    count = 5000
    request = encode_request(ProduceRequest(topic, 0, batch(b"x")))
    with NativeClient(shared_broker.host, shared_broker.port) as c:
        sender = threading.Thread(target=c.sock.sendall, args=(request * count,))
        sender.start()
        time.sleep(0.2)  # let answers accumulate unread (the assertions hold either way)
        decoder = FrameDecoder()
        offsets: list[int] = []
        while len(offsets) < count:
            chunk = c.sock.recv(1 << 20)
            assert chunk, "the broker closed the connection"
            decoder.feed(chunk)
            for frame in decoder.frames():
                error, offset = struct.unpack_from(">hq", frame)  # a PRODUCE answer: error, baseOffset, ...
                assert error == ErrorCode.NONE
                offsets.append(offset)
        sender.join()
        assert offsets == list(range(count))
        c.pending.append(OffsetsRequest.TYPE)
        c.sock.sendall(encode_request(OffsetsRequest(topic, 0, -1, 1)))
        assert c.recv().offsets == (count,)


def test_fetches_answered_at_once_say_what_the_task_would(connect, new_topic):
    c = connect()
    topic = new_topic()
    assert c.call(ProduceRequest(topic, 0, batch(b"a", b"b"))).base_offset == 0
    assert values(c.call(FetchRequest(topic, 0, 1, 4096, 0)).message_set) == [b"a", b"b"]  # the whole batch
    assert c.call(FetchRequest(topic, 0, 2, 4096, 0)).message_set == b""  # at the end, no wait
    assert c.call(FetchRequest(topic, 0, 3, 4096, 0)).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert c.call(FetchRequest("no-such-topic", 0, 0, 4096, 0)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(FetchRequest(topic, 7, 0, 4096, 0)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(FetchRequest(topic, 0, 0, -1, 0)).error == ErrorCode.INVALID_REQUEST


# ---- in-process: where appends ran -------------------------------------------------------------

@pytest.fixture
def inprocess(tmp_path):
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    b = InProcessBroker(tmp_path).start()
    try:
        yield b
    finally:
        b.stop()
        structlog.configure(**saved)


def pipeline(client: NativeClient, requests) -> list:
    client.sock.sendall(b"".join(encode_request(r) for r in requests))
    for r in requests:
        client.pending.append(r.TYPE)
    return [client.recv() for _ in requests]


def test_appends_up_to_1_mib_run_inline_unless_an_fsync_is_due(inprocess):
    stats = inprocess.app.partitions.append_stats
    with NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("plain", 1)).error == ErrorCode.NONE
        assert c.call(CreateTopicRequest("synced", 1, (("flush.messages", "2"),))).error == ErrorCode.NONE
        answers = pipeline(c, [ProduceRequest("plain", 0, big_batch(i)) for i in range(6)]
                           + [ProduceRequest("plain", 0, batch(b"small"))])
        assert [a.base_offset for a in answers] == list(range(7))
        assert (stats.inline, stats.executor) == (7, 0)
        answers = pipeline(c, [ProduceRequest("synced", 0, big_batch(1)), ProduceRequest("synced", 0, batch(b"s"))])
        assert [a.base_offset for a in answers] == [0, 1]
        assert (stats.inline, stats.executor, stats.backoffs) == (7, 2, 0)
    assert inprocess.server.stats.begun_early == 0  # nothing went through an appender streak


def test_a_fetch_too_big_for_the_socket_read_late_arrives_whole_before_the_next_answer(inprocess):
    """The fast path sendfiles what the socket takes; the rest of the FETCH goes to the
    request task, and the PRODUCE pipelined behind it is answered only after it."""
    stats = inprocess.server.stats
    blocked_before = server_module.sendfile_stats.would_block
    count = 24  # ~24 MiB: more than loopback's socket buffers hold
    with NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("big", 1)).error == ErrorCode.NONE
        for i in range(count):
            one = build_batch([(None, bytes([i]) * 1000) for _ in range(1000)])
            assert c.call(ProduceRequest("big", 0, one)).base_offset == i * 1000
        answered = stats.answered_at_once
        c.send(FetchRequest("big", 0, 0, 50 << 20, 0))
        c.send(ProduceRequest("big", 0, batch(b"behind the fetch")))
        time.sleep(0.3)  # read nothing yet: the socket buffers fill up
        fetched = c.recv()
        assert fetched.error == ErrorCode.NONE
        assert values(fetched.message_set) == [bytes([i]) * 1000 for i in range(count) for _ in range(1000)]
        assert c.recv().base_offset == count * 1000
    # The FETCH began on the fast path (the PRODUCE too if reading had paused until the
    # FETCH was sent: then the connection was idle again when it was read).
    assert stats.answered_at_once >= answered + 1
    assert server_module.sendfile_stats.would_block > blocked_before  # the socket did fill up


def test_fetches_with_data_are_answered_at_once_and_long_polls_wait_on_the_task(inprocess):
    stats = inprocess.server.stats
    with NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("polled", 1)).error == ErrorCode.NONE
        assert c.call(ProduceRequest("polled", 0, batch(b"one"))).base_offset == 0
        before = stats.answered_at_once
        assert values(c.call(FetchRequest("polled", 0, 0, 4096, 500)).message_set) == [b"one"]
        assert stats.answered_at_once == before + 1
        c.send(FetchRequest("polled", 0, 1, 4096, 5000))  # at the end: a long poll, on the task
        time.sleep(0.1)
        assert stats.answered_at_once == before + 1
        with NativeClient(*inprocess.address) as other:
            assert other.call(ProduceRequest("polled", 0, batch(b"two"))).base_offset == 1
        assert values(c.recv().message_set) == [b"two"]  # woken by the append


def test_a_slow_inline_append_sends_large_appends_to_the_executor_for_a_while(inprocess, monkeypatch):
    monkeypatch.setattr(appends_module, "SLOW_INLINE_APPEND_S", 0.0)  # every inline append is "slow"
    stats = inprocess.app.partitions.append_stats
    with capture_logs() as logs, NativeClient(*inprocess.address) as c:
        assert c.call(CreateTopicRequest("slow", 1)).error == ErrorCode.NONE
        assert c.call(ProduceRequest("slow", 0, big_batch(0))).base_offset == 0  # inline, then the back-off
        assert (stats.inline, stats.executor, stats.backoffs) == (1, 0, 1)
        answers = pipeline(c, [ProduceRequest("slow", 0, big_batch(i)) for i in (1, 2, 3)])
        assert [a.base_offset for a in answers] == [1, 2, 3]
        assert (stats.inline, stats.executor) == (1, 3)  # large ones: the executor, in order
        assert c.call(ProduceRequest("slow", 0, batch(b"small"))).base_offset == 4  # small: still inline
        assert (stats.inline, stats.executor, stats.backoffs) == (2, 3, 1)  # one warning per back-off
        fetched = c.call(FetchRequest("slow", 0, 0, 4 << 20, 0)).message_set
    assert [v[:1] for v in values(fetched)] == [b"\x00", b"\x01", b"\x02", b"\x03", b"s"]
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["inline_append_slow"]
