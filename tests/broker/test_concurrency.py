"""Many connections at once, and a client that stops reading."""

from __future__ import annotations

import socket
import threading
import time

from kafka_format import iter_records
from protocol import (
    CreateTopicRequest,
    ErrorCode,
    FetchRequest,
    MetadataRequest,
    OffsetsRequest,
    ProduceRequest,
    encode_request,
)
from tests.broker.conftest import batch
from tests.broker.wire import NativeClient

CONNECTIONS = 200
PRODUCES_PER_CONNECTION = 5


def test_200_connections_produce_to_one_partition_without_loss_or_duplicates(shared_broker, connect, new_topic):
    topic = new_topic()
    clients = [NativeClient(shared_broker.host, shared_broker.port) for _ in range(CONNECTIONS)]
    try:
        # Every connection is open before anyone produces: 200 live connections at once.
        for c in clients:
            assert c.call(MetadataRequest([topic])).error == ErrorCode.NONE
        start = threading.Barrier(CONNECTIONS)
        acked: dict[int, list[int]] = {}
        errors: list[BaseException] = []

        def produce(index: int, c: NativeClient) -> None:
            try:
                start.wait(60)
                offsets = []
                for j in range(PRODUCES_PER_CONNECTION):
                    response = c.call(ProduceRequest(topic, 0, batch(b"%d:%d" % (index, j))))
                    assert response.error == ErrorCode.NONE
                    offsets.append(response.base_offset)
                acked[index] = offsets
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=produce, args=(i, c)) for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:3]
    finally:
        for c in clients:
            c.close()
    total = CONNECTIONS * PRODUCES_PER_CONNECTION
    every_offset = sorted(o for offsets in acked.values() for o in offsets)
    assert every_offset == list(range(total))  # no offset lost or given twice
    c = connect()
    assert c.call(OffsetsRequest(topic, 0, -1, 1)).offsets == (total,)
    records = []
    offset = 0
    while offset < total:
        fetched = c.call(FetchRequest(topic, 0, offset, 1 << 20, 0))
        chunk = list(iter_records(bytes(fetched.message_set)))
        records += chunk
        offset = chunk[-1].offset + 1
    assert [r.offset for r in records] == list(range(total))
    by_value = {r.value: r.offset for r in records}
    assert len(by_value) == total  # no duplicates
    for index, offsets in acked.items():
        # What each connection was told is what the log holds, in its own order.
        assert [by_value[b"%d:%d" % (index, j)] for j in range(PRODUCES_PER_CONNECTION)] == offsets
        assert offsets == sorted(offsets)


def test_a_client_that_stops_reading_is_throttled_not_buffered(shared_broker, connect, new_topic):
    """A client pipelines FETCHes of ~1 MB and reads nothing. Once the socket buffers
    are full the broker must stop reading its requests (flow control), so the client's
    non-blocking sends start failing after a bounded amount; without flow control the
    broker would keep reading, queueing and answering into memory forever."""
    topic = new_topic()
    producer = connect()
    for _ in range(4):
        assert producer.call(ProduceRequest(topic, 0, batch(b"x" * 250_000))).error == ErrorCode.NONE
    request = encode_request(FetchRequest(topic, 0, 0, 1 << 20, 0))
    rss_before = _rss_kb(shared_broker.pid)
    slow = socket.create_connection(shared_broker.address)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    slow.setblocking(False)
    sent = 0
    stalled_since = None
    deadline = time.monotonic() + 60  # a guard: the stall comes long before
    limit = 2_000_000 * len(request)  # ~2 TB of answers: flow control must stop us long before
    while sent < limit and time.monotonic() < deadline:
        try:
            sent += slow.send(request * 64)
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 1.0:  # stayed blocked: the broker stopped reading
                break
            time.sleep(0.01)
    requests_sent = sent // len(request)
    assert stalled_since is not None, f"the broker kept reading: {requests_sent} requests accepted"
    # Everyone else is served while the slow client is stuck.
    other = connect()
    assert other.call(MetadataRequest([topic])).topics[0].partitions[0].log_end_offset == 4
    # The broker did not hold the answers in memory: each is ~1 MB, and it accepted
    # far more requests than its memory grew in MB.
    grown_mb = (_rss_kb(shared_broker.pid) - rss_before) / 1024
    assert grown_mb < 64, f"broker RSS grew by {grown_mb:.0f} MB for {requests_sent} pending fetches"
    assert requests_sent > 64  # (sanity: the stall is flow control, not a tiny buffer)
    slow.close()
    assert other.call(CreateTopicRequest(topic + "-after", 1)).error == ErrorCode.NONE


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")
