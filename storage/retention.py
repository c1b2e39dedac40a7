"""Retention policy: which of a partition log's old segments go, and why (Kafka's
UnifiedLog.deleteOldSegments rules).

Contract:
- Pure policy: `deletion(reason, segments, ...)` looks at a snapshot of a log's
  segments, its log start offset, its config and the time, and returns the
  segments one rule deletes with the rule's reason (a `Deletion`), or None. It
  changes nothing; `Log.delete_old_segments` asks it rule by rule under the log's
  lock and removes what it returns (`Log.remove_segments`: rolls first when
  every segment goes, moves the log start, renames the files to `.deleted`).
- `rules(config)` gives Kafka's rules in Kafka's order: the log-start-offset
  breach (a segment goes when the NEXT segment's base offset is <= the log start
  offset), then size (`retention.bytes`: while `size - retention.bytes - segment
  size >= 0` the oldest goes), then time (`retention.ms`: `now - largest
  timestamp > retention.ms`, the largest timestamp being the file's mtime when
  the segment has none). Each rule walks from the oldest segment and stops at
  the first that stays; a final empty segment never goes.
  `cleanup.policy=compact` applies only the first rule; `delete` and
  `compact,delete` apply all three. -1 disables a limit.
- Stats: `RetentionResult` is what one pass did to one log; `log_result` logs
  `segments_deleted` on `strata.retention` for a log that lost segments (segments
  and bytes per reason, the new log start offset, the duration) and `log_pass`
  one `retention_pass` line per pass over every log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import structlog

from .config import LogConfig
from .segment import LogSegment
from .segments import SegmentsSnapshot

# Reasons, in the order Kafka applies them (its SegmentDeletionReason names).
LOG_START_OFFSET = "log_start_offset_breach"
RETENTION_BYTES = "retention_size_breach"
RETENTION_MS = "retention_ms_breach"
REASONS = (LOG_START_OFFSET, RETENTION_BYTES, RETENTION_MS)

logger = structlog.get_logger("strata.retention")

# (segment, the next segment or None) -> delete it?
Predicate = Callable[[LogSegment, LogSegment | None], bool]


class Deletion(NamedTuple):
    """The segments one rule deletes (the log's oldest, in order) and its reason."""

    reason: str
    segments: list[LogSegment]


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

def rules(config: LogConfig) -> tuple[str, ...]:
    """The rules `config` applies, in Kafka's order."""
    return REASONS if config.delete else (LOG_START_OFFSET,)


def deletion(reason: str, segments: SegmentsSnapshot, *, config: LogConfig, log_start_offset: int,
             now_ms: int, log_name: str = "") -> Deletion | None:
    """The segments rule `reason` deletes from `segments` (oldest first), or None."""
    if reason == LOG_START_OFFSET:
        predicate: Predicate | None = _log_start_offset_breached(log_start_offset)
    elif reason == RETENTION_BYTES:
        predicate = _retention_bytes_breached(config.retention_bytes, segments)
    elif reason == RETENTION_MS:
        predicate = _retention_ms_breached(config.retention_ms, now_ms, log_name)
    else:
        raise ValueError(f"unknown retention rule {reason!r}")
    if predicate is None:
        return None
    deletable = deletable_segments(segments, predicate)
    return Deletion(reason, deletable) if deletable else None


def _log_start_offset_breached(start: int) -> Predicate:
    return lambda segment, following: following is not None and following.base_offset <= start


def _retention_bytes_breached(retention: int, segments: SegmentsSnapshot) -> Predicate | None:
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


def _retention_ms_breached(retention: int, now_ms: int, log_name: str) -> Predicate | None:
    if retention < 0:
        return None

    def breached(segment: LogSegment, following: LogSegment | None) -> bool:
        largest = segment.largest_timestamp
        if largest > now_ms:
            logger.debug("future_timestamp", log=log_name, base_offset=segment.base_offset,
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


# ---- stats ------------------------------------------------------------------------------------

def log_result(result: RetentionResult) -> None:
    """The `segments_deleted` line of a log that lost segments."""
    if result.segments_deleted:
        logger.info("segments_deleted", **result.fields())


def log_pass(results: list[RetentionResult], logs_checked: int, duration_ms: float) -> None:
    """The `retention_pass` line of one pass over every log (Kafka's cleanupLogs)."""
    totals = {r: Deleted() for r in REASONS}
    for result in results:
        for reason, d in result.deleted.items():
            totals[reason].segments += d.segments
            totals[reason].bytes += d.bytes
    fields: dict = {"logs": logs_checked, "segments": sum(t.segments for t in totals.values()),
                    "bytes": sum(t.bytes for t in totals.values())}
    for reason, d in totals.items():
        fields[f"{reason}_segments"] = d.segments
        fields[f"{reason}_bytes"] = d.bytes
    fields["duration_ms"] = round(duration_ms, 3)
    (logger.info if fields["segments"] else logger.debug)("retention_pass", **fields)
