"""The cleaner's key -> latest offset map (Kafka's OffsetMap / SkimpyOffsetMap),
exact: two different keys are never taken for one.

Why not Kafka's map: SkimpyOffsetMap keeps only the MD5 of a key and its
offset (24 bytes a slot). Two keys with one MD5 (collisions are cheap to make)
share a slot, the older key's latest record looks superseded, and the cleaner
deletes a live record. Strata's map never merges two keys, whatever its hashes
do:

- A key of at most `inline_key_limit` bytes (128 by default: ids, UUIDs,
  composite keys) is stored whole in the key map storage/accel.py binds: the C
  table of storage/_ccleaner.c or its plain-Python twin storage/_pycleaner.py
  (a dict). Both match keys by their bytes once their hashes agree, so a hash
  collision costs a probe, never a wrong answer. The C table is open
  addressing (linear probing, at most 3/4 full) over 32-byte slots holding the
  offset, 32 bits of the key's hash, its length and the key itself when it has
  at most 16 bytes, else the place of its bytes in an arena of fixed-size chunks;
  a probe compares hash, length and then every byte (the tests set the hash mask
  to 0, so that every key collides, and check that the map stays exact).
- A longer key is stored as a 16-byte BLAKE2b digest (an injectable function)
  and its offset. When a put finds its digest already there, the map compares
  the key with the key of the stored offset, read back from the log through
  `key_reader(offset)` (a small cache of recently put long keys saves most
  reads). Same key: the offset moves on. Different key, same digest: the slot
  becomes a bucket holding one offset per distinct key, and later lookups in
  that slot compare keys the same way.

Correctness argument. After pass 1 over the records with offsets in
[start_offset, latest_offset], for every distinct key K among them the map
holds exactly one offset, the largest offset of a record with key K: short
keys by byte equality (the key map); long keys because a digest slot or bucket gets a new
offset only after the key bytes were compared equal, and a new entry only
after they were compared different from every key already in the slot. A
lookup `get(K, offset_of_the_record)` returns K's own latest offset or -1:
short keys by equality; long keys in a one-key slot without a read when the
record lies inside the mapped range (then K itself was put, and the slot holds
only one key, so it is K's), and otherwise only after comparing K with the key
at the stored offset. So the cleaner, which drops a record only when `get`
returns a larger offset, drops a record only when a later record with the very
same key exists: never because of a collision, in any hash the map uses (the
tests inject a digest that maps every key to one value).

Memory bound. A key of n <= inline_key_limit bytes costs at most
    NATIVE_ENTRY_BOUND (128) + (n if n > 16 else 0) bytes
(`native_entry_bound`): its slot, 32 bytes in a table at least 3/8 full once it
has doubled, so 86 bytes a key, and 128 if a doubling holds the old and the new
table at once (the table grows in place with realloc, which moves a large
block's pages without copying; the bound covers a realloc that copies); longer
keys add their bytes in the arena, whose chunks
(capacity / 32, 4 KiB to 1 MiB) waste less than one key each. With the default
limit an entry costs at most 256 bytes, one for a 10-byte key at most 128 (86
between doublings; Kafka: 24, but inexact). Fixed parts: the smallest table (16
slots), one partly filled chunk, and pass 1's bit table of the cleaner (2 bits
per dirty offset, kept and charged by the map). The C map counts every byte
it allocates in `used_bytes` and its `fits` counts the moment of a doubling, so
the charged figure is the real one. The Python twin charges the same figures
(so both clean in the same rounds) while its dict holds more: the bound is the
C build's.

Keys longer than the limit are Python's here, in both builds: each distinct one
costs at most
    ENTRY_OVERHEAD (144) + 8 * ceil((33 + 16) / 8) = 200 bytes
(`LONG_KEY_ENTRY`): the dict slot (112, counting the moment a resize holds two
tables), the offset (a Python int, 32) and its 16-byte digest. Colliding long
keys add at most BUCKET_COST to their slot, and the cache of recently put long
keys holds at most RECENT_LONG_KEYS_BYTES of keys (1 MiB, keys of 129 bytes or
more). The map charges every new entry against its budget
(`log.cleaner.dedupe.buffer.size` times the load factor) and reports itself
full before a batch that might not fit; the cleaner then cleans up to where
the map got (more rounds when the map fills), as Kafka does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from . import accel

if TYPE_CHECKING:
    from .accel import KeyMapType

INLINE_KEY_LIMIT = 128
DIGEST_SIZE = 16
# Per entry on CPython 3.11 (as tracemalloc counts it): the dict's
# table takes at most 112 bytes an entry counting the moment a resize holds the
# old and the new table, the offset int 32.
ENTRY_OVERHEAD = 112 + 32
BUCKET_COST = 64 + 40  # a list for the first collision; then 40 bytes per extra key
RECENT_LONG_KEYS_BYTES = 1 << 20  # cache of recently put long keys (saves log reads)
LONG_KEY_WORST = ENTRY_OVERHEAD + 40 + BUCKET_COST  # the most a long key costs, its length aside
# The native table (storage/_ccleaner.c): 32-byte slots, at most 3/4 full, at least
# 3/8 full after it doubles; keys longer than NATIVE_INLINE_KEY bytes go to the arena.
NATIVE_SLOT_BYTES = 32
NATIVE_INLINE_KEY = 16
NATIVE_ENTRY_BOUND = 128  # 32 * 8/3 (86) a key, 32 * 4/3 * 3 = 128 while a doubling holds both tables

KeyReader = Callable[[int], "bytes | None"]


def default_digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=DIGEST_SIZE).digest()


def stored_size(length: int) -> int:
    """Bytes of the Python bytes object holding `length` bytes (pymalloc rounds to 8)."""
    return (33 + length + 7) & ~7


LONG_KEY_ENTRY = ENTRY_OVERHEAD + stored_size(DIGEST_SIZE)  # a long key's digest entry (200 bytes)


def native_entry_bound(key_length: int, inline_key_limit: int = INLINE_KEY_LIMIT) -> int:
    """The most one key of `key_length` bytes costs in the native map (see the module doc)."""
    if key_length > inline_key_limit:
        return LONG_KEY_ENTRY  # a long key: the Python digest path
    return NATIVE_ENTRY_BOUND + (key_length if key_length > NATIVE_INLINE_KEY else 0)


class OffsetMap:
    """key -> latest offset over one cleaning round's dirty range (see the module doc)."""

    def __init__(self, budget_bytes: int, *, load_factor: float = 0.9,
                 inline_key_limit: int = INLINE_KEY_LIMIT,
                 digest: Callable[[bytes], bytes] = default_digest,
                 key_map: type[KeyMapType] | None = None):
        """`key_map`: the key map class (default: the one storage/accel.py binds)."""
        if budget_bytes <= 0:
            raise ValueError("the offset map needs a positive budget")
        self.budget_bytes = budget_bytes
        self.capacity_bytes = int(budget_bytes * load_factor)
        self.inline_key_limit = inline_key_limit
        self._digest = digest
        self._key_reader: KeyReader | None = None
        # keys of at most inline_key_limit bytes, and pass 1's bits
        self.key_map: KeyMapType = (key_map or accel.KeyMap)(self.capacity_bytes, inline_key_limit)
        self.clear()

    # ---- state -------------------------------------------------------------------

    def clear(self, key_reader: KeyReader | None = None) -> None:
        """Empty the map for a new round; `key_reader(offset)` gives the key of the
        record at `offset` (needed only for keys longer than the inline limit)."""
        self._long: dict[bytes, int | list[int]] = {}
        self._recent: dict[int, bytes] = {}
        self._recent_bytes = 0
        self._key_reader = key_reader
        self.key_map.clear()
        self._used = 0  # charged for the long keys
        self._entries = 0  # long keys held
        self.start_offset = -1  # the first offset put this round
        self.latest_offset = -1  # every keyed record in [start_offset, latest_offset] was put
        self.collisions = 0  # distinct long keys that share a digest with another
        self.key_reads = 0  # long-key comparisons that had to read the log

    @property
    def used_bytes(self) -> int:
        """Bytes charged: the key map's, plus the long keys'."""
        return self.key_map.used_bytes + self._used

    @used_bytes.setter
    def used_bytes(self, value: int) -> None:  # callers charge more (`+=`)
        self._used += value - self.used_bytes

    @property
    def entries(self) -> int:
        return self.key_map.entries + self._entries

    @property
    def python_entries(self) -> int:
        """Long keys held (outside the key map)."""
        return self._entries

    @property
    def utilization(self) -> float:
        return self.used_bytes / self.budget_bytes

    def stats(self) -> dict:
        return {"map_entries": self.entries, "map_bytes": self.used_bytes,
                "map_budget_bytes": self.budget_bytes,
                "map_utilization": round(self.utilization, 4),
                "map_collisions": self.collisions, "map_key_reads": self.key_reads,
                "map_native": accel.is_native(self.key_map)}

    def fits(self, key_lengths_total: int, count: int) -> bool:
        """Whether `count` more keys (of `key_lengths_total` bytes together) surely fit."""
        if count == 0:
            return True
        # stored_size(n) <= n + 40, and a long key's digest object is smaller than the key
        worst = count * LONG_KEY_WORST + key_lengths_total
        # lengths unknown: as keys of the key map and as long ones
        return self.key_map.fits(count, key_lengths_total, self._used + worst, -1)

    def fits_keys(self, keys: Sequence[bytes], key_lengths_total: int, last_offset: int = -1) -> bool:
        """Whether these keys surely fit (and pass 1's bits up to `last_offset`)."""
        limit = self.inline_key_limit
        short = arena = 0
        worst = self._used
        for key in keys:
            n = len(key)
            if n <= limit:
                short += 1
                if n > NATIVE_INLINE_KEY:
                    arena += n
            else:
                worst += LONG_KEY_WORST + n
        return self.key_map.fits(short, arena, worst, last_offset)

    def update_latest_offset(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset

    # ---- writing -------------------------------------------------------------------

    def put_all(self, keys: Sequence[bytes], offsets: Sequence[int]) -> list[int]:
        """Put each (key, offset), in offset order; returns the offsets superseded
        (the previous latest offset of a key that was already in the map)."""
        superseded: list[int] = []
        if not keys:
            return superseded
        if self.start_offset < 0:
            self.start_offset = offsets[0]
        limit = self.inline_key_limit
        if max(map(len, keys)) <= limit:
            return self.key_map.put_keys(keys, offsets)
        for key, offset in zip(keys, offsets, strict=False):
            if len(key) <= limit:
                superseded += self.key_map.put_keys((key,), (offset,))
            else:
                old = self._put_long(key, offset)
                if old is not None:
                    superseded.append(old)
        return superseded

    def put(self, key: bytes, offset: int) -> int | None:
        superseded = self.put_all((key,), (offset,))
        return superseded[0] if superseded else None

    def _put_long(self, key: bytes, offset: int) -> int | None:
        digest = self._digest(key)
        slot = self._long.get(digest)
        self._remember(offset, key)
        if slot is None:
            self._long[digest] = offset
            self._charge_new(stored_size(len(digest)))
            return None
        if isinstance(slot, int):
            if self._key_at(slot) == key:
                self._long[digest] = offset
                return slot
            self._long[digest] = [slot, offset]
            self.collisions += 1
            self._charge_new(BUCKET_COST)
            return None
        for i, stored in enumerate(slot):
            if self._key_at(stored) == key:
                slot[i] = offset
                return stored
        slot.append(offset)
        self.collisions += 1
        self._charge_new(40)
        return None

    def _charge_new(self, extra: int) -> None:
        self._entries += 1
        self._used += ENTRY_OVERHEAD + extra

    def _remember(self, offset: int, key: bytes) -> None:
        recent = self._recent
        recent[offset] = key
        self._recent_bytes += len(key)
        while self._recent_bytes > RECENT_LONG_KEYS_BYTES and recent:
            oldest = next(iter(recent))
            self._recent_bytes -= len(recent.pop(oldest))

    def _key_at(self, offset: int) -> bytes | None:
        key = self._recent.get(offset)
        if key is not None:
            return key
        if self._key_reader is None:
            raise RuntimeError("a long key needs comparing but the map has no key reader")
        self.key_reads += 1
        key = self._key_reader(offset)
        if key is not None:
            self._remember(offset, key)
        return key

    # ---- reading -------------------------------------------------------------------

    def get(self, key: bytes, record_offset: int = -1) -> int:
        """The latest offset of `key` in the mapped range, or -1. `record_offset` is
        where the asking record lies: inside the mapped range a long key was put
        itself, which spares a comparison (see the module doc)."""
        if len(key) <= self.inline_key_limit:
            return self.short_get(key, -1)
        slot = self._long.get(self._digest(key))
        if slot is None:
            return -1
        if isinstance(slot, int):
            if self.start_offset <= record_offset <= self.latest_offset:
                return slot
            return slot if self._key_at(slot) == key else -1
        for stored in slot:
            if self._key_at(stored) == key:
                return stored
        return -1

    @property
    def short_get(self) -> Callable[[bytes, int], int]:
        """`get(key, default)` for a key of at most `inline_key_limit` bytes (the
        cleaner's hot loop calls it directly, sparing a method call per record)."""
        return self.key_map.get
