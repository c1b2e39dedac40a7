"""Reads of records at an offset from remote segments (Kafka's RemoteLogReader).

Contract:
- `RemoteLogReader(rsm, metadata, cache_bytes=, chunk_bytes=)`; `read(tp, offset,
  max_bytes, min_one_message)` returns the whole entries (record batches, as
  stored) from the one holding `offset`, at most `max_bytes` of them (the first
  entry alone may be larger when `min_one_message`), from one remote segment, as
  a local fetch reads one local segment. An empty result means the offset is
  past the remote segments' last entry. No COPY_SEGMENT_FINISHED segment holding
  `offset`: OffsetOutOfRangeError (the broker then serves it locally or refuses it).
- The segment is found through the metadata (only finished copies), the start
  position through the segment's remote offset index (largest entry at or below
  the offset, as Kafka's OffsetIndex.lookup), then entry headers are walked from
  there. Every byte comes through a bounded LRU cache of decoded offset indexes
  and of `chunk_bytes`-aligned data chunks, filled by ranged reads of the store;
  a segment is never read whole into memory.
- Thread-safe: the cache has its own lock; reads run concurrently and two
  misses of the same chunk may both read it.
- A corrupt remote entry (impossible size, an entry running past the segment's
  size) or index raises RemoteStorageError naming the segment and position; a
  missing object raises RemoteResourceNotFoundError. Both are
  KAFKA_STORAGE_ERROR (56) for the fetch that needs them.
- `offset_for_timestamp(tp, timestamp)` answers ListOffsets by timestamp from the
  remote segments, through their remote time and offset indexes.
- `read_with_end` also answers where the read stopped; `read_ahead` schedules
  the chunks after it (without waiting), `close()` stops the pool.
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import structlog

from kafka_format.errors import CorruptRecordError, OffsetOutOfRangeError
from kafka_format.reader import iter_entries

from .errors import RemoteStorageError
from .metadata import RemoteLogMetadataStore, RemoteLogSegmentMetadata, TopicIdPartition
from .store import IndexType, RemoteStorageManager

ENTRY_HEAD = struct.Struct(">qi")  # offset, size after these 12 bytes
LOG_OVERHEAD = 12
MAGIC_POSITION = 16
LAST_OFFSET_DELTA = struct.Struct(">i")
LAST_OFFSET_DELTA_POSITION = 23
HEADER_PEEK = 27
MIN_ENTRY_SIZE = 14  # a classic message's smallest size field
INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
DEFAULT_READAHEAD_BYTES = 32 * 1024 * 1024
DEFAULT_THREADS = 4

log = structlog.get_logger("strata.remote")


class LruCache:
    """A byte-bounded LRU map; values are charged `size` bytes each."""

    def __init__(self, capacity_bytes: int):
        self.capacity = capacity_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def get(self, key: Any, count: bool = True) -> Any | None:
        """The value (now the most recently used), or None; `count`: in `hits` / `misses`."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                if count:
                    self.misses += 1
                return None
            self._items.move_to_end(key)
            if count:
                self.hits += 1
            return item[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        if size > self.capacity:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.capacity:
                _, (_, evicted) = self._items.popitem(last=False)
                self._bytes -= evicted

    def __len__(self) -> int:
        return len(self._items)


class OffsetIndexView:
    """A remote `.index`: sorted absolute offsets and their positions."""

    def __init__(self, metadata: RemoteLogSegmentMetadata, data: bytes):
        if len(data) % INDEX_ENTRY.size:
            raise RemoteStorageError(f"remote segment {metadata.segment_id}: offset index of {len(data)} bytes "
                                     f"is not a whole number of {INDEX_ENTRY.size}-byte entries")
        base = metadata.start_offset
        self.offsets: list[int] = []
        self.positions: list[int] = []
        last_offset, last_position = -1, -1
        for relative, position in INDEX_ENTRY.iter_unpack(data):
            offset = base + relative
            if offset <= last_offset or position < last_position or position > metadata.segment_size_in_bytes:
                raise RemoteStorageError(f"remote segment {metadata.segment_id}: corrupt offset index entry "
                                         f"{len(self.offsets)} (offset {offset}, position {position})")
            self.offsets.append(offset)
            self.positions.append(position)
            last_offset, last_position = offset, position
        self.size_bytes = len(data) * 3 + 64  # the two lists' rough cost

    def lookup(self, offset: int) -> int:
        """The position of the largest indexed offset at or below `offset`, else 0."""
        i = bisect.bisect_right(self.offsets, offset)
        return self.positions[i - 1] if i else 0


class TimeIndexView:
    """A remote `.timeindex`: timestamps and the offsets they were first reached at."""

    def __init__(self, metadata: RemoteLogSegmentMetadata, data: bytes):
        if len(data) % TIME_INDEX_ENTRY.size:
            raise RemoteStorageError(f"remote segment {metadata.segment_id}: time index of {len(data)} bytes "
                                     f"is not a whole number of {TIME_INDEX_ENTRY.size}-byte entries")
        self.base = metadata.start_offset
        entries = list(TIME_INDEX_ENTRY.iter_unpack(data))
        self.timestamps = [t for t, _ in entries]
        self.offsets = [self.base + r for _, r in entries]
        self.size_bytes = len(data) * 3 + 64

    def lookup(self, timestamp: int) -> int:
        """The offset of the last entry whose timestamp is <= `timestamp`, else the base offset."""
        i = bisect.bisect_right(self.timestamps, timestamp)
        return self.offsets[i - 1] if i else self.base


class RemoteLogReader:
    def __init__(self, rsm: RemoteStorageManager, metadata: RemoteLogMetadataStore, *,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 readahead_bytes: int = DEFAULT_READAHEAD_BYTES, threads: int = DEFAULT_THREADS):
        if chunk_bytes < HEADER_PEEK:
            raise ValueError(f"chunk_bytes must be at least {HEADER_PEEK}")
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.rsm = rsm
        self.metadata = metadata
        self.chunk_bytes = chunk_bytes
        self.cache = LruCache(cache_bytes)
        self.readahead_bytes = max(0, min(readahead_bytes, cache_bytes // 2))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="strata-remote-read")
        self._loading: dict[tuple[Any, int], Future[memoryview]] = {}
        self._loading_lock = threading.Lock()

    def reads_in_flight(self) -> int:
        """How many chunk reads have started and not finished."""
        with self._loading_lock:
            return len(self._loading)

    def close(self) -> None:
        """Stop the pool (chunks in flight finish; queued read-ahead is dropped)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    # ---- cached pieces ---------------------------------------------------------------

    def _offset_index(self, metadata: RemoteLogSegmentMetadata) -> OffsetIndexView:
        key = (metadata.segment_id.id, "index")
        view = self.cache.get(key)
        if view is None:
            view = OffsetIndexView(metadata, self.rsm.fetch_index(metadata, IndexType.OFFSET))
            self.cache.put(key, view, view.size_bytes)
        return view

    def _time_index(self, metadata: RemoteLogSegmentMetadata) -> TimeIndexView:
        key = (metadata.segment_id.id, "timeindex")
        view = self.cache.get(key)
        if view is None:
            view = TimeIndexView(metadata, self.rsm.fetch_index(metadata, IndexType.TIMESTAMP))
            self.cache.put(key, view, view.size_bytes)
        return view

    def _claim(self, metadata: RemoteLogSegmentMetadata, number: int) -> tuple[memoryview | Future[memoryview], bool]:
        """The chunk (from the cache), or its read in flight and whether the caller
        owns that read (it was not in flight: the caller must `_load` it)."""
        key = (metadata.segment_id.id, number)
        with self._loading_lock:
            chunk = self.cache.get(key, count=False)
            if chunk is not None:
                return chunk, False
            future = self._loading.get(key)
            if future is not None:
                return future, False
            future = Future()
            self._loading[key] = future
            return future, True

    def _load(self, metadata: RemoteLogSegmentMetadata, number: int, future: Future[memoryview]) -> None:
        """Read a claimed chunk from the store into the cache and complete its future."""
        key = (metadata.segment_id.id, number)
        try:
            chunk = self.rsm.read_log_segment_view(metadata, number * self.chunk_bytes, self.chunk_bytes)
        except BaseException as e:
            with self._loading_lock:
                self._loading.pop(key, None)
            future.set_exception(e)
            return
        self.cache.put(key, chunk, len(chunk))
        with self._loading_lock:
            self._loading.pop(key, None)
        future.set_result(chunk)

    def _chunks(self, metadata: RemoteLogSegmentMetadata, numbers: range) -> list[memoryview]:
        """The chunks `numbers` of the segment: from the cache, from reads in flight,
        else read from the store (the first on this thread, the others on the pool,
        all at once)."""
        found: list[memoryview | Future[memoryview]] = []
        inline: tuple[int, Future[memoryview]] | None = None
        for number in numbers:
            key = (metadata.segment_id.id, number)
            chunk = self.cache.get(key)
            if chunk is not None:
                found.append(chunk)
                continue
            claimed, mine = self._claim(metadata, number)
            if mine:
                assert isinstance(claimed, Future)
                if inline is None:
                    inline = number, claimed
                else:
                    self._submit(metadata, number, claimed)
            found.append(claimed)
        if inline is not None:
            self._load(metadata, *inline)
        return [item.result() if isinstance(item, Future) else item for item in found]

    def _submit(self, metadata: RemoteLogSegmentMetadata, number: int, future: Future[memoryview]) -> None:
        try:
            self._pool.submit(self._load, metadata, number, future)
        except RuntimeError as e:  # the pool is shut down: the reader is closing
            with self._loading_lock:
                self._loading.pop((metadata.segment_id.id, number), None)
            future.set_exception(RemoteStorageError(f"remote reader is closed: {e}"))

    def _chunk(self, metadata: RemoteLogSegmentMetadata, number: int) -> memoryview:
        return self._chunks(metadata, range(number, number + 1))[0]

    def _read(self, metadata: RemoteLogSegmentMetadata, position: int, length: int) -> bytes:
        """Bytes [position, position + length) of the segment, through the chunk cache."""
        end = min(position + length, metadata.segment_size_in_bytes)
        if position >= end:
            return b""
        first = position // self.chunk_bytes
        chunks = self._chunks(metadata, range(first, (end - 1) // self.chunk_bytes + 1))
        parts: list[memoryview] = []
        for number, chunk in enumerate(chunks, first):
            within = max(position - number * self.chunk_bytes, 0)
            take = min(len(chunk) - within, end - position)
            if take <= 0:
                raise RemoteStorageError(f"remote segment {metadata.segment_id}: no data at position {position} "
                                         f"of {metadata.segment_size_in_bytes} bytes")
            parts.append(chunk[within:within + take])
            position += take
        return parts[0].tobytes() if len(parts) == 1 else b"".join(parts)  # the one copy of what is returned

    def _schedule(self, metadata: RemoteLogSegmentMetadata, position: int, end: int) -> None:
        """Start reads on the pool of the chunks of [position, end) not cached or in flight."""
        end = min(end, metadata.segment_size_in_bytes)
        for number in range(position // self.chunk_bytes, -(-end // self.chunk_bytes)):
            claimed, mine = self._claim(metadata, number)
            if mine:
                assert isinstance(claimed, Future)
                self._submit(metadata, number, claimed)

    # ---- reading ---------------------------------------------------------------------

    def segment_for(self, tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata:
        metadata = self.metadata.segment_for_offset(tp, offset)
        if metadata is None:
            raise OffsetOutOfRangeError(f"offset {offset} of {tp.topic}-{tp.partition} is in no remote segment")
        return metadata

    def read(self, tp: TopicIdPartition, offset: int, max_bytes: int, min_one_message: bool = True) -> bytes:
        return self.read_with_end(tp, offset, max_bytes, min_one_message)[0]

    def read_with_end(self, tp: TopicIdPartition, offset: int, max_bytes: int,
                      min_one_message: bool = True) -> tuple[bytes, RemoteLogSegmentMetadata, int]:
        """`read`, with the segment read and the position just past what it returned
        (where the next sequential read starts: `read_ahead` from there)."""
        metadata = self.segment_for(tp, offset)
        size = metadata.segment_size_in_bytes
        position = self._offset_index(metadata).lookup(offset)
        # The chunks this read will likely need after the first: read at once on the pool.
        self._schedule(metadata, position + self.chunk_bytes,
                       position + min(max_bytes, self.cache.capacity // 2))
        first = None  # (position, size) of the entry holding `offset`
        while position + LOG_OVERHEAD <= size:
            entry_size, last_offset = self._header(metadata, position)
            if last_offset >= offset:
                first = position, entry_size
                break
            position += entry_size
        if first is None:
            return b"", metadata, size
        start, end = first[0], first[0] + first[1]
        if first[1] > max_bytes and not min_one_message:
            return b"", metadata, start
        while end + LOG_OVERHEAD <= size:
            entry_size, _ = self._header(metadata, end)
            if end + entry_size - start > max_bytes:
                break
            end += entry_size
        return self._read(metadata, start, end - start), metadata, end

    def read_ahead(self, tp: TopicIdPartition, metadata: RemoteLogSegmentMetadata, position: int,
                   length: int | None = None) -> None:
        """Start reading [position, position + length) of the segment into the cache
        (past its end: the next remote segments'), `readahead_bytes` at most, on the
        pool; returns at once. A failed read-ahead is dropped (the fetch that needs
        the chunk reads it again and meets the error)."""
        left = self.readahead_bytes if length is None else min(length, self.readahead_bytes)
        try:
            while left > 0:
                if position >= metadata.segment_size_in_bytes:
                    following = self.metadata.segment_for_offset(tp, metadata.end_offset + 1)
                    if following is None:
                        return
                    metadata, position = following, 0
                    continue
                end = min(position + left, metadata.segment_size_in_bytes)
                self._schedule(metadata, position, end)
                left -= end - position
                position = end
        except Exception as e:
            log.debug("remote_read_ahead_failed", partition=str(tp), error=str(e))

    def offset_for_timestamp(self, tp: TopicIdPartition, timestamp: int,
                             starting_offset: int = 0) -> tuple[int, int] | None:
        """(timestamp, offset) of the first remote record at or after `starting_offset`
        whose timestamp is >= `timestamp` (Kafka's findOffsetByTimestamp over remote
        segments), or None when no remote segment has one."""
        for metadata in self.metadata.readable_segments(tp):
            if metadata.max_timestamp_ms < timestamp or metadata.end_offset < starting_offset:
                continue
            indexed = max(self._time_index(metadata).lookup(timestamp), starting_offset)
            position = self._offset_index(metadata).lookup(indexed)
            size = metadata.segment_size_in_bytes
            while position + LOG_OVERHEAD <= size:
                entry_size, _ = self._header(metadata, position)
                data = self._read(metadata, position, entry_size)
                try:
                    for entry in iter_entries(data):
                        if entry.max_timestamp < timestamp:
                            continue
                        found = entry.first_record_at(timestamp, starting_offset)
                        if found is not None:
                            return found
                except CorruptRecordError as e:
                    raise RemoteStorageError(f"remote segment {metadata.segment_id}: entry at {position}: {e}") \
                        from None
                position += entry_size
        return None

    def _header(self, metadata: RemoteLogSegmentMetadata, position: int) -> tuple[int, int]:
        """(whole entry size, last offset) of the entry at `position`."""
        size = metadata.segment_size_in_bytes
        head = self._read(metadata, position, HEADER_PEEK)
        if len(head) < LOG_OVERHEAD:
            raise RemoteStorageError(f"remote segment {metadata.segment_id}: entry at {position} is cut short")
        base, entry = ENTRY_HEAD.unpack_from(head)
        total = LOG_OVERHEAD + entry
        if entry < MIN_ENTRY_SIZE or position + total > size:
            raise RemoteStorageError(f"remote segment {metadata.segment_id}: corrupt entry at position {position} "
                                     f"(size field {entry}, segment of {size} bytes)")
        if len(head) > MAGIC_POSITION and head[MAGIC_POSITION] >= 2:
            if len(head) < HEADER_PEEK:
                raise RemoteStorageError(f"remote segment {metadata.segment_id}: batch at {position} is too short")
            (delta,) = LAST_OFFSET_DELTA.unpack_from(head, LAST_OFFSET_DELTA_POSITION)
            return total, base + delta
        return total, base
