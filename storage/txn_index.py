"""A segment's `.txnindex`: the aborted transactions whose abort marker it holds
(Kafka's TransactionIndex and AbortedTxn).

Contract:
- The file is a sequence of 34-byte entries, big-endian: version int16 (0) |
  producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64.
  firstOffset is the transaction's first offset, lastOffset its abort marker's,
  lastStableOffset the partition's last stable offset once the marker was written
  (Kafka uses it to stop a search early).
- As Kafka, the file exists only once an entry was appended; no file reads as
  empty. Unlike Kafka, a truncation that keeps no entry removes the file, so an
  existing empty file is damage (`sanity_check`). Entries are appended in
  ascending lastOffset (ValueError otherwise).
- The entries are read from the file once, on first use, and kept in memory:
  `entries` is replaced whole, never changed in place, so readers (a fetch, on the
  loop) see the old or the new tuple. The first read and each change take the
  index's own lock, so a reader's first load never races an append.
  A partial entry at the end (a crash during an append) is ignored, and cut
  by the next append or `truncate_to`.
- Appends write without fsync; `flush()` fsyncs (the segment's flush), so a crash
  loses at most what recovery rebuilds from the log (storage/producer_state.py).
- Changes come from one writer at a time (the owning Log's lock).
- `sanity_check(next_offset)` (the loader, at start) raises CorruptIndexError
  unless the file is whole entries and not empty (a torn or emptied one would
  lose an aborted transaction: READ_COMMITTED consumers would read its records),
  every entry's
  abort marker lies within the segment (base offset <= lastOffset <
  `next_offset`, the segment's end), 0 <= firstOffset <= lastOffset, and the
  lastOffsets ascend. Kafka's TransactionIndex.sanityCheck checks only
  lastOffset >= the base offset and skips a partial entry; an
  index failing any of these is rebuilt from the log, never served (loader.py).
  `reset()` empties the index (its file goes) for that rebuild.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from typing import NamedTuple

from kafka_format.errors import CorruptIndexError

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(VERSION, *self)


def decode_entries(data: bytes, path: str = "") -> list[AbortedTxn]:
    """The whole entries of `data` (a partial last one is ignored)."""
    found = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, *fields = ENTRY.unpack_from(data, pos)
        if version > VERSION:
            raise CorruptIndexError(f"{path}: aborted transaction version {version} at {pos} is not {VERSION}")
        found.append(AbortedTxn(*fields))
    return found


def txn_index_path(log_path: str) -> str:
    """The `.txnindex` beside a segment's `.log` (with its suffix: `.log.swap` ->
    `.txnindex.swap`)."""
    head, sep, tail = log_path.rpartition(".log")
    return head + ".txnindex" + tail if sep else log_path + ".txnindex"


class TransactionIndex:
    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._entries: tuple[AbortedTxn, ...] | None = None  # loaded on first use
        self._dirty = False
        self._lock = threading.Lock()

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        entries = self._entries
        if entries is None:
            with self._lock:
                entries = self._load()
        return entries

    def _load(self) -> tuple[AbortedTxn, ...]:
        """The entries, read from the file unless already known (lock held)."""
        entries = self._entries
        if entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            entries = self._entries = tuple(decode_entries(data, self.path))
        return entries

    def sanity_check(self, next_offset: int | None = None) -> None:
        """Raise CorruptIndexError for a file that is not whole entries, an entry
        outside the segment's offsets [base offset, `next_offset`), or out of
        order (see the module contract)."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            size = ENTRY_SIZE  # no file: no entries
        if size == 0:
            raise CorruptIndexError(f"{self.path}: empty (the file exists only while it holds an entry)")
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: {size} bytes, not a whole number of {ENTRY_SIZE}-byte entries")
        previous = None
        for i, txn in enumerate(self.entries):
            problem = None
            if txn.last_offset < self.base_offset:
                problem = f"ends at {txn.last_offset}, below the segment's base offset {self.base_offset}"
            elif next_offset is not None and txn.last_offset >= next_offset:
                problem = f"ends at {txn.last_offset}, past the segment's last offset {next_offset - 1}"
            elif not 0 <= txn.first_offset <= txn.last_offset:
                problem = f"starts at {txn.first_offset}, after its abort marker at {txn.last_offset}"
            elif previous is not None and txn.last_offset <= previous:
                problem = f"ends at {txn.last_offset}, not after the entry before it ({previous})"
            if problem is not None:
                raise CorruptIndexError(f"{self.path}: aborted transaction {i} (producer {txn.producer_id}) {problem}")
            previous = txn.last_offset

    def reset(self) -> None:
        """Forget every entry and delete the file (before a rebuild)."""
        with self._lock:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self._entries = ()
            self._dirty = False

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, txn: AbortedTxn) -> None:
        with self._lock:
            entries = self._load()
            if entries and entries[-1].last_offset >= txn.last_offset:
                raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} does not "
                                 f"follow the last one, ending at {entries[-1].last_offset}")
            self._write_at(len(entries) * ENTRY_SIZE, txn.encode())
            self._entries = (*entries, txn)

    def _write_at(self, position: int, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != position:
                os.ftruncate(fd, position)  # a partial entry a crash left
            os.pwrite(fd, data, position)
        finally:
            os.close(fd)
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), and whether
        the search is complete (an entry's last stable offset reached the bound):
        Kafka's collectAbortedTxns."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions whose marker is at or past `offset` (and a
        partial entry a crash left at the end)."""
        with self._lock:
            entries = self._load()
            keep = 0
            while keep < len(entries) and entries[keep].last_offset < offset:
                keep += 1
            try:
                size = os.path.getsize(self.path)
            except FileNotFoundError:
                return
            if keep == 0:
                os.unlink(self.path)  # no entry, no file: an empty file is damage (sanity_check)
                self._dirty = False
            elif size != keep * ENTRY_SIZE:
                os.truncate(self.path, keep * ENTRY_SIZE)
                self._dirty = True
            self._entries = entries[:keep]

    def flush(self) -> None:
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def rename(self, new_path: str) -> None:
        """Rename the file when there is one; the index takes the new path either way."""
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, new_path)
        self.path = new_path

    def delete_if_exists(self) -> bool:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True
