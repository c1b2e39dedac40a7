"""The bottom layer: Kafka's on-disk and on-wire record formats (classic
messages, magic 0/1, and record batches, magic 2, byte for byte), their
compression codecs, Kafka's topic-name rule and the errors every layer shares.

Contract: this package is pure computation on buffers (no I/O, no asyncio) and
imports nothing of Strata's; storage/, protocol/, broker/, client/ and
pipeline/ all stand on it (the import-linter contracts in pyproject.toml). It
offers:

- `scan_entries` (entries.py): the shallow, per-entry check that recovery and
  index rebuilding run over segment files (the append-time check built on the
  same layouts, Kafka's LogValidator, is storage/validator.py, since it applies
  a topic's configuration);
- `LogEntry`, `iter_entries`, `iter_records` (reader.py): the rich reader;
- `build_batch`, `build_classic` (builder.py): building message sets.

Layouts live in framing.py (what all entries share), classic.py (magic 0/1),
batch.py (magic 2) and varint.py; codecs in codecs.py; errors.py holds the shared
errors, topic_names.py the topic-name rule; accel.py binds the C accelerators
(_crecords.c) or their pure-Python twins (_pyrecords.py) once, as native.py's
switches say.
"""

from .builder import build_batch, build_classic
from .entries import EntryInfo, ScanResult, scan_entries
from .framing import LOG_OVERHEAD, Record
from .reader import LogEntry, iter_entries, iter_records
from .varint import decode_varint, encode_varint

__all__ = [
    "LOG_OVERHEAD", "EntryInfo", "ScanResult", "scan_entries", "Record", "LogEntry", "iter_entries", "iter_records",
    "build_batch", "build_classic", "encode_varint", "decode_varint",
]
