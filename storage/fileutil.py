"""File helpers shared by the storage engine: crash-safe replacement and segment names.

Contract:
- `atomic_write(path, data)` is the one way the project replaces a file. After it
  returns, `path` holds exactly `data` and survives a crash. If it raises, no `.tmp`
  file it created is left behind and `path` holds its old content (or is still
  absent), except when only the final directory fsync failed: then the new content
  is in place but may not survive a crash. A `.tmp` left by an earlier crash is
  simply overwritten.
- `fsync_dir(path)` makes renames, creations and deletions inside a directory durable.
- `reserve_blocks(fd, offset, length)` asks the filesystem for the blocks of a
  range without changing the file's size (fallocate, FALLOC_FL_KEEP_SIZE); it
  returns False, changing nothing, where the system or filesystem cannot.
- `segment_file_name` / `parse_segment_file_name` convert between a segment's base
  offset and Kafka's file names: the offset zero-padded to 20 digits, then a suffix
  chain such as `.log`, `.index.deleted`, `.log.cleaned` or `.timeindex.swap`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re

TMP_SUFFIX = ".tmp"

# Kinds of file a segment owns, and the temporary states any of them can be in
# (LogCleaner writes `.cleaned`, renames it to `.swap`; retention renames to `.deleted`).
SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
TEMPORARY_SUFFIXES = (".cleaned", ".swap", ".deleted")

_BASE_OFFSET_DIGITS = 20
_MAX_BASE_OFFSET = 10**_BASE_OFFSET_DIGITS - 1

_SEGMENT_SUFFIX_PATTERN = "|".join(re.escape(s) for s in SEGMENT_FILE_SUFFIXES)
_TEMPORARY_SUFFIX_PATTERN = "|".join(re.escape(s) for s in TEMPORARY_SUFFIXES)
_SEGMENT_FILE_NAME = re.compile(
    rf"(?P<base>[0-9]{{{_BASE_OFFSET_DIGITS}}})"
    rf"(?P<suffix>(?:{_SEGMENT_SUFFIX_PATTERN})(?:{_TEMPORARY_SUFFIX_PATTERN})?)"
)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so that entries added, renamed or removed in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content.

    Steps: write `path + ".tmp"`, flush and fsync it, rename it over `path`, fsync the
    directory (the rename is only durable once the directory is).
    """
    target = os.fspath(path)
    tmp = target + TMP_SUFFIX
    created_tmp = False
    try:
        # "wb" truncates a .tmp left by an earlier crash instead of failing on it.
        with open(tmp, "wb") as f:
            created_tmp = True
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        created_tmp = False
    except BaseException:
        if created_tmp:
            # Only remove what this call wrote: never a directory or file someone else put there.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(target)))


FALLOC_FL_KEEP_SIZE = 0x01  # linux/falloc.h


def _libc_fallocate():
    """glibc's or musl's fallocate(2) wrapper, or None (not Linux, no such symbol)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = getattr(libc, "fallocate64", None) or libc.fallocate
    except (OSError, AttributeError):
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fallocate.restype = ctypes.c_int
    return fallocate


_fallocate = _libc_fallocate()


def reserve_blocks(fd: int, offset: int, length: int) -> bool:
    """Allocate disk blocks for bytes offset..offset+length of `fd` without
    changing its size, so that later writes there skip the filesystem's
    per-page block reservation (ext4's delayed allocation, a large share of
    the cost of a big append: bench/storage.py). The file reads as before:
    blocks past the end are invisible, and an ftruncate to the same size gives
    them back. False where fallocate is missing or the filesystem refuses it
    (EOPNOTSUPP), or the disk is full: the write itself then decides."""
    if _fallocate is None or length <= 0:
        return False
    return _fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0


def segment_file_name(base_offset: int, suffix: str) -> str:
    """`segment_file_name(42, ".log")` -> `"00000000000000000042.log"`."""
    if not 0 <= base_offset <= _MAX_BASE_OFFSET:
        raise ValueError(f"base offset {base_offset} does not fit a 20-digit segment name")
    if not suffix.startswith("."):
        raise ValueError(f"segment file suffix must start with '.', got {suffix!r}")
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """Split a segment file name into (base offset, full suffix chain), or None if it is not one.

    `"00000000000000000042.index.deleted"` -> `(42, ".index.deleted")`. Takes a bare
    file name (as os.listdir gives), not a path.
    """
    match = _SEGMENT_FILE_NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group("base")), match.group("suffix")
