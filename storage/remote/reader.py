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
- `read_with_end` also answers where the read stopped; `prefetch` reads the
  chunks after it into the cache ahead of the next sequential read.
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections import OrderedDict
from typing import Any

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

    def get(self, key: Any) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
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
                 cache_bytes: int = 64 * 1024 * 1024, chunk_bytes: int = 1024 * 1024):
        if chunk_bytes < HEADER_PEEK:
            raise ValueError(f"chunk_bytes must be at least {HEADER_PEEK}")
        self.rsm = rsm
        self.metadata = metadata
        self.chunk_bytes = chunk_bytes
        self.cache = LruCache(cache_bytes)

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

    def _chunk(self, metadata: RemoteLogSegmentMetadata, number: int) -> bytes:
        key = (metadata.segment_id.id, number)
        chunk = self.cache.get(key)
        if chunk is None:
            chunk = self.rsm.read_log_segment(metadata, number * self.chunk_bytes, self.chunk_bytes)
            self.cache.put(key, chunk, len(chunk))
        return chunk

    def _prefetch(self, metadata: RemoteLogSegmentMetadata, position: int, length: int) -> None:
        """Put the chunks of [position, position + length) that the cache lacks into it,
        read from the store in one call (concurrent ranged reads), at most what the
        cache holds in half."""
        end = min(position + length, metadata.segment_size_in_bytes, position + self.cache.capacity // 2)
        numbers = [n for n in range(position // self.chunk_bytes, -(-end // self.chunk_bytes))
                   if self.cache.get((metadata.segment_id.id, n)) is None]
        if len(numbers) < 2:
            return
        chunks = self.rsm.read_log_segment_ranges(metadata, [(n * self.chunk_bytes, self.chunk_bytes)
                                                             for n in numbers])
        for number, chunk in zip(numbers, chunks, strict=True):
            self.cache.put((metadata.segment_id.id, number), chunk, len(chunk))

    def _read(self, metadata: RemoteLogSegmentMetadata, position: int, length: int) -> bytes:
        """Bytes [position, position + length) of the segment, through the chunk cache."""
        end = min(position + length, metadata.segment_size_in_bytes)
        parts = []
        while position < end:
            number, within = divmod(position, self.chunk_bytes)
            chunk = self._chunk(metadata, number)
            take = min(len(chunk) - within, end - position)
            if take <= 0:
                raise RemoteStorageError(f"remote segment {metadata.segment_id}: no data at position {position} "
                                         f"of {metadata.segment_size_in_bytes} bytes")
            parts.append(chunk[within:within + take])
            position += take
        return b"".join(parts)

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
        (where the next sequential read starts: `prefetch` it ahead)."""
        metadata = self.segment_for(tp, offset)
        size = metadata.segment_size_in_bytes
        position = self._offset_index(metadata).lookup(offset)
        self._prefetch(metadata, position, max_bytes)
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

    def prefetch(self, tp: TopicIdPartition, metadata: RemoteLogSegmentMetadata, position: int,
                 length: int) -> None:
        """Bring [position, position + length) of the segment into the cache (at the
        segment's end: the start of the next remote segment), for the next
        sequential read."""
        if position >= metadata.segment_size_in_bytes:
            following = self.metadata.segment_for_offset(tp, metadata.end_offset + 1)
            if following is None:
                return
            metadata, position = following, 0
        self._prefetch(metadata, position, length)

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
