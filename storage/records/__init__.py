"""Kafka's on-disk and on-wire record formats: classic messages (magic 0/1) and
record batches (magic 2), byte for byte.

Contract: this package is pure computation on buffers (no I/O, no asyncio). It
offers four things, each in its own module:

- `scan_entries` (entries.py): the shallow, per-entry check that recovery and
  index rebuilding run over segment files;
- `validate_and_assign` (validator.py): the append-time check and offset
  assignment, Kafka's LogValidator;
- `LogEntry`, `iter_entries`, `iter_records` (reader.py): the rich reader;
- `build_batch`, `build_classic` (builder.py): building message sets.

Layouts live in framing.py (what all entries share), classic.py (magic 0/1),
batch.py (magic 2) and varint.py; codecs in storage/codecs.py.
"""

from .builder import build_batch, build_classic
from .entries import EntryInfo, ScanResult, scan_entries
from .framing import LOG_OVERHEAD, Record
from .reader import LogEntry, iter_entries, iter_records
from .validator import ValidatedSet, validate_and_assign
from .varint import decode_varint, encode_varint

__all__ = [
    "LOG_OVERHEAD", "EntryInfo", "ScanResult", "scan_entries", "ValidatedSet",
    "validate_and_assign", "Record", "LogEntry", "iter_entries", "iter_records",
    "build_batch", "build_classic", "encode_varint", "decode_varint",
]
