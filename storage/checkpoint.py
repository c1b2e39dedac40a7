"""Kafka's per-data-directory offset checkpoint files (recovery point, log start, cleaner).

Contract:
- `OffsetCheckpointFile(path).write(offsets)` replaces the file through
  `fileutil.atomic_write`, so a crash leaves the old or the new checkpoint, never a mix.
  Entries are written sorted by (topic, partition) so equal maps give equal files.
- `read()` returns {} when the file is absent or empty (Kafka creates checkpoint files
  empty), and otherwise insists on the exact format: a wrong version, a missing or wrong
  entry count, a malformed or duplicated entry line, or bytes that are not UTF-8 raise
  KafkaStorageError naming the path and the line. A leftover `path + ".tmp"` from a
  crash is never read; the next write overwrites it.

On-disk layout (UTF-8 text, "\\n" line ends):

    0                        version
    2                        number of entry lines that follow
    my-topic 0 1234          topic, partition, offset, separated by whitespace
    my-topic 1 99
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping

from kafka_format.errors import KafkaStorageError

from .fileutil import atomic_write

CHECKPOINT_VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

_INT32_RANGE = range(-(2**31), 2**31)
_INT64_RANGE = range(-(2**63), 2**63)

# Strict decimal integers: Python's int() would also take " 7", "+7" and "1_000".
_INTEGER = re.compile(r"-?[0-9]+")
# Kafka splits an entry line on runs of whitespace and wants exactly three fields;
# like Java's split, trailing whitespace is tolerated and leading whitespace is not.
_ENTRY_LINE = re.compile(r"(\S+)\s+(\S+)\s+(\S+)\s*")


class OffsetCheckpointFile:
    """Reads and atomically rewrites one `topic partition offset` checkpoint file."""

    def __init__(self, path: str | os.PathLike):
        self._path = os.fspath(path)
        self._lock = threading.Lock()  # one write or read at a time per file

    @property
    def path(self) -> str:
        return self._path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        for (topic, partition), offset in sorted(offsets.items()):
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic {topic!r} cannot be written to checkpoint {self._path}")
            lines.append(f"{topic} {int(partition)} {int(offset)}")
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            atomic_write(self._path, data)

    def read(self) -> dict[tuple[str, int], int]:
        with self._lock:
            try:
                with open(self._path, "rb") as f:
                    raw = f.read()
            except FileNotFoundError:
                return {}
        if not raw:
            return {}
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise KafkaStorageError(f"checkpoint file {self._path} is not UTF-8: {e}") from None
        return _CheckpointParser(self._path, text).parse()


class _CheckpointParser:
    """Parses the text of one checkpoint file, reporting the first line that is wrong."""

    def __init__(self, path: str, text: str):
        self._path = path
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the final line end
        # Kafka reads lines with BufferedReader, which also accepts "\r\n".
        self._lines = [line[:-1] if line.endswith("\r") else line for line in lines]

    def parse(self) -> dict[tuple[str, int], int]:
        lines = self._lines
        version = self._integer(1, lines[0], _INT32_RANGE)
        if version != CHECKPOINT_VERSION:
            raise self._error(1, lines[0], f"unrecognised version {version}, expected {CHECKPOINT_VERSION}")
        if len(lines) < 2:
            raise self._error(1, lines[0], "the entry count line is missing")
        expected = self._integer(2, lines[1], _INT32_RANGE)
        if expected < 0:
            raise self._error(2, lines[1], "negative entry count")
        entries: dict[tuple[str, int], int] = {}
        for number, line in enumerate(lines[2:], start=3):
            match = _ENTRY_LINE.fullmatch(line)
            if match is None:
                raise self._error(number, line, "expected 'topic partition offset'")
            topic, partition_text, offset_text = match.groups()
            key = (topic, self._integer(number, partition_text, _INT32_RANGE, line))
            if key in entries:
                raise self._error(number, line, f"a second entry for {key[0]}-{key[1]}")
            entries[key] = self._integer(number, offset_text, _INT64_RANGE, line)
        if len(entries) != expected:
            raise KafkaStorageError(
                f"checkpoint file {self._path} declares {expected} entries on line 2 "
                f"but holds {len(entries)}")
        return entries

    def _integer(self, number: int, text: str, valid: range, line: str | None = None) -> int:
        if _INTEGER.fullmatch(text) is None or int(text) not in valid:
            raise self._error(number, text if line is None else line, f"{text!r} is not a valid integer")
        return int(text)

    def _error(self, number: int, line: str, why: str) -> KafkaStorageError:
        return KafkaStorageError(f"malformed line {number} in checkpoint file {self._path}: {line!r} ({why})")
