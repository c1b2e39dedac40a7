"""ListOffsets MAX_TIMESTAMP (-3): the record holding a log's largest timestamp.

Kafka 3.8+ (KAFKA-16310) answers the offset of that record itself, not the last
offset of its batch. The segment with the largest tracked timestamp (the first one
on a tie, as Kafka's maxBy) names the batch; only that batch is read
(LogSegment.max_timestamp_record). Segments whose largest timestamp sits below the
log start offset (DeleteRecords) are passed over.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from .segment import LogSegment, TimestampOffset


class _SegmentSnapshots(Protocol):
    def snapshot(self) -> Iterable[LogSegment]: ...


class _LogView(Protocol):
    @property
    def log_start_offset(self) -> int: ...

    @property
    def segments(self) -> _SegmentSnapshots: ...


def max_timestamp_offset(log: _LogView) -> TimestampOffset | None:
    """(timestamp, offset) of the first record holding the largest timestamp at or
    after the log start, or None when no record has a timestamp (blocking)."""
    return max_timestamp_in(log.segments.snapshot(), log.log_start_offset)


def max_timestamp_in(segments: Iterable[LogSegment], start: int) -> TimestampOffset | None:
    """`max_timestamp_offset` over `segments`, at or after the offset `start`."""
    chosen = None
    for segment in segments:
        ts = segment.max_timestamp_so_far
        if ts >= 0 and segment.offset_of_max_timestamp_so_far >= start and (
                chosen is None or ts > chosen.max_timestamp_so_far):
            chosen = segment
    return None if chosen is None else chosen.max_timestamp_record(start)
