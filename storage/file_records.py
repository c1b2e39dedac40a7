"""One segment's `.log` file: append at the end, read slices, walk entry headers.

Contract:
- `size` is the committed size: it moves forward only after bytes are fully
  written, so a reader bounded by it never sees half an entry.
- One writer at a time (the log's append lock); any number of readers.
- The descriptor is opened on first use and counts against the process's
  open-file budget (open_files): while idle it may be closed, and the next use
  reopens the file by its current name. Every use of the descriptor happens
  under a pin.
- A failed append (ENOSPC, EIO) leaves the file cut back to its committed size:
  nothing of a torn write stays for a reader or a restart to meet.
- A non-empty `FileSlice` pins the open file: neither the budget nor a delete
  closes it until the slice is released, so a segment deleted while a fetch is
  still sending from it keeps its descriptor and the send completes (Linux keeps
  an unlinked file's data while it is open).
- Blocks ahead: an append may ask for blocks past the end to be reserved
  (`reserve_ahead`, fileutil.reserve_blocks): the file's size does not change,
  so readers, recovery and Kafka's tools see nothing of them. They are given
  back by `release_reserved` (a segment rolling or closing), and by truncation;
  after a crash, recovery gives back what the crashed process had reserved
  (`release_leftover_reservation`).
- Reading headers needs only the 12-byte entry overhead plus, for magic 2, the
  lastOffsetDelta field: `iter_headers` reads small chunks, never whole batches.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from kafka_format.errors import CorruptRecordError

from .fileutil import reserve_blocks
from .open_files import ManagedFile, OpenFiles

# offset:int64 | size:int32 | (crc:uint32 | magic:int8 ...)         classic
# baseOffset:int64 | length:int32 | leaderEpoch:int32 | magic:int8 | crc:uint32 |
#     attributes:int16 | lastOffsetDelta:int32 ...                     magic 2
ENTRY_HEAD = struct.Struct(">qi")
LOG_OVERHEAD = ENTRY_HEAD.size  # 12
MAGIC_POSITION = 16
LAST_OFFSET_DELTA = struct.Struct(">i")
LAST_OFFSET_DELTA_POSITION = 23
HEADER_PEEK = LAST_OFFSET_DELTA_POSITION + LAST_OFFSET_DELTA.size  # 27 bytes tell an entry's span
MIN_ENTRY_SIZE = 14  # Kafka: size field smaller than this is corrupt
SCAN_CHUNK = 8192
# Blocks past the end that can only be a reservation (release_leftover_reservation).
LEFTOVER_BLOCKS_BYTES = 64 * 1024


class EntryHeader(NamedTuple):
    position: int
    size: int  # whole entry, overhead included
    base_offset: int  # first offset for magic 2; the entry's offset for classic messages
    last_offset: int
    magic: int


class FileSlice:
    """`length` bytes of a log file from `position`: what a fetch sends with sendfile.
    A non-empty slice keeps the file open (pinned) until released."""

    __slots__ = ("records", "position", "length", "_released")

    def __init__(self, records: FileRecords, position: int, length: int):
        self.records = records
        self.position = position
        self.length = length
        self._released = length == 0  # an empty slice needs no descriptor
        if length:
            records.retain()

    def fileno(self) -> int:
        return self.records.fileno()

    def read(self) -> bytes:
        """The bytes themselves (tests, tools, small fetch reads; the server sends larger ones with sendfile).
        While the slice holds its pin the descriptor stays open: it is read directly."""
        if self._released:
            return self.records.read(self.position, self.length)
        return os.pread(self.records.fileno(), self.length, self.position)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.records.release()

    def __enter__(self) -> FileSlice:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileSlice({self.records.path!r}, position={self.position}, length={self.length})"


class FileRecords(ManagedFile):
    def __init__(self, path: str, size: int, budget: OpenFiles | None = None):
        """A `.log` file of `size` bytes that exists on disk (see `open`); not opened yet."""
        super().__init__(budget)
        self.path = path
        self._fd = -1
        self.size = size
        self._dirty = False  # written since the last flush
        # Blocks are reserved up to here (fileutil.reserve_blocks); None once the
        # filesystem refused, so no later append asks again.
        self._reserved_end: int | None = size

    @classmethod
    def open(cls, path: str, budget: OpenFiles | None = None) -> FileRecords:
        """The file at `path`, created empty when missing; its descriptor opens on first use."""
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
        return cls(path, size, budget)

    def open_descriptor(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)

    def close_descriptor(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def describe(self) -> str:
        return f"log file {self.path}"

    # ---- writing --------------------------------------------------------------

    def append(self, data, reserve_ahead: int = 0) -> int:
        """Write `data` at the end; return the position it starts at. With
        `reserve_ahead`, blocks for `data` and that many bytes more are
        reserved first when they are not yet (see the module contract)."""
        self._pin()
        try:
            fd = self._fd
            position = self.size
            reserved_end = self._reserved_end
            if reserve_ahead and reserved_end is not None and position + len(data) > reserved_end:
                wanted = position + len(data) + reserve_ahead
                self._reserved_end = wanted if reserve_blocks(fd, position, wanted - position) else None
            self._dirty = True
            view = memoryview(data)
            try:
                written = os.pwrite(fd, view, position)
                while written < len(view):  # a short write: the rest
                    written += os.pwrite(fd, view[written:], position + written)
            except OSError:
                self._cut_back(position)
                raise
            self.size = position + written
            return position
        finally:
            self._unpin()

    def _cut_back(self, size: int) -> None:
        """After a failed write (a full disk writes part of it): cut the file back
        to `size`, so no torn entry stays behind it. If even that fails, readers
        still stop at `size` and the next append writes over the rest."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size)
        if self._reserved_end is not None:
            self._reserved_end = size

    def flush(self) -> None:
        if self.retired or not self._dirty:  # closed: a deleted segment that a flush's snapshot still listed
            return
        self._pin()
        try:
            self._dirty = False
            os.fsync(self._fd)  # a descriptor reopened after eviction syncs the file's pages too
        except BaseException:
            self._dirty = True
            raise
        finally:
            self._unpin()

    def truncate_to(self, size: int) -> int:
        """Cut the file to `size` bytes; return how many bytes went."""
        if size > self.size or size < 0:
            raise ValueError(f"cannot truncate {self.path} of {self.size} bytes to {size}")
        cut = self.size - size
        self._pin()
        try:
            self._dirty = True
            os.ftruncate(self._fd, size)  # also gives back any blocks reserved past `size`
        finally:
            self._unpin()
        self.size = size
        if self._reserved_end is not None:
            self._reserved_end = size
        return cut

    def release_reserved(self) -> None:
        """Give back the blocks reserved past the end. The size and the
        modification time stay (retention falls back on the mtime of segments
        without timestamps, and Kafka's trim at roll leaves it too)."""
        reserved_end = self._reserved_end
        if reserved_end is None or reserved_end <= self.size or self.retired:
            return
        self._pin()
        try:
            self._give_back_blocks(os.fstat(self._fd))
        finally:
            self._unpin()

    def release_leftover_reservation(self) -> None:
        """Give back blocks past the end that this process did not reserve: a
        crashed one did (recovery calls this). A file holding at least
        LEFTOVER_BLOCKS_BYTES past its last block has some; smaller slack is
        the filesystem's own (extent blocks) and stays."""
        if self.retired:
            return
        self._pin()
        try:
            stat = os.fstat(self._fd)
            last_block_end = -(-self.size // stat.st_blksize) * stat.st_blksize
            if stat.st_blocks * 512 - last_block_end >= LEFTOVER_BLOCKS_BYTES:
                self._give_back_blocks(stat)
        finally:
            self._unpin()

    def _give_back_blocks(self, before: os.stat_result) -> None:
        fd = self._fd  # pinned by the caller
        os.ftruncate(fd, self.size)
        os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
        if self._reserved_end is not None:
            self._reserved_end = self.size

    # ---- reading --------------------------------------------------------------

    def fileno(self) -> int:
        """The descriptor; only while the caller holds a pin (a FileSlice)."""
        return self._fd

    def read(self, position: int, length: int) -> bytes:
        self._pin()
        try:
            return os.pread(self._fd, length, position)
        finally:
            self._unpin()

    def slice(self, position: int, length: int) -> FileSlice:
        return FileSlice(self, position, length)

    def iter_headers(self, start: int, end: int | None = None) -> Iterator[EntryHeader]:
        """The entries' spans from `start` up to `end` (default: the committed size).

        Stops quietly at a trailing entry that is not all there (a cut the caller
        bounds by `end`); raises CorruptRecordError on an impossible size field."""
        end = self.size if end is None else end
        position = start
        chunk = b""
        chunk_start = start
        while position + LOG_OVERHEAD <= end:
            offset_in_chunk = position - chunk_start
            if offset_in_chunk + HEADER_PEEK > len(chunk):
                chunk_start = position
                offset_in_chunk = 0
                chunk = self.read(position, min(SCAN_CHUNK, end - position))
                if len(chunk) < LOG_OVERHEAD:
                    return
            offset, size = ENTRY_HEAD.unpack_from(chunk, offset_in_chunk)
            if size < MIN_ENTRY_SIZE:
                raise CorruptRecordError(f"{self.path}: entry at {position} has size {size}")
            total = LOG_OVERHEAD + size
            if position + total > end:
                return
            magic = chunk[offset_in_chunk + MAGIC_POSITION] if offset_in_chunk + MAGIC_POSITION < len(chunk) else -1
            if magic >= 2:
                if offset_in_chunk + HEADER_PEEK > len(chunk):
                    raise CorruptRecordError(f"{self.path}: batch at {position} too short")
                (delta,) = LAST_OFFSET_DELTA.unpack_from(chunk, offset_in_chunk + LAST_OFFSET_DELTA_POSITION)
                yield EntryHeader(position, total, offset, offset + delta, magic)
            else:
                yield EntryHeader(position, total, offset, offset, magic)
            position += total

    # ---- life cycle -------------------------------------------------------------

    def rename(self, new_path: str) -> None:
        with self._budget.no_opens():  # a reopen meanwhile would look for the old name
            os.rename(self.path, new_path)
            self.path = new_path

    def retain(self) -> None:
        """Keep the file open until `release` (a FileSlice being sent)."""
        self._pin()

    def release(self) -> None:
        self._unpin()

    def close(self) -> None:
        """Close now, or as soon as the last outstanding slice is released."""
        self.release_reserved()
        self._retire()

    def evict(self) -> bool:
        """Close the descriptor now when idle (it reopens on use); True when closed."""
        return self._budget.evict_idle(self)

    @property
    def closed(self) -> bool:
        """Closed for good (a slice still being sent keeps it open until released)."""
        return self.retired and not self.descriptor_open

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def mtime_ms(self) -> int:
        return os.stat(self.path).st_mtime_ns // 1_000_000

    def __repr__(self) -> str:
        return f"FileRecords({self.path!r}, size={self.size})"
