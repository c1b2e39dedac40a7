"""Zigzag varints, as record batches (magic 2) encode record fields.

Contract: `encode_varint(n)` gives the bytes of `n` (any value in the int64
range) zigzag-encoded, 7 bits per byte, least significant group first, high
bit set on every byte but the last; `decode_varint(buf, pos)` reads one back
and returns `(value, position after it)`, raising CorruptRecordError when the
buffer ends inside the varint or the varint runs past 10 bytes (a varlong's
most). Kafka's int32 varints use the same encoding, at most 5 bytes.
`encode_uvarint(n)` gives Kafka's UnsignedVarint (no zigzag) for `n >= 0`, as
flexible message versions write lengths, counts and tags.
"""

from __future__ import annotations

from .errors import CorruptRecordError

MAX_VARLONG_BYTES = 10
_MAX_SHIFT = 7 * (MAX_VARLONG_BYTES - 1)

# One-byte encodings cover -64..63, which is most deltas and small lengths.
_ONE_BYTE = {n: bytes([(n << 1) ^ (n >> 63)]) for n in range(-64, 64)}


def encode_varint(value: int) -> bytes:
    """The zigzag varint bytes for `value`."""
    one = _ONE_BYTE.get(value)
    if one is not None:
        return one
    zigzag = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while zigzag > 0x7F:
        out.append(0x80 | (zigzag & 0x7F))
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """`(value, next position)` for the zigzag varint at `buf[pos]`."""
    try:
        byte = buf[pos]
        if byte < 0x80:  # the common one-byte case, kept short
            return (byte >> 1) ^ -(byte & 1), pos + 1
        result, shift = byte & 0x7F, 7
        while True:
            pos += 1
            byte = buf[pos]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (result >> 1) ^ -(result & 1), pos + 1
            shift += 7
            if shift > _MAX_SHIFT:
                raise CorruptRecordError(f"varint longer than {MAX_VARLONG_BYTES} bytes")
    except IndexError:
        raise CorruptRecordError("buffer ends inside a varint") from None


def size_of_varint(value: int) -> int:
    """How many bytes `encode_varint(value)` takes."""
    zigzag = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    return max(1, (zigzag.bit_length() + 6) // 7)


def encode_uvarint(value: int) -> bytes:
    """Kafka's UnsignedVarint bytes for `value` (>= 0): 7 bits per byte, no zigzag."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
