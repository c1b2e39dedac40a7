"""Fixed-size rows of native int64s packed in one buffer, read as a sequence.

Contract: a `PackedRows` subclass names its `ROW` struct and how a row reads
(`make`, default: a tuple). `rows` is the buffer (bytes or bytearray); len,
indexing (a slice is the same class over the sliced rows), iteration and
equality with lists of rows work as on a list. The C accelerators read and
write `rows` directly, so no Python object is made per row on the hot path:
the validator's and the recovery scan's entries (records.entries.EntryTable, a
thousand per MiB of 1 KiB classic messages).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar


class PackedRows:
    ROW: ClassVar[struct.Struct]
    make: ClassVar[Callable[[tuple], Any]] = tuple

    __slots__ = ("rows",)

    def __init__(self, rows: bytes | bytearray = b"") -> None:
        self.rows = rows

    @classmethod
    def of(cls, items):
        """Rows packed from tuples (or anything unpackable into ROW's fields)."""
        pack = cls.ROW.pack
        return cls(bytearray(b"".join(pack(*item) for item in items)))

    def __len__(self) -> int:
        return len(self.rows) // self.ROW.size

    def __getitem__(self, index):
        size = self.ROW.size
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError(f"{type(self).__name__} slices take no step")
            return type(self)(self.rows[start * size:max(start, stop) * size])
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(f"{type(self).__name__} index out of range")
        return type(self).make(self.ROW.unpack_from(self.rows, index * size))

    def __iter__(self):
        return map(type(self).make, self.ROW.iter_unpack(self.rows))

    def __eq__(self, other) -> bool:
        if isinstance(other, PackedRows):
            return type(other) is type(self) and bytes(self.rows) == bytes(other.rows)
        if isinstance(other, (list, tuple)):
            return list(self) == [tuple(item) for item in other]
        return NotImplemented

    # Mutable, like a list. typeshed types object.__hash__ as a method, and marks its own
    # `__hash__: ClassVar[None]` (list, dict, set) with the same ignore.
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"
