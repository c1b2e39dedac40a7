"""Primitive wire types shared by requests.py and responses.py.

Layout (NATIVE-PROTOCOL.md, "Framing"): integers are big-endian and signed;
`str` is `length:int16` followed by that many UTF-8 bytes, length -1 = null.

Contract:
- `Reader` walks one frame. Every read checks the bounds and raises
  ProtocolError(code) with the code the reader was made with: INVALID_REQUEST
  for requests, CORRUPT_MESSAGE for responses. Fixed runs of fields are read
  with one `struct.Struct` each (`unpack`), so offsets come from struct sizes,
  never from typed-in numbers. `finish()` rejects trailing bytes.
- Byte runs (`take`, `rest`) are memoryview slices of the frame: no copy.
- `encode_str` / `encode_nullable_str` build `str` fields for encoders and raise
  ValueError for what the wire cannot carry (None where null is not allowed,
  more than 32767 UTF-8 bytes, text that is not encodable as UTF-8).
"""

from __future__ import annotations

import struct

from .errors import ErrorCode, ProtocolError

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
NULL_STR = INT16.pack(-1)


class Reader:
    """A cursor over one frame (a bytes-like object)."""

    __slots__ = ("_buf", "_pos", "_code")

    def __init__(self, buf: bytes | bytearray | memoryview, code: ErrorCode) -> None:
        view = memoryview(buf)
        self._buf = view if view.format == "B" and view.ndim == 1 else view.cast("B")
        self._pos = 0
        self._code = code

    def fail(self, message: str) -> ProtocolError:
        return ProtocolError(self._code, f"{message} at byte {self._pos}")

    @property
    def remaining(self) -> int:
        return len(self._buf) - self._pos

    def unpack(self, st: struct.Struct) -> tuple:
        if self.remaining < st.size:
            raise self.fail(f"truncated: need {st.size} bytes, have {self.remaining}")
        values = st.unpack_from(self._buf, self._pos)
        self._pos += st.size
        return values

    def int16(self) -> int:
        return self.unpack(INT16)[0]

    def int32(self) -> int:
        return self.unpack(INT32)[0]

    def int64(self) -> int:
        return self.unpack(INT64)[0]

    def count16(self) -> int:
        return self._count(self.int16())

    def count32(self) -> int:
        return self._count(self.int32())

    def _count(self, n: int) -> int:
        if n < 0:
            raise self.fail(f"negative count {n}")
        return n

    def take(self, n: int) -> memoryview:
        """The next n bytes as a view of the frame."""
        if n < 0:
            raise self.fail(f"negative size {n}")
        if n > self.remaining:
            raise self.fail(f"size {n} runs past the end of the frame ({self.remaining} left)")
        view = self._buf[self._pos:self._pos + n]
        self._pos += n
        return view

    def rest(self) -> memoryview:
        return self.take(self.remaining)

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        if n < 0:
            raise self.fail(f"negative string length {n}")
        raw = self.take(n)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"string is not valid UTF-8 ({e.reason})") from None

    def string(self) -> str:
        start = self._pos
        value = self.nullable_string()
        if value is None:
            self._pos = start
            raise self.fail("null string where null is not allowed")
        return value

    def finish(self) -> None:
        if self.remaining:
            raise self.fail(f"{self.remaining} trailing bytes after the body")


def encode_nullable_str(value: str | None) -> bytes:
    if value is None:
        return NULL_STR
    if not isinstance(value, str):
        raise ValueError(f"expected str, got {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"string cannot be encoded as UTF-8: {e.reason}") from None
    if len(raw) > INT16_MAX:
        raise ValueError(f"string of {len(raw)} UTF-8 bytes exceeds {INT16_MAX}")
    return INT16.pack(len(raw)) + raw


def encode_str(value: str) -> bytes:
    if value is None:
        raise ValueError("null is not allowed here")
    return encode_nullable_str(value)


def check_count16(n: int) -> int:
    if n > INT16_MAX:
        raise ValueError(f"{n} items do not fit an int16 count")
    return n
