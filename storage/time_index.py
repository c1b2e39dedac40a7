"""A segment's time index: timestamp -> offset (Kafka's TimeIndex).

Contract:
- An entry (T, O) means: the largest timestamp seen up to offset O is T, so any record
  with a timestamp above T comes after O. Timestamps strictly increase from entry to
  entry; offsets never decrease.
- `maybe_append(ts, offset)` adds an entry only when `ts` exceeds the last entry's
  timestamp (so v0 records, whose timestamp is -1, never add one). An offset below
  the last entry's offset raises InvalidOffsetError.
- `is_full()` keeps one slot free (entries >= max_entries - 1): when a segment rolls
  or closes it appends its final (max timestamp, offset) with skip_full_check=True.
- `lookup(ts)` gives the last entry whose timestamp is <= ts, or (-1, base_offset).
- File handling, truncation, resizing and the concurrency rules: see index_file.

On-disk layout (big-endian), one entry per 12 bytes, no header:

    timestamp      : int64   milliseconds
    relativeOffset : int32   offset - base_offset
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from kafka_format.errors import CorruptIndexError, InvalidOffsetError

from .index_file import DEFAULT_MAX_INDEX_SIZE, IndexFile
from .open_files import OpenFiles

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(IndexFile):
    ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
    OFFSET_FIELD = 1
    FREE_SLOTS_KEPT = 1  # for the entry a roll or close adds with skip_full_check

    def __init__(self, path: str | os.PathLike, base_offset: int,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE, writable: bool = True,
                 budget: OpenFiles | None = None):
        self._last_entry = TimestampOffset(NO_TIMESTAMP, base_offset)
        super().__init__(path, base_offset, max_index_size, writable, budget)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base_offset) when empty."""
        if not self._loaded:
            self._ensure_loaded()
        return self._last_entry

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) when the timestamp exceeds the last entry's."""
        with self._writing():
            if not skip_full_check and self.is_full():
                raise InvalidOffsetError(f"attempt to append to a full time index {self._path} "
                                         f"({self._entries} entries)")
            last = self._last_entry
            if self._entries > 0 and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {self._entries} of {self._path}, "
                    f"below the last offset appended ({last.offset})")
            if timestamp <= last.timestamp:
                # Re-adding the last entry (roll, close) or an older max timestamp: nothing new.
                return
            if self._entries >= self._max_entries:
                raise InvalidOffsetError(f"no slot left in time index {self._path} "
                                         f"({self._entries} entries)")
            self._publish_entry(timestamp, self._relative_offset(offset))
            self._last_entry = TimestampOffset(timestamp, offset)

    # append_entries' hooks: entries as unpacked are (timestamp, relativeOffset).
    def _continues(self, first) -> bool:
        last = self._last_entry
        return self._entries == 0 or (self._base_offset + first[1] >= last.offset and first[0] > last.timestamp)

    def _append_unpacked(self, entry) -> None:
        self.maybe_append(entry[0], self._base_offset + entry[1])

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The last entry whose timestamp is <= target, else (-1, base_offset)."""
        found = self._floor_entry(self.KEY_FIELD, target_timestamp)
        if found is None:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return TimestampOffset(found[0], self._base_offset + found[1])

    def entry(self, n: int) -> TimestampOffset:
        """The n-th entry (0-based); IndexError outside 0..entries-1."""
        timestamp, relative = self._raw_entry(n)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless the entries are ordered: timestamps and
        relative offsets non-decreasing, offsets from 0 up (Kafka checks only the
        length and the last entry). The last two entries are checked first: equal
        ones (a file preallocated with zeros by a crash) cannot be, since appends
        take strictly increasing timestamps; then every entry, in C."""
        self._ensure_loaded()
        if self._length % self._entry_size != 0:
            raise CorruptIndexError(
                f"time index file {self._path} is corrupt: {self._length} bytes is not a multiple "
                f"of {self._entry_size}")
        count = self._entries
        if count == 0:
            return
        last = self._raw_entry(count - 1)
        if last[1] < 0:
            raise CorruptIndexError(
                f"corrupt time index {self._path}: it has entries but the last offset "
                f"{self._base_offset + last[1]} is below the base offset {self._base_offset}")
        if count > 1:
            before = self._raw_entry(count - 2)
            if before[0] >= last[0] or before[1] > last[1]:
                raise CorruptIndexError(f"corrupt time index {self._path}: the last timestamps do not grow")
        fields = struct.unpack(">" + "qi" * count, self._entries_bytes())
        timestamps, offsets = fields[0::2], fields[1::2]
        if list(timestamps) != sorted(timestamps):
            raise CorruptIndexError(f"corrupt time index {self._path}: timestamps do not ascend")
        if offsets[0] < 0 or list(offsets) != sorted(offsets):
            raise CorruptIndexError(
                f"corrupt time index {self._path}: offsets do not ascend from the base offset {self._base_offset}")

    def _cache_last(self, last) -> None:
        self._last_entry = (TimestampOffset(NO_TIMESTAMP, self._base_offset) if last is None
                            else TimestampOffset(last[0], self._base_offset + last[1]))
