"""Retention: deleting a partition log's old segments (Kafka's
UnifiedLog.deleteOldSegments and LocalLog.deleteSegmentFiles).

Contract:
- `delete_old_segments(log, now_ms)` applies Kafka's rules in Kafka's order:
  the log-start-offset breach (a segment goes when the NEXT segment's base
  offset is <= the log start offset), then size (`retention.bytes`: while
  `size - retention.bytes - segment size >= 0` the oldest goes), then time
  (`retention.ms`: `now - largest timestamp > retention.ms`, the largest
  timestamp being the file's mtime when the segment has none). Each rule walks
  from the oldest segment and stops at the first that stays; a final empty
  segment never goes. `cleanup.policy=compact` applies only the first rule;
  `delete` and `compact,delete` apply all three. -1 disables a limit.
- When every segment would go, a new empty active segment is rolled at the log
  end first, so the log keeps its log end offset and takes appends at once.
- The log start offset moves to the first surviving base offset (never back;
  the recovery point follows it, as in Kafka's updateLogStartOffset), before
  the segments leave the copy-on-write list, so a reader that takes a
  snapshot without them sees the new start. Readers holding an older snapshot
  or a FileSlice keep reading: nothing is closed at this point.
- The segments' files are renamed to `.deleted` and removed
  `file.delete.delay.ms` later by `PendingDeletions.delete_due` (the broker calls
  it periodically). Closing a log closes what is still pending and leaves the
  `.deleted` files, which the loader removes at the next start; a crash between
  the rename and the removal ends the same way.
- Locking: each rule is one step under the log's append lock (decide, roll if
  needed, move the log start, drop from the list, rename: a few syscalls per
  segment); removing the files happens later, outside it.
- Stats: every log that lost segments logs `segments_deleted` on
  `strata.retention` (segments and bytes per reason, the new log start offset,
  the duration); `run_retention` logs one `retention_pass` line per pass.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Optional

import structlog

from .segment import LogSegment
from .segments import SegmentsSnapshot

if TYPE_CHECKING:
    from .log import Log

DELETED_SUFFIX = ".deleted"

# Reasons, in the order Kafka applies them (its SegmentDeletionReason names).
LOG_START_OFFSET = "log_start_offset_breach"
RETENTION_BYTES = "retention_size_breach"
RETENTION_MS = "retention_ms_breach"
REASONS = (LOG_START_OFFSET, RETENTION_BYTES, RETENTION_MS)

logger = structlog.get_logger("strata.retention")

# (segment, the next segment or None) -> delete it?
Predicate = Callable[[LogSegment, Optional[LogSegment]], bool]


@dataclass
class Deleted:
    segments: int = 0
    bytes: int = 0


@dataclass
class RetentionResult:
    """What one retention pass did to one log."""

    log: str
    log_start_offset: int  # after the pass
    deleted: dict[str, Deleted] = field(default_factory=lambda: {r: Deleted() for r in REASONS})
    rolled: bool = False  # every segment went: an empty active segment was rolled first
    duration_ms: float = 0.0

    @property
    def segments_deleted(self) -> int:
        return sum(d.segments for d in self.deleted.values())

    @property
    def bytes_deleted(self) -> int:
        return sum(d.bytes for d in self.deleted.values())

    def fields(self) -> dict:
        """Flat key/values for a structured log line."""
        out: dict = {"log": self.log, "log_start_offset": self.log_start_offset,
                     "segments": self.segments_deleted, "bytes": self.bytes_deleted}
        for reason, d in self.deleted.items():
            out[f"{reason}_segments"] = d.segments
            out[f"{reason}_bytes"] = d.bytes
        out["rolled"] = self.rolled
        out["duration_ms"] = round(self.duration_ms, 3)
        return out


# ---- the rules --------------------------------------------------------------------------------

def delete_old_segments(log: "Log", now_ms: int) -> RetentionResult:
    """One retention pass over `log` (Kafka's deleteOldSegments)."""
    started = time.perf_counter()
    result = RetentionResult(log.name, log.log_start_offset)
    _delete(log, LOG_START_OFFSET, _log_start_offset_breached, result)
    if log.config.delete:
        _delete(log, RETENTION_BYTES, _retention_bytes_breached, result)
        _delete(log, RETENTION_MS, lambda one, segments: _retention_ms_breached(one, now_ms), result)
    return _finish(log, result, started)


def delete_log_start_offset_breached_segments(log: "Log") -> RetentionResult:
    """Only the first rule: whole segments below the log start offset (after DELETE_RECORDS)."""
    started = time.perf_counter()
    result = RetentionResult(log.name, log.log_start_offset)
    _delete(log, LOG_START_OFFSET, _log_start_offset_breached, result)
    return _finish(log, result, started)


def _finish(log: "Log", result: RetentionResult, started: float) -> RetentionResult:
    result.log_start_offset = log.log_start_offset
    result.duration_ms = (time.perf_counter() - started) * 1000
    if result.segments_deleted:
        logger.info("segments_deleted", **result.fields())
    return result


def _log_start_offset_breached(log: "Log", segments: SegmentsSnapshot) -> Predicate:
    start = log.log_start_offset
    return lambda segment, following: following is not None and following.base_offset <= start


def _retention_bytes_breached(log: "Log", segments: SegmentsSnapshot) -> Predicate | None:
    retention = log.config.retention_bytes
    size = segments.size_in_bytes()
    if retention < 0 or size < retention:
        return None
    diff = size - retention

    def breached(segment: LogSegment, following: LogSegment | None) -> bool:
        nonlocal diff
        if diff - segment.size >= 0:
            diff -= segment.size
            return True
        return False

    return breached


def _retention_ms_breached(log: "Log", now_ms: int) -> Predicate | None:
    retention = log.config.retention_ms
    if retention < 0:
        return None

    def breached(segment: LogSegment, following: LogSegment | None) -> bool:
        largest = segment.largest_timestamp
        if largest > now_ms:
            logger.debug("future_timestamp", log=log.name, base_offset=segment.base_offset,
                         largest_timestamp=largest, now_ms=now_ms)
        return now_ms - largest > retention

    return breached


def deletable_segments(segments: SegmentsSnapshot, predicate: Predicate) -> list[LogSegment]:
    """From the oldest segment, those the predicate takes, up to the first it keeps;
    a final empty segment is never among them (Kafka's deletableSegments)."""
    ordered = segments.segments
    deletable = []
    for i, segment in enumerate(ordered):
        following = ordered[i + 1] if i + 1 < len(ordered) else None
        last_and_empty = following is None and segment.size == 0
        if predicate(segment, following) and not last_and_empty:
            deletable.append(segment)
        else:
            break
    return deletable


def _delete(log: "Log", reason: str, make_predicate, result: RetentionResult) -> None:
    """One rule, one step under the log's lock (Kafka's deleteOldSegments(predicate))."""
    with log._lock:  # noqa: SLF001 -- retention is part of the Log, kept in its own module
        if log._closed:  # noqa: SLF001
            return
        segments = log.segments.snapshot()
        predicate = make_predicate(log, segments)
        if predicate is None:
            return
        deletable = deletable_segments(segments, predicate)
        if not deletable:
            return
        if len(deletable) == len(segments):
            # A log always has a segment: roll an empty one at the log end first.
            rolled = log._roll(log.log_end_offset)  # noqa: SLF001
            result.rolled = True
            if deletable[-1] is rolled:
                deletable.pop()
            if not deletable:
                return
        following = log.segments.snapshot().higher(deletable[-1].base_offset)
        assert following is not None  # the roll above guarantees a survivor
        if following.base_offset > log.log_start_offset:
            log._update_log_start_offset(following.base_offset)  # noqa: SLF001
        stats = result.deleted[reason]
        for segment in deletable:
            stats.segments += 1
            stats.bytes += segment.size
            log.segments.remove(segment.base_offset)
        retire_segments(log, deletable)


def retire_segments(log: "Log", segments: Iterable[LogSegment]) -> None:
    """Rename segments that already left the log's list to `.deleted` and schedule
    their files' removal after `file.delete.delay.ms` (Kafka's deleteSegmentFiles,
    asynchronous). The caller holds the log's lock."""
    due = log._clock.monotonic_ms() + log.config.file_delete_delay_ms  # noqa: SLF001
    for segment in segments:
        if not segment.log.path.endswith(DELETED_SUFFIX):
            segment.change_file_suffixes("", DELETED_SUFFIX)
        log.pending_deletions.schedule(segment, due)


# ---- the delayed file removal ---------------------------------------------------------------------

class PendingDeletions:
    """Segments renamed to `.deleted`, waiting for their due time (monotonic ms).

    Thread-safe: scheduling (under the log's lock), `delete_due` (the broker's
    periodic task) and `close` may run on different threads."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, LogSegment]] = []
        self._seq = itertools.count()  # ties keep their order; segments never compare
        self._lock = threading.Lock()
        self._closed = False

    def schedule(self, segment: LogSegment, due_ms: int) -> None:
        with self._lock:
            if self._closed:
                segment.close()  # too late to delete: the loader removes `.deleted` files
                return
            heapq.heappush(self._heap, (due_ms, next(self._seq), segment))

    def delete_due(self, now_ms: int) -> int:
        """Remove the files of every segment due by `now_ms`; returns how many.
        A FileSlice still held keeps its data readable until released."""
        due = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now_ms:
                due.append(heapq.heappop(self._heap)[2])
        for segment in due:
            segment.delete()
        return len(due)

    def close(self) -> None:
        """Close what is still pending, leaving its `.deleted` files for the loader."""
        with self._lock:
            self._closed = True
            pending, self._heap = self._heap, []
        for _, _, segment in pending:
            segment.close()

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return [segment for _, _, segment in sorted(self._heap, key=lambda e: (e[0], e[1]))]


# ---- every log ---------------------------------------------------------------------------------

def run_retention(logs: Iterable["Log"], now_ms: int) -> list[RetentionResult]:
    """One pass over `logs` (Kafka's LogManager.cleanupLogs): a log that fails is
    logged and the pass goes on with the next."""
    started = time.perf_counter()
    results = []
    checked = 0
    for one in logs:
        checked += 1
        try:
            results.append(one.delete_old_segments(now_ms))
        except Exception:
            logger.exception("retention_failed", log=one.name)
    totals = {r: Deleted() for r in REASONS}
    for result in results:
        for reason, d in result.deleted.items():
            totals[reason].segments += d.segments
            totals[reason].bytes += d.bytes
    fields: dict = {"logs": checked, "segments": sum(t.segments for t in totals.values()),
                    "bytes": sum(t.bytes for t in totals.values())}
    for reason, d in totals.items():
        fields[f"{reason}_segments"] = d.segments
        fields[f"{reason}_bytes"] = d.bytes
    fields["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
    (logger.info if fields["segments"] else logger.debug)("retention_pass", **fields)
    return results
