"""Cleaning one log: Kafka's Cleaner (log compaction), one round.

Contract: `Cleaner(offset_map, ...).clean(log, first_dirty, first_uncleanable)`
cleans the log's segments below `first_uncleanable` (the caller never passes an
offset past the active segment's base) and returns `(end_offset, stats)`: every
record below `end_offset` is now clean, and the caller records `end_offset` in
`cleaner-offset-checkpoint` (last, after the swaps).

1. Pass 1 maps each key to its latest offset over the dirty records, from
   `first_dirty`, segment by segment, until the map is full (storage/offset_map.py;
   whole entries only, so a round always maps at least one entry). The round
   cleans up to where the map got.
2. Pass 2 groups the segments from the first one up to the round's end, each
   group fitting segment.bytes, segment.index.bytes (both indexes) and int32
   relative offsets (Kafka's groupSegmentsBySize), and rewrites each group into
   one `<base>.log.cleaned` segment with what stays (storage/cleaner_records.py:
   latest record per key, tombstones until their delete horizon, no keyless
   records, every offset unchanged, untouched entries copied byte for byte).
   The last entry of a group always stays, if only as an empty batch, so that the
   cleaned segment ends at the old segments' last offset (the loader finds what a
   `.swap` replaces by its offset range).
3. Each group is flushed, given the last old segment's modification time, and
   swapped in (storage/segment_swap.py) before the next group starts, so at most
   one group's temporary files exist at any moment.

Magic 0/1 tombstones stay while their segment was modified after the last clean
segment's modification time minus delete.retention.ms (Kafka's legacy horizon).

Stopping: `check_done()` runs between chunks of at most `io_buffer_size` bytes
and may raise (shutdown, a log being deleted); the group being written is then
discarded, segments already swapped stay swapped (they are clean), and the
checkpoint is not moved. Only the swap takes the log's lock.

The key map and its walks (storage/accel.py's `KeyMap`: the C twin of
storage/_ccleaner.c or the plain-Python one of storage/_pycleaner.py) hold the
short keys and pass 1's bits, and both passes hand each chunk read to the map's
walks first: the C ones take the runs of uncompressed magic-2 batches with the
GIL released (pass 1: keys into the map; pass 2: the batches pass 1 decided,
copied or rebuilt byte for byte as RecordFilter would). Every entry a walk
leaves (classic messages, compressed or control batches, keys over the inline
limit, tombstones, keyless records, active producers' batches, the group's last
entry; the Python twin leaves them all) goes through the Python code below,
which stays the reference: tests/storage/test_ccleaner.py checks that both
twins write the same bytes.

Idempotent producers: the last batch of each active producer stays, if only as
an empty batch with its producer fields, so its sequence survives the clean (Kafka's
RETAIN_EMPTY).

Transactions (Kafka's CleanedTransactionMetadata): cleaning stops at the first
unstable offset (an open transaction's records are never cleaned). A batch of an
aborted transaction (the log's `.txnindex` entries: its producer, between the
transaction's first offset and its abort marker) puts no key in the map (it
never supersedes committed data) and loses all its records in pass 2 (an active
producer's last batch stays empty). A round that meets aborted transactions runs
both passes in Python. An abort marker stays while the round meets data of its
transaction; the first round that meets none stamps it with a delete horizon
(now + delete.retention.ms, as a tombstone's); the first round after the horizon
removes it and its `.txnindex` entry (Kafka's rules). The other `.txnindex`
entries are carried into the cleaned segment. A COMMIT marker goes the same way
once its transaction has no batch left: pass 2 notes the producers whose
committed (not aborted) transactional batches it met since the log start; a
COMMIT marker of a producer noted stays as it is (and clears the note), one of a
producer not noted is stamped with a delete horizon and removed past it (Kafka's
CleanedTransactionMetadata.onControlBatchRead, over the whole round rather than
one group, so no marker goes while data of its transaction is left anywhere).
Every batch with a producer id goes through Python in pass 2 (the C pass leaves
them), so each transactional batch is seen.
"""

from __future__ import annotations

import bisect
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kafka_format import LogEntry
from kafka_format.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    CONTROL_BIT,
    CRC_OFFSET,
    DELETE_HORIZON_BIT,
    FIELD_OFFSET,
    INT16,
    TRANSACTIONAL_BIT,
    UINT32,
    batch_crc,
)
from kafka_format.builder import build_batch
from kafka_format.entries import EntryInfo, EntryTable
from kafka_format.errors import CorruptRecordError
from kafka_format.framing import LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, MIN_ENTRY_SIZE_FIELD

from .accel import FULL, NEED_PYTHON
from .cleaner_records import EntryKeys, FilterStats, Kept, RecordFilter, entry_info, entry_keys
from .clock import SYSTEM_CLOCK, SystemClock
from .fileutil import segment_file_name
from .offset_map import OffsetMap
from .segment import INT_MAX, LogSegment
from .segment_swap import CLEANED_SUFFIX
from .txn_markers import ABORT, COMMIT, CONTROL_KEY, MARKER_VALUE, decode_marker

if TYPE_CHECKING:
    from .accel import KeyMapType

DEFAULT_IO_BUFFER_SIZE = 512 * 1024  # Kafka's log.cleaner.io.buffer.size
_SIZE = _INT32 = struct.Struct(">i")
_ENTRY_HEAD = struct.Struct(">qi")
LAST_DELTA_AT = FIELD_OFFSET["last_offset_delta"]
NO_KEYS = EntryKeys([], [], 0, 0, 0, 1)  # an aborted batch in pass 1: no key, never all-mapped


class CleaningAborted(Exception):
    """The clean was stopped (shutdown, or the log is going away)."""


@dataclass
class CleanerStats:
    """What one clean did, for the `log_cleaned` line."""

    log: str = ""
    first_dirty: int = 0
    end_offset: int = 0
    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    segments: int = 0
    groups: int = 0
    records: FilterStats = field(default_factory=FilterStats)
    map: dict = field(default_factory=dict)
    map_seconds: float = 0.0
    clean_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    @property
    def records_dropped(self) -> int:
        return self.records.records_read - self.records.records_kept

    def fields(self) -> dict:
        total = time.perf_counter() - self.started
        r = self.records
        mb = self.bytes_read / 1e6
        return {"log": self.log, "first_dirty_offset": self.first_dirty, "end_offset": self.end_offset,
                "segments": self.segments, "groups": self.groups,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "map_bytes_read": self.map_bytes_read, "map_records_read": self.map_records_read,
                "records_read": r.records_read, "records_kept": r.records_kept,
                "records_dropped": self.records_dropped, "keyless_dropped": r.keyless_dropped,
                "tombstones_dropped": r.tombstones_dropped, "entries_copied": r.entries_copied,
                "entries_rebuilt": r.entries_rebuilt, "entries_dropped": r.entries_dropped,
                "empty_batches": r.empty_batches, **self.map,
                "map_seconds": round(self.map_seconds, 3), "clean_seconds": round(self.clean_seconds, 3),
                "duration_seconds": round(total, 3),
                "mb_per_second": round(mb / total, 2) if total > 0 else 0.0}


class _Chunk:
    """What LogSegment.append needs of a set of entries (a ValidatedSet's shape;
    `entries` an EntryTable).
    The offset of the largest timestamp is not tracked here: None, so the segment
    takes it from the entries."""

    __slots__ = ("buffer", "entries", "max_timestamp")
    offset_of_max_timestamp = None
    first_offset = None  # not tracked either: the segment notes no recent append for it

    def __init__(self, buffer, entries, max_timestamp):
        self.buffer = buffer
        self.entries = entries
        self.max_timestamp = max_timestamp


class _ChunkReader:
    """The walks' reads: a chunk of at most `chunk_size` bytes at a time from
    `start`; the caller says how many bytes of whole entries it used (`advance`). When
    it could use none (one entry larger than the chunk) the next read is that entry."""

    __slots__ = ("records", "position", "stop", "chunk_size", "want", "check_done")

    def __init__(self, segment: LogSegment, start: int, stop: int, chunk_size: int,
                 check_done: Callable[[], None]) -> None:
        self.records = segment.log
        self.position = start
        self.stop = stop
        self.chunk_size = chunk_size
        self.want = chunk_size
        self.check_done = check_done

    def read(self) -> bytes | None:
        if self.position >= self.stop:
            return None
        self.check_done()
        return self.records.read(self.position, min(self.want, self.stop - self.position))

    def advance(self, buf: bytes, used: int) -> None:
        if used:
            self.position += used
            self.want = self.chunk_size
            return
        n = len(buf)
        if n < LOG_OVERHEAD:
            raise CorruptRecordError(f"{self.records.path}: partial entry at {self.position}")
        total = LOG_OVERHEAD + _SIZE.unpack_from(buf, 8)[0]
        if self.position + total > self.stop or total <= n:
            raise CorruptRecordError(f"{self.records.path}: entry at {self.position} runs past the end")
        self.want = total

    def entry_end(self, buf: bytes, pos: int) -> int:
        """Where the entry at buf[pos] ends, or -1 when buf cuts it."""
        if pos + LOG_OVERHEAD > len(buf):
            return -1
        size = _SIZE.unpack_from(buf, pos + 8)[0]
        if size < MIN_ENTRY_SIZE_FIELD:
            raise CorruptRecordError(f"{self.records.path}: entry at {self.position + pos} has size {size}")
        end = pos + LOG_OVERHEAD + size
        return end if end <= len(buf) else -1


def read_entries(segment: LogSegment, start: int, stop: int, chunk_size: int,
                 check_done: Callable[[], None]) -> Iterator[tuple[int, bytes, list[tuple[int, int]]]]:
    """Whole entries of segment's file in [start, stop), a chunk at a time: yields
    (file position of the buffer, buffer, [(start, end) of each entry in the buffer])."""
    reader = _ChunkReader(segment, start, stop, chunk_size, check_done)
    while (buf := reader.read()) is not None:
        spans = []
        pos = 0
        while (end := reader.entry_end(buf, pos)) >= 0:
            spans.append((pos, end))
            pos = end
        if spans:
            yield reader.position, buf, spans
        reader.advance(buf, pos)


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable: int) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose data, offset index
    and time index each add up to at most the limits, and whose offsets stay
    within int32 of the group's base."""
    groups = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index.size_in_bytes
        time_index_size = segments[i].time_index.size_in_bytes
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            if (log_size + nxt.size > max_size
                    or index_size + nxt.offset_index.size_in_bytes > max_index_size
                    or time_index_size + nxt.time_index.size_in_bytes > max_index_size
                    or (nxt.size > 0 and last_offset - group[0].base_offset > INT_MAX)):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.offset_index.size_in_bytes
            time_index_size += nxt.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups


class _BatchTable:
    """Pass 1's tally of the dirty records, kept (and charged) by the key map: one bit
    per offset from the first dirty offset (set: a later record of the same key
    superseded it), and the dirty batches (magic 2, all past the first dirty offset)
    whose records pass 2 may keep or drop by those bits alone, without looking their
    keys up again; a batch with a tombstone or a keyless record is decided by key."""

    __slots__ = ("key_map",)

    def __init__(self, key_map: KeyMapType, start: int) -> None:
        self.key_map = key_map
        key_map.begin(start)

    def cover(self, last_offset: int) -> None:
        """Make room for bits up to `last_offset`."""
        self.key_map.cover(last_offset)

    def add(self, base_offset: int, eligible: bool) -> None:
        self.key_map.mark_batch(base_offset, eligible)

    def supersede(self, offsets: list[int]) -> None:
        self.key_map.supersede(offsets)

    def dead_mask(self, base_offset: int, last_offset: int) -> int | None:
        """Bit i set: the record at base_offset + i was superseded; None when pass 2
        must decide this batch by key."""
        bits = self.key_map.dead_mask(base_offset, last_offset)
        return None if bits is None else int.from_bytes(bits, "little")


class _LogKeyReader:
    """The key of the record at an offset, read back from the log (for the offset
    map's long keys), with a small cache of decoded entries."""

    def __init__(self, segments):
        self._segments = segments
        self._cache: dict[tuple[int, int], dict[int, bytes | None]] = {}

    def __call__(self, offset: int) -> bytes | None:
        segment = self._segments.floor(offset)
        if segment is None:
            return None
        found = segment.translate_offset(offset)
        if found is None:
            return None
        cache_key = (segment.base_offset, found.position)
        keys = self._cache.get(cache_key)
        if keys is None:
            data = segment.log.read(found.position, found.size)
            keys = {r.offset: r.key for r in LogEntry(data).records()}
            if len(self._cache) >= 64:
                self._cache.pop(next(iter(self._cache)))
            self._cache[cache_key] = keys
        return keys.get(offset)


class Cleaner:
    def __init__(self, offset_map: OffsetMap, *, io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE,
                 clock: SystemClock = SYSTEM_CLOCK, step: Callable[[str], None] | None = None):
        self.offset_map = offset_map
        self.io_buffer_size = io_buffer_size
        self._aborted = AbortedBatches([])  # the round's aborted transactions
        self._committed_data: set[int] = set()  # producers with committed transactional data met, marker not yet
        self.clock = clock
        self.step = step or (lambda name: None)
        self.current: CleanerStats | None = None  # the clean in progress (or the last one), for progress lines

    # ---- one round -------------------------------------------------------------------

    def clean(self, log, first_dirty: int, first_uncleanable: int, *,
              check_done: Callable[[], None] = lambda: None,
              now_ms: int | None = None) -> tuple[int, CleanerStats]:
        now = self.clock.time_ms() if now_ms is None else now_ms
        self.current = stats = CleanerStats(log=log.name, first_dirty=first_dirty)
        snapshot = log.segments.snapshot()
        active = snapshot.last
        first_uncleanable = min(first_uncleanable, active.base_offset)
        unstable = log.first_unstable_offset()
        if unstable < first_uncleanable:
            # Never a segment holding an open transaction's records (Kafka: the first
            # unstable offset bounds cleaning, at a segment's base as the others).
            holder = snapshot.floor(unstable)
            first_uncleanable = holder.base_offset if holder is not None else first_uncleanable
        self._aborted = AbortedBatches(log.aborted_transactions(log.log_start_offset, first_uncleanable))
        self._committed_data = set()
        config = log.config

        before_dirty = [s for s in snapshot if s.base_offset < first_dirty and s is not active]
        legacy_horizon = before_dirty[-1].log.mtime_ms() - config.delete_retention_ms if before_dirty else 0

        started = time.perf_counter()
        table = self._build_offset_map(snapshot, first_dirty, first_uncleanable, stats, check_done)
        end_offset = self.offset_map.latest_offset + 1
        stats.map_seconds = time.perf_counter() - started
        stats.end_offset = end_offset = max(end_offset, first_dirty)
        if end_offset <= first_dirty:
            stats.map = self.offset_map.stats()
            return first_dirty, stats

        started = time.perf_counter()
        to_clean = [s for s in snapshot if s.base_offset < end_offset and s is not active]
        groups = group_segments_by_size(to_clean, config.segment_bytes, config.segment_index_bytes,
                                        first_uncleanable)
        record_filter = RecordFilter(self.offset_map, now, config.delete_retention_ms, stats.records,
                                     log.last_offsets_of_active_producers())
        for group in groups:
            self._clean_group(log, group, record_filter, table, legacy_horizon, stats, check_done)
        stats.clean_seconds = time.perf_counter() - started
        stats.map = self.offset_map.stats()
        return end_offset, stats

    # ---- pass 1 -------------------------------------------------------------------------

    def _build_offset_map(self, snapshot, start: int, end: int, stats: CleanerStats,
                          check_done: Callable[[], None]) -> _BatchTable:
        offset_map = self.offset_map
        offset_map.clear(_LogKeyReader(snapshot))
        table = _BatchTable(offset_map.key_map, start)
        segments = [s for s in snapshot.from_offset(start) if s.base_offset < end]
        walks = not self._aborted  # the walks do not know aborted transactions
        for i, segment in enumerate(segments):
            if segment is snapshot.last:
                break
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end
            position = segment.offset_index.lookup(start)[1] if segment.base_offset < start else 0
            if walks:
                if not self._map_segment_walked(segment, position, start, table, stats, check_done):
                    return table  # full: this round cleans up to the previous entry
                offset_map.update_latest_offset(next_base - 1)  # a gap at the segment's end
                continue
            for _, buf, spans in read_entries(segment, position, segment.size, self.io_buffer_size,
                                              check_done):
                for pos, stop in spans:
                    if not self._map_entry(buf, pos, stop, start, table, stats):
                        return table  # full: this round cleans up to the previous entry
            offset_map.update_latest_offset(next_base - 1)  # a gap at the segment's end
        return table

    def _map_segment_walked(self, segment: LogSegment, position: int, start: int, table: _BatchTable,
                            stats: CleanerStats, check_done: Callable[[], None]) -> bool:
        """Pass 1 over a segment from `position`: the key map's walk over each chunk
        (C: whole runs of plain batches in one call, GIL released); the entries it
        leaves (classic, compressed, long keys, ...) go through Python. False when the
        map is full."""
        offset_map = self.offset_map
        key_map = offset_map.key_map
        reader = _ChunkReader(segment, position, segment.size, self.io_buffer_size, check_done)
        while (buf := reader.read()) is not None:
            n = len(buf)
            pos = 0
            while pos < n:
                pos, status, latest, first_put, records, nbytes = key_map.map_entries(
                    buf, pos, n, offset_map.python_entries, offset_map.used_bytes - key_map.used_bytes)
                stats.map_records_read += records
                stats.map_bytes_read += nbytes
                if latest >= 0:
                    offset_map.update_latest_offset(latest)
                if first_put >= 0 and offset_map.start_offset < 0:
                    offset_map.start_offset = first_put
                if status == FULL:
                    return False
                if status == NEED_PYTHON:
                    end = reader.entry_end(buf, pos)
                    if end < 0:
                        break  # cut by the chunk: the next read starts with it
                    if not self._map_entry(buf, pos, end, start, table, stats):
                        return False
                    pos = end
            reader.advance(buf, pos)
        return True

    def _map_entry(self, buf, pos: int, stop: int, start: int, table, stats: CleanerStats) -> bool:
        """Pass 1 for the entry at buf[pos:stop]; False when the map is full."""
        offset_map = self.offset_map
        offset_field = _ENTRY_HEAD.unpack_from(buf, pos)[0]
        magic = buf[pos + MAGIC_OFFSET]
        last_offset = (offset_field + BATCH_HEADER.unpack_from(buf, pos)[6]
                       if magic == MAGIC_V2 else offset_field)
        if last_offset < start:
            return True
        # An aborted transaction's records supersede nothing.
        aborted = magic == MAGIC_V2 and self._aborted.holds(buf, pos)
        keys = NO_KEYS if aborted else entry_keys(buf, pos, stop, start)
        if offset_map.entries and (not offset_map.fits_keys(keys.keys, keys.key_bytes, last_offset)
                                   or offset_map.used_bytes > offset_map.capacity_bytes):
            return False
        table.cover(last_offset)
        if magic == MAGIC_V2 and offset_field >= start:
            table.add(offset_field, not (keys.tombstones or keys.keyless))
        superseded = offset_map.put_all(keys.keys, keys.offsets)
        if superseded:  # (a key twice in one batch supersedes within it)
            table.supersede(superseded)
        offset_map.update_latest_offset(last_offset)
        stats.map_records_read += keys.records
        stats.map_bytes_read += stop - pos
        return True

    # ---- pass 2 -------------------------------------------------------------------------

    def _abort_marker(self, buf, pos: int, stop: int, now_ms: int, retention_ms: int,
                      keep: bool) -> Kept | None:
        """An abort marker as Kafka's cleaner keeps it: as it is while the round met
        data of its transaction (removed now) or while its delete horizon is ahead;
        stamped with a delete horizon (now + delete.retention.ms) the first round
        that finds no data left; gone (with its `.txnindex` entry) once the horizon
        has passed, unless `keep` (a group's last entry stays)."""
        (base_offset, _, leader_epoch, _, _, attributes, last_delta, base_ts, max_ts, producer_id, epoch,
         sequence, count) = BATCH_HEADER.unpack_from(buf, pos)
        if self._aborted.observed_data(producer_id, base_offset):
            return Kept(memoryview(buf)[pos:stop], MAGIC_V2, base_offset + last_delta, max_ts, 0, count)
        kept = self._marker_without_data(buf, pos, stop, now_ms, retention_ms, keep)
        if kept is None:
            self._aborted.removed.add((producer_id, base_offset))
        return kept

    def _commit_marker(self, buf, pos: int, stop: int, now_ms: int, retention_ms: int,
                       keep: bool) -> Kept | None:
        """A COMMIT marker stays as it is while the round met data of its transaction
        since its last COMMIT, else goes the abort markers' way (`_marker_without_data`)."""
        producer_id = BATCH_HEADER.unpack_from(buf, pos)[9]
        if producer_id in self._committed_data:
            self._committed_data.discard(producer_id)
            (base_offset, _, _, _, _, _, last_delta, _, max_ts, *_rest, count) = BATCH_HEADER.unpack_from(buf, pos)
            return Kept(memoryview(buf)[pos:stop], MAGIC_V2, base_offset + last_delta, max_ts, 0, count)
        return self._marker_without_data(buf, pos, stop, now_ms, retention_ms, keep)

    def _marker_without_data(self, buf, pos: int, stop: int, now_ms: int, retention_ms: int,
                             keep: bool) -> Kept | None:
        """A marker whose transaction has no batch left: stamped with a delete horizon
        (now + delete.retention.ms) the first time, as it is while the horizon is
        ahead (or `keep`: a group's last entry stays), None (gone) past it."""
        (base_offset, _, leader_epoch, _, _, attributes, last_delta, base_ts, max_ts, producer_id, epoch,
         sequence, count) = BATCH_HEADER.unpack_from(buf, pos)
        last_offset = base_offset + last_delta
        as_is = Kept(memoryview(buf)[pos:stop], MAGIC_V2, last_offset, max_ts, 0, count)
        if attributes & DELETE_HORIZON_BIT:
            if base_ts > now_ms or keep:
                return as_is
            return None
        marker = decode_marker(bytes(buf[pos:stop]))
        if marker is None:
            return as_is
        kind = COMMIT if marker.commit else ABORT
        out = bytearray(build_batch([(CONTROL_KEY.pack(0, kind), MARKER_VALUE.pack(0, marker.coordinator_epoch),
                                      marker.timestamp)],
                                    base_offset=base_offset, base_timestamp=now_ms + retention_ms,
                                    max_timestamp=max_ts, producer_id=producer_id, producer_epoch=epoch,
                                    base_sequence=sequence, partition_leader_epoch=leader_epoch,
                                    is_transactional=True, is_control=True))
        INT16.pack_into(out, ATTRIBUTES_OFFSET, attributes | DELETE_HORIZON_BIT)
        UINT32.pack_into(out, CRC_OFFSET, batch_crc(out, 0, len(out)))
        return Kept(bytes(out), MAGIC_V2, last_offset, max_ts, 0, count)

    def _clean_group(self, log, group: list[LogSegment], record_filter: RecordFilter,
                     table: _BatchTable,
                     legacy_horizon: int, stats: CleanerStats, check_done: Callable[[], None]) -> None:
        config = log.config
        base = group[0].base_offset
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):  # left by a clean that failed
            leftover = os.path.join(log.directory, segment_file_name(base, suffix + CLEANED_SUFFIX))
            if os.path.exists(leftover):
                os.unlink(leftover)
        cleaned = LogSegment.open(log.directory, base, index_interval_bytes=config.index_interval_bytes,
                                  max_index_size=config.segment_index_bytes, clock=self.clock,
                                  suffix=CLEANED_SUFFIX)
        try:
            last_non_empty = max((i for i, s in enumerate(group) if s.size > 0), default=-1)
            latest = self.offset_map.latest_offset
            key_map = None if self._aborted else self.offset_map.key_map  # None: no walks
            filter_stats = record_filter.stats
            now_ms, retention_ms = record_filter.now_ms, record_filter.delete_retention_ms
            unpack_head, unpack_delta = _ENTRY_HEAD.unpack_from, _INT32.unpack_from
            for i, segment in enumerate(group):
                retain_legacy_deletes = segment.log.mtime_ms() > legacy_horizon
                size = segment.size
                chunks: Iterator[bytes] | Iterator[tuple[int, bytes, list[tuple[int, int]]]]
                if key_map is not None:
                    reader = _ChunkReader(segment, 0, size, self.io_buffer_size, check_done)
                    chunks = iter(reader.read, None)
                else:
                    chunks = read_entries(segment, 0, size, self.io_buffer_size, check_done)
                for chunk in chunks:
                    spans: list[tuple[int, int]] | None
                    if not isinstance(chunk, tuple):  # the walks' chunk of whole and cut entries
                        buf = chunk
                        chunk_at, n = reader.position, len(buf)
                        spans = None
                        # the group's last entry stays, if only as an empty batch: Python decides it
                        keep_end = size - chunk_at if i == last_non_empty else -1
                    else:
                        chunk_at, buf, spans = chunk
                        n = spans[-1][1]
                    # What to write, joined once (often one part: the C output).
                    parts: list[bytes | bytearray | memoryview] = []
                    written = 0
                    infos: list[EntryInfo] = []
                    largest = -1
                    max_ts = -1
                    span_index = 0
                    pos = 0 if spans is None else spans[0][0]
                    while pos < n:
                        if spans is None:
                            # The walk: in C, the batches pass 1 decided, in one call (GIL released)
                            assert key_map is not None  # spans are None with the walks only
                            pos, _, data, done, done_max_ts, counts = key_map.filter_entries(
                                buf, pos, n, latest, keep_end, written, now_ms, retention_ms)
                            if done:
                                parts.append(data)
                                written += len(data)
                                infos += done
                                largest = done[-1].last_offset
                                if done_max_ts > max_ts:
                                    max_ts = done_max_ts
                            filter_stats.records_read += counts[0]
                            filter_stats.records_kept += counts[1]
                            filter_stats.entries_copied += counts[2]
                            filter_stats.entries_rebuilt += counts[3]
                            filter_stats.entries_dropped += counts[4]
                            filter_stats.keyless_dropped += counts[5]
                            filter_stats.tombstones_dropped += counts[6]
                            if pos >= n:
                                break
                            stop = reader.entry_end(buf, pos)
                            if stop < 0:
                                break  # cut by the chunk: the next read starts with it
                        else:
                            stop = spans[span_index][1]
                            span_index += 1
                        keep_empty = i == last_non_empty and chunk_at + stop == size
                        dead = None
                        if buf[pos + MAGIC_OFFSET] == MAGIC_V2:
                            base_offset = unpack_head(buf, pos)[0]
                            last = base_offset + unpack_delta(buf, pos + LAST_DELTA_AT)[0]
                            attributes = INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
                            aborted = self._aborted.holds(buf, pos)
                            if attributes & TRANSACTIONAL_BIT and not attributes & CONTROL_BIT and not aborted:
                                self._committed_data.add(BATCH_HEADER.unpack_from(buf, pos)[9])
                            if last <= latest:
                                dead = table.dead_mask(base_offset, last)
                                is_marker, marker = False, None
                                if aborted:
                                    dead = (1 << (last - base_offset + 1)) - 1  # every record goes
                                    self._aborted.observe(buf, pos)
                                elif self._aborted.marker_at(buf, pos) is not None:
                                    is_marker, marker = True, self._abort_marker(
                                        buf, pos, stop, record_filter.now_ms, record_filter.delete_retention_ms,
                                        keep_empty)
                                elif attributes & CONTROL_BIT and is_commit_marker(buf, pos, stop):
                                    is_marker, marker = True, self._commit_marker(
                                        buf, pos, stop, record_filter.now_ms, record_filter.delete_retention_ms,
                                        keep_empty)
                                if is_marker:
                                    pos = stop
                                    if marker is None:
                                        continue
                                    infos.append(entry_info(marker, written))
                                    parts.append(marker.data)
                                    written += len(marker.data)
                                    largest = marker.last_offset
                                    max_ts = max(max_ts, marker.max_timestamp)
                                    continue
                        kept = record_filter.filter(buf, pos, stop, keep_empty=keep_empty,
                                                    retain_legacy_deletes=retain_legacy_deletes, dead=dead)
                        pos = stop
                        if kept is None:
                            continue
                        infos.append(entry_info(kept, written))
                        parts.append(kept.data)
                        written += len(kept.data)
                        largest = kept.last_offset
                        if kept.max_timestamp > max_ts:
                            max_ts = kept.max_timestamp
                    if spans is None:
                        reader.advance(buf, pos)
                    stats.bytes_read += pos
                    if infos:
                        out = parts[0] if len(parts) == 1 else b"".join(parts)
                        cleaned.append(largest, _Chunk(out, EntryTable.of(infos), max_ts))
                        stats.bytes_written += written
                stats.segments += 1
                for txn in segment.txn_index.entries:  # the aborted transactions stay known ...
                    if (txn.producer_id, txn.last_offset) not in self._aborted.removed:  # ... but gone markers'
                        cleaned.txn_index.append(txn)
            cleaned.on_became_inactive()
            mtime = os.stat(group[-1].log.path).st_mtime_ns
            os.utime(cleaned.log.path, ns=(mtime, mtime))
            cleaned.flush()
            self.step("cleaned_written")
            log.replace_segments(cleaned, group, step=self.step)
        except Exception:
            # Not swapped in: its files go (after a crash the loader removes `.cleaned`
            # files). Swapped in, the failure came after: the segment is the log's now.
            if log.segments.snapshot().get(base) is not cleaned:
                cleaned.delete()
            raise
        stats.groups += 1


def is_commit_marker(buf, pos: int, stop: int) -> bool:
    """Whether the control batch at buf[pos:stop] holds a COMMIT marker."""
    marker = decode_marker(bytes(buf[pos:stop]))
    return marker is not None and marker.commit


class AbortedBatches:
    """Which batches belong to aborted transactions, from `.txnindex` entries: a
    transactional data batch of the producer between a transaction's first offset
    and its abort marker. Pass 2 records the transactions whose data it met
    (`observe`) and the markers it removed (`removed`: (producer id, offset))."""

    def __init__(self, aborted) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        self._markers = {(txn.producer_id, txn.last_offset) for txn in aborted}
        self._observed: set[tuple[int, int]] = set()  # (producer id, marker offset)
        self.removed: set[tuple[int, int]] = set()
        for txn in aborted:
            self._ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        for ranges in self._ranges.values():
            ranges.sort()

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def holds(self, buf, pos: int) -> bool:
        """Whether the magic-2 batch at buf[pos:] belongs to an aborted transaction."""
        if not self._ranges:
            return False
        (base_offset, _, _, _, _, attributes, _, _, _, producer_id, *_rest) = BATCH_HEADER.unpack_from(buf, pos)
        if not attributes & TRANSACTIONAL_BIT or attributes & CONTROL_BIT:
            return False
        return self._range_of(producer_id, base_offset) is not None

    def _range_of(self, producer_id: int, offset: int) -> tuple[int, int] | None:
        ranges = self._ranges.get(producer_id)
        if not ranges:
            return None
        i = bisect.bisect_right(ranges, (offset, 2**63)) - 1
        return ranges[i] if i >= 0 and ranges[i][0] <= offset <= ranges[i][1] else None

    def observe(self, buf, pos: int) -> None:
        """Pass 2 met the aborted batch at buf[pos:] (`holds` said so)."""
        (base_offset, _, _, _, _, _, _, _, _, producer_id, *_rest) = BATCH_HEADER.unpack_from(buf, pos)
        found = self._range_of(producer_id, base_offset)
        if found is not None:
            self._observed.add((producer_id, found[1]))

    def observed_data(self, producer_id: int, marker_offset: int) -> bool:
        return (producer_id, marker_offset) in self._observed

    def marker_at(self, buf, pos: int) -> tuple[int, int] | None:
        """(producer id, offset) when the batch at buf[pos:] is an abort marker of
        the `.txnindex` entries."""
        if not self._markers:
            return None
        (base_offset, _, _, _, _, attributes, _, _, _, producer_id, *_rest) = BATCH_HEADER.unpack_from(buf, pos)
        if not attributes & CONTROL_BIT or (producer_id, base_offset) not in self._markers:
            return None
        return producer_id, base_offset
