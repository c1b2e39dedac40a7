"""What the cleaner does to one log entry (Kafka's MemoryRecords.filterTo with
the cleaner's RecordFilter), and the record walks it needs. Pure computation
on buffers: no files, no log.

Contract:
- `entry_keys(buf, pos, end, min_offset)` (pass 1) gives the keys and offsets of
  an entry's keyed records at or past `min_offset`, plus its tombstone and
  keyless counts, reading as little as the format allows.
- `RecordFilter.filter(buf, pos, end, ...)` (pass 2) decides, record by record,
  what stays, with Kafka's rule: a record past the map's latest offset stays;
  a keyless one goes; a keyed one stays when it is the latest for its key (its
  offset >= the map's offset for the key) and it has a value or is a tombstone
  whose delete horizon has not passed. It returns the entry to write:
  * the entry's own bytes when every record stays and nothing must change;
  * nothing when no record stays (or, with `keep_empty` or for the last batch of
    an active idempotent producer, an empty batch holding the entry's first and
    last offsets and producer fields, which Kafka's format allows);
  * otherwise the entry rebuilt with the records that stay: a batch keeps its
    base offset, last offset delta, producer fields, leader epoch, codec and
    attributes (Kafka's buildRetainedRecordsInto); a compressed classic wrapper
    becomes a wrapper of the messages that stay, whose offset is the last one.
- Tombstones (magic 2): a batch that keeps a tombstone and has no delete horizon
  is rebuilt with one: attribute bit 6 and baseTimestamp = now +
  delete.retention.ms, the record timestamp deltas taken relative to it (as
  Kafka's MemoryRecordsBuilder does). A later clean drops the tombstone once
  now >= that horizon. Magic 0/1 tombstones have no horizon field; the caller
  says per segment whether they stay (`retain_legacy_deletes`, Kafka's rule on
  segment modification times).
- Records keep their offsets and bytes: a rebuilt batch copies each kept record
  byte for byte but for its length and timestamp delta prefix.
- Structure errors raise CorruptRecordError; a rebuilt entry's CRC is checked
  first, so a damaged entry is never laundered into a valid one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from kafka_format import accel
from kafka_format.batch import BATCH_HEADER, BATCH_OVERHEAD, CONTROL_BIT, DELETE_HORIZON_BIT, UINT32
from kafka_format.batch import CRC_OFFSET as BATCH_CRC_OFFSET
from kafka_format.batch import CRC_START as BATCH_CRC_START
from kafka_format.classic import CRC_START as CLASSIC_CRC_START
from kafka_format.classic import HEADERS, KEY_LENGTH_OFFSET, LENGTH, append_message, inner_messages
from kafka_format.codecs import Codec, compress, decompress
from kafka_format.entries import EntryInfo
from kafka_format.errors import CorruptRecordError
from kafka_format.framing import (
    CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    crc32,
)
from kafka_format.varint import decode_varint, encode_varint

_LOG_APPEND_TIME = TIMESTAMP_TYPE_BIT
_INT64 = struct.Struct(">q")


class EntryKeys(NamedTuple):
    keys: list[bytes]
    offsets: list[int]
    key_bytes: int  # total length of `keys`
    records: int  # records at or past min_offset
    tombstones: int
    keyless: int


# ---- walking the records of a batch ---------------------------------------------------------

def _corrupt(what: str) -> CorruptRecordError:
    return CorruptRecordError(f"record batch: {what}")


def batch_record_keys(buf: bytes, pos: int, end: int, count: int, base_offset: int,
                      min_offset: int) -> EntryKeys:
    """Keys and offsets of the records in buf[pos:end] (the records of one batch)
    whose offsets are >= min_offset, read field by field (the C key map's walk,
    storage/_ccleaner.c, takes the plain batches)."""
    keys: list[bytes] = []
    offsets: list[int] = []
    key_bytes = tombstones = keyless = taken = 0
    try:
        for _ in range(count):
            length, fields_at = decode_varint(buf, pos)
            record_end = fields_at + length
            _timestamp_delta, at = decode_varint(buf, fields_at + 1)  # past the record attributes
            offset_delta, at = decode_varint(buf, at)
            offset = base_offset + offset_delta
            if offset >= min_offset:
                taken += 1
                key_len, at = decode_varint(buf, at)
                if key_len < -1:
                    raise _corrupt(f"a record's key length {key_len} at {at}")
                if key_len == -1:
                    keyless += 1
                else:
                    if at + key_len > record_end:
                        raise _corrupt(f"a record's key of {key_len} bytes overruns it at {at}")
                    keys.append(buf[at:at + key_len])
                    offsets.append(offset)
                    key_bytes += key_len
                    at += key_len
                value_len, _ = decode_varint(buf, at)
                if value_len == -1:
                    tombstones += 1
            if record_end > end or record_end <= fields_at:
                raise _corrupt(f"a record's length overruns the batch at {fields_at}")
            pos = record_end
    except IndexError:
        raise _corrupt("records are cut short") from None
    if pos != end:
        raise _corrupt(f"{end - pos} bytes left after {count} records")
    return EntryKeys(keys, offsets, key_bytes, taken, tombstones, keyless)


class RawRecord(NamedTuple):
    offset: int
    key: bytes | None
    is_tombstone: bool
    timestamp_delta: int
    start: int  # where the record starts (its length varint)
    rest: int  # where the offset delta starts: the bytes kept as they are in a rebuild
    end: int
    attributes: int


def batch_records(buf: bytes, pos: int, end: int, count: int, base_offset: int,
                  want_keys: bool = True) -> list[RawRecord]:
    """Every record of buf[pos:end] with what pass 2 needs to keep or rebuild it
    (keys as b"" unless `want_keys`), read field by field."""
    out = []
    try:
        for _ in range(count):
            start = pos
            length, fields_at = decode_varint(buf, pos)
            record_end = fields_at + length
            if record_end > end or record_end <= fields_at:
                raise _corrupt(f"a record's length overruns the batch at {start}")
            attributes = buf[fields_at]
            timestamp_delta, rest = decode_varint(buf, fields_at + 1)
            offset_delta, at = decode_varint(buf, rest)
            key_len, at = decode_varint(buf, at)
            key: bytes | None
            if key_len >= 0:
                key = buf[at:at + key_len] if want_keys else b""
                at += key_len
            elif key_len == -1:
                key = None
            else:
                raise _corrupt(f"key length {key_len}")
            if at >= record_end:
                raise _corrupt(f"a record's fields overrun it at {start}")
            value_len, _ = decode_varint(buf, at)
            out.append(RawRecord(base_offset + offset_delta, key, value_len == -1, timestamp_delta, start, rest,
                                 record_end, attributes))
            pos = record_end
    except IndexError:
        raise _corrupt("records are cut short") from None
    if pos != end:
        raise _corrupt(f"{end - pos} bytes left after {count} records")
    return out


# ---- pass 1 -----------------------------------------------------------------------------

_NO_KEYS = EntryKeys([], [], 0, 0, 0, 0)


def entry_keys(buf: bytes, pos: int, end: int, min_offset: int) -> EntryKeys:
    """The keyed records of the entry at buf[pos:end] whose offsets are >= min_offset."""
    magic = buf[pos + MAGIC_OFFSET]
    if magic == MAGIC_V2:
        (base_offset, _, _, _, _, attributes, last_delta, _, _, _, _, _,
         count) = BATCH_HEADER.unpack_from(buf, pos)
        if attributes & CONTROL_BIT or base_offset + last_delta < min_offset:
            return _NO_KEYS
        codec = attributes & CODEC_MASK
        if codec == Codec.NONE:
            return batch_record_keys(buf, pos + BATCH_OVERHEAD, end, count, base_offset, min_offset)
        payload = decompress(codec, memoryview(buf)[pos + BATCH_OVERHEAD:end], magic=MAGIC_V2)
        return batch_record_keys(payload, 0, len(payload), count, base_offset, min_offset)
    keys, offsets = [], []
    key_bytes = tombstones = keyless = taken = 0
    for offset, key, is_tombstone in classic_records(buf, pos, end):
        if offset < min_offset:
            continue
        taken += 1
        tombstones += is_tombstone
        if key is None:
            keyless += 1
        else:
            keys.append(key)
            offsets.append(offset)
            key_bytes += len(key)
    return EntryKeys(keys, offsets, key_bytes, taken, tombstones, keyless)


def classic_records(buf: bytes, pos: int, end: int) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, is tombstone) of a classic message or of a wrapper's inner messages."""
    magic = buf[pos + MAGIC_OFFSET]
    header = HEADERS[magic].unpack_from(buf, pos)
    attributes = header[4]
    key_at = pos + KEY_LENGTH_OFFSET[magic]
    (key_len,) = LENGTH.unpack_from(buf, key_at)
    value_at = key_at + LENGTH.size + max(key_len, 0)
    (value_len,) = LENGTH.unpack_from(buf, value_at)
    if not attributes & CODEC_MASK:
        key = bytes(buf[key_at + LENGTH.size:value_at]) if key_len >= 0 else None
        return [(header[0], key, value_len < 0)]
    inner, messages = _inner(buf, pos, end, magic, attributes, value_at, value_len)
    shift = header[0] - messages[-1].offset if magic == 1 else 0
    return [(m.offset + shift, inner[m.key_position:m.key_position + m.key_len] if m.key_len >= 0 else None,
             m.value_len < 0) for m in messages]


def _inner(buf, pos, end, magic, attributes, value_at, value_len):
    if value_len < 0:
        raise CorruptRecordError(f"compressed message at {pos} has no value")
    inner = decompress(attributes & CODEC_MASK, memoryview(buf)[value_at + LENGTH.size:end], magic=magic)
    messages = inner_messages(inner, magic)
    if not messages:
        raise CorruptRecordError(f"compressed message at {pos} holds no messages")
    return inner, messages


# ---- pass 2 -----------------------------------------------------------------------------

@dataclass
class FilterStats:
    records_read: int = 0
    records_kept: int = 0
    keyless_dropped: int = 0
    tombstones_dropped: int = 0
    entries_copied: int = 0
    entries_rebuilt: int = 0
    entries_dropped: int = 0
    empty_batches: int = 0


class Kept(NamedTuple):
    data: bytes | bytearray | memoryview  # the entry to write
    magic: int
    last_offset: int
    max_timestamp: int
    codec: int
    records: int


class RecordFilter:
    """Pass 2's decision for one cleaning round (see the module contract).

    `offset_map` is the round's OffsetMap; `now_ms` the time the round started
    (Kafka's currentTime); `delete_retention_ms` the topic's setting."""

    def __init__(self, offset_map, now_ms: int, delete_retention_ms: int, stats: FilterStats | None = None,
                 producer_last_offsets: dict[int, int] | None = None):
        self.map = offset_map
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.stats = stats or FilterStats()
        # Kafka keeps each active idempotent producer's last batch, if only empty, so
        # that its sequence survives (producer id -> last offset of its last batch).
        self.producer_last_offsets = producer_last_offsets or {}
        self._short_get = offset_map.short_get
        self._limit = offset_map.inline_key_limit

    def _latest(self, key: bytes, offset: int) -> int:
        if len(key) <= self._limit:
            return self._short_get(key, -1)
        return self.map.get(key, offset)

    def _keep(self, offset: int, key: bytes | None, is_tombstone: bool, retain_deletes: bool) -> bool:
        if offset > self.map.latest_offset:
            return True
        if key is None:
            self.stats.keyless_dropped += 1
            return False
        if offset < self._latest(key, offset):
            return False
        if is_tombstone and not retain_deletes:
            self.stats.tombstones_dropped += 1
            return False
        return True

    # ---- one entry -----------------------------------------------------------------------

    def filter(self, buf: bytes, pos: int, end: int, *, keep_empty: bool = False,
               retain_legacy_deletes: bool = True, dead: int | None = None) -> Kept | None:
        """The entry at buf[pos:end] as it should be written, or None when it goes.

        `dead`: pass 1 already knows this batch (all its records mapped, none a
        tombstone or keyless): bit i set = the record at base offset + i is
        superseded. Then no key is looked up again (0: every record stays)."""
        if buf[pos + MAGIC_OFFSET] == MAGIC_V2:
            return self._filter_batch(buf, pos, end, keep_empty, dead)
        return self._filter_classic(buf, pos, end, keep_empty, retain_legacy_deletes)

    def _copy(self, buf, pos: int, end: int, magic: int, last_offset: int, max_timestamp: int,
              codec: int, records: int) -> Kept:
        self.stats.entries_copied += 1
        self.stats.records_kept += records
        return Kept(memoryview(buf)[pos:end], magic, last_offset, max_timestamp, codec, records)

    def _filter_batch(self, buf, pos: int, end: int, keep_empty: bool, dead: int | None) -> Kept | None:
        (base_offset, _, leader_epoch, _, crc, attributes, last_delta, base_timestamp, max_timestamp,
         producer_id, producer_epoch, base_sequence, count) = BATCH_HEADER.unpack_from(buf, pos)
        stats = self.stats
        stats.records_read += count
        last_offset = base_offset + last_delta
        codec = attributes & CODEC_MASK
        has_horizon = bool(attributes & DELETE_HORIZON_BIT)
        if producer_id >= 0 and self.producer_last_offsets.get(producer_id) == last_offset:
            keep_empty = True  # an active producer's last batch
        if count == 0 and not attributes & CONTROL_BIT:
            # An empty batch (left by an earlier clean) stays only where one is needed.
            if keep_empty:
                return self._copy(buf, pos, end, MAGIC_V2, last_offset, max_timestamp, codec, 0)
            stats.entries_dropped += 1
            return None
        if dead == 0 or attributes & CONTROL_BIT or (has_horizon and base_offset > self.map.latest_offset):
            return self._copy(buf, pos, end, MAGIC_V2, last_offset, max_timestamp, codec, count)
        if dead is not None and dead == (1 << count) - 1 and last_delta == count - 1:
            kept = []  # every record superseded: no need to read them
        else:
            if codec == Codec.NONE:
                payload, start, stop = buf, pos + BATCH_OVERHEAD, end
            else:
                payload = decompress(codec, memoryview(buf)[pos + BATCH_OVERHEAD:end], magic=MAGIC_V2)
                start, stop = 0, len(payload)
            if dead is None:
                records = batch_records(payload, start, stop, count, base_offset)
                retain_deletes = not has_horizon or self.now_ms < base_timestamp
                keep = self._keep
                kept = [r for r in records if keep(r.offset, r.key, r.is_tombstone, retain_deletes)]
            else:
                records = batch_records(payload, start, stop, count, base_offset, want_keys=False)
                kept = [r for r in records if not (dead >> (r.offset - base_offset)) & 1]
            kept_tombstone = any(r.is_tombstone for r in kept)
            if len(kept) == count and not (kept_tombstone and not has_horizon):
                return self._copy(buf, pos, end, MAGIC_V2, last_offset, max_timestamp, codec, count)
        if accel.crc32c(memoryview(buf)[pos + BATCH_CRC_START:end]) != crc:
            raise CorruptRecordError(f"batch at offset {base_offset} fails its CRC32C; not cleaning it")
        if not kept:
            if keep_empty:
                return self._empty_batch(base_offset, last_delta, leader_epoch, attributes,
                                         max_timestamp, producer_id, producer_epoch, base_sequence)
            stats.entries_dropped += 1
            return None
        # Kafka's buildRetainedRecordsInto: same base offset and last offset delta,
        # baseTimestamp = the delete horizon when there is one, else the first record's.
        log_append = bool(attributes & _LOG_APPEND_TIME)
        horizon: int | None
        if kept_tombstone and not has_horizon:
            horizon = self.now_ms + self.delete_retention_ms
            attributes |= DELETE_HORIZON_BIT
        else:
            horizon = base_timestamp if has_horizon else None
        timestamps = [max_timestamp] * len(kept) if log_append else [base_timestamp + r.timestamp_delta for r in kept]
        new_base_ts = horizon if horizon is not None else timestamps[0]
        if not log_append and new_base_ts == base_timestamp:
            # the deltas stay as they are: each kept record byte for byte
            records_bytes = b"".join([payload[r.start:r.end] for r in kept])
        else:
            parts = []
            for r, ts in zip(kept, timestamps, strict=True):
                body = b"".join((bytes((r.attributes,)), encode_varint(ts - new_base_ts), payload[r.rest:r.end]))
                parts.append(encode_varint(len(body)))
                parts.append(body)
            records_bytes = b"".join(parts)
        if codec != Codec.NONE:
            records_bytes = compress(codec, records_bytes, magic=MAGIC_V2)
        new_max = max_timestamp if log_append else max(timestamps)
        out = bytearray(BATCH_OVERHEAD)
        out += records_bytes
        BATCH_HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, leader_epoch, MAGIC_V2, 0,
                               attributes, last_delta, new_base_ts, new_max, producer_id,
                               producer_epoch, base_sequence, len(kept))
        UINT32.pack_into(out, BATCH_CRC_OFFSET, accel.crc32c(memoryview(out)[BATCH_CRC_START:]))
        stats.entries_rebuilt += 1
        stats.records_kept += len(kept)
        return Kept(out, MAGIC_V2, last_offset, new_max, codec, len(kept))

    def _empty_batch(self, base_offset: int, last_delta: int, leader_epoch: int, attributes: int,
                     max_timestamp: int, producer_id: int, producer_epoch: int,
                     base_sequence: int) -> Kept:
        """A count-0 batch keeping an entry's offsets (Kafka's writeEmptyHeader)."""
        attributes &= ~CODEC_MASK & ~DELETE_HORIZON_BIT
        out = bytearray(BATCH_OVERHEAD)
        BATCH_HEADER.pack_into(out, 0, base_offset, BATCH_OVERHEAD - LOG_OVERHEAD, leader_epoch, MAGIC_V2,
                               0, attributes, last_delta, max_timestamp, max_timestamp, producer_id,
                               producer_epoch, base_sequence, 0)
        UINT32.pack_into(out, BATCH_CRC_OFFSET, accel.crc32c(memoryview(out)[BATCH_CRC_START:]))
        self.stats.empty_batches += 1
        return Kept(out, MAGIC_V2, base_offset + last_delta, max_timestamp, 0, 0)

    def _filter_classic(self, buf, pos: int, end: int, keep_empty: bool,
                        retain_deletes: bool) -> Kept | None:
        magic = buf[pos + MAGIC_OFFSET]
        header = HEADERS[magic].unpack_from(buf, pos)
        wrapper_offset, crc, attributes = header[0], header[2], header[4]
        timestamp = header[5] if magic else NO_TIMESTAMP
        codec = attributes & CODEC_MASK
        key_at = pos + KEY_LENGTH_OFFSET[magic]
        (key_len,) = LENGTH.unpack_from(buf, key_at)
        value_at = key_at + LENGTH.size + max(key_len, 0)
        (value_len,) = LENGTH.unpack_from(buf, value_at)
        stats = self.stats
        if codec == Codec.NONE:
            stats.records_read += 1
            key = bytes(buf[key_at + LENGTH.size:value_at]) if key_len >= 0 else None
            if self._keep(wrapper_offset, key, value_len < 0, retain_deletes):
                return self._copy(buf, pos, end, magic, wrapper_offset, timestamp, 0, 1)
            return self._dropped_classic(wrapper_offset, wrapper_offset, timestamp, magic, attributes,
                                         keep_empty)
        inner, messages = _inner(buf, pos, end, magic, attributes, value_at, value_len)
        stats.records_read += len(messages)
        shift = wrapper_offset - messages[-1].offset if magic == 1 else 0
        kept = []
        for m in messages:
            key = inner[m.key_position:m.key_position + m.key_len] if m.key_len >= 0 else None
            if self._keep(m.offset + shift, key, m.value_len < 0, retain_deletes):
                kept.append(m)
        first_offset = messages[0].offset + shift
        if len(kept) == len(messages):
            return self._copy(buf, pos, end, magic, wrapper_offset, timestamp, codec, len(kept))
        if crc32(memoryview(buf)[pos + CLASSIC_CRC_START:end]) != crc:
            raise CorruptRecordError(f"message at offset {wrapper_offset} fails its CRC32; not cleaning it")
        if not kept:
            return self._dropped_classic(first_offset, wrapper_offset, timestamp, magic, attributes,
                                         keep_empty)
        # The kept inner messages byte for byte (offsets lie outside their CRCs):
        # v1 inner offsets relative to the first kept one, v0 absolute as they are.
        first_kept = kept[0].offset + shift
        inner_set = bytearray()
        for m in kept:
            start = len(inner_set)
            inner_set += inner[m.position:m.position + m.entry_size]
            if magic == 1:
                _INT64.pack_into(inner_set, start, m.offset + shift - first_kept)
        last_kept = kept[-1].offset + shift
        log_append = bool(attributes & _LOG_APPEND_TIME)
        new_timestamp = NO_TIMESTAMP if magic == 0 else (
            timestamp if log_append else max(m.timestamp for m in kept))
        out = bytearray()
        append_message(out, last_kept, magic, attributes, new_timestamp, None,
                       compress(codec, inner_set, magic=magic))
        stats.entries_rebuilt += 1
        stats.records_kept += len(kept)
        return Kept(out, magic, last_kept, new_timestamp, codec, len(kept))

    def _dropped_classic(self, first_offset: int, last_offset: int, timestamp: int, magic: int,
                         attributes: int, keep_empty: bool) -> Kept | None:
        if keep_empty:
            # Classic formats have no empty entry: a count-0 batch holds the offsets.
            type_bit = attributes & _LOG_APPEND_TIME if magic else 0
            return self._empty_batch(first_offset, last_offset - first_offset, -1, type_bit, timestamp,
                                     -1, -1, -1)
        self.stats.entries_dropped += 1
        return None


def entry_info(kept: Kept, position: int) -> EntryInfo:
    return EntryInfo(position, len(kept.data), kept.magic, kept.last_offset, kept.max_timestamp, kept.codec)
