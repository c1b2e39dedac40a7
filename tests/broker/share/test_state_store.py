"""The share-state store (broker/share/state_store.py) over real logs: Kafka's
Initialize/Read/Write/DeleteShareGroupState semantics, snapshots every N updates,
rebuilding after a restart, and kill -9 at each step of a write."""

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from broker.share.errors import FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, INVALID_REQUEST, ShareError
from broker.share.log_view import BatchInfo, LogRead
from broker.share.partition import AckBatch, AckType, AcquiredRecords, SharePartition, StateBatch
from broker.share.state_records import SHARE_GROUP_STATE_TOPIC, SNAPSHOT_TYPE, UPDATE_TYPE, ShareStateKey, decode
from broker.share.state_store import ShareStateStore, combine
from kafka_format import iter_entries
from storage.clock import ManualClock
from storage.config import LogConfig
from storage.log import Log

NOW = 1_700_000_000_000
TOPIC_ID = uuid.UUID(int=42)
KEY = ShareStateKey("g", TOPIC_ID, 0)
PARTITIONS = 3


class Logs:
    """The `__share_group_state` logs of a data directory, opened as after a crash."""

    def __init__(self, root):
        self.root, self.logs = root, {}

    def get(self, partition):
        if partition not in self.logs:
            self.logs[partition] = Log.open(os.path.join(self.root, f"{SHARE_GROUP_STATE_TOPIC}-{partition}"),
                                            SHARE_GROUP_STATE_TOPIC, partition,
                                            LogConfig.from_props({"cleanup.policy": "compact"}),
                                            had_clean_shutdown=False)
        return self.logs[partition]

    def existing(self):
        for name in sorted(os.listdir(self.root)):
            self.get(int(name.rsplit("-", 1)[1]))
        return list(self.logs.values())

    def close(self):
        for log in self.logs.values():
            log.close()
        self.logs.clear()


@pytest.fixture
def logs(tmp_path):
    opened = Logs(str(tmp_path))
    yield opened
    opened.close()


def store_of(logs, clock=None, **kw):
    clock = clock or ManualClock(NOW)
    return ShareStateStore(logs.get, PARTITIONS, now_ms=clock.time_ms, **kw)


def reopen(logs, **kw):
    logs.close()
    store = store_of(logs, **kw)
    store.load(logs.existing())
    return store


def records(logs):
    out = []
    for log in logs.existing():
        with log.read(0, 1 << 20) as chunk:
            data = chunk.read()
        for entry in iter_entries(data):
            for r in entry.records():
                out.append(decode(bytes(r.key), None if r.value is None else bytes(r.value)))
    return out


def test_combine_newer_wins_and_trims_below_the_start():
    old = [StateBatch(0, 9, 0, 1), StateBatch(10, 19, 2, 1)]
    assert combine(old, [StateBatch(5, 12, 4, 2)], 3) == (
        StateBatch(3, 4, 0, 1), StateBatch(5, 12, 4, 2), StateBatch(13, 19, 2, 1))
    assert combine([StateBatch(0, 4, 2, 1)], [StateBatch(5, 9, 2, 1)], 0) == (StateBatch(0, 9, 2, 1),)
    assert combine(old, [], 20) == ()


def test_initialize_write_read_delete(logs):
    store = store_of(logs)
    assert store.read(KEY) is None
    with pytest.raises(ShareError) as e:
        store.write(KEY, 0, 0, 0, [])
    assert e.value.code == INVALID_REQUEST
    store.initialize(KEY, 1, 10)
    state = store.read(KEY, leader_epoch=0)
    assert (state.state_epoch, state.leader_epoch, state.start_offset, state.state_batches) == (1, 0, 10, ())
    store.write(KEY, 1, 0, 12, [StateBatch(12, 14, 2, 1), StateBatch(15, 15, 0, 2)])
    store.write(KEY, 1, 0, -1, [StateBatch(15, 15, 4, 3)])
    state = store.read(KEY)
    assert state.start_offset == 12
    assert state.state_batches == (StateBatch(12, 14, 2, 1), StateBatch(15, 15, 4, 3))
    # Fencing: older leader and state epochs are refused and change nothing.
    store.read(KEY, leader_epoch=4)
    for call, code in ((lambda: store.write(KEY, 1, 3, 20, []), FENCED_LEADER_EPOCH),
                       (lambda: store.read(KEY, leader_epoch=3), FENCED_LEADER_EPOCH),
                       (lambda: store.write(KEY, 0, 4, 20, []), FENCED_STATE_EPOCH),
                       (lambda: store.initialize(KEY, 0, 0), FENCED_STATE_EPOCH),
                       (lambda: store.write(KEY, 1, 4, 20, [StateBatch(3, 2, 0, 1)]), INVALID_REQUEST)):
        with pytest.raises(ShareError) as e:
            call()
        assert e.value.code == code
    assert store.read(KEY).start_offset == 12
    # A new state epoch (AlterShareGroupOffsets) starts over.
    store.initialize(KEY, 2, 30)
    state = store.read(KEY)
    assert (state.state_epoch, state.start_offset, state.state_batches, state.snapshot_epoch) == (2, 30, (), 1)
    store.delete(KEY)
    assert store.read(KEY) is None
    store.delete(KEY)  # nothing stored: no error
    kinds = [(r.record_type, r.value is None) for r in records(logs)]
    assert kinds == [(SNAPSHOT_TYPE, False)] + [(UPDATE_TYPE, False)] * 4 + [(SNAPSHOT_TYPE, False),
                                                                              (SNAPSHOT_TYPE, True)]
    # The read that took leader epoch 0 wrote it, and so did the one that took 4.
    assert reopen(logs).read(KEY) is None


def test_snapshot_every_n_updates_and_restart(logs):
    store = store_of(logs, snapshot_every=3)
    store.initialize(KEY, 0, 0)
    for i in range(7):
        store.write(KEY, 0, 0, i, [StateBatch(i, i, 2, 1), StateBatch(i + 1, i + 1, 0, 1)])
    types = [r.record_type for r in records(logs)]
    # snapshot, 3 updates, snapshot (the 4th write), 3 updates... : every 4th record is a snapshot
    assert types == [SNAPSHOT_TYPE, UPDATE_TYPE, UPDATE_TYPE, UPDATE_TYPE, SNAPSHOT_TYPE,
                     UPDATE_TYPE, UPDATE_TYPE, UPDATE_TYPE]
    snapshot = records(logs)[4].value
    assert snapshot.snapshot_epoch == 1 and snapshot.start_offset == 3
    before = store.read(KEY)
    again = reopen(logs, snapshot_every=3)
    assert again.read(KEY) == before
    assert again.updates_since_snapshot(KEY) == 3
    again.write(KEY, 0, 0, -1, [])
    assert records(logs)[-1].record_type == SNAPSHOT_TYPE


def test_keys_spread_over_state_partitions(logs):
    store = store_of(logs)
    keys = [ShareStateKey(f"g{i}", TOPIC_ID, i) for i in range(12)]
    for k in keys:
        store.initialize(k, 0, k.partition)
    assert len({k.state_partition(PARTITIONS) for k in keys}) > 1
    again = reopen(logs)
    assert sorted(again.keys(), key=lambda k: k.partition) == keys
    assert [again.read(k).start_offset for k in keys] == list(range(12))


# ---- kill -9 at each step --------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, signal, sys, uuid
    sys.path.insert(0, {root!r})
    from tests.broker.share.test_state_store import Logs, scenario
    from broker.share.state_store import ShareStateStore
    crash_at, data = int(sys.argv[1]), sys.argv[2]
    steps = [0]
    def crash_point(step):
        steps[0] += 1
        if steps[0] == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
    logs = Logs(data)
    store = ShareStateStore(logs.get, 3, snapshot_every=2, crash_point=crash_point)
    store.load(logs.existing())
    def answered(step):
        print(step, flush=True)
    scenario(store, answered)
    print("done", flush=True)
""")

MEMBER = "m1"


def scenario(store, answered):
    """A share partition's life through the store: initialize, acquire 0..9, acknowledge in
    steps (each write is answered before the next), release one record, then delete
    another group's state. `answered(step)` marks each write that returned."""
    key = ShareStateKey("g", uuid.UUID(int=42), 0)
    other = ShareStateKey("other", uuid.UUID(int=42), 0)
    store.initialize(other, 0, 0)
    answered("init-other")
    store.initialize(key, 0, 0)
    answered("init")
    sp = SharePartition("g", "t", 0)
    sp.load(store.read(key, 0).start_offset, [])
    sp.acquire(MEMBER, LogRead([BatchInfo(0, 9)]), NOW)
    for step, (first, last, ack) in enumerate([(0, 2, AckType.ACCEPT), (5, 5, AckType.REJECT),
                                               (3, 3, AckType.RELEASE), (6, 7, AckType.ACCEPT)]):
        sp.acknowledge(MEMBER, [AckBatch(first, last, [ack])], NOW)
        start, batches = sp.take_dirty()
        store.write(key, 0, 0, start, batches)
        answered(f"ack{step}")
    store.delete(other)
    answered("delete-other")


# What each answered step guarantees after a restart: (SPSO, offsets acknowledged or archived).
GUARANTEES = {
    "init": (0, set()),
    "ack0": (3, set()),
    "ack1": (3, {5}),
    "ack2": (3, {5}),
    "ack3": (3, {5, 6, 7}),
}
STEPS = 2 * 8  # two crash points per record written (8 records: the read writes leader epoch 0)


@pytest.mark.parametrize("crash_at", range(1, STEPS + 2))
def test_kill_at_each_step_keeps_every_answered_write(tmp_path, crash_at):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    data = str(tmp_path / "data")
    os.makedirs(data)
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=root), str(crash_at), data],
                          capture_output=True, text=True, timeout=120)
    answered = [line for line in proc.stdout.split("\n") if line and " " not in line]
    if crash_at <= STEPS:
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    else:
        assert proc.returncode == 0 and answered[-1] == "done", proc.stderr
    logs = Logs(data)
    try:
        store = ShareStateStore(logs.get, 3)
        store.load(logs.existing())
        key = ShareStateKey("g", TOPIC_ID, 0)
        other = ShareStateKey("other", TOPIC_ID, 0)
        if "init-other" in answered and crash_at <= STEPS - 1:  # killed before the delete's append
            assert store.read(other) is not None
        if "delete-other" in answered:
            assert store.read(other) is None
        done = [s for s in answered if s in GUARANTEES]
        state = store.read(key)
        if not done:
            return
        assert state is not None
        spso, finished = GUARANTEES[done[-1]]
        assert state.start_offset >= spso
        # Rebuild the share partition from the store, as its leader does at start.
        sp = SharePartition("g", "t", 0)
        sp.load(state.start_offset, state.state_batches, state.state_epoch)
        redelivered = sp.acquire("m2", LogRead([BatchInfo(0, 9)]), NOW)
        offsets = {o for r in redelivered for o in range(r.first_offset, r.last_offset + 1)}
        assert not offsets & finished, "an answered acknowledgement was lost"
        assert not offsets & set(range(spso))
        # Records acquired and never acknowledged are delivered again; the released
        # record 3 keeps its delivery count once its release was answered.
        assert {4, 8, 9} <= offsets
        if "ack2" in done:
            assert AcquiredRecords(3, 3, 2) in redelivered
    finally:
        logs.close()


def test_a_torn_last_record_is_dropped_and_the_rest_kept(logs, tmp_path):
    store = store_of(logs)
    store.initialize(KEY, 0, 0)
    store.write(KEY, 0, 0, 2, [StateBatch(2, 3, 2, 1)])
    store.write(KEY, 0, 0, 4, [StateBatch(4, 4, 4, 1)])
    partition = KEY.state_partition(PARTITIONS)
    path = logs.get(partition).active_segment.log.path
    logs.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # the process died inside the last write
        f.truncate(size - 7)
    again = reopen(logs)
    state = again.read(KEY)
    assert (state.start_offset, state.state_batches) == (2, (StateBatch(2, 3, 2, 1),))
