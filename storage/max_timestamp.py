"""ListOffsets MAX_TIMESTAMP (-3): the record holding a log's largest timestamp.

Kafka 3.8+ (KAFKA-16310) answers the offset of that record itself, not the last
offset of its batch. The segment with the largest tracked timestamp (the first one
on a tie, as Kafka's maxBy) names the batch; only that batch is read
(LogSegment.max_timestamp_record). Segments whose largest timestamp sits below the
log start offset (DeleteRecords) are passed over.
"""

from __future__ import annotations

from .log import Log
from .segment import TimestampOffset


def max_timestamp_offset(log: Log) -> TimestampOffset | None:
    """(timestamp, offset) of the first record holding the largest timestamp at or
    after the log start, or None when no record has a timestamp (blocking)."""
    start = log.log_start_offset
    chosen = None
    for segment in log.segments.snapshot():
        ts = segment.max_timestamp_so_far
        if ts >= 0 and segment.offset_of_max_timestamp_so_far >= start and (
                chosen is None or ts > chosen.max_timestamp_so_far):
            chosen = segment
    return None if chosen is None else chosen.max_timestamp_record(start)
