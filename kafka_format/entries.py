"""The shallow scan: walk log entries one by one, checking each, never its records.

Contract: `scan_entries(buf, start, end, *, min_offset, check_crc)` walks the
entries of buf[start:end] (any mix of magics) and stops at the first entry that
is bad or not all there. For each good entry it records an `EntryInfo` (a row
of an `EntryTable`); the `ScanResult` says where it stopped, why, and whether the stop is merely an
entry cut short by `end` (`partial`: more bytes could make it whole, which
recovery uses to read on or to cut a torn tail). `problem` is None exactly when
every byte up to `end` belongs to a good entry (then `stop == end`).

An entry is good when: its size field is at least 14 (49 for a record batch);
its magic is 0, 1 or 2; a classic message's key and value lengths fill its
size exactly; its CRC matches (CRC32 over magic..end for magic 0/1, CRC32C over
attributes..end for magic 2) unless check_crc is False; its codec is known
(zstd only with magic 2); a batch has lastOffsetDelta >= 0 and
recordCount >= 0 (an empty batch is legal); and its first offset (a batch's
baseOffset, a classic message's offset) is above the previous entry's last
offset and at least `min_offset`.

This is recovery's hot path: one header unpack and one CRC per entry, no walk
over the records of a batch, no Python object per entry (C appends the rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple

from . import accel
from .batch import BATCH_CODECS, BATCH_HEADER, MIN_BATCH_LENGTH
from .batch import CRC_START as BATCH_CRC_START
from .classic import CLASSIC_CODECS, HEADERS, MIN_SIZE_FIELD, message_lengths
from .classic import CRC_START as CLASSIC_CRC_START
from .errors import CorruptRecordError
from .framing import (
    CODEC_MASK,
    ENTRY_PREFIX,
    ENTRY_ROW,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_ENTRY_SIZE_FIELD,
    NO_TIMESTAMP,
)
from .framing import crc32 as framing_crc32
from .packed_rows import PackedRows


class EntryInfo(NamedTuple):
    """One log entry: a record batch, a classic message or a compressed wrapper."""

    position: int
    size: int  # LOG_OVERHEAD included
    magic: int
    last_offset: int  # batch: baseOffset + lastOffsetDelta; classic: its offset field
    max_timestamp: int  # batch: maxTimestamp; v1: its timestamp; v0: -1
    codec: int


class EntryTable(PackedRows):
    """Entries packed one `ENTRY_ROW` each into a bytearray (`rows`), read as a
    sequence of EntryInfo. The validator and the scan return one: a MiB of 1 KiB
    classic messages is a thousand entries, which as EntryInfo tuples cost about 100 ns
    each to make and free again, most of the per-message cost once the CRC is
    in C; as rows they are a 48-byte copy, appended directly by the C validator,
    and LogSegment indexes them without making any object."""

    ROW = ENTRY_ROW
    rows: bytearray
    make: ClassVar[Callable[[tuple], EntryInfo]] = EntryInfo._make
    __slots__ = ()

    def __init__(self, rows: bytearray | None = None) -> None:
        # All PackedRows.__init__ does, set here: every validated set makes a table.
        self.rows = bytearray() if rows is None else rows

    def add(self, position: int, size: int, magic: int, last_offset: int, max_timestamp: int,
            codec: int) -> None:
        self.rows += ENTRY_ROW.pack(position, size, magic, last_offset, max_timestamp, codec)


class ScanResult(NamedTuple):
    entries: EntryTable
    stop: int  # where the first bad or incomplete entry starts, or `end`
    problem: str | None
    partial: bool  # the entry at `stop` is only cut short by `end`


def scan_entries(buf, start: int = 0, end: int | None = None, *, min_offset: int = -1,
                 check_crc: bool = True, check_lengths: bool = True) -> ScanResult:
    """Shallowly walk and check the entries of buf[start:end].

    `check_lengths=False` skips a classic message's key/value length check, as
    Kafka's recovery does: the lengths were checked when the message was
    appended and its CRC covers them, so a torn or corrupted write still fails
    the CRC."""
    view = memoryview(buf)
    if end is None:
        end = len(view)
    entries = EntryTable()
    crc32, crc32c = framing_crc32, accel.crc32c
    previous_last = min_offset - 1
    pos = start

    def stopped(problem: str, partial: bool = False) -> ScanResult:
        return ScanResult(entries, pos, f"entry at {pos}: {problem}", partial)

    while pos < end:
        # The run takes every good entry it can (the Python twin: none); the
        # entry it stops at is checked below, which alone names problems.
        pos, previous_last = accel.scan_run(view, pos, end, previous_last, check_crc, check_lengths,
                                            entries.rows, crc32, crc32c)
        if pos >= end:
            break
        remaining = end - pos
        if remaining <= MAGIC_OFFSET:
            if remaining >= LOG_OVERHEAD:  # the size alone can already be wrong
                size = ENTRY_PREFIX.unpack_from(view, pos)[1]
                if size < MIN_ENTRY_SIZE_FIELD:
                    return stopped(f"size {size} is below {MIN_ENTRY_SIZE_FIELD}")
            return stopped(f"cut short after {remaining} bytes", partial=True)
        offset, size = ENTRY_PREFIX.unpack_from(view, pos)
        if size < MIN_ENTRY_SIZE_FIELD:
            return stopped(f"size {size} is below {MIN_ENTRY_SIZE_FIELD}")
        entry_end = pos + LOG_OVERHEAD + size
        magic = view[pos + MAGIC_OFFSET]

        if magic == MAGIC_V2:
            if size < MIN_BATCH_LENGTH:
                return stopped(f"batch length {size} is below {MIN_BATCH_LENGTH}")
            if entry_end > end:
                return stopped(f"batch of {entry_end - pos} bytes cut short after {remaining}", True)
            (_, _, _, _, crc, attributes, last_delta, _, max_timestamp, _, _, _,
             count) = BATCH_HEADER.unpack_from(view, pos)
            if check_crc and crc32c(view[pos + BATCH_CRC_START:entry_end]) != crc:
                return stopped("batch fails its CRC32C")
            codec = attributes & CODEC_MASK
            if codec >= BATCH_CODECS:
                return stopped(f"unknown codec {codec}")
            if last_delta < 0 or count < 0:
                return stopped(f"bad lastOffsetDelta {last_delta} or recordCount {count}")
            if offset <= previous_last:
                return stopped(f"base offset {offset} does not follow offset {previous_last}")
            previous_last = last = offset + last_delta

        elif magic <= 1:
            if size < MIN_SIZE_FIELD[magic]:
                return stopped(f"size {size} is below {MIN_SIZE_FIELD[magic]} for magic {magic}")
            if entry_end > end:
                return stopped(f"message of {entry_end - pos} bytes cut short after {remaining}", True)
            fields = HEADERS[magic].unpack_from(view, pos)
            if check_lengths:
                try:
                    message_lengths(view, pos, magic, entry_end)
                except CorruptRecordError as error:
                    return ScanResult(entries, pos, str(error), False)
            if check_crc and crc32(view[pos + CLASSIC_CRC_START:entry_end]) != fields[2]:
                return stopped("message fails its CRC32")
            codec = fields[4] & CODEC_MASK
            if codec >= CLASSIC_CODECS:
                return stopped(f"codec {codec} is not allowed with magic {magic}")
            if offset <= previous_last:
                return stopped(f"offset {offset} does not follow offset {previous_last}")
            previous_last = last = offset
            max_timestamp = fields[5] if magic else NO_TIMESTAMP

        else:
            return stopped(f"unknown magic {magic}")

        entries.add(pos, entry_end - pos, magic, last, max_timestamp, codec)
        pos = entry_end
    return ScanResult(entries, pos, None, False)
