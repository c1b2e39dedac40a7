"""The plain-Python twin of storage/_ccleaner.c: the cleaner's key map and pass 1's bits.

Contract: the interface of `_ccleaner.pyi`, name for name; storage/accel.py binds
one of the two and every caller takes `KeyMap` from there.

- The map: an exact key -> latest offset map for keys of at most
  `inline_key_limit` bytes (a dict, which compares keys by their bytes).
- Its memory figures are the C map's: `used_bytes`, `table_bytes`, `arena_bytes`,
  `bits_bytes` and `fits()` follow the C table's layout (32-byte slots, at most 3/4
  full, doubling; keys over 16 bytes in arena chunks; two bit tables), computed
  rather than allocated. So both twins report full at the same entry and a clean
  runs the same rounds, whichever is bound. The dict itself takes more than that
  (up to about twice as much for short keys): the pure-Python build keeps the C build's
  rounds and output, not its memory bound.
- Pass 1's bits (`begin`, `cover`, `mark_batch`, `supersede`, `dead_mask`) as in C.
- The walks (`map_entries`, `filter_entries`) stop at the first entry they leave
  to Python; this twin leaves every entry, so the cleaner's per-entry Python passes
  (storage/cleaner.py, storage/cleaner_records.py), which the C walks follow byte for
  byte, do all the work. `native_entries` stays (0, 0).
- `set_hash_mask` changes nothing here: a dict has no probe sequence for the tests
  to make collide.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafka_format.entries import EntryInfo

Buffer = bytes | bytearray | memoryview

SLOT_BYTES = 32  # offset + 1, 32 bits of hash, length, and a 16-byte key or its arena position
SLOT_INLINE_KEY = 16  # longer keys take arena bytes
DONE = 0
NEED_PYTHON = 1
FULL = 2
_POINTER_BYTES = 8  # one entry of the arena's chunk directory
_NO_COUNTS = (0, 0, 0, 0, 0, 0, 0)


def set_hash_mask(mask: int, /) -> None:
    """C: AND every key hash with `mask` (tests). A dict has no hash to mask."""


def _grown_cap(cap: int, entries: int) -> int:
    """Slots of the table holding `entries` (power of two, at most 3/4 full)."""
    if cap == 0:
        cap = 16
    while entries * 4 > cap * 3:
        cap <<= 1
    return cap


class KeyMap:
    """Exact key -> latest offset for short keys, and pass 1's bits (see the module doc)."""

    def __init__(self, capacity_bytes: int, inline_key_limit: int = 128) -> None:
        if not 0 <= inline_key_limit <= 1 << 20:
            raise ValueError("inline_key_limit must be in [0, 1048576]")
        self.capacity_bytes = capacity_bytes
        self.inline_key_limit = inline_key_limit
        # chunks of about capacity/32 bytes, a power of two in [4 KiB, 1 MiB], at least 2 keys
        size = 4096
        while size < 1 << 20 and size * 32 <= capacity_bytes:
            size <<= 1
        while size < inline_key_limit * 2:
            size <<= 1
        self.chunk_size = size
        self.clear()

    # ---- state ------------------------------------------------------------------------

    def clear(self) -> None:
        self._table: dict[bytes, int] = {}
        self._slots = 0  # the C table's slots
        self._chunks = 0  # arena chunks, their directory's capacity, bytes used in the last
        self._chunks_cap = 0
        self._chunk_used = 0
        self.extra = 0  # bytes a caller charges
        self.native_entries = (0, 0)
        self.begin(-1)

    def begin(self, start: int, /) -> None:
        """Empty bit tables, the first bit for offset `start` (-1: none)."""
        self.start = start if start >= 0 else -1
        self._dead = bytearray()
        self._eligible = bytearray()
        self._bits_cap = 0

    @property
    def entries(self) -> int:
        return len(self._table)

    @property
    def table_bytes(self) -> int:
        return self._slots * SLOT_BYTES

    @property
    def arena_bytes(self) -> int:
        return self._chunks * self.chunk_size

    @property
    def bits_bytes(self) -> int:
        return 2 * self._bits_cap

    @property
    def used_bytes(self) -> int:
        return (self.table_bytes + self.arena_bytes + self._chunks_cap * _POINTER_BYTES + self.bits_bytes
                + self.extra)

    # ---- the map ----------------------------------------------------------------------

    def put_keys(self, keys: Sequence[bytes], offsets: Sequence[int], /) -> list[int]:
        """Put each (key, offset) in order; the offsets they superseded."""
        if len(keys) != len(offsets):
            raise ValueError("keys and offsets differ in length")
        superseded = []
        table = self._table
        limit = self.inline_key_limit
        held = -1  # entries before the latest put
        try:
            for key, offset in zip(keys, offsets, strict=True):
                if offset < 0:
                    raise ValueError("negative offset")
                stored = key if type(key) is bytes else bytes(key)
                if len(stored) > limit:
                    raise ValueError("key longer than the inline limit")
                held = len(table)
                old = table.get(stored)
                table[stored] = offset
                if old is not None:
                    superseded.append(old)
                elif len(stored) > SLOT_INLINE_KEY:
                    self._arena_store(len(stored))
        finally:
            # C reserves a slot before each put; the table only grows, so reserving once
            # for the last put sizes it the same
            if held >= 0:
                self._reserve(held + 1)
        return superseded

    def get(self, key: bytes, default: int = -1, /) -> int:
        found = self._table.get(key if type(key) is bytes else bytes(key))
        return default if found is None else found

    def _reserve(self, entries: int) -> None:
        """Size the table for `entries` keys."""
        if self._slots == 0 or entries * 4 > self._slots * 3:
            self._slots = _grown_cap(self._slots, entries)

    def _arena_store(self, length: int) -> None:
        if self._chunks == 0 or self._chunk_used + length > self.chunk_size:
            if self._chunks == self._chunks_cap:
                self._chunks_cap = self._chunks_cap * 2 if self._chunks_cap else 16
            self._chunks += 1
            self._chunk_used = 0
        self._chunk_used += length

    def fits(self, count: int, arena_bytes: int, extra_worst: int, last_offset: int, /) -> bool:
        """Whether `count` more keys (`arena_bytes` of them in keys over 16 bytes) and the
        bits up to `last_offset` surely fit, with `extra_worst` more bytes charged."""
        count = max(count, 0)
        peak = self.used_bytes + extra_worst
        cap = _grown_cap(self._slots, len(self._table) + count)
        if cap != self._slots or self._slots == 0:
            peak += cap * SLOT_BYTES  # old and new table, for a moment
        if arena_bytes > 0:
            per_chunk = max(self.chunk_size - self.inline_key_limit, 1)
            chunks = arena_bytes // per_chunk + 1
            peak += chunks * self.chunk_size
            directory = self._chunks_cap or 16
            while directory < self._chunks + chunks:
                directory *= 2
            if directory != self._chunks_cap:
                peak += directory * _POINTER_BYTES  # grown: old and new
        need = self._bits_needed(last_offset)
        if need > self._bits_cap:
            peak += 2 * self._bits_new_cap(need) + 2 * self._bits_cap
        return peak <= self.capacity_bytes

    # ---- pass 1's bits ----------------------------------------------------------------

    def _bits_needed(self, last_offset: int) -> int:
        if self.start < 0 or last_offset < self.start:
            return 0
        return ((last_offset - self.start) >> 3) + 1

    def _bits_new_cap(self, need: int) -> int:
        if need <= self._bits_cap:
            return self._bits_cap
        return max(self._bits_cap * 2 if self._bits_cap else 64, need)

    def _bit(self, offset: int) -> int:
        """The bit index of `offset`, or -1 when the bits do not cover it."""
        if self.start < 0 or offset < self.start or (offset - self.start) >> 3 >= len(self._dead):
            return -1
        return offset - self.start

    def cover(self, last_offset: int, /) -> None:
        """Bits up to `last_offset`."""
        need = self._bits_needed(last_offset)
        grown = need - len(self._dead)
        if grown <= 0:
            return
        self._bits_cap = self._bits_new_cap(need)
        self._dead.extend(bytes(grown))
        self._eligible.extend(bytes(grown))

    def mark_batch(self, base_offset: int, eligible: bool, /) -> None:
        """Whether the batch at `base_offset` may be decided by the dead bits alone."""
        i = self._bit(base_offset)
        if eligible and i >= 0:
            self._eligible[i >> 3] |= 1 << (i & 7)

    def supersede(self, offsets: Iterable[int], /) -> None:
        dead, start = self._dead, self.start
        if start < 0:
            return
        covered = len(dead) << 3
        for offset in offsets:
            i = offset - start
            if 0 <= i < covered:
                dead[i >> 3] |= 1 << (i & 7)

    def dead_mask(self, base: int, last: int, /) -> bytes | None:
        """The dead bits of base..last, little-endian (bit i: base + i), or None when that
        batch is not to be decided by them."""
        first, end = self._bit(base), self._bit(last)
        if last < base or first < 0 or end < 0 or not (self._eligible[first >> 3] >> (first & 7)) & 1:
            return None
        n = end - first + 1
        chunk = int.from_bytes(self._dead[first >> 3:(end >> 3) + 1], "little")
        return ((chunk >> (first & 7)) & ((1 << n) - 1)).to_bytes((n + 7) // 8, "little")

    # ---- the walks --------------------------------------------------------------------

    def map_entries(self, buf: Buffer, pos: int, stop: int, python_entries: int, python_worst: int,
                    /) -> tuple[int, int, int, int, int, int]:
        """Pass 1 over the whole entries of buf[pos:stop]: here, none taken (see the
        module doc). -> (pos, status, latest, first_put, records, bytes)."""
        if pos < 0 or stop > len(buf) or pos > stop or self.start < 0:
            raise ValueError("bad span, or no begin()")
        return pos, NEED_PYTHON if pos < stop else DONE, -1, -1, 0, 0

    def filter_entries(self, buf: Buffer, pos: int, stop: int, latest_offset: int, keep_end: int,
                       out_position: int, now_ms: int, delete_retention_ms: int,
                       /) -> tuple[int, int, bytes, list[EntryInfo], int, tuple[int, int, int, int, int, int, int]]:
        """Pass 2 over the whole entries of buf[pos:stop]: here, none taken (see the
        module doc). -> (pos, status, data, entries, max_timestamp, counts)."""
        if pos < 0 or stop > len(buf) or pos > stop:
            raise ValueError("bad span")
        return pos, NEED_PYTHON if pos < stop else DONE, b"", [], -1, _NO_COUNTS
