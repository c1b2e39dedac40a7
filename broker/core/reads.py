"""Reads of both protocols, on the loop (an index search and a few header reads
from the page cache, the same kind of work as the sendfile that follows): the
FileSlice a read returns is sent with sendfile by the connection.

Isolation, as Kafka's UnifiedLog.read(..., FetchIsolation, minOneMessage):
`read_isolated` with READ_COMMITTED reads up to the last stable offset (the first
offset of the oldest open transaction, else the log end) and answers, in the same
call, the aborted transactions of the range read (from the `.txnindex` files);
READ_UNCOMMITTED reads to the log end with no list. Both answer the last stable
offset and the high watermark (the log end, one node). Every read counts its
bytes out, or a failed fetch, on the topic's counters (broker/admin/metrics.py).
"""

from __future__ import annotations

from typing import Any

from broker.admin.metrics import BrokerMetrics
from storage.file_records import FileSlice

from .types import READ_COMMITTED, READ_UNCOMMITTED, FetchIsolation, FetchSpec, IsolatedRead, PartitionLog

# A read of up to this size goes into a reply as bytes (one pread, the slice
# released) rather than as a FileSlice for sendfile: a slice costs a send of the
# bytes before it and a sendfile call, which for a small read costs more than the
# copy, and a reply of small reads (a fetch session's partitions at a low rate)
# goes out in one write. The Kafka Fetch applies it; the native FETCH and
# MULTIFETCH hand every read to the connection's writer as a slice, which sends it
# by sendfile or, on TLS, copies it through the transport.
INLINE_READ_BYTES = 16 * 1024


class MemorySlice(FileSlice):
    """Records held in memory (a read of the remote store, broker/core/tiering.py) in
    a read's place: `length`, `read()` and a no-op `release()` as a FileSlice's.
    Replies carry its bytes (`reply_records`, `reply_part`), never the slice: it
    has no file to send."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data
        self.records = None  # type: ignore[assignment]
        self.position = 0
        self.length = len(data)
        self._released = True

    def fileno(self) -> int:
        raise ValueError("records read from the remote store have no file")

    def read(self) -> bytes:
        return self.data

    def release(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"MemorySlice(length={self.length})"


def reply_part(found: FileSlice) -> bytes | FileSlice:
    """A read as a reply part for the connection's writer: a FileSlice as it is
    (sendfile), the bytes of a MemorySlice."""
    return found.data if isinstance(found, MemorySlice) else found


def reply_records(found: FileSlice) -> bytes | FileSlice:
    """A read as a reply part: the bytes of a small read (the slice released) or of a
    read in memory, else the slice itself, for sendfile (the reply takes it over)."""
    if isinstance(found, MemorySlice):
        return found.data
    if found.length > INLINE_READ_BYTES:
        return found
    try:
        return found.read()
    finally:
        found.release()


def release_all(result: Any) -> None:
    """Release every FileSlice in `result` (a slice, or lists/tuples of them)."""
    if isinstance(result, FileSlice):
        result.release()
    elif isinstance(result, (list, tuple)):
        for item in result:
            release_all(item)


class Reads:
    """The reads of both protocols (the module's doc)."""

    def __init__(self, metrics: BrokerMetrics | None):
        self.metrics = metrics

    def read(self, partition_log: PartitionLog, offset: int, max_bytes: int, *,
             min_one_message: bool = False, isolation_level: int = READ_UNCOMMITTED) -> FileSlice:
        """Up to `max_bytes` of whole batches from `offset`, on the loop (the caller
        releases the slice, or the connection does once sent); READ_COMMITTED stops at
        the last stable offset. Raises StrataError."""
        max_offset = partition_log.last_stable_offset if isolation_level == READ_COMMITTED else None
        if self.metrics is None:
            return partition_log.read(offset, max_bytes, min_one_message, max_offset=max_offset)
        counters = self.metrics.topic(partition_log.topic)
        try:
            found = partition_log.read(offset, max_bytes, min_one_message, max_offset=max_offset)
        except Exception:
            counters.read_failed()
            raise
        counters.read(found.length)
        return found

    @staticmethod
    def fetch_isolation(partition_log: PartitionLog, isolation_level: int, fetch_offset: int,
                        found: FileSlice | None) -> FetchIsolation:
        """The last stable offset of `partition_log` and, under READ_COMMITTED, the
        aborted transactions with data in `found` (read from `fetch_offset` by `read`
        at that level; None when nothing was read), as (producer id, first offset)."""
        lso = partition_log.last_stable_offset
        if isolation_level != READ_COMMITTED or found is None or not found.length:
            return FetchIsolation(lso)
        upper = partition_log.fetch_upper_bound(fetch_offset, found, lso)
        return FetchIsolation(lso, tuple((a.producer_id, a.first_offset)
                                         for a in partition_log.aborted_transactions(fetch_offset, upper)))

    def read_isolated(self, partition_log: PartitionLog, offset: int, max_bytes: int, isolation_level: int, *,
                      min_one_message: bool = False) -> IsolatedRead:
        """The isolated read of one partition, on the loop: the records (`read` at the
        level), the high watermark, the last stable offset and, under
        READ_COMMITTED, the aborted transactions of the range read. Raises StrataError."""
        found = self.read(partition_log, offset, max_bytes, min_one_message=min_one_message,
                          isolation_level=isolation_level)
        try:
            isolation = self.fetch_isolation(partition_log, isolation_level, offset, found)
        except BaseException:
            found.release()
            raise
        end = partition_log.log_end_offset  # after the LSO: never below it
        aborted = isolation.aborted if isolation_level == READ_COMMITTED else None
        return IsolatedRead(found, end, isolation.last_stable_offset, aborted)

    def read_spec(self, partition_log: PartitionLog, spec: FetchSpec) -> IsolatedRead:
        """`read_isolated` of a FetchSpec."""
        return self.read_isolated(partition_log, spec.offset, spec.max_bytes, spec.isolation_level,
                                  min_one_message=spec.min_one_message)
