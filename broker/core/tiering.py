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
  forgotten. First it retries the pending partition deletions (below) whose
  back-off has passed; the first pass after a start marks for deletion the
  remote data of topic ids no topic has any more (a topic deleted just before a
  crash: `mark_deleted_topics`).
- Reads (blocking, in the executor): `read(log, offset, max_bytes,
  min_one_message)` answers the records of the remote segment holding `offset`
  (a fetch below the local log start), up to that segment's end, through one
  RemoteLogReader (chunked concurrent ranged reads, a bounded cache of index and
  data chunks), then has it read what follows ahead into the cache on its pool
  (storage/remote/reader.py); `offset_for_timestamp` searches the remote
  segments. A missing or corrupt object raises RemoteStorageError
  (KAFKA_STORAGE_ERROR).
- `delete_topic(topic, topic_id, partitions)` (blocking, after a topic deletion
  or remote.log.delete.on.disable) stops the partitions' passes (waiting for a
  running copy: no copy uploads alongside or after the deletion, so none leaves
  an object behind), records DELETE_PARTITION_MARKED in the metadata, then
  deletes the remote segments (DELETE_PARTITION_STARTED ... FINISHED). A failed
  deletion stays pending in the metadata (durable: a restart finds it) and is
  retried by `run_pass` with remote.log.manager.task.retry.backoff.ms doubling up
  to backoff.max.ms. A partition with a pending deletion is neither copied nor
  read remotely.
- `log_start_offset(log)`: the partition's log start including remote data
  (ListOffsets EARLIEST, fetch answers); the local one is the log's own.
- `delete_records(log, offset)` (blocking): DeleteRecords below a tiered
  partition's local start moves its log start into the remote data (Kafka's
  logStartOffset below localLogStartOffset), durable in
  `<data dir>/remote-log-start-offsets.json` (written before it takes effect);
  reads below it answer OFFSET_OUT_OF_RANGE and the remote retention pass deletes
  the remote segments wholly below it.
- `stats()` / `totals()`: per-partition TierStats and their sums (copy lag,
  local and remote sizes, failures) for metrics and /health/ready;
  `remote_log_sizes()` and `store_url` for DescribeLogDirs.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from broker.state.json_files import damaged, read_document, write_document
from kafka_format.reader import iter_entries
from storage.log import Log
from storage.manager import LogManager
from storage.remote.config import RemoteLogConfig
from storage.remote.copier import Backoff, RemotePartition, TierStats
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
# The log starts DeleteRecords moved below tiered partitions' local starts: Kafka keeps
# them in log-start-offset-checkpoint, whose entries here are the local starts.
LOG_STARTS_FILE = "remote-log-start-offsets.json"
LOG_STARTS_VERSION = 1
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
                 rsm: RemoteStorageManager, metadata: RemoteLogMetadataStore, *, log_starts_path: str | None = None):
        self.config = config
        # The log starts DeleteRecords moved into remote data, durable in `log_starts_path`.
        self.log_starts_path = log_starts_path or os.path.join(manager.data_dir, LOG_STARTS_FILE)
        self._log_starts = _read_log_starts(self.log_starts_path)
        self._log_starts_lock = threading.Lock()
        self.manager = manager
        self.topic_id = topic_id
        self.rsm = rsm
        self.metadata = metadata
        self.reader = RemoteLogReader(rsm, metadata, cache_bytes=config.cache_bytes,
                                      chunk_bytes=config.fetch_chunk_bytes,
                                      readahead_bytes=config.fetch_readahead_bytes, threads=config.fetch_threads)
        self._partitions: dict[tuple[str, int], RemotePartition] = {}
        self._lock = threading.Lock()
        # Partitions being stopped by delete_topic: `partition` makes none for them.
        self._closing: set[TopicIdPartition] = set()
        self._deleting = threading.Lock()  # one partition deletion at a time
        # Failed partition deletions: (consecutive failures, monotonic ms of the next try).
        self._delete_failures: dict[TopicIdPartition, tuple[int, int]] = {}
        self._orphans_checked = False  # mark_deleted_topics ran (the first pass)
        self._delete_backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms, config.retry_jitter)

    @classmethod
    def open(cls, config: RemoteLogConfig, data_dir: str, manager: LogManager,
             topic_id: Callable[[str], str | None]) -> Tiering:
        metadata = RemoteLogMetadataStore(os.path.join(data_dir, METADATA_DIR))
        try:
            rsm = open_remote_storage(config)
        except BaseException:
            metadata.close()
            raise
        log.info("tiered_storage_opened", store=str(config.location), interval_ms=config.task_interval_ms)
        try:
            return cls(config, manager, topic_id, rsm, metadata,
                       log_starts_path=os.path.join(data_dir, LOG_STARTS_FILE))
        except BaseException:
            rsm.close()
            metadata.close()
            raise

    # ---- partitions ---------------------------------------------------------------------

    @staticmethod
    def is_tiered(partition_log: Log) -> bool:
        """Whether the log's retention is this object's (a tiered topic's local
        retention): the LogManager's `retention_elsewhere`."""
        return bool(partition_log.config.remote_storage_enable)

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
            if tp is None or tp in self._closing or self._delete_pending(tp):
                return None
            if not self.is_tiered(partition_log) and not self.metadata.segments(tp):
                return None
            made = RemotePartition(partition_log, tp, self.rsm, self.metadata, config=self.config)
            made.set_log_start_floor(self._log_starts.get(tp, 0))
            self._partitions[key] = made
            return made

    def _delete_pending(self, tp: TopicIdPartition) -> bool:
        event = self.metadata.partition_delete(tp)
        return event is not None and event.state != PartitionDeleteState.DELETE_PARTITION_FINISHED

    def known(self, partition_log: Log) -> RemotePartition | None:
        """The log's RemotePartition if one was made (no store or metadata work)."""
        found = self._partitions.get((partition_log.topic, partition_log.partition))
        return found if found is not None and found.log is partition_log else None

    # ---- the periodic pass ----------------------------------------------------------------

    def run_pass(self) -> None:
        if not self._orphans_checked:
            self.mark_deleted_topics()
            self._orphans_checked = True
        self.retry_partition_deletes()
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
        """Delete a deleted topic's remote data, or a topic's whose remote.storage.enable
        was turned off (blocking; Kafka's partition deletion through
        RemotePartitionDeleteMetadata). Each partition's RemotePartition is stopped
        first (a running pass ends, no later one starts), so no copy runs alongside
        the deletion. Per partition with remote segments: DELETE_PARTITION_MARKED is
        recorded, then `_delete_partition`. A failure is logged; the partition stays
        pending in the metadata and `run_pass` retries it after the back-off, also
        after a restart."""
        if not topic_id:
            return
        tps = [TopicIdPartition(topic, uuid.UUID(topic_id), partition) for partition in range(partitions)]
        with self._lock:
            self._closing.update(tps)
            stopped = [self._partitions.pop((topic, partition), None) for partition in range(partitions)]
        try:
            for remote in stopped:
                if remote is not None:
                    remote.stop()
            for tp in tps:
                if not any(m.state != SegmentState.DELETE_SEGMENT_FINISHED for m in self.metadata.segments(tp)):
                    continue
                try:
                    self.metadata.put_partition_delete(RemotePartitionDeleteMetadata(
                        tp, PartitionDeleteState.DELETE_PARTITION_MARKED, int(time.time() * 1000), 0))
                except Exception:
                    log.exception("remote_partition_delete_failed", partition=str(tp))
                    continue
                self._try_delete_partition(tp)
        finally:
            with self._lock:
                self._closing.difference_update(tps)
        self._forget_log_starts(tps)

    def _try_delete_partition(self, tp: TopicIdPartition) -> bool:
        """`_delete_partition`, a failure logged and counted for the back-off."""
        try:
            self._delete_partition(tp)
        except Exception as e:
            failures = self._delete_failures.get(tp, (0, 0))[0] + 1
            delay = self._delete_backoff.delay_ms(failures)
            self._delete_failures[tp] = (failures, int(time.monotonic() * 1000) + delay)
            log.warning("remote_partition_delete_failed", partition=str(tp), error=str(e), failures=failures,
                        retry_in_ms=delay)
            return False
        self._delete_failures.pop(tp, None)
        return True

    def _delete_partition(self, tp: TopicIdPartition) -> None:
        """DELETE_PARTITION_STARTED, then per segment not yet deleted: its manifest,
        DELETE_SEGMENT_STARTED, its objects, DELETE_SEGMENT_FINISHED; then
        DELETE_PARTITION_FINISHED. One deletion at a time (a retry never runs
        alongside the first try). Raises what the store or the metadata raise."""
        with self._deleting:
            if not self._delete_pending(tp):
                return  # finished by an earlier try
            segments = [m for m in self.metadata.segments(tp) if m.state != SegmentState.DELETE_SEGMENT_FINISHED]
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

    def mark_deleted_topics(self) -> None:
        """Record DELETE_PARTITION_MARKED for every partition in the metadata whose
        topic id is no topic's any more and whose remote data is not deleted nor
        marked: a topic deleted just before a crash, before `delete_topic` recorded
        anything. `retry_partition_deletes` then deletes them."""
        for tp in self.metadata.partitions():
            current = self.topic_id(tp.topic)
            if current and uuid.UUID(current) == tp.topic_id:
                continue
            with self._lock:
                if tp in self._closing:
                    continue  # delete_topic is on it
            if self._delete_pending(tp):
                continue
            if not any(m.state != SegmentState.DELETE_SEGMENT_FINISHED for m in self.metadata.segments(tp)):
                continue
            log.info("remote_partition_of_deleted_topic", partition=str(tp))
            self.metadata.put_partition_delete(RemotePartitionDeleteMetadata(
                tp, PartitionDeleteState.DELETE_PARTITION_MARKED, int(time.time() * 1000), 0))

    def retry_partition_deletes(self) -> None:
        """Retry each pending partition deletion whose back-off has passed."""
        now = int(time.monotonic() * 1000)
        for tp in self.metadata.pending_partition_deletes():
            with self._lock:
                if tp in self._closing:
                    continue  # delete_topic is on it
            if self._delete_failures.get(tp, (0, 0))[1] > now:
                continue
            self._try_delete_partition(tp)

    def pending_partition_deletes(self) -> int:
        return len(self.metadata.pending_partition_deletes())

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
        return start is not None and offset >= max(start, remote.log_start_offset)

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
        """(timestamp, offset) of the first remote record at or after `timestamp` from
        the log start (a DeleteRecords start inside the remote data included), or None."""
        remote = self.partition(partition_log)
        if remote is None:
            return None
        return self.reader.offset_for_timestamp(remote.tp, timestamp, remote.log_start_offset)

    def log_start_offset(self, partition_log: Log) -> int:
        """The partition's log start including remote data (no store work: the
        RemotePartition of a tiered log is made here when no pass has made it yet,
        so a restarted broker answers the same start before its first pass)."""
        remote = self.known(partition_log)
        if remote is None and self.is_tiered(partition_log):
            remote = self.partition(partition_log)
        if remote is None:
            return partition_log.log_start_offset
        return remote.log_start_offset

    def log_start_offset_of(self, partition_log: Log) -> int:
        """The partition's log start including remote data, its RemotePartition made
        when needed (blocking: the first use may read the metadata)."""
        remote = self.partition(partition_log)
        return partition_log.log_start_offset if remote is None else remote.log_start_offset

    def delete_records(self, partition_log: Log, offset: int) -> int:
        """DeleteRecords of a tiered partition at `offset` below its local start
        (blocking): the new log start is written to `log_starts_path` first (a failed
        write raises KafkaStorageError and changes nothing), then the partition's
        RemotePartition takes it as its floor (reads below it answer
        OFFSET_OUT_OF_RANGE; its remote retention pass deletes the remote segments
        wholly below it). Returns the log start."""
        remote = self.partition(partition_log)
        if remote is None:
            return partition_log.log_start_offset
        with self._log_starts_lock:
            if offset > remote.log_start_offset:
                starts = dict(self._log_starts)
                starts[remote.tp] = offset
                _write_log_starts(self.log_starts_path, starts)
                self._log_starts = starts
                remote.set_log_start_floor(offset)
        return remote.log_start_offset

    def _forget_log_starts(self, tps: list[TopicIdPartition]) -> None:
        """Drop deleted partitions from `log_starts_path` (a failed write is logged:
        a deleted topic id's entry is never used)."""
        with self._log_starts_lock:
            if not any(tp in self._log_starts for tp in tps):
                return
            starts = {tp: offset for tp, offset in self._log_starts.items() if tp not in tps}
            try:
                _write_log_starts(self.log_starts_path, starts)
            except Exception as e:
                log.warning("remote_log_starts_not_written", path=self.log_starts_path, error=str(e))
                return
            self._log_starts = starts

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

    def remote_log_sizes(self) -> list[tuple[str, int, int]]:
        """(topic, partition, bytes in the store) of every partition log that is
        tiered or has remote data: the sizes of its COPY_SEGMENT_FINISHED segments
        (Kafka's RemoteLogSizeBytes). From memory."""
        out = []
        for partition_log in self.manager.logs():
            tp = self._tp(partition_log)
            if tp is None or self._delete_pending(tp):
                continue
            readable = self.metadata.readable_segments(tp)
            if readable or self.is_tiered(partition_log):
                out.append((tp.topic, tp.partition, sum(m.segment_size_in_bytes for m in readable)))
        return out

    @property
    def store_url(self) -> str:
        """The remote store's URL (rsm.config.url's bucket and prefix or directory:
        never credentials)."""
        return str(self.config.location)

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


def _read_log_starts(path: str) -> dict[TopicIdPartition, int]:
    """The log starts in `path` ({"version": 1, "partitions": [{"topic", "topic_id",
    "partition", "log_start_offset"}]}); none when it does not exist. A damaged file
    raises InvalidConfigError naming it."""
    what = "the remote log starts"
    remedy = "restore it from a backup, or delete it to start those partitions at their remote data"
    doc = read_document(path, LOG_STARTS_VERSION, what, remedy)
    if doc is None:
        return {}
    try:
        return {TopicIdPartition(str(entry["topic"]), uuid.UUID(str(entry["topic_id"])), int(entry["partition"])):
                int(entry["log_start_offset"]) for entry in doc["partitions"]}
    except (KeyError, TypeError, ValueError) as e:
        raise damaged(path, what, e, remedy) from None


def _write_log_starts(path: str, starts: dict[TopicIdPartition, int]) -> None:
    write_document(path, "the remote log starts", {"version": LOG_STARTS_VERSION, "partitions": [
        {"topic": tp.topic, "topic_id": str(tp.topic_id), "partition": tp.partition, "log_start_offset": offset}
        for tp, offset in sorted(starts.items(), key=lambda item: (item[0].topic, item[0].partition))]})
