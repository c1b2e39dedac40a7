"""Building message sets: record batches (magic 2) and classic messages (0/1).

Contract: `build_batch` and `build_classic` turn Python values into the exact
bytes a Kafka producer would send (and the broker would store, once offsets are
assigned). A record is `(key, value)`, `(key, value, timestamp)` or
`(key, value, timestamp, headers)`, headers being `(str, bytes | None)` pairs;
a missing timestamp means now. Used by tests, the client library, benchmarks,
and by the validator when it must rebuild an entry.

Extra keywords beyond the producer's view exist for compaction, which rewrites
entries keeping each record's original offset: `offset_deltas` /
`last_offset_delta` / `max_timestamp` for batches, `offsets` for classic sets.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .batch import BATCH_HEADER, CONTROL_BIT, CRC_OFFSET, TRANSACTIONAL_BIT, UINT32, batch_crc, encode_record
from .classic import append_message
from .codecs import Codec, compress
from .framing import LOG_APPEND_TIME, LOG_OVERHEAD, NO_TIMESTAMP, TIMESTAMP_TYPE_BIT


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _normalize(records, default_timestamp: int | None) -> list[tuple]:
    """(key, value, timestamp, headers) for each record tuple."""
    out = []
    now = None
    for record in records:
        key, value, *rest = record
        timestamp = rest[0] if rest else None
        headers = tuple(rest[1]) if len(rest) > 1 else ()
        if timestamp is None:
            if default_timestamp is None:
                now = now if now is not None else _now_ms()
            timestamp = default_timestamp if default_timestamp is not None else now
        out.append((key, value, timestamp, headers))
    return out


def build_batch(records: Sequence[tuple], *, base_offset: int = 0, codec: int = Codec.NONE,
                base_timestamp: int | None = None, timestamp_type: int = 0,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                partition_leader_epoch: int = -1, is_transactional: bool = False,
                is_control: bool = False, offset_deltas: Sequence[int] | None = None,
                last_offset_delta: int | None = None, max_timestamp: int | None = None,
                compression_level: int | None = None) -> bytes:
    """One record batch holding `records` (none: an empty batch, count 0).

    baseTimestamp is `base_timestamp` or the first record's timestamp; the
    header's maxTimestamp is `max_timestamp` or the largest record timestamp
    (`base_timestamp`, else -1, for an empty batch)."""
    rows = _normalize(records, base_timestamp)
    if offset_deltas is None:
        offset_deltas = range(len(rows))
    elif len(offset_deltas) != len(rows):
        raise ValueError("offset_deltas must give one delta per record")
    if base_timestamp is None:
        base_timestamp = rows[0][2] if rows else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r[2] for r in rows), default=base_timestamp)
    if last_offset_delta is None:
        last_offset_delta = offset_deltas[-1] if rows else 0

    payload = b"".join(encode_record(delta, timestamp - base_timestamp, key, value, headers)
                       for delta, (key, value, timestamp, headers) in zip(offset_deltas, rows, strict=True))
    if codec != Codec.NONE:
        payload = compress(codec, payload, magic=2, level=compression_level)
    attributes = (int(codec) | (TIMESTAMP_TYPE_BIT if timestamp_type == LOG_APPEND_TIME else 0)
                  | (TRANSACTIONAL_BIT if is_transactional else 0)
                  | (CONTROL_BIT if is_control else 0))
    out = bytearray(BATCH_HEADER.size)
    out += payload
    BATCH_HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, 2,
                           0, attributes, last_offset_delta, base_timestamp, max_timestamp,
                           producer_id, producer_epoch, base_sequence, len(rows))
    UINT32.pack_into(out, CRC_OFFSET, batch_crc(out, 0, len(out)))
    return bytes(out)


def build_classic(records: Sequence[tuple], *, magic: int, codec: int = Codec.NONE,
                  base_offset: int = 0, timestamp_type: int = 0,
                  offsets: Sequence[int] | None = None) -> bytes:
    """Classic messages for `records`: one message each when uncompressed, else
    one wrapper (inner v1 offsets relative to the first, inner v0 absolute,
    wrapper offset = the last absolute offset, v1 wrapper timestamp = the
    largest inner one). `offsets` (absolute) defaults to consecutive offsets
    from `base_offset`."""
    if magic not in (0, 1):
        raise ValueError(f"classic messages have magic 0 or 1, not {magic}")
    if codec not in (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4):
        raise ValueError(f"codec {codec} cannot be used with magic {magic}")
    rows = _normalize(records, NO_TIMESTAMP if magic == 0 else None)
    if any(headers for *_, headers in rows):
        raise ValueError("classic messages have no headers")
    if offsets is None:
        offsets = range(base_offset, base_offset + len(rows))
    elif len(offsets) != len(rows):
        raise ValueError("offsets must give one offset per record")
    if magic == 0:
        rows = [(key, value, NO_TIMESTAMP, ()) for key, value, _, _ in rows]
    type_bit = TIMESTAMP_TYPE_BIT if magic == 1 and timestamp_type == LOG_APPEND_TIME else 0

    out = bytearray()
    if codec == Codec.NONE:
        for offset, (key, value, timestamp, _) in zip(offsets, rows, strict=True):
            append_message(out, offset, magic, type_bit, timestamp, key, value)
        return bytes(out)
    if not rows:
        raise ValueError("a compressed wrapper needs at least one message")
    inner = bytearray()
    for offset, (key, value, timestamp, _) in zip(offsets, rows, strict=True):
        inner_offset = offset - offsets[0] if magic == 1 else offset
        append_message(inner, inner_offset, magic, 0, timestamp, key, value)
    wrapper_timestamp = max(r[2] for r in rows)
    append_message(out, offsets[-1], magic, int(codec) | type_bit, wrapper_timestamp, None,
                   compress(codec, inner, magic=magic))
    return bytes(out)
