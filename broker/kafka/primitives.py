"""Kafka wire primitives for the responses Strata writes by hand (fetch_response.py,
produce_response.py): fixed-width integers, classic and compact (KIP-482) lengths
and strings, the empty tagged-field section and the zero topic id, as kio writes them.
"""

from __future__ import annotations

import functools
import struct

from kafka_format.varint import encode_uvarint

INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")
NO_TAGS = b"\x00"  # a flexible version's empty tagged-field section
ZERO_UUID = bytes(16)  # kio's topic id when none is set

_SMALL_COMPACT_LENGTHS = tuple(encode_uvarint(count + 1) for count in range(127))


def compact_length(count: int) -> bytes:
    """A compact array or string length: count + 1 as an unsigned varint."""
    return _SMALL_COMPACT_LENGTHS[count] if count < 127 else encode_uvarint(count + 1)


def string(value: str | None) -> bytes:
    """A classic nullable string: int16 length (-1: null) and UTF-8 bytes."""
    if value is None:
        return b"\xff\xff"
    data = value.encode()
    return INT16.pack(len(data)) + data


def compact_string(value: str | None) -> bytes:
    """A compact nullable string: compact length (0: null) and UTF-8 bytes."""
    if value is None:
        return b"\x00"
    data = value.encode()
    return compact_length(len(data)) + data


@functools.lru_cache(maxsize=4096)
def topic_name(name: str, flexible: bool) -> bytes:
    """A topic name as written (a client is answered the same few names thousands of
    times a second)."""
    return compact_string(name) if flexible else string(name)
