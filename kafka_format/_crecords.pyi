# The interface of kafka_format/_crecords.c, which kafka_format/_pyrecords.py
# twins in Python; kafka_format/accel.py binds one of the two. The walks take
# any buffer (bytes, bytearray, memoryview, mmap); positions are byte indexes.
from collections.abc import Callable, Sequence

Buffer = bytes | bytearray | memoryview

CLMUL: int
CRC_PATH: int
CRC32C_IN_C: int

def crc32(data: Buffer, path: int = -1, /) -> int: ...
def crc32c(data: Buffer, path: int = -1, /) -> int: ...
def set_crc_path(path: int, /) -> int: ...
def scan_run(buf: Buffer, pos: int, end: int, previous_last: int, check_crc: bool, check_lengths: bool,
             rows: bytearray, crc32: Callable[[Buffer], int], crc32c: Callable[[Buffer], int],
             /) -> tuple[int, int]: ...
def assign_plain_run(buf: Buffer, pos: int, end: int, next_offset: int, max_bytes: int, compact: bool,
                     log_append: bool, now_ms: int, shift: int, max_timestamp: int, offset_of_max: int, rows: bytearray,
                     crc32: Callable[[Buffer], int], crc32c: Callable[[Buffer], int],
                     /) -> tuple[int, int, int, int, int, bool]: ...
def summarize_records(buf: Buffer, pos: int, end: int, count: int, /) -> tuple[int | None, bool, bool] | None: ...
def find_timestamp(buf: Buffer, pos: int, end: int, count: int, min_timestamp_delta: int,
                   min_offset_delta: int, /) -> tuple[int, int, int]: ...
def index_entries(entries: bytearray | Sequence[Sequence[int]], interval: int, since: int, best_timestamp: int,
                  best_offset: int, base_offset: int, base_position: int, newest: int,
                  /) -> tuple[bytes, bytes, int, int, int]: ...
