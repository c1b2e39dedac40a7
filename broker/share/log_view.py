"""What a share partition needs of the partition's log: the protocol the broker
core provides, and the batch summaries of a read.

The share partition never touches record bytes. The core reads the log from the
share partition's next fetch offset (bounded at the last stable offset for
read_committed, at the high watermark otherwise), sends the bytes to the
client, and hands the share partition a `LogRead`: the header of each batch in
those bytes and, for read_committed, the aborted transactions overlapping them
(Kafka's FetchResponse AbortedTransactions, storage.log.Log.aborted_transactions).

    ShareLog (implemented by the core, one per topic-partition):
      log_start_offset() -> int        the first offset of the log
      high_watermark() -> int          the offset after the last record (one node: the log end)
      last_stable_offset() -> int      Kafka's LSO: the first offset of the oldest open transaction
      offset_for_timestamp(ts) -> int | None   the first offset with a timestamp >= ts
                                       (ListOffsets), None when there is none
`batches_of(data)` summarizes the batches of bytes read from a log (`batches_until`
those up to an offset, with the bytes they fill);
`StorageShareLog` is the ShareLog of one storage.log.Log, with the read a
ShareFetch makes (bytes for the client and their LogRead).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from kafka_format import iter_entries
from storage.log import Log


class BatchInfo(NamedTuple):
    """The header fields of one batch read from the log."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    is_transactional: bool = False
    is_control: bool = False


class AbortedTxn(NamedTuple):
    """An aborted transaction: its producer and the first offset it wrote."""

    producer_id: int
    first_offset: int


class LogRead(NamedTuple):
    """The batches of one read of the log, in offset order; (read_committed) the
    aborted transactions that overlap them; the offset the read started at (-1:
    unknown), so offsets between it and the first batch are known to be absent."""

    batches: Sequence[BatchInfo]
    aborted: Sequence[AbortedTxn] = ()
    fetch_offset: int = -1


class ShareLog(Protocol):
    def log_start_offset(self) -> int: ...

    def high_watermark(self) -> int: ...

    def last_stable_offset(self) -> int: ...

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None: ...


def batches_of(data) -> list[BatchInfo]:
    """The BatchInfo of each whole entry in `data` (bytes read from a log)."""
    return [BatchInfo(e.base_offset, e.last_offset, e.producer_id, e.is_transactional, e.is_control)
            for e in iter_entries(data)]


def batches_until(data, end_offset: int) -> tuple[list[BatchInfo], int]:
    """The BatchInfo of the whole entries in `data` up to the first one holding
    `end_offset - 1` (those starting before `end_offset`), and how many bytes of `data`
    they fill: a share fetch summarizes, and sends, only what it may acquire."""
    out: list[BatchInfo] = []
    end = 0
    for e in iter_entries(data):
        if e.base_offset >= end_offset and out:
            break
        out.append(BatchInfo(e.base_offset, e.last_offset, e.producer_id, e.is_transactional, e.is_control))
        end = e.position + e.size
    return out, end


def aborted_offsets(read: LogRead) -> Iterable[tuple[int, int]]:
    """(first, last) offset ranges of the batches of `read` that a read_committed
    consumer never sees: the batches of aborted transactions and every control
    batch. Kafka's consumer logic: a producer is aborted from the batch at or after
    its aborted transaction's first offset until its next control batch."""
    pending = sorted(read.aborted, key=lambda a: a.first_offset)
    aborting: set[int] = set()
    i = 0
    for batch in read.batches:
        while i < len(pending) and pending[i].first_offset <= batch.last_offset:
            aborting.add(pending[i].producer_id)
            i += 1
        if batch.is_control:
            aborting.discard(batch.producer_id)
            yield batch.base_offset, batch.last_offset
        elif batch.is_transactional and batch.producer_id in aborting:
            yield batch.base_offset, batch.last_offset


class StorageShareLog:
    """The ShareLog of a storage.log.Log (one node: the high watermark is the log end)."""

    def __init__(self, log: Log):
        self.log = log

    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def high_watermark(self) -> int:
        return self.log.log_end_offset

    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        found = self.log.offset_for_timestamp(timestamp_ms)
        return None if found is None else found.offset

    def read(self, offset: int, max_bytes: int, read_committed: bool) -> tuple[bytes, LogRead]:
        """The bytes of a read from `offset` (at least one batch when any is there,
        bounded at the LSO for read_committed) and their LogRead."""
        bound = self.log.last_stable_offset if read_committed else None
        with self.log.read(offset, max_bytes, min_one_message=True, max_offset=bound) as found:
            data = found.read()
        batches = batches_of(data)
        aborted: list[AbortedTxn] = []
        if read_committed and batches:
            aborted = [AbortedTxn(a.producer_id, a.first_offset)
                       for a in self.log.aborted_transactions(offset, batches[-1].last_offset + 1)]
        return data, LogRead(batches, aborted, offset)


__all__ = ["StorageShareLog", "AbortedTxn", "BatchInfo", "LogRead", "ShareLog", "aborted_offsets", "batches_of",
           "batches_until"]
