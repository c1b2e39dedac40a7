"""Memory-mapped, preallocated files of fixed-size index entries (Kafka's AbstractIndex
and LazyIndex).

`OffsetIndex` and `TimeIndex` are built on `IndexFile`; this module holds what they
share: opening and preallocating the file, the entry count, binary search, truncation,
resizing, flush, close, rename and delete.

Contract:
- A writable index whose file does not exist is created and preallocated (sparse
  ftruncate) to `max_index_size` rounded down to whole entries, and starts empty. A
  file that exists is taken as all-valid: entries = length // entry size, and it is
  full until resized. This is why `close()` trims the file to its real entries.
- Lazy (Kafka's LazyIndex): an existing file is opened and mapped on first use, not
  when the object is made. The file holds one descriptor while open (mapped_file:
  no duplicate for the mapping) and counts against the process's open-file budget
  (open_files): while idle it may be closed, keeping what it knows of its entries,
  and reopens on its next use. Every use of the mapping or the descriptor happens
  under a pin. Writes go through the descriptor with pwrite.
- Entries are sorted on every field a search uses (the owner appends in order).
- Relative offsets are `offset - base_offset` and must fit 0..2**31-1.
- Concurrency: one writer (append, truncate, resize, flush, close; serialised by a
  lock, so calling them from several threads is safe but not concurrent) and any
  number of readers (lookup, entry). Readers never see a half-written entry: the
  writer stores an entry's bytes first and only then publishes it by bumping
  `entries`. Growing the file maps it afresh and swaps the reference; shrinking it
  ftruncates the file and keeps the mapping, whose tail past the new end is never
  read. Shrinking below the entries a reader may still be searching (after
  `truncate_to`) would make those pages fault (SIGBUS) on Linux, so readers hold
  `_remap_lock` for the few microseconds of a search and resizing takes it too;
  appends never take it.
- POSIX only: the file is truncated while mapped, which Windows does not allow.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from typing import Any

from kafka_format.errors import InvalidOffsetError, KafkaStorageError

from .mapped_file import MappedFile
from .open_files import ManagedFile, OpenFiles

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes

INT32_MAX = 2**31 - 1

# Kafka searches the last 8 KiB of an index first: most lookups come from consumers
# and followers near the end, so the pages they touch stay in the page cache.
WARM_SECTION_BYTES = 8192


class IndexFile(ManagedFile):
    """One memory-mapped file of fixed-size entries, searched by binary search.

    Subclasses set `ENTRY` (one struct for one entry), `OFFSET_FIELD` (which field of
    an entry holds the relative offset; field 0 is always the search key),
    `FREE_SLOTS_KEPT` (slots appends leave free) and implement `_cache_last`
    (refresh the values cached from the last entry), `_continues` and
    `_append_unpacked` (append_entries' checks) and `sanity_check`.
    """

    ENTRY: struct.Struct
    OFFSET_FIELD: int
    KEY_FIELD = 0
    FREE_SLOTS_KEPT = 0

    def __init__(self, path: str | os.PathLike, base_offset: int,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE, writable: bool = True,
                 budget: OpenFiles | None = None):
        super().__init__(budget)
        self._path = os.fspath(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        self._entry_size = self.ENTRY.size
        self._unpack_from = self.ENTRY.unpack_from
        self._warm_entries = WARM_SECTION_BYTES // self._entry_size
        self._write_lock = threading.RLock()  # one mutation at a time
        # `with self._writing():` - stateless, so one serves every writer and nesting.
        self._write_session = _Pinned(self._write_lock, self._require_writable, self._pin, self._unpin)
        self._remap_lock = threading.Lock()  # a search vs. a change of the file's length
        self._file: MappedFile | None = None  # while the descriptor is open
        self._dirty = False  # written since the last flush
        # What is known of the file once it was first opened (kept while it is evicted).
        self._loaded = False
        self._length = 0  # the file's length in bytes
        self._max_entries = 0
        self._entries = 0
        if writable and self._create_if_missing():
            self._loaded = True
            self._length = self._round_down(max_index_size)
            self._max_entries = self._length // self._entry_size
            self._on_entries_changed()
        elif not writable and not os.path.exists(self._path):
            raise FileNotFoundError(2, "No such file or directory", self._path)

    # -- opening -------------------------------------------------------------------

    def _create_if_missing(self) -> bool:
        """Create and preallocate the file when it does not exist; True when created."""
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        try:
            if self._max_index_size < self._entry_size:
                os.unlink(self._path)
                raise ValueError(f"invalid max index size {self._max_index_size} for {self._path}")
            os.ftruncate(fd, self._round_down(self._max_index_size))
        finally:
            os.close(fd)
        return True

    def open_descriptor(self) -> None:
        """Open and map the file (the budget calls this under a first pin)."""
        flags = (os.O_RDWR if self._writable else os.O_RDONLY) | os.O_CLOEXEC
        fd = os.open(self._path, flags)
        try:
            length = os.fstat(fd).st_size
            if self._loaded and length != self._length:
                raise KafkaStorageError(
                    f"index {self._path} changed length while closed ({self._length} -> {length} bytes)")
            self._file = MappedFile(self._path, fd, length, self._writable)
        except BaseException:
            if self._file is None:
                os.close(fd)
            raise
        if not self._loaded:
            self._length = length
            self._max_entries = length // self._entry_size
            self._entries = self._max_entries
            self._loaded = True
            self._on_entries_changed()

    def close_descriptor(self) -> None:
        mapped, self._file = self._file, None
        if mapped is not None:
            mapped.close()

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._pin()
            self._unpin()

    def _round_down(self, size: int) -> int:
        return size - size % self._entry_size

    def describe(self) -> str:
        return f"index {self._path}"

    # -- properties ----------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def entries(self) -> int:
        self._ensure_loaded()
        return self._entries

    @property
    def max_entries(self) -> int:
        self._ensure_loaded()
        return self._max_entries

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def length(self) -> int:
        """The file's length in bytes (preallocated space included)."""
        self._ensure_loaded()
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes taken by real entries."""
        self._ensure_loaded()
        return self._entries * self._entry_size

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def closed(self) -> bool:
        return self.retired

    def is_full(self) -> bool:
        if not self._loaded:
            self._ensure_loaded()
        return self._entries >= self._max_entries - self.FREE_SLOTS_KEPT

    def can_append_offset(self, offset: int) -> bool:
        """Whether `offset` fits this index's 32-bit relative offsets."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    def _relative_offset(self, offset: int) -> int:
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            raise InvalidOffsetError(
                f"offset {offset} does not fit a relative offset from base {self._base_offset} in {self._path}")
        return relative

    def __repr__(self) -> str:
        entries = f"{self._entries}/{self._max_entries}" if self._loaded else "not loaded"
        return f"{type(self).__name__}({self._path!r}, base_offset={self._base_offset}, entries={entries})"

    # -- reading (any thread) ------------------------------------------------------

    def _raw_entry(self, n: int) -> tuple[Any, ...]:
        self._pin()
        try:
            with self._remap_lock:
                count = self._entries
                if not 0 <= n < count:
                    raise IndexError(f"entry {n} requested from {self._path}, which has {count} entries")
                return self._unpack_from(self._mapping(), n * self._entry_size)
        finally:
            self._unpin()

    def _floor_entry(self, field: int, target: int) -> tuple[Any, ...] | None:
        """The last entry whose `field` is <= target, or None when there is none."""
        self._pin()
        try:
            with self._remap_lock:
                # The mapping cannot change while we hold the lock, but appends go on:
                # take the count once and search only entries published before it.
                count = self._entries
                if count == 0:
                    return None
                mapping = self._mapping()
                found = self._count_at_most(mapping, count, field, target)
                return self._unpack_from(mapping, (found - 1) * self._entry_size) if found else None
        finally:
            self._unpin()

    @property
    def _open_file(self) -> MappedFile:
        """The mapped file, which a pin keeps open (the caller pinned it)."""
        mapped = self._file
        if mapped is None:
            raise KafkaStorageError(f"index {self._path} is used while its descriptor is closed")
        return mapped

    def _mapping(self) -> Any:
        """The mapped bytes, for struct (caller pinned; never None while entries > 0)."""
        return self._open_file.buffer

    def _entries_bytes(self) -> bytes:
        """A copy of the real entries, as the file holds them."""
        self._pin()
        try:
            with self._remap_lock:
                return self._open_file.read(0, self._entries * self._entry_size)
        finally:
            self._unpin()

    def _count_at_most(self, mapping: Any, count: int, field: int, target: int) -> int:
        """How many of the first `count` entries have entry[field] <= target."""
        unpack_from = self._unpack_from
        entry_size = self._entry_size
        lo, hi = 0, count  # entries below lo are <= target, entries from hi on are > target
        warm_start = count - self._warm_entries
        if warm_start > 0:
            if unpack_from(mapping, warm_start * entry_size)[field] <= target:
                lo = warm_start + 1
            else:
                hi = warm_start
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack_from(mapping, mid * entry_size)[field] <= target:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- writing (one writer) ------------------------------------------------------

    def _require_writable(self) -> None:
        if self.retired:
            raise KafkaStorageError(f"index {self._path} is closed")
        if not self._writable:
            raise KafkaStorageError(f"index {self._path} was opened read-only")

    def _publish_entry(self, *fields: int) -> None:
        """Store one entry in the next slot (with pwrite, see `_write_at`), then make it
        visible to readers (writer, pinned by the caller's `_writing`)."""
        slot = self._entries
        self._write_at(slot * self._entry_size, self.ENTRY.pack(*fields))
        self._entries = slot + 1

    def _writing(self) -> _Pinned:
        """`with self._writing():` - the write lock, checks, and a pin (the file open)."""
        return self._write_session

    def append_entries(self, packed: bytes) -> None:
        """Add entries packed as the file holds them, in order (LogSegment
        computes them: segment.index_entries), under one lock with one write.
        When they do not follow the last entry or do not fit, they go one by one
        through the subclass's single-entry append instead, which raises where
        it applies."""
        size = self._entry_size
        if len(packed) % size:
            raise ValueError(f"{len(packed)} bytes are not whole entries of {self._path}")
        count = len(packed) // size
        if count == 0:
            return
        with self._writing():
            slot = self._entries
            if (slot + count > self._max_entries - self.FREE_SLOTS_KEPT
                    or not self._continues(self._unpack_from(packed, 0))):
                for n in range(count):
                    self._append_unpacked(self._unpack_from(packed, n * size))
                return
            self._write_at(slot * size, packed)
            self._entries = slot + count  # published: readers see whole entries only
            # From the bytes just written: reading them back through the mapping
            # could take a page fault.
            self._cache_last(self._unpack_from(packed, len(packed) - size))

    def _write_at(self, position: int, data: bytes) -> None:
        """Store whole entries at `position` with pwrite rather than through the
        mapping (caller pinned). Linux keeps the two coherent (one page cache). Why:
        after the log's own large write, kernel writeback has often just cleaned the
        index's page, and a store through the mapping then takes a write fault,
        which costs several times what pwrite's re-dirtying of the page does.
        And a full disk: the file is preallocated sparse, so a store through the
        mapping into a hole on a full filesystem (tmpfs) kills the process with
        SIGBUS, where pwrite fails with ENOSPC, which the log answers."""
        self._dirty = True
        if os.pwrite(self._open_file.fd, data, position) != len(data):
            raise OSError(f"short write to index {self._path}")

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset` (no effect past the last entry)."""
        with self._writing():
            count = self._entries
            if count == 0:
                return
            # Offsets are integers: "offset < target" is "offset <= target - 1".
            keep = self._count_at_most(self._mapping(), count, self.OFFSET_FIELD,
                                       offset - self._base_offset - 1)
            self._truncate_to_entries(keep)

    def truncate(self) -> None:
        """Remove all entries (the file keeps its size)."""
        with self._writing():
            self._truncate_to_entries(0)

    def _truncate_to_entries(self, count: int) -> None:
        # The dropped slots keep their bytes until appends overwrite them; nothing
        # reads past `entries`, and close() trims the file so a reopen cannot see them.
        if count < self._entries:
            self._entries = count
            self._on_entries_changed()

    def reset(self) -> None:
        """Remove all entries and grow the file back to `max_index_size`."""
        with self._write_lock:
            self.truncate()
            self.resize(self._max_index_size)

    def resize(self, new_size: int) -> bool:
        """Set the file's length to `new_size` rounded down to whole entries.

        Returns False when the length does not change. Entries past a smaller end are lost.
        """
        with self._writing():
            new_length = self._round_down(max(new_size, 0))
            if new_length == self._length:
                return False
            mapped = self._file
            assert mapped is not None
            with self._remap_lock:
                os.ftruncate(mapped.fd, new_length)
                self._dirty = True
                if new_length > mapped.length:
                    # No reader holds the old mapping (they search under _remap_lock).
                    mapped.remap(new_length)
                # Shrinking keeps the mapping: its tail past the end is never touched.
                self._length = new_length
                self._max_entries = new_length // self._entry_size
                lost_entries = self._entries > self._max_entries
                if lost_entries:
                    self._entries = self._max_entries
            if lost_entries:
                self._on_entries_changed()
            return True

    def trim_to_valid_size(self) -> None:
        """Cut the file to its real entries (done when a segment rolls or closes)."""
        with self._write_lock:
            if self._loaded and self._length != self._entries * self._entry_size:
                self.resize(self._entries * self._entry_size)

    def flush(self) -> None:
        """Write the entries (and the file's length) to disk."""
        with self._write_lock:
            if self.retired or not self._dirty:
                return
            self._pin()
            try:
                os.fsync(self._open_file.fd)  # covers stores through the mapping too
                self._dirty = False
            finally:
                self._unpin()

    def close(self) -> None:
        """Trim the file to its real entries and close it. Closing twice is harmless."""
        with self._write_lock:
            if self.retired:
                return
            if self._writable:
                self.trim_to_valid_size()
            self._retire()

    def evict(self) -> bool:
        """Close the descriptor now when idle (it reopens on use); True when closed."""
        return self._budget.evict_idle(self)

    def rename(self, new_path: str | os.PathLike) -> None:
        """Rename the file; the index stays usable (a reopen takes the new name)."""
        with self._write_lock:
            new_path = os.fspath(new_path)
            with self._budget.no_opens():  # a reader's reopen meanwhile would look for the old name
                os.rename(self._path, new_path)
                self._path = new_path

    def delete_if_exists(self) -> bool:
        """Close (without trimming) and delete the file; False when it was already gone."""
        with self._write_lock:
            if not self.retired:
                self._retire()
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                return False
            return True

    # -- subclass hooks ------------------------------------------------------------

    def _last_raw_entry(self) -> tuple[Any, ...] | None:
        """The last entry, read by the writer or at first open, pinned (no lock: only the
        writer changes the mapping)."""
        if self._entries == 0:
            return None
        return self._unpack_from(self._mapping(), (self._entries - 1) * self._entry_size)

    def _on_entries_changed(self) -> None:
        """Refresh values cached from the last entry after open, truncation or resize."""
        self._cache_last(self._last_raw_entry())

    def _cache_last(self, last: tuple[Any, ...] | None) -> None:
        """Cache what the subclass keeps of the last entry (as unpacked; None: no entries)."""
        raise NotImplementedError

    def _continues(self, first: tuple[Any, ...]) -> bool:
        """Whether an entry (as unpacked) may follow the last one."""
        raise NotImplementedError

    def _append_unpacked(self, entry: tuple[Any, ...]) -> None:
        """The subclass's checked single-entry append of an entry as unpacked."""
        raise NotImplementedError

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when the file cannot be a valid index."""
        raise NotImplementedError


class _Pinned:
    """IndexFile._writing(): the write lock, the writability checks and a pin, through
    the index's own bound methods (so this helper uses none of its private names).
    It keeps no state of its own: one per index serves every writer, nested too."""

    __slots__ = ("_lock", "_pin", "_require_writable", "_unpin")

    def __init__(self, lock: threading.RLock, require_writable: Callable[[], None],
                 pin: Callable[[], None], unpin: Callable[[], None]):
        self._lock = lock
        self._require_writable = require_writable
        self._pin = pin
        self._unpin = unpin

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._require_writable()
            self._pin()
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._unpin()
        finally:
            self._lock.release()
