"""Retention (Kafka's deleteOldSegments): the three rules and their order, the
roll of a fully expired log, `.deleted` files and their delayed removal, readers
that outlive a deletion, DELETE_RECORDS, and the manager's pass."""

import os
import threading

import pytest
import structlog

from kafka_format import build_batch, build_classic, iter_records
from kafka_format.errors import OffsetOutOfRangeError
from storage import retention
from storage.config import LogConfig, broker_log_defaults
from storage.manager import LogManager
from storage.retention import LOG_START_OFFSET, RETENTION_BYTES, RETENTION_MS

from .test_log import read_all

HOUR = 3_600_000


def record(ts, size=10):
    """One batch of one record: every append is the same size."""
    return build_batch([(b"k", b"v" * size, ts)])


def bases(log):
    return [s.base_offset for s in log.segments]


def files(log):
    return sorted(os.listdir(log.directory))


def fill(log, timestamps):
    for ts in timestamps:
        log.append(record(ts))


def per_segment(n, clock):
    """segment.bytes holding exactly n of `record` (Kafka rolls when size > segment.bytes - append)."""
    return n * len(record(clock.now_ms))


# ---- the rules ------------------------------------------------------------------------------

def test_kafkas_size_example_15_records_5_per_segment_keep_10_leaves_2(open_log, clock):
    size = len(record(clock.now_ms))
    log = open_log(segment_bytes=5 * size, retention_bytes=10 * size)
    fill(log, [clock.now_ms] * 15)
    assert bases(log) == [0, 5, 10]
    result = log.delete_old_segments()
    assert bases(log) == [5, 10]
    assert log.log_start_offset == 5 and log.log_end_offset == 15
    assert (result.deleted[RETENTION_BYTES].segments, result.deleted[RETENTION_BYTES].bytes) == (1, 5 * size)
    assert result.segments_deleted == 1 and not result.rolled
    assert [r.offset for r in read_all(log, 5)] == list(range(5, 15))
    assert log.delete_old_segments().segments_deleted == 0  # 10 records' worth is not over the limit


def test_size_rule_may_take_the_active_segment_too(open_log, clock):
    size = len(record(clock.now_ms))
    log = open_log(segment_bytes=5 * size, retention_bytes=0)
    fill(log, [clock.now_ms] * 7)
    result = log.delete_old_segments()
    assert result.rolled and result.deleted[RETENTION_BYTES].segments == 2
    assert bases(log) == [7] and log.log_start_offset == 7 and log.log_end_offset == 7


def test_time_rule_uses_the_largest_timestamp_and_stops_at_the_first_that_stays(open_log, clock):
    now = clock.now_ms
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR)
    # segment 0: old; segment 2: one old and one recent record (its largest is recent);
    # segment 4: old again but behind a segment that stays; segment 6: active.
    fill(log, [now - 3 * HOUR, now - 2 * HOUR, now - 3 * HOUR, now - 10, now - 5 * HOUR, now - 5 * HOUR, now])
    assert bases(log) == [0, 2, 4, 6]
    result = log.delete_old_segments()
    assert bases(log) == [2, 4, 6] and log.log_start_offset == 2
    assert result.deleted[RETENTION_MS].segments == 1
    clock.advance(HOUR - 10)  # segment 2's largest (now - 10) is exactly an hour old: not over
    assert log.delete_old_segments().segments_deleted == 0
    clock.advance(1)
    assert log.delete_old_segments().deleted[RETENTION_MS].segments == 2  # 2, then 4 (old)
    assert bases(log) == [6] and log.log_start_offset == 6


def test_time_rule_falls_back_to_the_mtime_without_timestamps(open_log, clock):
    one = build_classic([(b"k", b"v" * 10, None)], magic=0)
    log = open_log(segment_bytes=2 * len(one), retention_ms=HOUR)
    for _ in range(5):
        log.append(one)
    assert bases(log) == [0, 2, 4]
    now_s = clock.now_ms / 1000
    for segment, age_ms in zip(log.segments, (2 * HOUR, HOUR // 2, 3 * HOUR), strict=True):
        os.utime(segment.log.path, (now_s - age_ms / 1000, now_s - age_ms / 1000))
    assert [s.largest_timestamp for s in log.segments] == [clock.now_ms - 2 * HOUR, clock.now_ms - HOUR // 2,
                                                          clock.now_ms - 3 * HOUR]
    result = log.delete_old_segments()
    assert result.deleted[RETENTION_MS].segments == 1 and bases(log) == [2, 4]


def test_retention_ms_minus_one_keeps_everything(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=-1)
    fill(log, [1000 + i for i in range(7)])  # 1970: ancient
    assert log.delete_old_segments().segments_deleted == 0
    assert bases(log) == [0, 2, 4, 6] and log.log_start_offset == 0


def test_compact_only_applies_only_the_log_start_rule(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=1, retention_bytes=0,
                   cleanup_policy="compact")
    fill(log, [1000 + i for i in range(7)])
    assert log.delete_old_segments().segments_deleted == 0
    assert log.increase_log_start_offset(5) == 5
    result = log.delete_old_segments()
    assert result.deleted[LOG_START_OFFSET].segments == 2 and result.segments_deleted == 2
    assert bases(log) == [4, 6] and log.log_start_offset == 5  # the start is not pulled back to 4


def test_compact_delete_applies_all_rules(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR, cleanup_policy="compact,delete")
    now = clock.now_ms
    fill(log, [now - 2 * HOUR] * 4 + [now] * 3)
    result = log.delete_old_segments()
    assert result.deleted[RETENTION_MS].segments == 2 and bases(log) == [4, 6]


def test_rules_run_in_kafkas_order(open_log, clock):
    size = len(record(clock.now_ms))
    log = open_log(segment_bytes=2 * size, retention_bytes=5 * size, retention_ms=HOUR)
    now = clock.now_ms
    fill(log, [now] * 4 + [now - 2 * HOUR] * 2 + [now] * 4)  # segments 0 2 4 6 8; 4 is old
    log.increase_log_start_offset(2)
    result = log.delete_old_segments()
    # start offset 2: segment 0 goes (the next base, 2, is <= 2); size: 8 records left, 5 kept,
    # so 2 goes and 4 (3 - 2 < 2) stays; time: 4 is old and goes, 6 is recent and stays.
    assert [result.deleted[r].segments for r in (LOG_START_OFFSET, RETENTION_BYTES, RETENTION_MS)] == [1, 1, 1]
    assert bases(log) == [6, 8] and log.log_start_offset == 6


# ---- a fully expired log ------------------------------------------------------------------

def test_fully_expired_log_rolls_keeps_its_end_and_takes_appends(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR, file_delete_delay_ms=0)
    fill(log, [clock.now_ms] * 5)
    clock.advance(HOUR + 1)
    result = log.delete_old_segments()
    assert result.rolled and result.deleted[RETENTION_MS].segments == 3
    assert bases(log) == [5] and log.active_segment.size == 0
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)
    assert log.recovery_point == 5  # follows the start (Kafka's updateLogStartOffset)
    with log.read(5, 1000) as empty:
        assert empty.length == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    assert log.delete_old_segments().segments_deleted == 0  # an empty active segment stays
    assert log.append(record(clock.now_ms)).first_offset == 5
    assert [r.offset for r in read_all(log, 5)] == [5]
    assert log.delete_due_files() == 3
    assert files(log) == ["00000000000000000005.index", "00000000000000000005.log",
                          "00000000000000000005.snapshot", "00000000000000000005.timeindex"]


def test_fully_expired_log_survives_a_restart(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR)
    fill(log, [clock.now_ms] * 3)
    clock.advance(2 * HOUR)
    log.delete_old_segments()
    log.close()
    reopened = open_log(retention_ms=HOUR, log_start_offset=log.log_start_offset)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (3, 3)
    assert reopened.append(record(clock.now_ms)).first_offset == 3


# ---- files -------------------------------------------------------------------------------------

def test_deleted_files_are_renamed_then_removed_after_the_delay(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR, file_delete_delay_ms=1000)
    fill(log, [clock.now_ms - 2 * HOUR] * 2 + [clock.now_ms] * 2)
    log.delete_old_segments()
    names = files(log)
    assert {"00000000000000000000.log.deleted", "00000000000000000000.index.deleted",
            "00000000000000000000.timeindex.deleted"} <= set(names)
    assert "00000000000000000000.log" not in names
    assert log.delete_due_files() == 0
    clock.advance(999)
    assert log.delete_due_files() == 0
    clock.advance(1)
    assert log.delete_due_files() == 1
    assert not any(n.endswith(".deleted") for n in files(log))
    assert len(log.pending_deletions) == 0


def test_a_crash_between_rename_and_removal_leaves_nothing_behind(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR)
    fill(log, [clock.now_ms - 2 * HOUR] * 2 + [clock.now_ms] * 3)
    log.delete_old_segments()
    assert any(n.endswith(".deleted") for n in files(log))
    # No close, no checkpoint: the process died. The loader removes `.deleted` files
    # and the start follows the first segment left.
    reopened = open_log(retention_ms=HOUR, had_clean_shutdown=False)
    assert not any(n.endswith(".deleted") for n in files(reopened))
    assert (reopened.log_start_offset, reopened.log_end_offset) == (2, 5)
    assert [r.offset for r in read_all(reopened, 2)] == [2, 3, 4]


def test_closing_leaves_pending_files_for_the_loader(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR)
    fill(log, [clock.now_ms - 2 * HOUR] * 2 + [clock.now_ms])
    log.delete_old_segments()
    pending = log.pending_deletions.segments
    log.close()
    assert pending[0].log.closed and any(n.endswith(".log.deleted") for n in files(log))
    reopened = open_log(retention_ms=HOUR, log_start_offset=2)
    assert not any(n.endswith(".deleted") for n in files(reopened))


def test_a_read_taken_before_deletion_still_reads_after_the_files_went(open_log, clock):
    log = open_log(segment_bytes=per_segment(2, clock), retention_ms=HOUR, file_delete_delay_ms=0)
    fill(log, [clock.now_ms - 2 * HOUR] * 2 + [clock.now_ms])
    held = log.read(0, 1 << 20)
    expected = held.read()
    snapshot = log.segments.snapshot()  # a reader between its snapshot and its read
    log.delete_old_segments()
    assert bases(log) == [2]
    with snapshot.first.read(0, 1 << 20) as late:  # renamed, not yet removed: still readable
        assert late.read() == expected
    assert log.delete_due_files() == 1
    assert not any(n.startswith("00000000000000000000") for n in files(log))
    assert not held.records.closed  # the slice keeps the descriptor
    assert held.read() == expected and [r.offset for r in iter_records(expected)] == [0, 1]
    held.release()
    assert held.records.closed
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)


def test_appends_and_reads_run_alongside_retention(open_log, clock):
    size = len(record(clock.now_ms))
    log = open_log(segment_bytes=3 * size, retention_bytes=6 * size, file_delete_delay_ms=0)
    done = threading.Event()
    errors = []

    def append():
        try:
            for _ in range(300):
                log.append(record(clock.now_ms))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    writer = threading.Thread(target=append)
    writer.start()
    while not done.is_set():
        log.delete_old_segments()
        log.delete_due_files()
        start = log.log_start_offset
        try:
            with log.read(start, 1 << 20) as got:
                data = got.read()
        except OffsetOutOfRangeError:
            continue  # the start moved between the two calls
        offsets = [r.offset for r in iter_records(data)]
        if offsets:
            assert offsets[0] >= start
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    writer.join()
    assert not errors
    log.delete_old_segments()
    assert log.log_end_offset == 300 and log.size_in_bytes <= 6 * size
    segments = list(log.segments)
    assert segments[0].base_offset == log.log_start_offset
    assert [r.offset for r in read_all(log, log.log_start_offset)] == list(range(log.log_start_offset, 300))


# ---- the log start offset -------------------------------------------------------------------

def test_log_start_offset_never_moves_backwards(open_log, clock):
    size = len(record(clock.now_ms))
    log = open_log(segment_bytes=2 * size, retention_bytes=5 * size)
    fill(log, [clock.now_ms] * 7)  # segments 0 2 4 6
    assert log.increase_log_start_offset(5) == 5
    result = log.delete_old_segments()
    assert result.deleted[LOG_START_OFFSET].segments == 2  # 0 and 2: the next base (4) <= 5
    assert log.log_start_offset == 5 and bases(log) == [4, 6]
    assert log.increase_log_start_offset(3) == 5
    assert log.delete_old_segments().segments_deleted == 0
    assert log.log_start_offset == 5


def test_delete_records_then_whole_segments_below_go_and_the_start_survives_a_restart(tmp_path, clock):
    config = LogConfig.from_props({"segment.bytes": per_segment(3, clock), "file.delete.delay.ms": 0})
    manager = LogManager(str(tmp_path), config_for=lambda topic: config, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    fill(log, [clock.now_ms] * 10)  # segments 0 3 6 9
    assert log.increase_log_start_offset(7) == 7
    manager.checkpoint()
    result = log.delete_segments_below_log_start()
    assert result.deleted[LOG_START_OFFSET].segments == 2 and bases(log) == [6, 9]
    assert manager.delete_due_files() == 2
    manager.shutdown()
    assert "t 0 7" in (tmp_path / "log-start-offset-checkpoint").read_text().splitlines()
    again = LogManager(str(tmp_path), config_for=lambda topic: config, clock=clock)
    again.startup()
    log = again.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (7, 10)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 1000)
    assert [r.offset for r in read_all(log, 7)] == [7, 8, 9]
    again.shutdown()


# ---- the manager's pass -------------------------------------------------------------------------

def test_manager_pass_covers_every_log_and_logs_its_stats(tmp_path, clock):
    config = LogConfig.from_props({"segment.bytes": per_segment(2, clock), "retention.ms": HOUR,
                                   "file.delete.delay.ms": 500})
    manager = LogManager(str(tmp_path), config_for=lambda topic: config, clock=clock)
    manager.startup()
    logs = [manager.get_or_create_log("a", 0), manager.get_or_create_log("b", 1)]
    for one in logs:
        fill(one, [clock.now_ms - 2 * HOUR] * 4 + [clock.now_ms])
    with structlog.testing.capture_logs() as captured:
        results = manager.delete_old_segments()
    assert sorted((r.log, r.segments_deleted, r.log_start_offset) for r in results) == [("a-0", 2, 4), ("b-1", 2, 4)]
    deleted = [e for e in captured if e["event"] == "segments_deleted"]
    assert {e["log"] for e in deleted} == {"a-0", "b-1"}
    assert all(e["retention_ms_breach_segments"] == 2 and e["log_start_offset"] == 4 and e["duration_ms"] >= 0
               for e in deleted)
    (summary,) = [e for e in captured if e["event"] == "retention_pass"]
    assert (summary["logs"], summary["segments"], summary["retention_ms_breach_segments"]) == (2, 4, 4)
    assert summary["bytes"] == sum(r.bytes_deleted for r in results) and "duration_ms" in summary
    assert manager.delete_due_files() == 0
    clock.advance(500)
    assert manager.delete_due_files() == 4
    manager.shutdown()


def test_a_deleted_topic_closes_its_pending_segments(tmp_path, clock):
    config = LogConfig.from_props({"segment.bytes": per_segment(2, clock), "retention.ms": HOUR})
    manager = LogManager(str(tmp_path), config_for=lambda topic: config, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    fill(log, [clock.now_ms - 2 * HOUR] * 2 + [clock.now_ms])
    manager.delete_old_segments()
    (pending,) = log.pending_deletions.segments
    manager.delete_log("t", 0)
    assert pending.log.closed and manager.delete_due_files() == 0
    manager.shutdown()


# ---- broker-level defaults --------------------------------------------------------------------

@pytest.mark.parametrize("props, expected", [
    ({"log.retention.hours": "-1"}, -1),
    ({"log.retention.minutes": "-3"}, -1),
    ({"log.retention.ms": "-5", "log.retention.hours": "2"}, -1),
    ({"log.retention.ms": "100", "log.retention.hours": "2"}, 100),
    ({"log.retention.hours": "2"}, 2 * HOUR),
])
def test_broker_retention_names_map_as_kafkas(props, expected):
    assert broker_log_defaults(props).retention_ms == expected


def test_broker_size_and_delay_names_map():
    config = broker_log_defaults({"log.retention.bytes": "123", "log.segment.delete.delay.ms": "7"})
    assert (config.retention_bytes, config.file_delete_delay_ms) == (123, 7)


# ---- the policy alone, and the Log's mutator ----------------------------------------------------

def test_the_policy_decides_without_changing_the_log(open_log, clock):
    size = len(record(clock.now_ms))
    log = open_log(segment_bytes=2 * size, retention_bytes=3 * size)
    fill(log, [clock.now_ms] * 7)  # segments 0 2 4 6
    snapshot = log.segments.snapshot()
    assert retention.rules(log.config) == retention.REASONS
    chosen = retention.deletion(RETENTION_BYTES, snapshot, config=log.config, log_start_offset=0,
                                now_ms=clock.now_ms)
    assert chosen.reason == RETENTION_BYTES and [s.base_offset for s in chosen.segments] == [0, 2]
    assert retention.deletion(RETENTION_MS, snapshot, config=log.config, log_start_offset=0,
                              now_ms=clock.now_ms) is None  # nothing is older than retention.ms
    assert retention.deletion(LOG_START_OFFSET, snapshot, config=log.config, log_start_offset=3,
                              now_ms=clock.now_ms).segments == [snapshot.first]
    assert bases(log) == [0, 2, 4, 6] and log.log_start_offset == 0 and len(log.pending_deletions) == 0
    compacted = LogConfig.from_props({"cleanup.policy": "compact"})
    assert retention.rules(compacted) == (LOG_START_OFFSET,)
    with pytest.raises(ValueError, match="unknown retention rule"):
        retention.deletion("tired", snapshot, config=log.config, log_start_offset=0, now_ms=0)


def test_remove_segments_removes_the_oldest_and_skips_what_is_no_longer_the_logs(open_log, clock):
    size = len(record(clock.now_ms))
    log = open_log(segment_bytes=2 * size)
    fill(log, [clock.now_ms] * 7)  # segments 0 2 4 6
    first, second, third, active = log.segments
    result = log.remove_segments([first, second], RETENTION_MS)
    assert result.deleted[RETENTION_MS].segments == 2 and result.log_start_offset == 4
    assert bases(log) == [4, 6] and len(log.pending_deletions) == 2
    # Gone already (a concurrent pass took them): nothing happens, and a stale list stops
    # at its first segment that is no longer the log's.
    assert log.remove_segments([first, second, third], RETENTION_MS).segments_deleted == 0
    assert log.remove_segments([second], LOG_START_OFFSET).segments_deleted == 0
    assert bases(log) == [4, 6]
    with pytest.raises(ValueError, match="reason"):
        log.remove_segments([third], "because")
    result = log.remove_segments([third, active], RETENTION_BYTES)  # every segment: roll first
    assert result.rolled and bases(log) == [7] and log.log_start_offset == 7 == log.log_end_offset
    log.append(record(clock.now_ms))
    assert log.log_end_offset == 8
