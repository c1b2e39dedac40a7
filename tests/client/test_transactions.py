"""The native client's isolation.level (issue 18): read_committed over FETCH version 2
stops at the last stable offset and drops aborted records and markers;
read_uncommitted sees every data record. Real broker (in-process, for the marker
writes), real sockets."""

from __future__ import annotations

import threading
import time

import pytest

from client import Consumer
from client.fetch import read_fetched
from kafka_format import build_batch
from tests.broker.inprocess import InProcessBroker
from tests.txn_topic import (
    COMMITTED,
    COMMITTED_AFTER_C,
    EVERYTHING,
    A,
    B,
    C,
    end_txn,
    native_bootstrap,
    txn_batch,
    write_txn_topic,
)


@pytest.fixture
def broker(tmp_path):
    running = InProcessBroker(tmp_path).start()
    try:
        yield running
    finally:
        running.stop()


def consume(bootstrap: str, topic: str, isolation: str, expected: int,
            partitions=(0, 1)) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    """Records per partition (polled until `expected` came, then one more poll) and positions."""
    got: dict[int, list[bytes]] = {p: [] for p in partitions}
    with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level=isolation, max_wait_ms=100) as consumer:
        consumer.assign(topic, partitions)
        for _ in range(100):
            for record in consumer.poll(200):
                got[record.partition].append(record.value)
            if sum(map(len, got.values())) >= expected:
                break
        for record in consumer.poll(300):  # nothing more comes
            got[record.partition].append(record.value)
        positions = {p: consumer.position(topic, p) for p in partitions}
    return got, positions


def test_read_committed_against_read_uncommitted(broker):
    topic = write_txn_topic(broker)
    bootstrap = native_bootstrap(broker)
    committed, positions = consume(bootstrap, topic, "read_committed", 4)
    assert committed == COMMITTED
    assert positions == {0: 6, 1: 2}  # partition 1 waits at the LSO: C is open from offset 2
    everything, positions = consume(bootstrap, topic, "read_uncommitted", 8)
    assert everything == EVERYTHING
    assert positions == {0: 6, 1: 6}
    single, _ = consume(bootstrap, topic, "read_committed", 3, partitions=(0,))  # one FETCH, no gather
    assert single == {0: COMMITTED[0]}

    end_txn(broker, topic, 1, C, commit=True)
    committed, positions = consume(bootstrap, topic, "read_committed", 6)
    assert committed == COMMITTED_AFTER_C and positions == {0: 6, 1: 7}


def test_latest_is_the_last_stable_offset_under_read_committed(broker):
    topic = write_txn_topic(broker)
    bootstrap = native_bootstrap(broker)
    for isolation, expected in (("read_committed", 2), ("read_uncommitted", 6)):
        with Consumer(bootstrap, isolation_level=isolation) as consumer:
            consumer.assign(topic, [1])
            assert consumer.position(topic, 1) == expected


def test_a_long_poll_at_the_lso_wakes_when_the_transaction_commits(broker):
    topic = write_txn_topic(broker)
    bootstrap = native_bootstrap(broker)
    with Consumer(bootstrap, isolation_level="read_committed", max_wait_ms=20_000) as consumer:
        consumer.assign(topic, [1])
        consumer.seek(topic, 1, 2)
        assert consumer.poll(0) == []  # at the LSO: nothing yet
        closer = threading.Timer(0.3, end_txn, (broker, topic, 1, C, True))
        closer.start()
        try:
            got = consumer.poll(20_000)
        finally:
            closer.join()
    assert [r.value for r in got] == [b"c1", b"p2"]


def test_unknown_isolation_level_is_refused():
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer("127.0.0.1:1", isolation_level="read_committed_please")


# ---- the aborted-transaction rule on fetched bytes (no broker) ----------------------------


def marker(pid: int, offset: int, commit: bool) -> bytes:
    from storage.txn_markers import TxnMarker, build_marker
    return build_marker(TxnMarker(pid, 0, 0, commit, int(time.time() * 1000)), offset)


def at(batch: bytes, offset: int) -> bytes:
    return offset.to_bytes(8, "big") + batch[8:]


def test_aborted_batches_are_dropped_and_a_later_transaction_of_the_producer_kept():
    data = b"".join([
        at(txn_batch(A, 0, b"x1"), 0), at(txn_batch(B, 0, b"y1"), 1), marker(A, 2, commit=False),
        at(build_batch([(None, b"plain")]), 3), at(txn_batch(A, 1, b"x2"), 4), marker(B, 5, commit=True),
        marker(A, 6, commit=True)])
    assert [r.value for r in read_fetched(data, 0).records] == [b"x1", b"y1", b"plain", b"x2"]
    fetched = read_fetched(data, 0, aborted=[(A, 0)])
    assert [r.value for r in fetched.records] == [b"y1", b"plain", b"x2"]  # A's second transaction committed
    assert fetched.next_offset == 7
    assert [r.value for r in read_fetched(data, 1, aborted=[(A, 0)]).records] == [b"y1", b"plain", b"x2"]
    assert [r.value for r in read_fetched(data, 0, aborted=[]).records] == [b"x1", b"y1", b"plain", b"x2"]
