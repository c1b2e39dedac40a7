"""The fields of internal-topic records (`__consumer_offsets`, `__transaction_state`).

Kafka writes their keys and values as generated messages: big-endian fixed-width
numbers, INT16-length strings and, in flexible versions, unsigned varints,
compact strings and tagged fields. `FieldReader` walks one key or value; a
length past the end or an over-long varint raises ValueError, a fixed-width
field past the end struct.error, so a damaged record fails as a whole.
`encode_uvarint` writes the unsigned varints. `replay_keyed_records` hands each
keyed record of an internal topic's partition log to a loader, in offset order.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import structlog

from kafka_format import iter_entries
from kafka_format.varint import encode_uvarint

INT16 = struct.Struct(">h")

__all__ = ["FieldReader", "encode_uvarint"]


class FieldReader:
    """A position in one record key or value, read field by field."""

    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def unpack(self, st: struct.Struct) -> tuple:
        values = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return values

    def fixed(self, st: struct.Struct) -> int:
        """The one number `st` holds."""
        (value,) = self.unpack(st)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise ValueError("bad unsigned varint")
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("length past the end")
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(raw)

    def string(self) -> str:
        """An INT16-length UTF-8 string."""
        return self.take(self.fixed(INT16)).decode("utf-8")

    def compact_str(self) -> str | None:
        """A compact (unsigned varint length + 1) string; None for null."""
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode("utf-8")

    def skip_tags(self) -> None:
        """Steps over a tagged-field section."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


READ_CHUNK = 1 << 20  # bytes read from the log at a time while loading


def replay_keyed_records(partition_log: Any, apply: Callable[[Any], None], stopped_event: str) -> int:
    """Call `apply(record)` for every keyed record of the log's non-control batches,
    from its start offset to its end, and return how many there were. A read that
    does not advance (a torn tail) logs `stopped_event` and ends the load there."""
    records = 0
    offset, end = partition_log.log_start_offset, partition_log.log_end_offset
    while offset < end:
        with partition_log.read(offset, READ_CHUNK, min_one_message=True) as chunk:
            data = chunk.read()
        advanced = False
        for entry in iter_entries(data):
            if entry.last_offset >= offset and not entry.is_control:
                for record in entry.records():
                    if record.offset >= offset and record.key is not None:
                        records += 1
                        apply(record)
            offset = max(offset, entry.last_offset + 1)
            advanced = True
        if not advanced:
            structlog.get_logger("strata.state").warning(stopped_event, partition=partition_log.partition,
                                                         offset=offset)
            break
    return records
