"""Message sets (a FETCH answer, a `.log` file's bytes) into `Columns`, one pass.

Contract: `decode_into(buf, start, end, columns, pos=0, limit=None)` walks the
whole log entries of `buf[pos:limit]` and appends to `columns` every record
whose offset lies in [start, end), skipping records below `start` inside an
entry (a compacted or compressed entry may begin below it) and control
batches (transaction markers), as a Kafka consumer does. It returns a
`Walked`: `next_offset`, one past the last offset of the last whole entry
(never below `start`), where the next read begins; `whole_entries`;
`stop`, the position after the last whole entry (a trailing entry cut short
is left alone, since more bytes will make it whole); and `done`, True once an
entry reached `end`. With `aborted` (read_committed: the (producer id, first
offset) pairs of the aborted transactions the bytes hold, or an AbortedFilter
carried across calls) the batches of those transactions are skipped too, by
Kafka's consumer rule (client.fetch.AbortedFilter).

Every entry's CRC is checked (Kafka's `check.crcs=true`) and a batch's
records must fill it exactly; anything else raises CorruptRecordError naming
the position (plus `origin`, where `buf` starts in its file). Magic-2 batches
are decoded here field by field straight into the columns (the hot path: no
Record objects, one-byte varints inlined); classic messages (magic 0/1) go
through `kafka_format.LogEntry`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from crc32c import crc32c

from client.fetch import AbortedFilter, is_abort_marker
from kafka_format import LogEntry
from kafka_format.batch import BATCH_HEADER, BATCH_OVERHEAD, CONTROL_BIT, CRC_START
from kafka_format.codecs import decompress
from kafka_format.errors import CorruptRecordError
from kafka_format.framing import (
    CODEC_MASK,
    ENTRY_PREFIX,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_ENTRY_SIZE_FIELD,
    TIMESTAMP_TYPE_BIT,
)
from kafka_format.varint import decode_varint

from .schema import Columns

__all__ = ["Walked", "decode_into", "CorruptRecordError"]


class Walked(NamedTuple):
    next_offset: int
    whole_entries: int
    stop: int
    done: bool


def decode_into(buf, start: int, end: int, columns: Columns, pos: int = 0,
                limit: int | None = None, origin: int = 0,
                aborted: Iterable[tuple[int, int]] | AbortedFilter | None = None) -> Walked:
    if type(buf) is not bytes:
        buf = bytes(buf)  # slices must be bytes: they become the key and value cells
    limit = len(buf) if limit is None else limit
    view = memoryview(buf)
    unpack_prefix = ENTRY_PREFIX.unpack_from
    unpack_batch = BATCH_HEADER.unpack_from
    next_offset = start
    whole = 0
    txn_filter = aborted if aborted is None or isinstance(aborted, AbortedFilter) else AbortedFilter(aborted)
    while limit - pos > MAGIC_OFFSET:
        base, size = unpack_prefix(buf, pos)
        if size < MIN_ENTRY_SIZE_FIELD:
            raise CorruptRecordError(f"entry at {origin + pos}: size {size} is below "
                                     f"{MIN_ENTRY_SIZE_FIELD}")
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > limit:
            break
        magic = buf[pos + MAGIC_OFFSET]
        if magic == MAGIC_V2:
            if size + LOG_OVERHEAD < BATCH_OVERHEAD:
                raise CorruptRecordError(f"entry at {origin + pos}: batch length {size} is "
                                         f"too short")
            (_, _, _, _, crc, attributes, last_delta, base_ts, max_ts, producer_id, _, _,
             count) = unpack_batch(buf, pos)
            if crc32c(view[pos + CRC_START:entry_end]) != crc:
                raise CorruptRecordError(f"entry at {origin + pos}: batch fails its CRC32C")
            last = base + last_delta
            dropped = txn_filter is not None and txn_filter.drops_batch(
                last, producer_id, attributes,
                bool(attributes & CONTROL_BIT) and is_abort_marker(LogEntry(buf, pos)))
            if last >= start and base < end and count and not attributes & CONTROL_BIT and not dropped:
                codec = attributes & CODEC_MASK
                if codec:
                    payload = decompress(codec, view[pos + BATCH_OVERHEAD:entry_end], magic=2)
                    if type(payload) is not bytes:
                        payload = bytes(payload)
                    _batch_into(payload, 0, len(payload), count, base, base_ts, max_ts,
                                attributes, start, end, columns, origin + pos)
                else:
                    _batch_into(buf, pos + BATCH_OVERHEAD, entry_end, count, base, base_ts,
                                max_ts, attributes, start, end, columns, origin + pos)
        elif magic <= 1:
            entry = LogEntry(buf, pos)
            try:
                entry.ensure_valid()
            except CorruptRecordError as e:
                raise CorruptRecordError(str(e).replace(f"entry at {pos}:",
                                                        f"entry at {origin + pos}:", 1)) from None
            last = entry.last_offset
            if last >= start:
                for r in entry.records():
                    if start <= r.offset < end:
                        columns.append(r.offset, r.timestamp, r.timestamp_type, r.key, r.value)
        else:
            raise CorruptRecordError(f"entry at {origin + pos}: unknown magic {magic}")
        whole += 1
        pos = entry_end
        if last + 1 > next_offset:
            next_offset = last + 1
        if next_offset >= end:
            return Walked(next_offset, whole, pos, True)
    return Walked(next_offset, whole, pos, False)


def _batch_into(buf, pos: int, end_pos: int, count: int, base: int, base_ts: int, max_ts: int,
                attributes: int, start: int, end: int, columns: Columns, where: int) -> None:
    """The records of one magic-2 batch (payload buf[pos:end_pos]) into `columns`."""
    log_append = attributes & TIMESTAMP_TYPE_BIT
    ts_type = 1 if log_append else 0
    dv = decode_varint
    keys, values = columns.keys, columns.values
    offsets, stamps, types = columns.offsets, columns.timestamps, columns.timestamp_types
    headers_out = columns.headers
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:  # two bytes: lengths up to 8191
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = dv(buf, pos)
            record_end = pos + length
            if length < 0 or record_end > end_pos:
                raise CorruptRecordError(f"batch at {where}: a record overruns the batch")
            pos += 1  # record attributes (unused)
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = dv(buf, pos)
            b = buf[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = dv(buf, pos)
            offset = base + offset_delta
            if offset < start:
                pos = record_end
                continue
            if offset >= end:
                return
            b = buf[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:  # two bytes: lengths up to 8191
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = dv(buf, pos)
            if n < 0:
                key = None
            else:
                key = buf[pos:pos + n]
                pos += n
            b = buf[pos]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:  # two bytes: lengths up to 8191
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                n, pos = dv(buf, pos)
            if n < 0:
                value = None
            else:
                value = buf[pos:pos + n]
                pos += n
            if headers_out is not None:
                header_count, pos = dv(buf, pos)
                headers = []
                for _ in range(header_count):
                    n, pos = dv(buf, pos)
                    h_key = buf[pos:pos + n].decode("utf-8", "replace")
                    pos += n
                    n, pos = dv(buf, pos)
                    if n < 0:
                        h_value = None
                    else:
                        h_value = buf[pos:pos + n]
                        pos += n
                    headers.append((h_key, h_value))
                headers_out.append(headers)
                if pos != record_end:
                    raise CorruptRecordError(f"batch at {where}: a record's fields do not fill it")
            elif pos > record_end:
                raise CorruptRecordError(f"batch at {where}: a record's fields overrun it")
            pos = record_end  # headers skipped unless asked for
            keys.append(key)
            values.append(value)
            offsets.append(offset)
            stamps.append(max_ts if log_append else base_ts + ts_delta)
            types.append(ts_type)
    except IndexError:
        raise CorruptRecordError(f"batch at {where}: records are cut short") from None
    if pos != end_pos:
        raise CorruptRecordError(f"batch at {where}: {end_pos - pos} bytes left after "
                                 f"its {count} records")
