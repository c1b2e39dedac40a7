"""The pure-Python twins of kafka_format/_crecords.c, the interface `_crecords.pyi` states.

Contract: each function takes the same arguments and gives the same results as
its C twin; kafka_format/accel.py binds one of the two sets once per process
and every caller goes through it. These are the reference: plain code, one
field at a time; speed belongs in C.

- `scan_run` and `assign_plain_run` take a run of good entries and stop at the
  first one they do not take; the caller's per-entry code (entries.py,
  storage/validator.py) handles that entry, raising or naming every problem, and
  calls in again. Taking no entry meets that contract, and is what the twins do:
  the per-entry code is then the whole reference, written once.
- `summarize_records` walks a batch's records and raises CorruptRecordError
  naming the first problem (the C twin returns None on any problem instead,
  and batch.summarize_records then runs this one for the message).
- `find_timestamp` and `index_entries` do the same walks as their C twins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crc32c import crc32c as _package_crc32c
from isal.isal_zlib import crc32 as _isal_crc32

from .errors import CorruptRecordError
from .framing import ENTRY_ROW, OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from .varint import decode_varint

Buffer = bytes | bytearray | memoryview

CRC32C_IN_C = 0  # the crc32c package computes CRC32C (accel.py)
INT32_MAX = (1 << 31) - 1


# The libraries' functions themselves: a wrapper would cost a call per CRC.
crc32: Callable[[Buffer], int] = _isal_crc32
crc32c: Callable[[Buffer], int] = _package_crc32c


def scan_run(buf: Buffer, pos: int, end: int, previous_last: int, check_crc: bool, check_lengths: bool,
             rows: bytearray, crc32: Callable[[Buffer], int], crc32c: Callable[[Buffer], int],
             /) -> tuple[int, int]:
    """Takes no entry: entries.scan_entries checks each one itself."""
    return pos, previous_last


def assign_plain_run(buf: Buffer, pos: int, end: int, next_offset: int, max_bytes: int, compact: bool,
                     log_append: bool, now_ms: int, shift: int, max_timestamp: int, offset_of_max: int, rows: bytearray,
                     crc32: Callable[[Buffer], int], crc32c: Callable[[Buffer], int],
                     /) -> tuple[int, int, int, int, int, bool]:
    """Takes no entry: storage/validator.py assigns each one itself."""
    return pos, next_offset, max_timestamp, offset_of_max, 0, False


def summarize_records(buf: Buffer, pos: int, end: int, count: int, /) -> tuple[int | None, bool, bool]:
    """(largest timestamp delta or None, some key is null, offset deltas are 0..count-1)
    of the `count` records in buf[pos:end], checking their structure as Kafka's
    DefaultRecord.readFrom does."""
    max_delta = None
    null_key = False
    in_order = True
    try:
        for index in range(count):
            if pos >= end:
                raise CorruptRecordError(f"records are cut short: {index} of {count}")
            length, pos = decode_varint(buf, pos)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise CorruptRecordError(f"record {index}: length {length} overruns the batch")
            pos += 1  # record attributes: unused
            ts_delta, pos = decode_varint(buf, pos)
            offset_delta, pos = decode_varint(buf, pos)
            if max_delta is None or ts_delta > max_delta:
                max_delta = ts_delta
            if offset_delta != index:
                in_order = False
            key_len, pos = decode_varint(buf, pos)
            if key_len < 0:
                null_key = True
            pos = _skip_bytes(key_len, pos, record_end, index, "key")
            value_len, pos = decode_varint(buf, pos)
            pos = _skip_bytes(value_len, pos, record_end, index, "value")
            header_count, pos = decode_varint(buf, pos)
            if header_count < 0:
                raise CorruptRecordError(f"record {index}: negative header count {header_count}")
            for _ in range(header_count):
                h_key_len, pos = decode_varint(buf, pos)
                if h_key_len < 0:
                    raise CorruptRecordError(f"record {index}: null header key")
                pos = _skip_bytes(h_key_len, pos, record_end, index, "header key")
                h_value_len, pos = decode_varint(buf, pos)
                pos = _skip_bytes(h_value_len, pos, record_end, index, "header value")
            if pos != record_end:
                raise CorruptRecordError(
                    f"record {index}: declared {length} bytes but its fields take {length + pos - record_end}")
    except IndexError:
        raise CorruptRecordError("records are cut short") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the batch's {count} records")
    return max_delta, null_key, in_order


def _skip_bytes(length: int, pos: int, record_end: int, index: int, what: str) -> int:
    if length < -1:
        raise CorruptRecordError(f"record {index}: {what} length {length}")
    pos += max(length, 0)
    if pos > record_end:
        raise CorruptRecordError(f"record {index}: {what} of {length} bytes overruns the record")
    return pos


def find_timestamp(buf: Buffer, pos: int, end: int, count: int, min_timestamp_delta: int,
                   min_offset_delta: int, /) -> tuple[int, int, int]:
    """(1, timestamp delta, offset delta) of the first of the `count` records in
    buf[pos:end] with both deltas at least the given ones; (0, 0, 0) when none
    has; (-1, 0, 0) when the records are malformed."""
    try:
        summarize_records(buf, pos, end, count)  # the structure first: the walk below is then safe
    except CorruptRecordError:
        return -1, 0, 0
    for _ in range(count):
        length, pos = decode_varint(buf, pos)
        record_end = pos + length
        ts_delta, after = decode_varint(buf, pos + 1)  # past the record attributes
        offset_delta, _ = decode_varint(buf, after)
        if ts_delta >= min_timestamp_delta and offset_delta >= min_offset_delta:
            return 1, ts_delta, offset_delta
        pos = record_end
    return 0, 0, 0


def index_entries(entries: bytearray | Sequence[Sequence[int]], interval: int, since: int, best_timestamp: int,
                  best_offset: int, base_offset: int, base_position: int, newest: int,
                  /) -> tuple[bytes, bytes, int, int, int]:
    """Kafka's rule for the sparse indexes over entries just written from
    `base_position` of a segment at `base_offset` (EntryInfo rows, or an
    EntryTable's packed rows): once more than `interval` bytes were written
    since the last index entry, the entry gets one. Returns the offset index
    entries and time index entries packed as the files hold them, and the
    `since`, largest timestamp and its offset to carry over to the next append.
    A time entry is taken where the running largest timestamp rises above every
    earlier one and above `newest`, the time index's last. OverflowError when a
    relative offset or a position does not fit an index field (an int32)."""
    if isinstance(entries, bytearray):
        if len(entries) % ENTRY_ROW.size:
            raise ValueError("rows must be whole EntryTable rows")
        entries = list(ENTRY_ROW.iter_unpack(entries))
    offset_out, time_out = bytearray(), bytearray()
    if not entries:
        return b"", b"", since, best_timestamp, best_offset
    first_position = entries[0][0]
    threshold = first_position + interval - since
    indexed_position = -1
    position = size = 0
    for entry in entries:
        position, size, last_offset, timestamp = entry[0], entry[1], entry[3], entry[4]
        if timestamp > best_timestamp:
            best_timestamp, best_offset = timestamp, last_offset
        if position <= threshold:
            continue
        threshold = position + interval
        indexed_position = position
        relative, file_position = last_offset - base_offset, base_position + position
        if not (0 <= relative <= INT32_MAX and 0 <= file_position <= INT32_MAX):
            raise OverflowError(f"index entry (offset {last_offset}, position {file_position}) does not fit "
                                f"a segment at base offset {base_offset}")
        offset_out += OFFSET_INDEX_ENTRY.pack(relative, file_position)
        if best_timestamp > newest:
            newest = best_timestamp
            best_relative = best_offset - base_offset
            if not 0 <= best_relative <= INT32_MAX:
                raise OverflowError(f"time index offset {best_offset} does not fit a segment at "
                                    f"base offset {base_offset}")
            time_out += TIME_INDEX_ENTRY.pack(best_timestamp, best_relative)
    last_end = position + size
    since = since + last_end - first_position if indexed_position < 0 else last_end - indexed_position
    return bytes(offset_out), bytes(time_out), since, best_timestamp, best_offset
