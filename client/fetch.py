"""What a consumer makes of one partition's fetched message set (pure logic, no I/O).

Contract:
- `read_fetched(message_set, fetch_offset)` walks the whole entries of a FETCH
  answer and returns a `Fetched`: the records at or above `fetch_offset` (a
  compacted or compressed entry may start below it: the broker sends the
  entry that holds the offset, and records before it are skipped), and
  `next_offset`, one past the last offset of the last whole entry (never
  below `fetch_offset`), which is where the next fetch starts even when the
  entries held no wanted record (empty batches, records compacted away,
  control batches). A trailing entry cut short by maxBytes is ignored: it
  will be fetched whole next time.
- `too_small` is True when the answer held bytes but no whole entry: the next
  entry is larger than the fetch size. `grow_fetch_size(size, cap)` doubles
  the size (as the seed consumer did) and raises MessageTooLargeForFetch
  (code MESSAGE_TOO_LARGE) when the size is already at the cap.
- Each entry's CRC is checked (Kafka's `check.crcs=true`); a bad entry raises
  StrataClientError(CORRUPT_MESSAGE). Records of control batches are never
  returned, but their offsets are passed.
"""

from __future__ import annotations

from typing import NamedTuple

from kafka_format import Record as StoredRecord
from kafka_format import iter_entries
from kafka_format.errors import CorruptRecordError
from protocol import ErrorCode

from .errors import StrataClientError

__all__ = ["Fetched", "read_fetched", "grow_fetch_size", "MessageTooLargeForFetch"]


class Fetched(NamedTuple):
    records: list[StoredRecord]
    next_offset: int
    too_small: bool


class MessageTooLargeForFetch(StrataClientError):
    def __init__(self, message: str):
        super().__init__(message, ErrorCode.MESSAGE_TOO_LARGE)


def read_fetched(message_set, fetch_offset: int) -> Fetched:
    buf = memoryview(message_set)
    records: list[StoredRecord] = []
    next_offset = fetch_offset
    whole_entries = 0
    try:
        for entry in iter_entries(buf):
            whole_entries += 1
            entry.ensure_valid()
            if entry.last_offset < fetch_offset:
                continue  # wholly below the offset asked for (it is still "seen")
            if not entry.is_control:
                records.extend(r for r in entry.records() if r.offset >= fetch_offset)
            next_offset = max(next_offset, entry.last_offset + 1)
    except CorruptRecordError as e:
        raise StrataClientError(f"corrupt data at offset {next_offset}: {e}",
                                ErrorCode.CORRUPT_MESSAGE) from None
    return Fetched(records, next_offset, too_small=whole_entries == 0 and len(buf) > 0)


def grow_fetch_size(size: int, cap: int, where: str = "") -> int:
    """The next fetch size after an answer held only a cut-short entry."""
    if size >= cap:
        at = f" at {where}" if where else ""
        raise MessageTooLargeForFetch(
            f"the entry{at} is larger than the largest fetch size allowed ({cap} bytes)")
    return min(size * 2, cap)
