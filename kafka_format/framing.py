"""What every log entry shares, whatever its magic, and the `Record` it holds.

Contract: constants and structs only (plus the `Record` value type); no logic.
Every other module in this package derives its field positions from here or
from its own header struct, never from typed-in numbers.

Every entry, magic 0, 1 or 2, starts the same way, which is what lets a reader
walk a log without knowing the magic until byte 16:

    0         8       12                16
    | offset  | size  | crc or epoch    | magic | ...
      int64     int32   (4 bytes)         int8
    `size` counts the bytes after itself, so an entry is LOG_OVERHEAD + size long.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

# CRC32 (IEEE) of classic messages. ISA-L's is about 2.5x zlib's on 1 KiB
# messages, where a set of small classic messages spends most of its time.
# (CRC32C of record batches: accel.crc32c.)
from isal.isal_zlib import crc32  # noqa: F401  (re-exported)

ENTRY_PREFIX = struct.Struct(">qi")  # offset (or baseOffset), size (or batchLength)
LOG_OVERHEAD = ENTRY_PREFIX.size  # 12
SIZE_OFFSET = struct.calcsize(">q")  # 8
# Magic sits after the classic CRC or the batch's partitionLeaderEpoch (both 4 bytes).
MAGIC_OFFSET = LOG_OVERHEAD + struct.calcsize(">I")  # 16
# The smallest `size` any entry can have: a v0 message with null key and value.
MIN_ENTRY_SIZE_FIELD = struct.calcsize(">Ibbii")  # crc, magic, attributes, keyLen, valueLen: 14

MAGIC_V0, MAGIC_V1, MAGIC_V2 = 0, 1, 2

# Attribute bits shared by every magic.
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # set: LogAppendTime
CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1  # what magic 0 "has" for a timestamp

# One row of an EntryTable (entries.py): EntryInfo's six fields as native
# int64s; _crecords.c (ROW_*) reads and writes the same layout.
ENTRY_ROW = struct.Struct("=6q")
# The index files' entries (storage/offset_index.py, storage/time_index.py),
# which the index_entries walks (accel.py) pack.
OFFSET_INDEX_ENTRY = struct.Struct(">ii")  # relativeOffset, position
TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset


class Record(NamedTuple):
    """One record as a consumer sees it, with its absolute offset.

    `timestamp_type` is 0 (CreateTime) or 1 (LogAppendTime); magic 0 records
    report CreateTime with timestamp -1. `headers` is empty for magic 0/1."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
