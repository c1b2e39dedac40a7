"""Classic messages, magic 0 and 1 (Kafka before 0.11): layout and helpers.

Contract: structs and field positions for one classic message, plus small
helpers shared by the scanner, validator, reader and builder: reading the
key/value lengths (and checking they add up to the size), CRC32, writing one
message, and walking an inner message set (the decompressed value of a
compressed wrapper). Helpers raise CorruptRecordError; none checks CRCs unless
it says so.

    0        8      12      16      17           18                26 (v1)
    | offset | size | crc   | magic | attributes | timestamp (v1)  | keyLen | key | valueLen | value
      int64    int32  uint32  int8    int8         int64             int32          int32
    CRC32 (IEEE) covers magic .. end of value. Length -1 = null.
    attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 LogAppendTime (v1).

A compressed message (the "wrapper") has a null key and, as value, the
compressed bytes of an inner message set. The wrapper's offset is the absolute
offset of the last inner message; inner v1 offsets are relative (0..n-1), inner
v0 offsets absolute.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .errors import CorruptRecordError
from .framing import LOG_OVERHEAD, MAGIC_OFFSET, NO_TIMESTAMP, crc32

V0_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
V1_HEADER = struct.Struct(">qiIbbq")  # ... timestamp
LENGTH = struct.Struct(">i")  # key and value lengths
CRC = struct.Struct(">I")
TIMESTAMP = struct.Struct(">q")

CRC_OFFSET = LOG_OVERHEAD  # 12
CRC_START = MAGIC_OFFSET  # the CRC covers magic .. end: 16
ATTRIBUTES_OFFSET = MAGIC_OFFSET + 1  # 17
TIMESTAMP_OFFSET = V0_HEADER.size  # 18: v1's timestamp sits where v0's key length does

HEADERS = (V0_HEADER, V1_HEADER)
# Where the key length field starts, by magic (18, 26).
KEY_LENGTH_OFFSET = (V0_HEADER.size, V1_HEADER.size)
# The least `size` field, by magic: the header after `size` plus two lengths (14, 22).
MIN_SIZE_FIELD = tuple(h.size - LOG_OVERHEAD + 2 * LENGTH.size for h in HEADERS)
# The smallest whole message, by magic (26, 34).
MIN_ENTRY_SIZE = tuple(LOG_OVERHEAD + s for s in MIN_SIZE_FIELD)

CLASSIC_CODECS = 4  # none, gzip, snappy, lz4; zstd needs magic 2


def message_lengths(buf, pos: int, magic: int, entry_end: int) -> tuple[int, int]:
    """(keyLen, valueLen) of the whole message at `pos`, after checking that
    they are -1 or more and exactly fill the message up to `entry_end`."""
    key_pos = pos + KEY_LENGTH_OFFSET[magic] + LENGTH.size
    (key_len,) = LENGTH.unpack_from(buf, key_pos - LENGTH.size)
    if key_len < -1:
        raise CorruptRecordError(f"message at {pos}: key length {key_len} disagrees with its size")
    value_len_pos = key_pos + max(key_len, 0)
    if value_len_pos + LENGTH.size > entry_end:
        raise CorruptRecordError(f"message at {pos}: key length {key_len} disagrees with its size")
    (value_len,) = LENGTH.unpack_from(buf, value_len_pos)
    if value_len < -1 or value_len_pos + LENGTH.size + max(value_len, 0) != entry_end:
        raise CorruptRecordError(f"message at {pos}: value length {value_len} disagrees with its size")
    return key_len, value_len


def message_crc(buf, pos: int, entry_end: int) -> int:
    """The CRC32 the message at `pos` should carry."""
    return crc32(memoryview(buf)[pos + CRC_START:entry_end])


def append_message(out: bytearray, offset: int, magic: int, attributes: int, timestamp: int,
                   key: bytes | None, value: bytes | None) -> None:
    """Append one message, CRC included, to `out`."""
    header = HEADERS[magic]
    start = len(out)
    out += bytes(header.size)
    for field in (key, value):
        if field is None:
            out += LENGTH.pack(-1)
        else:
            out += LENGTH.pack(len(field))
            out += field
    size = len(out) - start - LOG_OVERHEAD
    if magic == 0:
        header.pack_into(out, start, offset, size, 0, magic, attributes)
    else:
        header.pack_into(out, start, offset, size, 0, magic, attributes, timestamp)
    CRC.pack_into(out, start + CRC_OFFSET, message_crc(out, start, len(out)))


class InnerMessage(NamedTuple):
    """One message of a decompressed inner set; positions are into that set."""

    position: int
    offset: int
    entry_size: int  # LOG_OVERHEAD included
    crc: int
    magic: int
    attributes: int
    timestamp: int  # -1 for magic 0
    key_len: int
    value_len: int

    @property
    def key_position(self) -> int:
        return self.position + KEY_LENGTH_OFFSET[self.magic] + LENGTH.size

    @property
    def value_position(self) -> int:
        return self.key_position + max(self.key_len, 0) + LENGTH.size


def inner_messages(buf: bytes, wrapper_magic: int) -> list[InnerMessage]:
    """Walk a decompressed inner message set, checking sizes, magics (each must
    equal the wrapper's) and CRCs. Nested compression is reported, not refused:
    the caller decides (it is an invalid record, not corrupt bytes)."""
    messages = []
    pos, end = 0, len(buf)
    header = HEADERS[wrapper_magic]
    while pos < end:
        if end - pos < MIN_ENTRY_SIZE[0]:
            raise CorruptRecordError(f"inner message at {pos} is cut short")
        magic = buf[pos + MAGIC_OFFSET]
        if magic != wrapper_magic:
            raise CorruptRecordError(
                f"inner message at {pos} has magic {magic}, its wrapper magic {wrapper_magic}")
        fields = header.unpack_from(buf, pos)
        entry_end = pos + LOG_OVERHEAD + fields[1]
        if fields[1] < MIN_SIZE_FIELD[magic] or entry_end > end:
            raise CorruptRecordError(f"inner message at {pos} has a bad size {fields[1]}")
        key_len, value_len = message_lengths(buf, pos, magic, entry_end)
        if message_crc(buf, pos, entry_end) != fields[2]:
            raise CorruptRecordError(f"inner message at {pos} fails its CRC")
        timestamp = fields[5] if magic else NO_TIMESTAMP
        messages.append(InnerMessage(pos, fields[0], entry_end - pos, fields[2], magic,
                                     fields[4], timestamp, key_len, value_len))
        pos = entry_end
    return messages
