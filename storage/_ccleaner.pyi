# The interface of storage/_ccleaner.c (the cleaner's key map, pass 1's bits and the
# walks over whole entries) and of its plain-Python twin storage/_pycleaner.py;
# storage/accel.py binds one of them.
from collections.abc import Iterable, Sequence

from kafka_format.entries import EntryInfo

Buffer = bytes | bytearray | memoryview

SLOT_BYTES: int
SLOT_INLINE_KEY: int
DONE: int
NEED_PYTHON: int
FULL: int

def set_hash_mask(mask: int, /) -> None: ...

class KeyMap:
    entries: int
    used_bytes: int
    capacity_bytes: int
    inline_key_limit: int
    table_bytes: int
    arena_bytes: int
    chunk_size: int
    bits_bytes: int
    start: int
    native_entries: tuple[int, int]
    extra: int
    def __init__(self, capacity_bytes: int, inline_key_limit: int) -> None: ...
    def clear(self) -> None: ...
    def begin(self, start: int, /) -> None: ...
    def put_keys(self, keys: Sequence[bytes], offsets: Sequence[int], /) -> list[int]: ...
    def get(self, key: bytes, default: int = -1, /) -> int: ...
    def fits(self, count: int, arena_bytes: int, extra_worst: int, last_offset: int, /) -> bool: ...
    def cover(self, last_offset: int, /) -> None: ...
    def mark_batch(self, base_offset: int, eligible: bool, /) -> None: ...
    def supersede(self, offsets: Iterable[int], /) -> None: ...
    def dead_mask(self, base: int, last: int, /) -> bytes | None: ...
    def map_entries(self, buf: Buffer, pos: int, stop: int, python_entries: int, python_worst: int,
                    /) -> tuple[int, int, int, int, int, int]: ...
    def filter_entries(self, buf: Buffer, pos: int, stop: int, latest_offset: int, keep_end: int,
                       out_position: int, now_ms: int, delete_retention_ms: int,
                       /) -> tuple[int, int, bytes, list[EntryInfo], int, tuple[int, int, int, int, int, int, int]]: ...
