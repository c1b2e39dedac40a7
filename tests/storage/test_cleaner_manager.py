"""Choosing the log to clean and its cleanable range (Kafka's LogCleanerManagerTest),
the cleaner checkpoint, pausing for deletion, and the LogCleaner over a LogManager
(including a crash after each step of a clean, checkpoint write last)."""

from __future__ import annotations

import errno
import os
import random

import pytest

from kafka_format import build_batch
from storage.checkpoint import OffsetCheckpointFile
from storage.cleaner import CleaningAborted
from storage.cleaner_manager import LogCleanerManager, cleanable_offsets, max_compaction_delay
from storage.config import LogConfig
from storage.log_cleaner import CleanerConfig, LogCleaner
from storage.manager import LogManager

from .conftest import crash_manager, holds_directory_lock
from .test_cleaner import SWAP_STEPS, Crash, latest_by_key, records

HOUR = 3_600_000


def config(**overrides) -> LogConfig:
    props = {"cleanup.policy": "compact", "segment.bytes": 300}
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig.from_props(props)


def cleaner_of(manager: LogManager, **kwargs) -> LogCleaner:
    """A LogCleaner over `manager`'s logs with a 1 MiB offset map."""
    return LogCleaner(manager.data_dir, manager.logs_by_partition, dedupe_buffer_size=1 << 20, **kwargs)


@pytest.fixture
def manager(tmp_path, clock):
    configs = {}
    m = LogManager(str(tmp_path / "data"), config_for=lambda topic: configs.get(topic, config()), clock=clock)
    m.configs = configs
    m.startup()
    yield m
    if holds_directory_lock(m):
        m.shutdown()


def produce(log, clock, batches, keys=5, seed=0, ts=None):
    rng = random.Random(seed)
    for _ in range(batches):
        log.append(build_batch([(b"k%d" % rng.randrange(keys), b"value", clock.time_ms() if ts is None else ts)]))


# ---- the cleanable range --------------------------------------------------------------------------

def test_first_dirty_is_the_checkpoint_or_the_log_start(manager, clock):
    log = manager.get_or_create_log("t", 0, config())
    produce(log, clock, 30)
    active = log.active_segment.base_offset
    now = clock.time_ms()
    assert cleanable_offsets(log, None, now) == (0, active, False)
    assert cleanable_offsets(log, 5, now) == (5, active, False)
    assert cleanable_offsets(log, log.log_end_offset + 1, now) == (0, active, True)  # past the end
    log.increase_log_start_offset(7)
    assert cleanable_offsets(log, 3, now) == (7, active, True)  # below the log start


def test_segments_younger_than_min_compaction_lag_are_not_cleanable(manager, clock):
    log = manager.get_or_create_log("t", 0, config(min_compaction_lag_ms=HOUR))
    produce(log, clock, 10, ts=clock.time_ms() - 2 * HOUR)
    young = log.roll().base_offset
    produce(log, clock, 10, ts=clock.time_ms())
    log.roll()
    produce(log, clock, 2)
    assert cleanable_offsets(log, None, clock.time_ms()).first_uncleanable == young
    clock.advance(HOUR + 1)
    assert cleanable_offsets(log, None, clock.time_ms()).first_uncleanable == log.active_segment.base_offset


def test_max_compaction_lag_is_measured_from_the_first_batch_of_a_dirty_segment(manager, clock):
    log = manager.get_or_create_log("t", 0, config(max_compaction_lag_ms=HOUR))
    produce(log, clock, 10, ts=clock.time_ms() - 3 * HOUR)
    log.roll()
    assert max_compaction_delay(log, 0, clock.time_ms()) == 2 * HOUR
    assert max_compaction_delay(log, log.active_segment.base_offset, clock.time_ms()) == 0


# ---- choosing ---------------------------------------------------------------------------------------

def test_the_dirtiest_log_above_its_ratio_is_chosen(manager, clock):
    cm = LogCleanerManager(manager.data_dir, manager.logs_by_partition)
    a = manager.get_or_create_log("a", 0, config())
    b = manager.get_or_create_log("b", 0, config())
    plain = manager.get_or_create_log("plain", 0, LogConfig.from_props({"segment.bytes": 300}))
    for log in (a, b, plain):
        produce(log, clock, 40)
    cm.update_checkpoint(("a", 0), a.segments.snapshot().segments[3].base_offset)  # a: partly clean
    chosen = cm.grab_filthiest_log(clock.time_ms())
    assert chosen.tp == ("b", 0) and chosen.cleanable_ratio == 1.0
    assert chosen.first_dirty == 0 and chosen.first_uncleanable == b.active_segment.base_offset
    second = cm.grab_filthiest_log(clock.time_ms())  # b is in progress now
    assert second.tp == ("a", 0) and 0.5 < second.cleanable_ratio < 1.0
    assert cm.grab_filthiest_log(clock.time_ms()) is None  # `plain` is not compacted


def test_a_log_below_min_cleanable_dirty_ratio_waits_unless_max_lag_passed(manager, clock):
    cm = LogCleanerManager(manager.data_dir, manager.logs_by_partition)
    log = manager.get_or_create_log("t", 0, config(min_cleanable_dirty_ratio=0.9))
    produce(log, clock, 40, ts=clock.time_ms())
    dirty_from = log.segments.snapshot().segments[3].base_offset  # ratio below 0.9
    cm.update_checkpoint(("t", 0), dirty_from)
    assert cm.grab_filthiest_log(clock.time_ms()) is None
    manager.configs["t"] = config(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=HOUR)
    log.update_config(manager.configs["t"])
    clock.advance(2 * HOUR)
    chosen = cm.grab_filthiest_log(clock.time_ms())
    assert chosen is not None and chosen.needs_compaction_now


def test_the_checkpoint_is_kafkas_file_and_keeps_only_existing_logs(manager, clock):
    cm = LogCleanerManager(manager.data_dir, manager.logs_by_partition)
    manager.get_or_create_log("t", 0, config())
    cm.update_checkpoint(("t", 0), 42)
    cm.update_checkpoint(("gone", 3), 7)  # not a log of this manager: dropped
    path = os.path.join(manager.data_dir, "cleaner-offset-checkpoint")
    with open(path) as f:
        assert f.read() == "0\n1\nt 0 42\n"
    assert OffsetCheckpointFile(path).read() == {("t", 0): 42}


def test_a_checkpoint_that_cannot_be_read_or_written_is_logged_and_cleaning_goes_on(manager, clock, monkeypatch):
    """Kafka's LogCleanerManager: an unreadable checkpoint reads as empty (every log
    cleaned from its start); a failed write (a full disk) leaves the old file."""
    cm = LogCleanerManager(manager.data_dir, manager.logs_by_partition)
    manager.get_or_create_log("t", 0, config())
    cm.update_checkpoint(("t", 0), 42)
    path = os.path.join(manager.data_dir, "cleaner-offset-checkpoint")
    with open(path, "rb") as f:
        kept = f.read()

    def full_disk(offsets):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cm.checkpoint, "write", full_disk)
    cm.update_checkpoint(("t", 0), 50)
    cm.forget(("t", 0))
    with open(path, "rb") as f:
        assert f.read() == kept
    monkeypatch.undo()
    with open(path, "wb") as f:
        f.write(b"0\n1\nt 0\n")  # torn mid-entry
    assert cm.all_checkpoints() == {}


def test_abort_and_pause_stop_a_clean_and_keep_the_log_out_until_resumed(manager, clock):
    cm = LogCleanerManager(manager.data_dir, manager.logs_by_partition)
    log = manager.get_or_create_log("t", 0, config())
    produce(log, clock, 40)
    chosen = cm.grab_filthiest_log(clock.time_ms())
    import threading
    aborted = threading.Thread(target=cm.abort_and_pause, args=(chosen.tp,))
    aborted.start()
    while True:  # the cleaner's next check raises...
        try:
            cm.check_aborted(chosen.tp)
        except CleaningAborted:
            break
    cm.done_cleaning(chosen.tp, None)  # ...and it reports done
    aborted.join(10)
    assert not aborted.is_alive()
    assert cm.grab_filthiest_log(clock.time_ms()) is None  # paused
    cm.resume(chosen.tp)
    assert cm.grab_filthiest_log(clock.time_ms()).tp == ("t", 0)


# ---- the LogCleaner over a LogManager -----------------------------------------------------------

def test_clean_once_cleans_records_the_checkpoint_and_logs_stats(manager, clock):
    log = manager.get_or_create_log("t", 0, config())
    produce(log, clock, 60)
    before = records(log)
    cleaner = cleaner_of(manager, clock=clock)
    import structlog
    with structlog.testing.capture_logs() as logs:
        assert cleaner.clean_once()
    assert latest_by_key(records(log)) == latest_by_key(before)
    checkpoint = cleaner.cleaner_manager.all_checkpoints()
    assert checkpoint == {("t", 0): log.active_segment.base_offset}
    line = [e for e in logs if e["event"] == "log_cleaned"][0]
    for key in ("bytes_read", "bytes_written", "records_kept", "records_dropped", "map_entries",
                "map_utilization", "duration_seconds", "mb_per_second"):
        assert key in line
    assert not cleaner.clean_once()  # nothing dirty now
    assert cleaner.offset_map.entries == 0  # the map is emptied between cleans


def test_a_long_clean_logs_its_progress_and_the_totals_add_up(manager, clock):
    log = manager.get_or_create_log("t", 0, config())
    produce(log, clock, 60)
    cleaner = cleaner_of(manager, clock=clock, io_buffer_size=4096)
    cleaner.progress_interval_s = 0  # every check between reads counts as "long"
    import structlog
    with structlog.testing.capture_logs() as logs:
        assert cleaner.clean_once()
    progress = [e for e in logs if e["event"] == "log_cleaning_progress"]
    assert progress and {e["log"] for e in progress} == {"t-0"}
    assert {e["phase"] for e in progress} <= {"building offset map", "cleaning"}
    assert progress[-1]["bytes_read"] >= progress[0]["bytes_read"]
    done = [e for e in logs if e["event"] == "log_cleaned"][0]
    assert (cleaner.cleans, cleaner.bytes_read, cleaner.bytes_written) == (1, done["bytes_read"],
                                                                            done["bytes_written"])


def test_deleting_a_log_aborts_its_clean_and_forgets_its_checkpoint(tmp_path, clock):
    manager = LogManager(str(tmp_path / "data"), config_for=lambda topic: config(), clock=clock,
                         cleaner=CleanerConfig(dedupe_buffer_size=1 << 20))
    manager.startup()
    log = manager.get_or_create_log("t", 0, config())
    produce(log, clock, 60)
    cleaner = manager.cleaner  # made by the manager (CleanerConfig): delete_log aborts its cleans
    assert cleaner.clean_once()
    manager.delete_log("t", 0)
    assert cleaner.cleaner_manager.all_checkpoints() == {}
    again = manager.get_or_create_log("t", 0, config())
    produce(again, clock, 60)
    assert cleaner.clean_once()  # the new log is not paused
    manager.shutdown()


def test_shutdown_stops_a_clean_at_its_next_read(manager, clock):
    log = manager.get_or_create_log("t", 0, config(segment_bytes=100_000))
    produce(log, clock, 200)
    log.roll()
    cleaner = cleaner_of(manager, io_buffer_size=4096, clock=clock)
    real = cleaner.cleaner.clean

    def clean_then_stop(*args, check_done, **kwargs):
        def check():
            cleaner.shutdown()
            check_done()
        return real(*args, check_done=check, **kwargs)

    cleaner.cleaner.clean = clean_then_stop
    assert cleaner.clean_once()
    assert cleaner.cleaner_manager.all_checkpoints() == {}
    assert not [n for n in os.listdir(log.directory) if ".cleaned" in n]
    assert not cleaner.clean_once()  # stopped


@pytest.mark.parametrize("crash_at", SWAP_STEPS + ["checkpoint_written"])
def test_a_crash_at_each_step_of_a_clean_loses_nothing(tmp_path, clock, crash_at):
    data = str(tmp_path / "data")
    first = LogManager(data, config_for=lambda topic: config(), clock=clock)
    first.startup()
    log = first.get_or_create_log("t", 0)
    produce(log, clock, 80, keys=7)
    before = latest_by_key(records(log))
    end = log.active_segment.base_offset

    def crash(step):
        if step == crash_at:
            raise Crash(step)

    cleaner = cleaner_of(first, clock=clock, step=crash)
    with pytest.raises(Crash):
        cleaner.clean_once()
    crash_manager(first)  # the process is gone: its directory lock with it

    second = LogManager(data, config_for=lambda topic: config(), clock=clock)
    second.startup()
    assert not second.had_clean_shutdown
    recovered = second.get_log("t", 0)
    assert latest_by_key(records(recovered)) == before
    checkpoint = cleaner_of(second, clock=clock).cleaner_manager.all_checkpoints()
    assert checkpoint == ({("t", 0): end} if crash_at == "checkpoint_written" else {})
    cleaner = cleaner_of(second, clock=clock)
    assert cleaner.clean_once() == (crash_at != "checkpoint_written")
    assert latest_by_key(records(recovered)) == before
    second.shutdown()


def test_compact_delete_topics_get_both_compaction_and_retention(manager, clock):
    cfg = config(cleanup_policy="compact,delete", retention_ms=HOUR)
    manager.configs["t"] = cfg
    log = manager.get_or_create_log("t", 0, cfg)
    produce(log, clock, 30, ts=clock.time_ms() - 2 * HOUR)  # past retention.ms
    old_end = log.log_end_offset
    log.roll()
    produce(log, clock, 60, seed=1)
    cleaner = cleaner_of(manager, clock=clock)
    assert cleaner.clean_once()  # compaction, from the log start
    log.delete_old_segments(clock.time_ms())  # retention removes the expired segments
    assert log.log_start_offset >= old_end
    recs = records(log)
    assert recs and all(r.offset >= old_end for r in recs)
    active = log.active_segment.base_offset
    cleaned = [r.key for r in recs if r.offset < active]
    assert len(cleaned) == len(set(cleaned))  # one record per key in the cleaned part
