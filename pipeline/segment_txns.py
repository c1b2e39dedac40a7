"""What read_committed sees of one partition's segment files (`strata-segments`).

Contract:
- `committed_view(directory, bases)` (on the driver, from the files alone) gives a
  `CommittedView` of the partition whose segments start at `bases`:
  `stable_end`, the partition's last stable offset in this copy (the first
  offset of its oldest transaction with no marker yet, else NO_END), and
  `aborted`, every aborted transaction its `.txnindex` files record.
- The open transactions are those of the newest producer-state snapshot
  (`<offset>.snapshot`: its producers' open-transaction first offsets, as of
  that offset) updated by the batch headers from the snapshot's offset on (a
  transactional batch opens its producer's transaction, a marker closes it), as
  the broker's recovery does; without a snapshot every segment's headers are
  read. Only headers are read (61 bytes a batch).
- `view.aborted_in(first, end)` are the (producer id, first offset) pairs of the
  aborted transactions with data in [first, end): Kafka's collectAbortedTransactions
  over the segment and the ones after it (an abort marker, and so its entry, may
  lie in a later segment than the transaction's data).
- A snapshot or index that cannot be read raises CorruptRecordError naming the file:
  read_committed is never answered from a guess.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from kafka_format.batch import BATCH_HEADER, CONTROL_BIT, TRANSACTIONAL_BIT
from kafka_format.errors import CorruptIndexError, CorruptRecordError
from kafka_format.framing import ENTRY_PREFIX, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2
from storage.fileutil import parse_segment_file_name, segment_file_name
from storage.producer_state import SNAPSHOT_SUFFIX, CorruptSnapshotError, decode_snapshot
from storage.txn_index import AbortedTxn, decode_entries
from storage.txn_markers import decode_marker

__all__ = ["CommittedView", "committed_view", "scan_headers", "NO_END"]

NO_END = 2**63 - 1


@dataclass(frozen=True)
class CommittedView:
    stable_end: int
    aborted: tuple[AbortedTxn, ...]

    def aborted_in(self, first: int, end: int) -> tuple[tuple[int, int], ...]:
        return tuple((t.producer_id, t.first_offset) for t in self.aborted
                     if t.last_offset >= first and t.first_offset < end)


def committed_view(directory: str, bases: list[int]) -> CommittedView:
    aborted: list[AbortedTxn] = []
    for base in bases:
        path = os.path.join(directory, segment_file_name(base, ".txnindex"))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        try:
            aborted.extend(decode_entries(data, path))
        except CorruptIndexError as e:
            raise CorruptRecordError(str(e)) from None
    return CommittedView(_stable_end(directory, bases), tuple(aborted))


def _stable_end(directory: str, bases: list[int]) -> int:
    start, open_txns = _newest_snapshot(directory, bases)
    for i, base in enumerate(bases):
        if i + 1 < len(bases) and bases[i + 1] <= start:
            continue  # wholly below the snapshot
        _scan_headers(os.path.join(directory, segment_file_name(base, ".log")), start, open_txns)
    return min(open_txns.values(), default=NO_END)


def _newest_snapshot(directory: str, bases: list[int]) -> tuple[int, dict[int, int]]:
    """(offset, producer id -> open transaction's first offset) of the newest snapshot
    at or above the first segment; (first base, {}) when there is none."""
    first = bases[0] if bases else 0
    offsets = sorted((parsed[0] for name in os.listdir(directory)
                      if (parsed := parse_segment_file_name(name)) and parsed[1] == SNAPSHOT_SUFFIX
                      and parsed[0] >= first), reverse=True)
    if not offsets:
        return first, {}
    path = os.path.join(directory, segment_file_name(offsets[0], SNAPSHOT_SUFFIX))
    with open(path, "rb") as f:
        data = f.read()
    try:
        entries = decode_snapshot(data)
    except CorruptSnapshotError as e:
        raise CorruptRecordError(f"{path}: {e}") from None
    return offsets[0], {e.producer_id: e.current_txn_first_offset for e in entries
                        if e.current_txn_first_offset >= 0}


def _scan_headers(path: str, start: int, open_txns: dict[int, int]) -> None:
    """Open and close transactions by the batch headers of the segment at `path`
    (batches wholly below `start` are passed over). A trailing entry cut short ends it."""
    with open(path, "rb") as f:
        def read_at(position: int, length: int) -> bytes:
            f.seek(position)
            return f.read(length)
        scan_headers(read_at, start, open_txns)


def scan_headers(read_at: Callable[[int, int], bytes], start: int, open_txns: dict[int, int]) -> None:
    """`_scan_headers` over any segment bytes: `read_at(position, length)` returns
    up to `length` bytes of the segment from `position` (fewer at its end)."""
    position = 0
    while True:
        head = read_at(position, BATCH_HEADER.size)
        if len(head) < LOG_OVERHEAD + 1:
            return
        base, size = ENTRY_PREFIX.unpack_from(head, 0)
        if size <= 0:
            return
        if head[MAGIC_OFFSET] == MAGIC_V2 and len(head) == BATCH_HEADER.size:
            (_, _, _, _, _, attributes, last_delta, _, _, producer_id, _, _,
             count) = BATCH_HEADER.unpack_from(head, 0)
            if base + last_delta >= start and producer_id >= 0:
                if attributes & CONTROL_BIT:
                    batch = read_at(position, LOG_OVERHEAD + size)
                    if len(batch) < LOG_OVERHEAD + size:
                        return  # cut short
                    if count and decode_marker(batch) is not None:
                        open_txns.pop(producer_id, None)
                elif attributes & TRANSACTIONAL_BIT:
                    open_txns.setdefault(producer_id, base)
        position += LOG_OVERHEAD + size
