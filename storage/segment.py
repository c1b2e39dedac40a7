"""A segment: one `.log` file with its sparse `.index` and `.timeindex`.

Contract:
- Appends come validated (offsets assigned) and in offset order, one writer at a
  time. The data is written before any index entry that points into it, so a
  concurrent reader bounded by the committed file size never follows an index
  entry past the data.
- The offset index gets `(last offset of an entry, position of the entry)` once
  more than `index.interval.bytes` were written since the previous index entry;
  the time index gets `(largest timestamp so far, its entry's last offset)` at the
  same moments, and only when the timestamp grew (Kafka's rule, per entry).
- Reads return whole entries starting at the entry that holds the wanted offset,
  or, when the first entry is larger than `max_size`, that entry cut short (a
  client learns its size and retries with a bigger buffer), unless
  `min_one_message` asks for the whole first entry.
- `recover()` rebuilds both indexes from the file while validating every entry
  and cuts the file at the first bad or partial one.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from kafka_format import accel, iter_entries, scan_entries
from kafka_format.entries import EntryTable
from kafka_format.errors import CorruptRecordError, InvalidOffsetError
from kafka_format.framing import ENTRY_PREFIX, ENTRY_ROW

from .clock import SystemClock
from .file_records import FileRecords, FileSlice
from .fileutil import segment_file_name
from .offset_index import OffsetIndex
from .time_index import TimeIndex
from .txn_index import TransactionIndex, txn_index_path

INT_MAX = 2**31 - 1
NO_TIMESTAMP = -1
RECOVERY_CHUNK = 8 << 20
RECENT_APPENDS = 8  # appends whose first entry a read finds without searching (LogSegment._recent_appends)


class OffsetPosition(NamedTuple):
    """Where the entry holding an offset starts, and how big it is."""

    offset: int  # the entry's last offset
    position: int
    size: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


def index_entries(entries, interval: int, since: int, best_ts: int, best_offset: int,
                  base_offset: int, base_position: int, newest: int):
    """accel.index_entries over an EntryTable's rows (no object made per entry)
    or a list of EntryInfo."""
    if isinstance(entries, EntryTable):
        entries = entries.rows
    return accel.index_entries(entries, interval, since, best_ts, best_offset, base_offset, base_position, newest)


class LogSegment:
    def __init__(self, log: FileRecords, offset_index: OffsetIndex, time_index: TimeIndex,
                 base_offset: int, index_interval_bytes: int, roll_jitter_ms: int,
                 clock: SystemClock):
        self.log = log
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = TransactionIndex(txn_index_path(log.path), base_offset)  # aborted txns, read lazily
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self._clock = clock
        self.created_ms = clock.time_ms()
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._max_timestamp_and_offset: TimestampOffset | None = None  # loaded lazily
        # (offset, position): where the last bounded read ended, an entry boundary.
        self._read_cursor: tuple[int, int] | None = None
        # The first entry of each of the last RECENT_APPENDS appends, by the append's
        # first offset: a consumer at the log end asks next for where an append
        # began, found here without an index search or a read of the file.
        self._recent_appends: dict[int, OffsetPosition] = {}

    @classmethod
    def open(cls, directory: str, base_offset: int, *, index_interval_bytes: int,
             max_index_size: int, roll_jitter_ms: int = 0, clock: SystemClock,
             suffix: str = "") -> LogSegment:
        def path(kind: str) -> str:
            return os.path.join(directory, segment_file_name(base_offset, kind + suffix))

        return cls(FileRecords.open(path(".log")),
                   OffsetIndex(path(".index"), base_offset, max_index_size),
                   TimeIndex(path(".timeindex"), base_offset, max_index_size),
                   base_offset, index_interval_bytes, roll_jitter_ms, clock)

    # ---- sizes and timestamps ------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts_and_offset().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts_and_offset().offset

    @property
    def largest_timestamp(self) -> int:
        """The largest timestamp in the segment, or the file's mtime when there is none."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.log.mtime_ms()

    def _max_ts_and_offset(self) -> TimestampOffset:
        if self._max_timestamp_and_offset is None:
            self._max_timestamp_and_offset = self._load_largest_timestamp()
        return self._max_timestamp_and_offset

    def _load_largest_timestamp(self) -> TimestampOffset:
        # The time index's last entry, then whatever was appended after it.
        ts, offset = self.time_index.last_entry
        best = TimestampOffset(ts, offset)
        start = self.offset_index.lookup(offset)[1]
        for entry in self._entries_from(start):
            if entry.max_timestamp > best.timestamp:
                best = TimestampOffset(entry.max_timestamp, entry.last_offset)
        return best

    def _entries_from(self, position: int):
        data = self.log.read(position, self.log.size - position)
        return iter_entries(data)

    def _first_batch_timestamp(self) -> int | None:
        for header in self.log.iter_headers(0):
            for entry in iter_entries(self.log.read(header.position, header.size)):
                return entry.max_timestamp
        return None

    # ---- rolling ------------------------------------------------------------------------

    def should_roll(self, *, messages_size: int, max_timestamp_in_messages: int,
                    max_offset_in_messages: int, now_ms: int, segment_bytes: int,
                    segment_ms: int) -> bool:
        size = self.log.size
        reached_roll_ms = (self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                           > segment_ms - self.roll_jitter_ms)
        return (size > segment_bytes - messages_size
                or (size > 0 and reached_roll_ms)
                or self.offset_index.is_full()
                or self.time_index.is_full()
                or not self.can_convert_to_relative_offset(max_offset_in_messages))

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Age measured as Kafka does: by record timestamps when the segment has
        one, else by the wall clock since the segment was created."""
        if self._rolling_based_timestamp is None and self.log.size > 0:
            self._rolling_based_timestamp = self._first_batch_timestamp()
        rolling = self._rolling_based_timestamp
        if rolling is not None and rolling >= 0:
            return message_timestamp - rolling
        return now_ms - self.created_ms

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT_MAX

    def on_became_inactive(self) -> None:
        """Called when a newer segment takes over: record the final time index
        entry (in the slot kept for it), trim both indexes to their entries and
        give back the log's reserved blocks."""
        best = self._max_ts_and_offset()
        if best.timestamp >= 0:
            self.time_index.maybe_append(best.timestamp, best.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.release_reserved()

    # ---- appending ---------------------------------------------------------------

    def append(self, largest_offset: int, validated, reserve_ahead: int = 0) -> None:
        """Write a validated set (see records.validate_and_assign) and index it;
        `reserve_ahead`: see FileRecords.append. `validated.entries` is an EntryTable."""
        if not validated.entries.rows:
            return
        if not self.can_convert_to_relative_offset(largest_offset):
            raise InvalidOffsetError(
                f"offset {largest_offset} does not fit segment {self.base_offset}")
        physical_position = self.log.size
        best = self._max_ts_and_offset()
        try:
            if physical_position == 0:
                self._rolling_based_timestamp = validated.max_timestamp
            self.log.append(validated.buffer, reserve_ahead)
            self._remember_append(validated, physical_position)
            size = len(validated.buffer)
            since = self._bytes_since_last_index_entry
            offset_of_max = validated.offset_of_max_timestamp  # None: not known, the entries tell
            if offset_of_max is not None and since + size <= self.index_interval_bytes:
                # No entry of the set can reach the next index point (what index_entries
                # would find): a small append only counts its bytes and its timestamp.
                self._bytes_since_last_index_entry = since + size
                if validated.max_timestamp > best.timestamp:
                    self._max_timestamp_and_offset = TimestampOffset(validated.max_timestamp, offset_of_max)
            else:
                self._index_entries(validated.entries, physical_position, best)
        except OSError:
            first_offset = validated.first_offset
            if first_offset is None:  # a cleaned chunk: its first entry's offset field
                first_offset = ENTRY_PREFIX.unpack_from(validated.buffer)[0]
            self._undo_append(first_offset, physical_position, best)
            raise

    def _undo_append(self, first_offset: int, position: int, best: TimestampOffset) -> None:
        """After a failed write (disk full, I/O error): drop what the append added,
        so that the segment is as before it. Every index entry the append wrote is
        at `first_offset` or later (the offset field of the set's first entry: a batch's
        base offset, a classic entry's own offset, each at most the offsets indexed
        for it), every older one before it. The log's file is cut back by
        FileRecords.append itself when its own write failed."""
        self._recent_appends.clear()
        if self.log.size > position:
            self.log.truncate_to(position)
        self.offset_index.truncate_to(first_offset)
        self.time_index.truncate_to(first_offset)
        self._max_timestamp_and_offset = best
        if position == 0:
            self._rolling_based_timestamp = None

    def _remember_append(self, validated, physical_position: int) -> None:
        """Note where the append's first entry is, by the set's first offset: the
        entry holding it (a batch's base offset, a classic message's offset, the
        first inner offset of a compressed classic wrapper). Read from the entry's
        packed row: no EntryInfo made."""
        first_offset = validated.first_offset
        if first_offset is None:
            return  # a cleaned chunk (storage/cleaner.py) does not say it: not noted
        position, size, _, last_offset, _, _ = ENTRY_ROW.unpack_from(validated.entries.rows)
        recent = self._recent_appends
        recent[first_offset] = OffsetPosition(last_offset, physical_position + position, size)
        if len(recent) > RECENT_APPENDS:
            del recent[next(iter(recent))]

    def _index_entries(self, entries, start_position: int, best: TimestampOffset) -> None:
        """Add index entries for `entries` (just written from `start_position`)."""
        offset_entries, time_entries, since, best_ts, best_offset = index_entries(
            entries, self.index_interval_bytes, self._bytes_since_last_index_entry, best.timestamp, best.offset,
            self.base_offset, start_position, self.time_index.last_entry.timestamp)
        self.offset_index.append_entries(offset_entries)
        self.time_index.append_entries(time_entries)
        self._bytes_since_last_index_entry = since
        self._max_timestamp_and_offset = TimestampOffset(best_ts, best_offset)

    # ---- reading -----------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> OffsetPosition | None:
        """The first entry whose last offset is >= `offset`, or None past the end."""
        position = max(self.offset_index.lookup(offset)[1], starting_position)
        for header in self.log.iter_headers(position):
            if header.last_offset >= offset:
                return OffsetPosition(header.last_offset, header.position, header.size)
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> FileSlice | None:
        """Whole entries from the one holding `start_offset`, at most `max_size` bytes
        (see the module contract for the first-entry rule). None past the end."""
        if max_size < 0:
            raise ValueError(f"max_size {max_size} is negative")
        end = self.log.size if max_position is None else min(max_position, self.log.size)
        start = (self._recent_appends.get(start_offset) or self._start_at_read_cursor(start_offset)
                 or self.translate_offset(start_offset))
        if start is None or start.position >= end:
            return None
        first_end = start.position + start.size
        if max_size == 0 and not min_one_message:
            return self.log.slice(start.position, 0)
        if first_end > start.position + max_size:
            length = start.size if min_one_message else max_size
            return self.log.slice(start.position, min(length, end - start.position))
        limit = min(end, start.position + max_size)
        return self.log.slice(start.position, self._last_whole_entry_end(start, limit) - start.position)

    def _start_at_read_cursor(self, offset: int) -> OffsetPosition | None:
        """A consumer reading on asks for one past the last entry it got: where the
        previous read stopped. Starting there skips the index search."""
        cursor = self._read_cursor
        if cursor is None or cursor[0] != offset:
            return None
        for header in self.log.iter_headers(cursor[1]):
            return OffsetPosition(header.last_offset, header.position, header.size)
        return None

    def _last_whole_entry_end(self, first: OffsetPosition, limit: int) -> int:
        """The end of the last whole entry at or before `limit`, the first entry being
        whole. Jumps with the offset index, then walks a few headers; remembers where
        it stopped as the read cursor."""
        known_end = first.position + first.size
        if limit >= self.log.size:
            return self.log.size  # every committed entry is whole
        position = max(known_end, self.offset_index.lookup_by_position(limit).position)
        # `position` is an entry boundary; the offset of the entry ending there is
        # known only when it is the first entry.
        end, last_offset = position, first.offset if position == known_end else None
        for header in self.log.iter_headers(position, limit):
            end, last_offset = header.position + header.size, header.last_offset
        if last_offset is not None:
            self._read_cursor = (last_offset + 1, end)
        return end

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> TimestampOffset | None:
        """The first record at or after `starting_offset` whose timestamp is >= `timestamp`."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(indexed_offset, starting_offset))[1]
        for header in self.log.iter_headers(position):
            data = self.log.read(header.position, header.size)
            for entry in iter_entries(data):
                if entry.max_timestamp < timestamp:
                    continue
                found = entry.first_record_at(timestamp, starting_offset)
                if found is not None:
                    return TimestampOffset(*found)
        return None

    def max_timestamp_record(self, starting_offset: int = 0) -> TimestampOffset | None:
        """(timestamp, offset) of the first record holding the segment's largest
        timestamp, at or after `starting_offset` (ListOffsets MAX_TIMESTAMP, KAFKA-16310).
        The time index / max-timestamp tracking names the batch (its last offset);
        only that one batch is read. None when the segment has no timestamp."""
        best = self._max_ts_and_offset()
        if best.timestamp < 0:
            return None
        position = self.offset_index.lookup(best.offset)[1]
        for header in self.log.iter_headers(position):
            if header.last_offset < best.offset:
                continue
            for entry in iter_entries(self.log.read(header.position, header.size)):
                found = entry.first_record_at(best.timestamp, starting_offset)
                return None if found is None else TimestampOffset(*found)
            break
        return None

    def read_next_offset(self) -> int:
        """One past the last offset in the segment (the base offset when empty)."""
        position = self.offset_index.lookup(self.offset_index.last_offset)[1]
        next_offset = self.base_offset
        for header in self.log.iter_headers(position):
            next_offset = header.last_offset + 1
        return max(next_offset, self.base_offset)

    # ---- recovery and truncation ------------------------------------------------------

    def verify_tail(self) -> None:
        """Raise CorruptRecordError unless the entries from the last offset index entry
        to the end of the file are whole and valid (CRCs, ascending offsets that fit the
        segment). The loader checks this after a clean shutdown, before any append goes
        after those entries: it reads at most an index interval and one append."""
        position = self.offset_index.lookup(self.offset_index.last_offset)[1]
        tail = self.log.read(position, self.log.size - position)
        result = scan_entries(tail, 0, len(tail), min_offset=self.base_offset, check_lengths=False)
        entries = result.entries
        end = entries[-1].position + entries[-1].size if entries else 0
        if result.problem is not None or end != len(tail):
            raise CorruptRecordError(f"{self.log.path}: {result.problem or 'a partial entry at the end'}")
        if entries and not self.can_convert_to_relative_offset(entries[-1].last_offset):
            raise CorruptRecordError(f"{self.log.path}: offset {entries[-1].last_offset} does not fit the segment")

    def recover(self, max_index_size: int) -> int:
        """Rebuild the indexes from the file, validating each entry; cut the file at
        the first invalid or partial entry. Returns the number of bytes cut."""
        self.offset_index.truncate()
        self.offset_index.resize(max_index_size)
        self.time_index.truncate()
        self.time_index.resize(max_index_size)
        self._bytes_since_last_index_entry = 0
        best = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        self._max_timestamp_and_offset = best
        file_size = self.log.size
        position = 0
        min_offset = self.base_offset
        chunk_size = RECOVERY_CHUNK
        while position < file_size:
            chunk = self.log.read(position, min(chunk_size, file_size - position))
            result = scan_entries(chunk, 0, len(chunk), min_offset=min_offset, check_lengths=False)
            entries = result.entries
            fitting = entries
            if entries and not self.can_convert_to_relative_offset(entries[-1].last_offset):
                # Offsets ascend: the entries that fit the segment are a prefix.
                fits = 0
                while fits < len(entries) and self.can_convert_to_relative_offset(entries[fits].last_offset):
                    fits += 1
                fitting = entries[:fits]
            if fitting:
                self._index_entries(fitting, position, self._max_timestamp_and_offset)
                min_offset = fitting[-1].last_offset + 1
                position += fitting[-1].position + fitting[-1].size
            if len(fitting) < len(entries) or (result.problem is not None and not result.partial):
                break  # an invalid entry: the file is cut here
            if result.partial:
                needed = self._entry_size_at(position)
                if needed is None or position + needed > file_size:
                    break  # a torn tail
                chunk_size = max(RECOVERY_CHUNK, needed)  # an entry larger than the chunk
            elif not entries:
                break
        self._read_cursor = None
        self._recent_appends.clear()
        truncated = self.log.truncate_to(position) if position < file_size else 0
        if truncated:
            self._rolling_based_timestamp = None
        else:  # (a truncation gave back any blocks a crashed process had reserved)
            self.log.release_leftover_reservation()
        return truncated

    def _entry_size_at(self, position: int) -> int | None:
        head = self.log.read(position, 12)
        if len(head) < 12:
            return None
        size = int.from_bytes(head[8:12], "big", signed=True)
        return 12 + size if size >= 14 else None

    def truncate_to(self, offset: int) -> int:
        """Remove every entry holding an offset >= `offset`; return the bytes cut."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if mapping is None:
            return 0
        self._read_cursor = None
        self._recent_appends.clear()
        truncated = self.log.truncate_to(mapping.position)
        if self.log.size == 0:
            self.created_ms = self._clock.time_ms()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_and_offset = None
        return truncated

    def resize_indexes(self, max_index_size: int) -> None:
        self.offset_index.resize(max_index_size)
        self.time_index.resize(max_index_size)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index file cannot be trusted (the loader
        then rebuilds): Kafka's checks pass an index left preallocated with zeros by a
        crash or with garbage inside; these do not: entries must be ordered and point
        inside the .log."""
        self.offset_index.sanity_check(self.log.size)
        self.time_index.sanity_check()

    # ---- durability and life cycle --------------------------------------------------

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        for f in (self.log, self.offset_index, self.time_index):
            if not f.path.endswith(old_suffix):
                raise ValueError(f"{f.path} does not end with {old_suffix!r}")
            f.rename(f.path[: len(f.path) - len(old_suffix)] + new_suffix)
        txn = self.txn_index
        if txn.path.endswith(old_suffix):
            txn.rename(txn.path[: len(txn.path) - len(old_suffix)] + new_suffix)

    def evict(self) -> None:
        """Close the files' descriptors now where idle; they reopen on their next use
        (the loader does this for each segment it has checked)."""
        self.log.evict()
        self.offset_index.evict()
        self.time_index.evict()

    def close(self) -> None:
        best = self._max_timestamp_and_offset
        if best is not None and best.timestamp >= 0:
            self.time_index.maybe_append(best.timestamp, best.offset, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.log.close()

    def delete(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.offset_index.delete_if_exists()
        self.time_index.delete_if_exists()
        self.txn_index.delete_if_exists()
        self.log.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
