"""Strata's storage engine: partition logs laid out byte for byte as Kafka's.

    <data-dir>/<topic>-<partition>/%020d.log | .index | .timeindex | .txnindex | .snapshot
    <data-dir>/recovery-point-offset-checkpoint, log-start-offset-checkpoint,
               cleaner-offset-checkpoint

Small classes with one job each, as in Kafka's storage module: `OffsetIndex`
and `TimeIndex` (sparse mmap indexes), `FileRecords` (one .log file),
`LogSegment` (the three together), `LogSegments` (the copy-on-write list),
`LogLoader` (clean-up and crash recovery), `Log` (one partition: its lock and
every change to its segments), and `LogManager` (the data directory).
Transactions: `txn_markers` (COMMIT/ABORT control batches), `txn_index` (a
segment's `.txnindex`: its aborted transactions) and `producer_state` (open
transactions, the last stable offset). Retention: `retention` (the policy: which segments go, and why) and
`PendingDeletions` (`.deleted` files awaiting file.delete.delay.ms).
Compaction, as Kafka's log cleaner:
`OffsetMap` (exact key -> latest offset), `Cleaner` (one log, one round) with
`cleaner_records` (what stays of an entry), `segment_swap` (the crash-safe swap),
`LogCleanerManager` (which log, checkpoints) and `LogCleaner` (the thread's
work). `records/` holds the entry formats and `codecs.py` Kafka's compression
framings. No network code lives here.
"""

from .config import LogConfig, broker_log_defaults
from .log import AppendResult, Log
from .manager import LogManager

__all__ = ["AppendResult", "Log", "LogConfig", "LogManager", "broker_log_defaults"]
