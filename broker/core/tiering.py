"""Tiered storage for both protocols (Kafka's RemoteLogManager, KIP-405): one
`Tiering` per broker when remote.log.storage.system.enable is true.

Contract:
- `Tiering.open(config, data_dir, manager, registry)` (blocking) opens the remote
  log metadata (`<data dir>/__remote_log_metadata-0`, storage/remote/metadata.py,
  which the LogManager's scan leaves alone: `RESERVED_DIRS`) and builds the remote
  store client (storage/remote/store.py). Building the client does not reach the
  store, so the broker starts when the store is down.
- `run_pass()` (blocking, on an executor thread every
  remote.log.manager.task.interval.ms): for every open log of a topic with
  remote.storage.enable, its RemotePartition (storage/remote/copier.py, made on
  first use) copies rolled segments, applies local retention (in place of the
  log's own retention pass: `retention_elsewhere`) and total retention to the
  remote segments. A failing store leaves the local log as it is; the partition's
  back-off decides when it is tried again. A partition whose log is gone is
  forgotten.
- Reads (blocking, in the executor): `read(log, offset, max_bytes,
  min_one_message)` answers the records of the remote segment holding `offset`
  (a fetch below the local log start), up to that segment's end, through one
  RemoteLogReader (chunked concurrent ranged reads, a bounded cache of index and
  data chunks), then has it read what follows ahead into the cache on its pool
  (storage/remote/reader.py); `offset_for_timestamp` searches the remote
  segments. A missing or corrupt object raises RemoteStorageError
  (KAFKA_STORAGE_ERROR).
- `delete_topic(topic, topic_id, partitions)` (blocking, after a topic deletion)
  deletes the topic's remote segments and records the partitions' deletion.
- `log_start_offset(log)`: the partition's log start including remote data
  (ListOffsets EARLIEST, fetch answers); the local one is the log's own.
- `stats()` / `totals()`: per-partition TierStats and their sums (copy lag,
  local and remote sizes, failures) for metrics, /health/ready and
  DescribeLogDirs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from kafka_format.reader import iter_entries
from storage.log import Log
from storage.manager import LogManager
from storage.remote.config import RemoteLogConfig
from storage.remote.copier import RemotePartition, TierStats
from storage.remote.metadata import (
    METADATA_TOPIC,
    PartitionDeleteState,
    RemoteLogMetadataStore,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicIdPartition,
)
from storage.remote.reader import RemoteLogReader
from storage.remote.store import IndexType, RemoteStorageManager, open_remote_storage
from storage.txn_index import AbortedTxn, decode_entries

log = structlog.get_logger("strata.tiering")

METADATA_DIR = f"{METADATA_TOPIC}-0"
RESERVED_DIRS = frozenset({METADATA_DIR})


@dataclass(frozen=True)
class TierTotals:
    """The sums of every tiered partition's TierStats."""

    partitions: int = 0
    copy_lag_segments: int = 0
    copy_lag_bytes: int = 0
    remote_segments: int = 0
    remote_size_bytes: int = 0
    local_size_bytes: int = 0
    failing_partitions: int = 0
    last_error: str | None = None


class Tiering:
    """The broker's tiered storage (the module's contract)."""

    def __init__(self, config: RemoteLogConfig, manager: LogManager, topic_id: Callable[[str], str | None],
                 rsm: RemoteStorageManager, metadata: RemoteLogMetadataStore):
        self.config = config
        self.manager = manager
        self.topic_id = topic_id
        self.rsm = rsm
        self.metadata = metadata
        self.reader = RemoteLogReader(rsm, metadata, cache_bytes=config.cache_bytes,
                                      chunk_bytes=config.fetch_chunk_bytes,
                                      readahead_bytes=config.fetch_readahead_bytes, threads=config.fetch_threads)
        self._partitions: dict[tuple[str, int], RemotePartition] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, config: RemoteLogConfig, data_dir: str, manager: LogManager,
             topic_id: Callable[[str], str | None]) -> Tiering:
        import os

        metadata = RemoteLogMetadataStore(os.path.join(data_dir, METADATA_DIR))
        try:
            rsm = open_remote_storage(config)
        except BaseException:
            metadata.close()
            raise
        log.info("tiered_storage_opened", store=str(config.location), interval_ms=config.task_interval_ms)
        return cls(config, manager, topic_id, rsm, metadata)

    # ---- partitions ---------------------------------------------------------------------

    @staticmethod
    def is_tiered(partition_log: Log) -> bool:
        return bool(partition_log.config.remote_storage_enable)

    def retention_elsewhere(self, partition_log: Log) -> bool:
        """Whether the log's retention is this object's (a tiered topic's local retention)."""
        return self.is_tiered(partition_log)

    def _tp(self, partition_log: Log) -> TopicIdPartition | None:
        topic_id = self.topic_id(partition_log.topic)
        if not topic_id:
            return None
        return TopicIdPartition(partition_log.topic, uuid.UUID(topic_id), partition_log.partition)

    def partition(self, partition_log: Log) -> RemotePartition | None:
        """The log's RemotePartition (made on first use), or None when the topic is not
        tiered and has no remote data."""
        key = (partition_log.topic, partition_log.partition)
        with self._lock:
            found = self._partitions.get(key)
            if found is not None and found.log is partition_log:
                return found
            tp = self._tp(partition_log)
            if tp is None:
                return None
            if not self.is_tiered(partition_log) and not self.metadata.segments(tp):
                return None
            made = RemotePartition(partition_log, tp, self.rsm, self.metadata, config=self.config)
            self._partitions[key] = made
            return made

    def known(self, partition_log: Log) -> RemotePartition | None:
        """The log's RemotePartition if one was made (no store or metadata work)."""
        found = self._partitions.get((partition_log.topic, partition_log.partition))
        return found if found is not None and found.log is partition_log else None

    # ---- the periodic pass ----------------------------------------------------------------

    def run_pass(self) -> None:
        logs = [partition_log for partition_log in self.manager.logs() if self.is_tiered(partition_log)]
        live = {(partition_log.topic, partition_log.partition) for partition_log in self.manager.logs()}
        with self._lock:
            for key in [key for key in self._partitions if key not in live]:
                del self._partitions[key]
        for partition_log in logs:
            remote = self.partition(partition_log)
            if remote is None:
                continue
            try:
                remote.copy_pass()
                remote.local_retention_pass()
                remote.remote_retention_pass()
            except Exception:  # one failing partition does not stop the pass
                log.exception("tiering_pass_failed", log=partition_log.name)

    # ---- topic deletion ----------------------------------------------------------------------

    def delete_topic(self, topic: str, topic_id: str, partitions: int) -> None:
        """Delete a deleted topic's remote data (blocking; Kafka's partition deletion
        through RemotePartitionDeleteMetadata): per partition with remote segments,
        DELETE_PARTITION_STARTED, each segment's manifest, DELETE_SEGMENT_STARTED,
        its objects, DELETE_SEGMENT_FINISHED, then DELETE_PARTITION_FINISHED. A
        failure is logged and leaves the partition STARTED in the metadata."""
        if not topic_id:
            return
        with self._lock:
            for partition in range(partitions):
                self._partitions.pop((topic, partition), None)
        for partition in range(partitions):
            tp = TopicIdPartition(topic, uuid.UUID(topic_id), partition)
            segments = [m for m in self.metadata.segments(tp) if m.state != SegmentState.DELETE_SEGMENT_FINISHED]
            if not segments:
                continue
            try:
                self.metadata.put_partition_delete(RemotePartitionDeleteMetadata(
                    tp, PartitionDeleteState.DELETE_PARTITION_STARTED, int(time.time() * 1000), 0))
                for metadata in segments:
                    if metadata.state == SegmentState.COPY_SEGMENT_FINISHED:
                        self.rsm.delete_manifest(metadata)
                    if metadata.state != SegmentState.DELETE_SEGMENT_STARTED:
                        metadata = self.metadata.update_segment(RemoteLogSegmentMetadataUpdate(
                            metadata.segment_id, int(time.time() * 1000), SegmentState.DELETE_SEGMENT_STARTED, 0))
                    self.rsm.delete_log_segment_data(metadata)
                    self.metadata.update_segment(RemoteLogSegmentMetadataUpdate(
                        metadata.segment_id, int(time.time() * 1000), SegmentState.DELETE_SEGMENT_FINISHED, 0))
                self.metadata.put_partition_delete(RemotePartitionDeleteMetadata(
                    tp, PartitionDeleteState.DELETE_PARTITION_FINISHED, int(time.time() * 1000), 0))
                log.info("remote_partition_deleted", partition=str(tp), segments=len(segments))
            except Exception:
                log.exception("remote_partition_delete_failed", partition=str(tp))

    # ---- reads ------------------------------------------------------------------------------

    def serves_remotely(self, partition_log: Log, offset: int) -> bool:
        """Whether a read at `offset` is one for the remote store: below the local log
        start of a partition with remote data, at or above its remote start."""
        if offset >= partition_log.log_start_offset:
            return False
        remote = self.known(partition_log)
        if remote is None and self.is_tiered(partition_log):
            remote = self.partition(partition_log)
        if remote is None:
            return False
        start = self.metadata.remote_log_start_offset(remote.tp)
        return start is not None and offset >= start

    def read(self, partition_log: Log, offset: int, max_bytes: int, min_one_message: bool = True) -> bytes:
        """The records from `offset` in its remote segment (blocking). Raises
        OffsetOutOfRangeError (no remote segment holds it) or RemoteStorageError."""
        remote = self.partition(partition_log)
        if remote is None:
            from kafka_format.errors import OffsetOutOfRangeError

            raise OffsetOutOfRangeError(f"offset {offset} of {partition_log.name} is below its log start "
                                        f"{partition_log.log_start_offset}")
        data, metadata, end = self.reader.read_with_end(remote.tp, offset, max_bytes, min_one_message)
        if data:  # the next sequential fetch's chunks, read ahead on the reader's pool
            self.reader.read_ahead(remote.tp, metadata, end)
        return data

    def read_committed(self, partition_log: Log, offset: int, max_bytes: int,
                       min_one_message: bool) -> tuple[bytes, tuple[tuple[int, int], ...]]:
        """`read`, and the aborted transactions overlapping what it returned, as
        (producer id, first offset) (Kafka's collectAbortedTransactions over remote
        segments): from the remote segments' transaction indexes, from the segment
        read on, then the local segments', until an entry shows that no later one
        can overlap. Blocking."""
        data = self.read(partition_log, offset, max_bytes, min_one_message)
        if not data:
            return data, ()
        last = -1
        for entry in iter_entries(data):
            last = entry.last_offset
        upper = last + 1
        remote = self.partition(partition_log)
        assert remote is not None
        found: list[AbortedTxn] = []
        complete = False
        for metadata in self.metadata.readable_segments(remote.tp):
            if metadata.end_offset < offset:
                continue
            key = (metadata.segment_id.id, "txnindex")
            entries = self.reader.cache.get(key)
            if entries is None:
                raw = self.rsm.fetch_index(metadata, IndexType.TRANSACTION)
                entries = decode_entries(raw, str(metadata.segment_id))
                self.reader.cache.put(key, entries, len(raw) + 64)
            for txn in entries:
                if txn.last_offset >= offset and txn.first_offset < upper:
                    found.append(txn)
                if txn.last_stable_offset >= upper:
                    complete = True
                    break
            if complete:
                break
        if not complete:
            found += partition_log.aborted_transactions(offset, upper)
        return data, tuple((txn.producer_id, txn.first_offset) for txn in found)

    def offset_for_timestamp(self, partition_log: Log, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first remote record at or after `timestamp`, or None."""
        remote = self.partition(partition_log)
        if remote is None:
            return None
        return self.reader.offset_for_timestamp(remote.tp, timestamp)

    def log_start_offset(self, partition_log: Log) -> int:
        """The partition's log start including remote data."""
        remote = self.known(partition_log)
        if remote is None:
            return partition_log.log_start_offset
        return remote.log_start_offset

    def log_start_offset_of(self, partition_log: Log) -> int:
        """The partition's log start including remote data, its RemotePartition made
        when needed (blocking: the first use may read the metadata)."""
        remote = self.partition(partition_log)
        return partition_log.log_start_offset if remote is None else remote.log_start_offset

    def highest_copied_offset(self, partition_log: Log) -> int:
        """The last offset in the remote store, -1 when none (ListOffsets LATEST_TIERED)."""
        remote = self.partition(partition_log)
        return -1 if remote is None else self.metadata.highest_copied_offset(remote.tp)

    # ---- state -------------------------------------------------------------------------------

    def stats(self) -> dict[tuple[str, int], TierStats]:
        with self._lock:
            partitions = dict(self._partitions)
        out = {}
        for key, remote in sorted(partitions.items()):
            try:
                out[key] = remote.stats()
            except Exception:  # a log closed under the call
                log.debug("tier_stats_failed", partition=f"{key[0]}-{key[1]}", exc_info=True)
        return out

    def totals(self) -> TierTotals:
        stats = self.stats()
        errors = [s.last_error for s in stats.values() if s.last_error]
        return TierTotals(
            partitions=len(stats), copy_lag_segments=sum(s.copy_lag_segments for s in stats.values()),
            copy_lag_bytes=sum(s.copy_lag_bytes for s in stats.values()),
            remote_segments=sum(s.remote_segments for s in stats.values()),
            remote_size_bytes=sum(s.remote_size_bytes for s in stats.values()),
            local_size_bytes=sum(s.local_size_bytes for s in stats.values()),
            failing_partitions=sum(1 for s in stats.values() if s.failures), last_error=errors[0] if errors else None)

    def close(self) -> None:
        self.reader.close()
        try:
            self.rsm.close()
        finally:
            self.metadata.close()


__all__ = ["METADATA_DIR", "RESERVED_DIRS", "TierTotals", "Tiering"]
