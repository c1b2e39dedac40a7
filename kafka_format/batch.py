"""Record batches, magic 2 (Kafka 0.11+): layout and helpers.

Contract: the header struct and field positions (derived from the struct's
format), the CRC32C, one record's encoding, and two walks over the records of
a batch: `summarize_records` (no objects, for validation) and
`decode_records` (Record objects, for readers). Both check the structure as
Kafka's DefaultRecord.readFrom does and raise CorruptRecordError when a
declared length does not match what was read, the count is off, or bytes are
left over.

    0           8        12                    16     17     21          23
    | baseOffset| length | partitionLeaderEpoch| magic| crc  | attributes| lastOffsetDelta
      int64       int32    int32                 int8   uint32 int16       int32
    27             35             43          51             53             57          61
    | baseTimestamp| maxTimestamp | producerId| producerEpoch| baseSequence | recordCount | records
      int64          int64          int64       int16          int32          int32
    CRC32C covers attributes .. end, so baseOffset and the leader epoch can be
    restamped without recomputing it. attributes: bits 0-2 codec (4 = zstd),
    3 LogAppendTime, 4 transactional, 5 control, 6 delete horizon set.
    The records, compressed as one payload when the codec is not none:

    Record => length: varint | attributes: int8 | timestampDelta: varlong |
              offsetDelta: varint | keyLen: varint | key | valueLen: varint | value |
              headerCount: varint | (hKeyLen: varint | hKey (UTF-8) | hValueLen: varint | hValue)*
    `length` counts the bytes after itself; lengths of -1 mean null.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from . import _pyrecords, accel
from .framing import LOG_APPEND_TIME, LOG_OVERHEAD, Record
from .varint import decode_varint, encode_varint

_FIELDS = (
    ("base_offset", "q"), ("length", "i"), ("partition_leader_epoch", "i"), ("magic", "b"),
    ("crc", "I"), ("attributes", "h"), ("last_offset_delta", "i"), ("base_timestamp", "q"),
    ("max_timestamp", "q"), ("producer_id", "q"), ("producer_epoch", "h"),
    ("base_sequence", "i"), ("record_count", "i"),
)
BATCH_HEADER = struct.Struct(">" + "".join(code for _, code in _FIELDS))
# Byte position of each header field, e.g. FIELD_OFFSET["crc"] == 17.
FIELD_OFFSET = {name: struct.calcsize(">" + "".join(c for _, c in _FIELDS[:i]))
                for i, (name, _) in enumerate(_FIELDS)}

BATCH_OVERHEAD = BATCH_HEADER.size  # 61: an empty batch
MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD  # 49: the least `length`
BASE_OFFSET_OFFSET = FIELD_OFFSET["base_offset"]
LEADER_EPOCH_OFFSET = FIELD_OFFSET["partition_leader_epoch"]
CRC_OFFSET = FIELD_OFFSET["crc"]
ATTRIBUTES_OFFSET = CRC_START = FIELD_OFFSET["attributes"]
MAX_TIMESTAMP_OFFSET = FIELD_OFFSET["max_timestamp"]
PRODUCER_ID_OFFSET = FIELD_OFFSET["producer_id"]

INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT16 = struct.Struct(">h")

BATCH_CODECS = 5  # none, gzip, snappy, lz4, zstd
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


def batch_crc(buf, pos: int, entry_end: int) -> int:
    """The CRC32C the batch at `pos` should carry."""
    return accel.crc32c(memoryview(buf)[pos + CRC_START:entry_end])


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers=()) -> bytes:
    """One record, length prefix included (record attributes are always 0)."""
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    for field in (key, value):
        if field is None:
            parts.append(encode_varint(-1))
        else:
            parts += (encode_varint(len(field)), field)
    parts.append(encode_varint(len(headers)))
    for h_key, h_value in headers:
        h_key = h_key.encode("utf-8", "surrogateescape")
        parts += (encode_varint(len(h_key)), h_key)
        if h_value is None:
            parts.append(encode_varint(-1))
        else:
            parts += (encode_varint(len(h_value)), h_value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


class RecordsSummary(NamedTuple):
    max_timestamp_delta: int | None  # None when there are no records
    has_null_key: bool
    offset_deltas_in_order: bool  # the deltas are exactly 0, 1, ..., count - 1


def summarize_records(buf, pos: int, end: int, count: int) -> RecordsSummary:
    """Walk `count` records in buf[pos:end], checking their structure; raises
    CorruptRecordError naming the first problem."""
    summary = accel.summarize_records(buf, pos, end, count)
    if summary is None:
        # The C walk gives up on anything malformed; the Python twin, the
        # reference, names the problem.
        summary = _pyrecords.summarize_records(buf, pos, end, count)
    return tuple.__new__(RecordsSummary, summary)


def decode_records(buf, pos: int, end: int, count: int, base_offset: int,
                   base_timestamp: int, attributes: int, max_timestamp: int) -> list[Record]:
    """The `count` records in buf[pos:end] with absolute offsets and timestamps
    (a LogAppendTime batch's records all report its maxTimestamp)."""
    log_append = bool(attributes & 0x08)
    ts_type = LOG_APPEND_TIME if log_append else 0
    records = []
    summarize_records(buf, pos, end, count)  # structure first: then the walk below is safe
    for _ in range(count):
        length, pos = decode_varint(buf, pos)
        pos += 1
        ts_delta, pos = decode_varint(buf, pos)
        offset_delta, pos = decode_varint(buf, pos)
        key, pos = _read_bytes(buf, pos)
        value, pos = _read_bytes(buf, pos)
        header_count, pos = decode_varint(buf, pos)
        headers = []
        for _ in range(header_count):
            h_key, pos = _read_bytes(buf, pos)
            h_value, pos = _read_bytes(buf, pos)
            assert h_key is not None  # summarize_records above refuses a null header key
            # surrogateescape: a key that is not UTF-8 (Kafka does not check) still
            # reads, and encode_record writes it back byte for byte.
            headers.append((h_key.decode("utf-8", "surrogateescape"), h_value))
        timestamp = max_timestamp if log_append else base_timestamp + ts_delta
        records.append(Record(base_offset + offset_delta, timestamp, ts_type, key, value,
                              tuple(headers)))
    return records


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    return bytes(buf[pos:pos + length]), pos + length
