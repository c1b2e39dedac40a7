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
- read_committed: `read_fetched(..., aborted=[(producer id, first offset), ...])`
  (a version-2 FETCH answer's aborted list) also drops the transactional
  batches of aborted transactions, as Kafka's consumer does: the aborted
  transactions are taken in first-offset order; one whose first offset is at
  or below a batch's last offset marks its producer aborted, that producer's
  transactional batches are dropped, and its ABORT marker unmarks it.
  `aborted=None` is read_uncommitted (every data batch counts).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import NamedTuple

from kafka_format import LogEntry, iter_entries
from kafka_format import Record as StoredRecord
from kafka_format.batch import CONTROL_BIT, TRANSACTIONAL_BIT
from kafka_format.errors import CorruptRecordError
from kafka_format.framing import MAGIC_V2
from protocol import ErrorCode

from .errors import StrataClientError

CONTROL_KEY_BYTES = 4  # a control record's key: version int16, type int16
ABORT_TYPE = 0  # Kafka's ControlRecordType.ABORT

__all__ = ["AbortedFilter", "Fetched", "is_abort_marker", "read_fetched", "grow_fetch_size", "MessageTooLargeForFetch"]


class Fetched(NamedTuple):
    records: list[StoredRecord]
    next_offset: int
    too_small: bool


class MessageTooLargeForFetch(StrataClientError):
    def __init__(self, message: str):
        super().__init__(message, ErrorCode.MESSAGE_TOO_LARGE)


class AbortedFilter:
    """Kafka's consumer-side rule for read_committed (CompletedFetch): which
    transactional batches of one FETCH answer belong to aborted transactions."""

    __slots__ = ("_pending", "_aborted_producers")

    def __init__(self, aborted: Iterable[tuple[int, int]]):
        self._pending = [(first, producer_id) for producer_id, first in aborted]
        heapq.heapify(self._pending)
        self._aborted_producers: set[int] = set()

    def drops(self, entry: LogEntry) -> bool:
        """True when `entry` is data of an aborted transaction (skip it whole)."""
        if entry.magic != MAGIC_V2:
            return False
        return self.drops_batch(entry.last_offset, entry.producer_id, entry.attributes,
                                entry.is_control and is_abort_marker(entry))

    def drops_batch(self, last_offset: int, producer_id: int, attributes: int, abort_marker: bool) -> bool:
        """`drops` from a magic-2 batch's header fields; `abort_marker`: the batch is
        a control batch whose first record is an ABORT marker."""
        if producer_id < 0:
            return False
        pending = self._pending
        while pending and pending[0][0] <= last_offset:
            self._aborted_producers.add(heapq.heappop(pending)[1])
        if attributes & CONTROL_BIT:
            if abort_marker:
                self._aborted_producers.discard(producer_id)
            return False
        return bool(attributes & TRANSACTIONAL_BIT) and producer_id in self._aborted_producers


def is_abort_marker(entry: LogEntry) -> bool:
    """Whether a control batch's first record is an ABORT marker (key: version
    int16, type int16; Kafka's ControlRecordType ABORT is 0)."""
    if not entry.record_count:
        return False
    key = entry.records()[0].key
    return (key is not None and len(key) >= CONTROL_KEY_BYTES
            and int.from_bytes(key[2:4], "big", signed=True) == ABORT_TYPE)


def read_fetched(message_set, fetch_offset: int,
                 aborted: Iterable[tuple[int, int]] | None = None) -> Fetched:
    buf = memoryview(message_set)
    records: list[StoredRecord] = []
    next_offset = fetch_offset
    whole_entries = 0
    aborted_filter = None if aborted is None else AbortedFilter(aborted)
    try:
        for entry in iter_entries(buf):
            whole_entries += 1
            entry.ensure_valid()
            dropped = aborted_filter is not None and aborted_filter.drops(entry)
            if entry.last_offset < fetch_offset:
                continue  # wholly below the offset asked for (it is still "seen")
            if not entry.is_control and not dropped:
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
