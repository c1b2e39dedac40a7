"""SharePartitionManager (broker/share/manager.py) over real logs: a topic's data
log read as a ShareFetch reads it, the share state in `__share_group_state`, a
restart, read_committed over real transactions, and kill -9 during a
consumer's life."""

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from broker.share.config import resolve
from broker.share.errors import INVALID_RECORD_STATE, UNKNOWN_TOPIC_OR_PARTITION, ShareError
from broker.share.log_view import StorageShareLog
from broker.share.manager import SharePartitionManager
from broker.share.partition import AckBatch, AckType, AcquiredRecords, RecordState
from broker.share.session import TopicIdPartition
from broker.share.state_store import ShareStateStore
from kafka_format import build_batch
from storage.clock import ManualClock
from storage.config import LogConfig
from storage.log import Log

from .test_state_store import Logs

NOW = 1_700_000_000_000
TOPIC_ID = uuid.UUID(int=99)
TP = TopicIdPartition(TOPIC_ID, 0)


class Broker:
    """A topic partition's data log, the state logs, and a manager over them (reopened as after kill -9)."""

    def __init__(self, root, group_configs=None, clock=None):
        self.root, self.clock = str(root), clock or ManualClock(NOW)
        self.group_configs = group_configs or {"share.auto.offset.reset": "earliest"}
        self.open()

    def crash_point(self, step):
        """Called by the state store at each step of a write; a test replaces it."""

    def open(self):
        self.data = Log.open(os.path.join(self.root, "t-0"), "t", 0, LogConfig(), had_clean_shutdown=False,
                             clock=self.clock)
        self.state_logs = Logs(os.path.join(self.root, "state"))
        os.makedirs(self.state_logs.root, exist_ok=True)
        self.store = ShareStateStore(self.state_logs.get, 3, now_ms=self.clock.time_ms,
                                     crash_point=lambda step: self.crash_point(step))
        self.store.load(self.state_logs.existing())
        self.share_log = StorageShareLog(self.data)
        self.manager = SharePartitionManager(
            self.store, lambda topic_id, p: self.share_log if (topic_id, p) == (TOPIC_ID, 0) else None,
            lambda group: resolve({}, self.group_configs), self.clock.time_ms)

    def close(self):
        self.data.close()
        self.state_logs.close()

    def restart(self):
        self.close()
        self.open()

    def produce(self, n, **kw):
        self.data.append(build_batch([(b"k", b"v%d" % i, self.clock.time_ms()) for i in range(n)], **kw))

    def fetch(self, member, group="g", max_records=500):
        sp = self.manager.share_partition(group, TP)
        _, read = self.share_log.read(sp.next_fetch_offset(), 1 << 20, sp.read_committed)
        return self.manager.acquire(group, member, TP, read, max_records)

    def flush(self):
        """Take, write and settle one round of state writes, as the share-state writer
        does; the first failure is raised."""
        round_ = self.manager.write(self.manager.take_writes())
        self.manager.settle(round_)
        for error in round_.failures.values():
            raise error

    def ack(self, member, first, last, ack, group="g"):
        try:
            self.manager.apply_acknowledgements(group, member, TP, [AckBatch(first, last, [int(ack)])])
        finally:
            self.flush()

    def expire(self):
        """The lock timeouts due now, applied and written; how many records."""
        def timeouts():
            return sum(counters.lock_timeouts for _, counters in self.manager.counters())

        before = timeouts()
        self.manager.apply_timeouts()
        self.flush()
        return timeouts() - before

    def release_member(self, group, member):
        released = self.manager.release(group, member)
        self.flush()
        return released


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    b.close()


def test_work_queue_shared_by_two_members_survives_a_restart(broker):
    broker.produce(3)
    broker.produce(3)
    assert broker.fetch("m1", max_records=3) == [AcquiredRecords(0, 2, 1)]
    assert broker.fetch("m2") == [AcquiredRecords(3, 5, 1)]
    broker.ack("m1", 0, 1, AckType.ACCEPT)
    broker.ack("m1", 2, 2, AckType.RELEASE)
    broker.ack("m2", 4, 4, AckType.REJECT)
    assert broker.fetch("m2") == [AcquiredRecords(2, 2, 2)]
    sp = broker.manager.share_partition("g", TP)
    assert (sp.start_offset, sp.end_offset) == (2, 5)
    broker.restart()
    # 0, 1 accepted and 4 rejected stay done; 2 (released, then acquired again), 3 and 5
    # (acquired, never acknowledged) are delivered again; 2 keeps its delivery count.
    assert broker.fetch("m3") == [AcquiredRecords(2, 2, 2), AcquiredRecords(3, 3, 1), AcquiredRecords(5, 5, 1)]
    with pytest.raises(ShareError) as e:
        broker.ack("m1", 2, 2, AckType.ACCEPT)  # m1's acquisitions did not survive the restart
    assert e.value.code == INVALID_RECORD_STATE
    broker.ack("m3", 2, 3, AckType.ACCEPT)
    broker.ack("m3", 5, 5, AckType.ACCEPT)
    assert broker.manager.share_partition("g", TP).start_offset == 6
    state, lag = broker.manager.summary("g", TP)
    assert (state.start_offset, lag) == (6, 0)
    broker.produce(4)
    assert broker.manager.summary("g", TP)[1] == 4


def test_lock_timeouts_are_written_and_the_poison_record_is_archived(tmp_path):
    clock = ManualClock(NOW)
    b = Broker(tmp_path, {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "2",
                          "share.record.lock.duration.ms": "15000"}, clock)
    try:
        b.produce(1)
        for attempt in (1, 2):
            assert b.fetch("m") == [AcquiredRecords(0, 0, attempt)]
            clock.advance(15_000)
            assert b.manager.next_deadline() == clock.time_ms()
            assert b.expire() == 1
        b.restart()
        assert b.manager.share_partition("g", TP).start_offset == 1  # archived: never delivered again
        assert b.fetch("m") == []
    finally:
        b.close()


def test_latest_and_by_duration_start_offsets(tmp_path):
    clock = ManualClock(NOW)
    b = Broker(tmp_path, {"share.auto.offset.reset": "latest"}, clock)
    try:
        b.produce(3)
        clock.advance(3_600_000)
        b.produce(2)  # offsets 3, 4 an hour later
        assert b.manager.share_partition("g", TP).start_offset == 5
        b.group_configs = {"share.auto.offset.reset": "by_duration:PT30M"}
        assert b.manager.share_partition("g2", TP).start_offset == 3
        b.group_configs = {"share.auto.offset.reset": "earliest"}
        assert b.manager.share_partition("g3", TP).start_offset == 0
        b.restart()  # each group keeps its stored SPSO whatever the reset is now
        assert [b.manager.share_partition(g, TP).start_offset for g in ("g", "g2", "g3")] == [5, 3, 0]
    finally:
        b.close()


def txn(pid, seq, n):
    return build_batch([(b"k", b"t%d" % i, NOW) for i in range(n)], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=True)


def test_read_committed_stops_at_the_lso_and_skips_aborted_records(tmp_path):
    b = Broker(tmp_path, {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"})
    try:
        b.produce(2)                    # 0-1
        b.data.append(txn(1, 0, 2))     # 2-3, producer 1: aborted below
        b.data.append(txn(2, 0, 2))     # 4-5, producer 2: still open
        assert b.fetch("m") == [AcquiredRecords(0, 1, 1)]  # the LSO is 2
        b.data.append_txn_marker(1, 0, 0, commit=False)  # 6
        b.data.append_txn_marker(2, 0, 0, commit=True)   # 7
        b.produce(1)                    # 8
        assert b.fetch("m") == [AcquiredRecords(4, 5, 1), AcquiredRecords(8, 8, 1)]
        sp = b.manager.share_partition("g", TP)
        assert sp.state_of(2) == (RecordState.ARCHIVED, 1) and sp.state_of(6) == (RecordState.ARCHIVED, 1)
        b.ack("m", 0, 1, AckType.ACCEPT)
        b.ack("m", 4, 5, AckType.ACCEPT)
        b.ack("m", 8, 8, AckType.ACCEPT)
        assert sp.start_offset == 9
    finally:
        b.close()


def test_offsets_apis_and_unknown_partitions(broker):
    broker.produce(5)
    broker.fetch("m")
    broker.manager.alter_start_offset("g", TP, 3)
    state, _ = broker.manager.summary("g", TP)
    assert (state.start_offset, state.state_epoch) == (3, 1)
    assert broker.fetch("m2") == [AcquiredRecords(3, 4, 1)]
    broker.manager.delete_state("g", TP)
    assert broker.manager.summary("g", TP) == (None, -1)
    with pytest.raises(ShareError) as e:
        broker.manager.share_partition("g", TopicIdPartition(uuid.UUID(int=5), 0))
    assert e.value.code == UNKNOWN_TOPIC_OR_PARTITION


def test_releasing_a_member(broker):
    broker.produce(4)
    broker.fetch("m1", max_records=2)
    assert broker.release_member("g", "m1") == 4  # one batch of 4 was acquired whole
    assert broker.fetch("m2") == [AcquiredRecords(0, 3, 2)]


# ---- kill -9 while a consumer works ------------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from tests.broker.share.test_manager import Broker, consumer_life
    crash_at, root = int(sys.argv[1]), sys.argv[2]
    b = Broker(root)
    steps = [0]
    def crash_point(step):
        steps[0] += 1
        if steps[0] == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
    b.crash_point = crash_point
    consumer_life(b, lambda msg: print(msg, flush=True))
    print("done", flush=True)
""")


def consumer_life(b, answered):
    """A consumer fetches the 20 records 5 at a time and accepts all but the first of
    each batch, which it rejects; each answered acknowledgement is reported."""
    for _ in range(4):
        got = b.fetch("m", max_records=5)
        first, last = got[0].first_offset, got[-1].last_offset
        b.ack("m", first, first, AckType.REJECT)
        answered(f"rejected:{first}")
        b.ack("m", first + 1, last, AckType.ACCEPT)
        answered(f"accepted:{first + 1}-{last}")


@pytest.mark.parametrize("crash_at", range(1, 21))
def test_kill_during_a_consumers_life_keeps_every_answered_acknowledgement(tmp_path, crash_at):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    b = Broker(tmp_path)
    for _ in range(4):
        b.produce(5)  # batches of 5: each fetch of at most 5 records acquires one
    b.close()
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=root), str(crash_at), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stdout.split("\n") if line and " " not in line]
    assert proc.returncode in (-signal.SIGKILL, 0), proc.stderr
    done: set[int] = set()
    for line in lines:
        if line.startswith(("rejected:", "accepted:")):
            span = line.split(":")[1]
            first, _, last = span.partition("-")
            done |= set(range(int(first), int(last or first) + 1))
    b = Broker(tmp_path)
    try:
        sp = b.manager.share_partition("g", TP)
        delivered = set()
        while got := b.fetch("after"):
            for r in got:
                delivered |= set(range(r.first_offset, r.last_offset + 1))
                b.ack("after", r.first_offset, r.last_offset, AckType.ACCEPT)
        assert not delivered & done, "an answered acknowledgement was lost"
        assert sp.start_offset == 20  # everything is done now
        # Only the acknowledgement being written at the kill (at most 4 offsets) may be in
        # the log unanswered; every other record not acknowledged was delivered again.
        assert len(set(range(20)) - done - delivered) <= 4
    finally:
        b.close()


def test_a_failed_write_fails_its_round_and_later_changes_and_the_partition_loads_again(broker):
    broker.produce(4)
    assert broker.fetch("m") == [AcquiredRecords(0, 3, 1)]
    broker.manager.apply_acknowledgements("g", "m", TP, [AckBatch(0, 1, [int(AckType.ACCEPT)])])
    round_ = broker.manager.take_writes()
    assert [w.key.partition for w in round_.writes] == [0]

    def fail(step):
        raise OSError("disk gone")

    broker.crash_point = fail
    broker.manager.write(round_)
    assert isinstance(round_.failure("g", TP), OSError)
    # accepted in memory while the failed write was in flight: it fails with the same error
    broker.manager.apply_acknowledgements("g", "m", TP, [AckBatch(2, 2, [int(AckType.ACCEPT)])])
    broker.manager.settle(round_)
    assert broker.manager.loaded_partition("g", TP) is None
    later = broker.manager.take_writes()
    assert later.writes == [] and isinstance(later.failure("g", TP), OSError)
    broker.crash_point = lambda step: None
    # loaded again from the log: nothing was accepted, every record is delivered again
    assert broker.fetch("m2") == [AcquiredRecords(0, 3, 1)]


def test_one_round_writes_the_acknowledgements_of_many_calls_once_per_partition(broker):
    broker.produce(6)
    broker.fetch("m")
    key = broker.manager.loaded("g")[0]
    before = broker.store.updates_since_snapshot(key)
    for first in range(0, 6, 2):
        broker.manager.apply_acknowledgements("g", "m", TP, [AckBatch(first, first + 1, [int(AckType.ACCEPT)])])
    round_ = broker.manager.take_writes()
    assert len(round_.writes) == 1
    broker.manager.settle(broker.manager.write(round_))
    assert broker.store.updates_since_snapshot(key) == before + 1
    broker.restart()
    assert broker.manager.share_partition("g", TP).start_offset == 6
