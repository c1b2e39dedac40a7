"""The fields of internal-topic records (`__consumer_offsets`, `__transaction_state`).

Kafka writes their keys and values as generated messages: big-endian fixed-width
numbers, INT16-length strings and, in flexible versions, unsigned varints,
compact strings and tagged fields. `FieldReader` walks one key or value; a
length past the end or an over-long varint raises ValueError, a fixed-width
field past the end struct.error, so a damaged record fails as a whole.
`encode_uvarint` writes the unsigned varints.
"""

from __future__ import annotations

import struct

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
