"""Restart after a crash: producer-state snapshots at recovery-point checkpoints, unclean
recovery from the newest snapshot at or below the recovery point, corrupt snapshots,
snapshot pruning, and the manager's parallel startup with progress lines
(storage/producer_state.py, storage/log.py, storage/loader.py, storage/manager.py)."""

import errno
import os
import shutil

import pytest
import structlog

import storage.producer_state
from kafka_format import build_batch
from kafka_format.errors import OutOfOrderSequenceError
from storage.config import LogConfig
from storage.manager import LogManager
from storage.producer_state import ProducerStateManager, decode_snapshot

from .conftest import crash_manager
from .test_log import read_all
from .test_producer_state import idem, snapshots

TS = 1_700_000_000_000


def snapshot_offsets(log):
    return [int(name[:20]) for name in snapshots(log)]


def crash_and_reopen(open_log, log, **overrides):
    """Reopen as after kill -9: no close, the recovery point the checkpoint file would hold."""
    return open_log(had_clean_shutdown=False, recovery_point=log.recovery_point, **overrides)


def rebuilt_from_zero(log, tmp_path):
    """The producer state of `log` rebuilt from offset 0, in a copy without snapshots."""
    copy = tmp_path / "copy"
    shutil.copytree(log.directory, copy)
    for name in os.listdir(copy):
        if name.endswith(".snapshot"):
            os.unlink(copy / name)
    manager = ProducerStateManager(str(copy))
    manager.load(log.segments, log_end=log.log_end_offset, had_clean_shutdown=False, now_ms=TS)
    assert manager.loaded_from == 0
    return manager


def state_of(manager):
    return {pid: (e.epoch, list(e.batches)[-1:]) for pid, e in manager.producers.items()}


# ---- snapshots at recovery-point checkpoints ----------------------------------------------------

def test_a_flush_to_the_log_end_is_snapshotted_at_the_checkpoint(open_log):
    log = open_log()
    log.append(idem(0, 3))
    log.append(build_batch([(b"k", b"v", TS)]))
    assert not log.write_checkpoint_snapshot()  # nothing flushed yet
    log.flush()
    assert snapshots(log) == []  # the file waits for the checkpoint
    assert log.write_checkpoint_snapshot()
    assert snapshot_offsets(log) == [4] == [log.recovery_point]
    with open(os.path.join(log.directory, snapshots(log)[0]), "rb") as f:
        [entry] = decode_snapshot(f.read())
    assert (entry.producer_id, entry.last_seq, entry.last_offset) == (7, 2, 2)
    assert not log.write_checkpoint_snapshot()  # once per flush


def test_a_log_without_producers_gets_empty_snapshots(open_log):
    log = open_log()
    log.append(build_batch([(b"k", b"v", TS)] * 5))
    log.flush()
    log.write_checkpoint_snapshot()
    with open(os.path.join(log.directory, f"{5:020d}.snapshot"), "rb") as f:
        assert decode_snapshot(f.read()) == []


def test_manager_checkpoint_writes_snapshots_before_the_recovery_points_and_prunes(tmp_path, clock):
    m = LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), clock=clock)
    m.startup()
    log = m.get_or_create_log("t", 0)
    for round_no in range(3):
        log.append(idem(round_no * 2, 2))
        log.flush()
        m.checkpoint()
        assert log.recovery_point == 2 * (round_no + 1)
        # Only the newest snapshot at or below the checkpointed recovery point stays.
        assert snapshot_offsets(log) == [log.recovery_point]
    assert "t 0 6" in (tmp_path / "recovery-point-offset-checkpoint").read_text()
    m.shutdown()


def test_pruning_keeps_snapshots_at_segment_bases(open_log):
    log = open_log(segment_bytes=300)
    for seq in range(6):
        log.append(idem(seq, value=b"x" * 60))
    bases = [s.base_offset for s in log.segments][1:]
    assert snapshot_offsets(log) == bases  # one per roll
    log.flush()
    log.write_checkpoint_snapshot()
    assert log.prune_snapshots(log.recovery_point) == 0
    assert snapshot_offsets(log) == bases + [6]


# ---- unclean recovery from the snapshot -----------------------------------------------------------

def test_unclean_start_replays_only_from_the_snapshot_at_the_recovery_point(open_log, tmp_path):
    log = open_log()
    for seq in range(0, 40, 2):
        log.append(idem(seq, 2))
        log.append(build_batch([(b"k", b"v", TS)]))
    log.flush()
    log.write_checkpoint_snapshot()
    flushed = log.recovery_point
    for seq in range(40, 46, 2):  # unflushed when the process dies
        log.append(idem(seq, 2))
    again = crash_and_reopen(open_log, log)
    assert again.producer_state.loaded_from == flushed
    assert again.producer_state.batches_replayed == 3
    assert again.log_end_offset == flushed + 6
    assert state_of(again.producer_state) == state_of(rebuilt_from_zero(again, tmp_path))


def test_snapshots_above_the_recovery_point_are_not_trusted(open_log):
    log = open_log()
    log.append(idem(0, 2))
    log.flush()
    log.write_checkpoint_snapshot()
    log.append(idem(2, 2))
    log.producer_state.take_snapshot(4)  # e.g. written, then the crash came before the checkpoint
    again = crash_and_reopen(open_log, log)
    assert again.producer_state.loaded_from == 2
    assert snapshot_offsets(again) == [2]
    assert again.producer_state.producers[7].last_seq == 3


def test_an_unclean_start_without_a_recovery_point_replays_from_the_first_segment(open_log):
    log = open_log()
    log.append(idem(0, 2))
    log.close()  # a snapshot at 2 ...
    again = open_log(had_clean_shutdown=False, recovery_point=0)  # ... but nothing was flushed
    assert again.producer_state.loaded_from == 0
    assert again.producer_state.batches_replayed == 1
    assert again.producer_state.producers[7].last_seq == 1


def test_a_corrupt_snapshot_falls_back_to_an_older_one(open_log, tmp_path):
    log = open_log(segment_bytes=300)
    for seq in range(6):
        log.append(idem(seq, value=b"x" * 60))
    older = snapshot_offsets(log)[-1]  # the last roll's
    log.flush()
    log.write_checkpoint_snapshot()
    newest = log.recovery_point
    with open(os.path.join(log.directory, f"{newest:020d}.snapshot"), "r+b") as f:
        f.seek(12)
        f.write(b"\xff\xff")
    with structlog.testing.capture_logs() as captured:
        again = crash_and_reopen(open_log, log, segment_bytes=300)
    assert [e["offset"] for e in captured if e["event"] == "producer_snapshot_corrupt"] == [newest]
    assert again.producer_state.loaded_from == older
    assert newest not in snapshot_offsets(again)
    assert state_of(again.producer_state) == state_of(rebuilt_from_zero(again, tmp_path))


def test_every_snapshot_corrupt_rebuilds_from_offset_zero(open_log):
    log = open_log()
    log.append(idem(0, 2))
    log.flush()
    log.write_checkpoint_snapshot()
    with open(os.path.join(log.directory, f"{2:020d}.snapshot"), "wb") as f:
        f.write(b"\x00\x01short")
    again = crash_and_reopen(open_log, log)
    assert again.producer_state.loaded_from == 0
    assert again.producer_state.producers[7].last_seq == 1
    assert snapshots(again) == []


def test_idempotent_dedupe_after_a_crash_with_snapshots(open_log):
    log = open_log()
    offsets = {}
    for seq in range(0, 12, 2):
        offsets[seq] = log.append(idem(seq, 2)).first_offset
    log.flush()
    log.write_checkpoint_snapshot()
    for seq in (12, 14):
        offsets[seq] = log.append(idem(seq, 2)).first_offset
    again = crash_and_reopen(open_log, log)
    assert again.producer_state.loaded_from == 12
    end = again.log_end_offset
    assert again.append(idem(14, 2)).first_offset == offsets[14]  # a retried batch: deduped
    assert again.append(idem(12, 2)).first_offset == offsets[12]  # replayed batches are cached too
    assert again.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        again.append(idem(20, 2))
    assert again.append(idem(16, 2)).first_offset == end  # the sequence continues
    assert [r.offset for r in read_all(again)] == list(range(end + 2))


def test_a_torn_tail_below_a_snapshot_deletes_it(open_log):
    log = open_log()
    log.append(idem(0, 2))
    log.append(idem(2, 2))
    log.flush()
    log.write_checkpoint_snapshot()
    path = os.path.join(log.directory, f"{0:020d}.log")
    os.truncate(path, os.path.getsize(path) - 5)  # the last batch is torn
    again = crash_and_reopen(open_log, log)
    assert again.log_end_offset == 2
    assert snapshot_offsets(again) == []
    assert again.producer_state.producers[7].last_seq == 1
    assert again.append(idem(2, 2)).first_offset == 2


# ---- the manager's startup --------------------------------------------------------------------------

@pytest.mark.parametrize("clean", [True, False])
def test_startup_opens_logs_in_parallel_and_logs_progress(tmp_path, clock, clean):
    m = LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), clock=clock, recovery_threads=3)
    m.startup()
    for p in range(25):
        log = m.get_or_create_log("t", p)
        log.append(idem(0, p % 3 + 1, pid=100 + p))
    m.checkpoint()
    if clean:
        m.shutdown()
    else:
        crash_manager(m)  # the next process may lock the directory
    again = LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), clock=clock, recovery_threads=3)
    with structlog.testing.capture_logs() as captured:
        again.startup()
    assert again.had_clean_shutdown is clean
    progress = [e for e in captured if e["event"] == "logs_recovered"]
    assert [e["recovered"] for e in progress] == sorted(e["recovered"] for e in progress)
    assert progress[-1]["progress"] == "25/25" and progress[-1]["total"] == 25
    assert len(progress) == 10 and progress[-1]["bytes"] > 0
    assert "elapsed_ms" in progress[-1]
    assert progress[-1]["segments"] == 25  # one segment a log
    loaded = [e for e in captured if e["event"] == "logs_loaded"][-1]
    assert loaded["segments"] == 25 and loaded["bytes"] == progress[-1]["bytes"] and loaded["logs"] == 25
    starting = [e for e in captured if e["event"] == "logs_recovering"][0]
    assert starting["logs"] == 25 and starting["data_dir"] == str(tmp_path)
    for p in range(25):
        log = again.get_log("t", p)
        assert log.log_end_offset == p % 3 + 1
        assert log.producer_state.producers[100 + p].last_seq == p % 3
    again.shutdown()


def test_a_failed_log_fails_the_start_and_closes_the_others(tmp_path, clock):
    m = LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), clock=clock)
    m.startup()
    for topic in ("a", "b", "c", "d"):
        m.get_or_create_log(topic, 0).append(build_batch([(b"k", b"v", TS)]))
    m.shutdown()

    def config_for(topic):
        if topic == "b":
            raise ValueError("no config for b")
        return LogConfig()

    again = LogManager(str(tmp_path), config_for=config_for, clock=clock, recovery_threads=2)
    with pytest.raises(ValueError, match="no config for b"):
        again.startup()
    assert again.logs() == []
    crash_manager(again)
    third = LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), clock=clock)
    third.startup()
    assert sorted(third.topics()) == ["a", "b", "c", "d"]
    third.shutdown()


def test_recovery_threads_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), recovery_threads=0)


# ---- the loader's untrusted indexes ------------------------------------------------------------------

def test_garbage_in_preallocated_indexes_above_the_recovery_point_is_rebuilt(open_log):
    log = open_log(segment_bytes=2000, index_interval_bytes=100)
    for i in range(60):
        log.append(build_batch([(b"k%d" % i, b"v" * 40, TS + i)]))
    log.flush(log.active_segment.base_offset)
    assert len(log.segments) > 2
    active = log.active_segment
    expected = [(o, active.offset_index.lookup(o)) for o in range(active.base_offset, log.log_end_offset)]
    for suffix in (".index", ".timeindex"):  # as a crash may leave them: preallocated, garbage first
        path = os.path.join(log.directory, f"{active.base_offset:020d}{suffix}")
        with open(path, "r+b") as f:
            f.write(os.urandom(64))
        os.truncate(path, 10 * 1024 * 1024)
    again = crash_and_reopen(open_log, log, segment_bytes=2000, index_interval_bytes=100)
    rebuilt = again.active_segment
    assert [(o, rebuilt.offset_index.lookup(o)) for o in range(rebuilt.base_offset, again.log_end_offset)] == expected
    assert again.offset_for_timestamp(TS + 59).offset == 59
    assert [r.offset for r in read_all(again)] == list(range(60))
    assert again.append(build_batch([(b"k", b"v", TS + 60)])).first_offset == 60


def test_a_snapshot_that_cannot_be_written_fails_neither_the_roll_nor_the_checkpoint(open_log, monkeypatch):
    def full_disk(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    log = open_log()
    log.append(idem(0, 2))
    log.flush()
    monkeypatch.setattr(storage.producer_state, "atomic_write", full_disk)
    assert not log.write_checkpoint_snapshot()
    log.roll()
    assert log.append(idem(2, 2)).first_offset == 2
    assert snapshots(log) == []
    monkeypatch.undo()
    again = crash_and_reopen(open_log, log)  # no snapshot: replayed from the first segment
    assert again.producer_state.loaded_from == 0
    assert again.append(idem(2, 2)).first_offset == 2


def test_a_log_from_before_snapshots_gets_one_at_a_clean_start(open_log):
    log = open_log()
    log.append(build_batch([(b"k", b"v", TS)] * 3))
    log.close()
    for name in snapshots(log):  # as a log written before every log had snapshots
        os.unlink(os.path.join(log.directory, name))
    again = open_log()
    assert snapshot_offsets(again) == [3]
    again.append(build_batch([(b"k", b"v", TS)]))
    crashed = crash_and_reopen(open_log, again)  # recovery point 3: the snapshot is used
    assert crashed.producer_state.loaded_from == 3


def test_a_new_empty_log_writes_no_snapshot(open_log):
    log = open_log()
    assert snapshots(log) == []
