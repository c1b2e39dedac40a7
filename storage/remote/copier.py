"""The remote log manager's work for one tiered partition log (Kafka's
RemoteLogManager copy and expiration tasks, RLMCopyTask / RLMExpirationTask).

Contract:
- `RemotePartition(log, tp, rsm, metadata)` ties a partition log (storage/log.py)
  to the remote store (storage/remote/store.py) and the remote log metadata
  (storage/remote/metadata.py). Its passes are meant to run every
  `remote.log.manager.task.interval.ms` on a worker thread (they block on the
  store); one lock runs them one at a time. The log is used only through its
  public, thread-safe API: segment snapshots, `last_stable_offset`,
  `remove_segments`, `increase_log_start_offset`, `delete_segments_below_log_start`.
- `copy_pass()`: first finishes what a crash left (copies in
  COPY_SEGMENT_STARTED and deletions in DELETE_SEGMENT_STARTED: their objects are
  deleted and their metadata goes to DELETE_SEGMENT_FINISHED; their objects were
  never readable, since a reader only follows COPY_SEGMENT_FINISHED metadata),
  and, after an interrupted deletion (total retention's), moves the log start past
  it as `remote_retention_pass` does (local segments below it go);
  then copies each rolled segment above the highest copied offset, oldest first,
  whose records are all below the last stable offset: COPY_SEGMENT_STARTED is
  recorded, the files are put under a new segment uuid, COPY_SEGMENT_FINISHED is
  recorded, then the segment's manifest is put (store.py: the offline readers'
  view of the finished segments). A segment is copied once: the next pass starts
  above it. A manifest whose put failed, or that a crash left unwritten (the
  first pass of a RemotePartition lists the partition's manifests once), is put
  by the next pass that reaches the store.
  Nothing is copied while the topic's remote.storage.enable is false or
  remote.log.copy.disable is true.
- Failures of the store: the pass stops at the failing segment, the error is kept
  (`stats.last_error`), and no pass touches the store again until the back-off
  (remote.log.manager.task.retry.backoff.ms doubling up to backoff.max.ms, with
  +-jitter) has passed; a success resets it. The local log is not changed by a
  failure.
- `local_retention_pass()`: local segments go only when their last offset is at
  or below the highest copied offset (their copy is durable and recorded), by
  local.retention.bytes and local.retention.ms (-2: the total's), Kafka's size
  and time rules; a segment not in the store is never deleted. The broker runs
  this instead of the log's own `delete_old_segments` for a tiered topic.
- `remote_retention_pass()`: total retention applied to the remote segments
  (Kafka's RLMExpirationTask): segments wholly below the log start floor
  DeleteRecords set (`set_log_start_floor`), by retention.ms on each segment's max timestamp,
  by retention.bytes on the remote size plus the local bytes not yet copied. Each goes
  manifest deleted -> DELETE_SEGMENT_STARTED -> objects deleted ->
  DELETE_SEGMENT_FINISHED (a manifest is never present for a segment whose
  metadata is not COPY_SEGMENT_FINISHED); then the
  log start offset moves to the first remote segment left, and local segments
  below it go.
- `stop()` (a topic deletion, remote.log.delete.on.disable): waits for a running
  pass to end; every later pass does nothing. After it returns the partition's
  remote data changes only through whoever stopped it.
- `stats()`: the copy lag (rolled segments and bytes not yet copied), the remote
  and local sizes, the log start offsets, the last error and the back-off.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from kafka_format.errors import KafkaStorageError, OffsetOutOfRangeError

from .. import retention
from ..clock import SYSTEM_CLOCK, SystemClock
from ..log import Log
from ..producer_state import snapshot_path
from ..segment import LogSegment
from ..validator import LEADER_EPOCH_ON_APPEND
from .config import RemoteLogConfig
from .errors import RemoteStorageError
from .metadata import (
    RemoteLogMetadataStore,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
    TopicIdPartition,
)
from .store import LogSegmentData, RemoteStorageManager, leader_epoch_checkpoint

logger = structlog.get_logger("strata.remote")


@dataclass
class TierStats:
    """One tiered partition's state, for metrics and health."""

    copy_lag_segments: int = 0
    copy_lag_bytes: int = 0
    highest_copied_offset: int = -1
    remote_log_start_offset: int | None = None
    remote_segments: int = 0
    remote_size_bytes: int = 0
    local_log_start_offset: int = 0
    local_size_bytes: int = 0
    failures: int = 0  # consecutive failed passes
    last_error: str | None = None
    retry_at_ms: int | None = None  # monotonic ms before which the store is left alone


@dataclass
class CopyResult:
    copied: list[RemoteLogSegmentMetadata] = dataclasses.field(default_factory=list)
    cleaned: int = 0  # unfinished copies or deletions finished
    skipped_for_backoff: bool = False
    error: str | None = None


class Backoff:
    """Kafka's ExponentialBackoff: initial * 2^(failures - 1), at most max, times 1 +- jitter."""

    def __init__(self, initial_ms: int, max_ms: int, jitter: float, rng: random.Random | None = None):
        self.initial_ms, self.max_ms, self.jitter = initial_ms, max_ms, jitter
        self._rng = rng or random.Random()

    def delay_ms(self, failures: int) -> int:
        if failures <= 0:
            return 0
        base = min(self.max_ms, self.initial_ms * 2 ** min(failures - 1, 62))
        factor = 1.0 if self.jitter == 0 else self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return int(base * factor)


def segment_end_offsets(log: Log) -> list[tuple[LogSegment, int]]:
    """The log's rolled segments with each one's last offset (the next base minus one)."""
    segments = log.segments.snapshot().segments
    return [(s, segments[i + 1].base_offset - 1) for i, s in enumerate(segments[:-1])]


class RemotePartition:
    def __init__(self, log: Log, tp: TopicIdPartition, rsm: RemoteStorageManager,
                 metadata: RemoteLogMetadataStore, *, config: RemoteLogConfig | None = None, broker_id: int = 0,
                 clock: SystemClock = SYSTEM_CLOCK, rng: random.Random | None = None,
                 persist_log_start: Callable[[int], None] | None = None):
        if (log.topic, log.partition) != (tp.topic, tp.partition):
            raise ValueError(f"log {log.name} is not {tp}")
        config = config or RemoteLogConfig()
        self.log = log
        self.tp = tp
        self.rsm = rsm
        self.metadata = metadata
        self.broker_id = broker_id
        self._clock = clock
        self._backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms, config.retry_jitter, rng)
        self._persist_log_start = persist_log_start
        self._lock = threading.Lock()
        self._failures = 0
        self._last_error: str | None = None
        self._retry_at: int | None = None
        self._stopped = False
        self._floor = 0  # the log start DeleteRecords set (set_log_start_floor)
        self._manifests_checked = False  # the store's manifests were compared with the metadata
        self._manifests_pending: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}

    # ---- state ---------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The partition's log start (Kafka's logStartOffset of a tiered partition): the
        remote start when the store holds the oldest records, else the local one; at
        least the floor DeleteRecords set (`set_log_start_floor`)."""
        remote = self.metadata.remote_log_start_offset(self.tp)
        local = self.log.log_start_offset
        return max(self._floor, local if remote is None else min(remote, local))

    def set_log_start_floor(self, offset: int) -> None:
        """The log start DeleteRecords moved into the remote data (the caller keeps it
        durable): records below it are no longer read, and the remote retention pass
        deletes the remote segments wholly below it."""
        self._floor = max(self._floor, offset)

    @property
    def local_log_start_offset(self) -> int:
        return self.log.log_start_offset

    def stats(self) -> TierStats:
        highest = self.metadata.highest_copied_offset(self.tp)
        pending = [(s, end) for s, end in segment_end_offsets(self.log) if end > highest and s.size > 0]
        readable = self.metadata.readable_segments(self.tp)
        return TierStats(
            copy_lag_segments=len(pending), copy_lag_bytes=sum(s.size for s, _ in pending),
            highest_copied_offset=highest,
            remote_log_start_offset=readable[0].start_offset if readable else None,
            remote_segments=len(readable), remote_size_bytes=sum(m.segment_size_in_bytes for m in readable),
            local_log_start_offset=self.log.log_start_offset, local_size_bytes=self.log.size_in_bytes,
            failures=self._failures, last_error=self._last_error, retry_at_ms=self._retry_at)

    def _copy_enabled(self) -> bool:
        config = self.log.config
        return not self._stopped and config.remote_storage_enable and not config.remote_log_copy_disable

    def stop(self) -> None:
        """Wait for a running pass to end and make every later pass do nothing."""
        with self._lock:
            self._stopped = True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _backing_off(self) -> bool:
        return self._retry_at is not None and self._clock.monotonic_ms() < self._retry_at

    def _failed(self, what: str, error: Exception) -> str:
        self._failures += 1
        self._last_error = f"{what}: {error}"
        self._retry_at = self._clock.monotonic_ms() + self._backoff.delay_ms(self._failures)
        logger.warning("remote_store_failed", partition=str(self.tp), operation=what, error=str(error),
                       failures=self._failures, retry_in_ms=self._retry_at - self._clock.monotonic_ms())
        return self._last_error

    def _succeeded(self) -> None:
        if self._failures:
            logger.info("remote_store_recovered", partition=str(self.tp), failures=self._failures)
        self._failures = 0
        self._last_error = None
        self._retry_at = None

    def _update(self, metadata: RemoteLogSegmentMetadata, state: SegmentState) -> RemoteLogSegmentMetadata:
        return self.metadata.update_segment(RemoteLogSegmentMetadataUpdate(
            metadata.segment_id, self._clock.time_ms(), state, self.broker_id))

    # ---- copying -------------------------------------------------------------------

    def copy_pass(self) -> CopyResult:
        result = CopyResult()
        with self._lock:
            if not self._copy_enabled():
                return result
            if self._backing_off():
                result.skipped_for_backoff = True
                return result
            try:
                result.cleaned = self._finish_unfinished()
                highest = self.metadata.highest_copied_offset(self.tp)
                stable = self.log.last_stable_offset
                for segment, end in segment_end_offsets(self.log):
                    if end <= highest or segment.size == 0:
                        continue
                    if end >= stable:
                        break  # records of an open transaction: copied once it closes
                    result.copied.append(self._copy_segment(segment, end))
                    highest = end
                self._put_missing_manifests()
            except (RemoteStorageError, KafkaStorageError, OSError) as e:
                result.error = self._failed("copy", e)
                return result
            self._succeeded()
        return result

    def _finish_unfinished(self) -> int:
        """Delete the objects of copies a crash interrupted and finish interrupted
        deletions; after an interrupted retention deletion the log start moves past
        it, as the interrupted pass would have moved it."""
        count = 0
        deleted_end = -1
        for metadata in self.metadata.unfinished_segments(self.tp):
            if metadata.state == SegmentState.COPY_SEGMENT_STARTED:
                metadata = self._update(metadata, SegmentState.DELETE_SEGMENT_STARTED)
            elif self.metadata.was_copied(metadata.segment_id):  # not an abandoned copy's cleanup
                deleted_end = max(deleted_end, metadata.end_offset)
            self.rsm.delete_log_segment_data(metadata)
            self._update(metadata, SegmentState.DELETE_SEGMENT_FINISHED)
            logger.info("remote_segment_cleaned", partition=str(self.tp), segment=str(metadata.segment_id),
                        start_offset=metadata.start_offset)
            count += 1
        if deleted_end >= 0:
            self._advance_log_start(deleted_end + 1)
        return count

    def _copy_segment(self, segment: LogSegment, end: int) -> RemoteLogSegmentMetadata:
        epochs = ((LEADER_EPOCH_ON_APPEND, segment.base_offset),)
        data = LogSegmentData(
            log_segment=segment.log.path, log_size=segment.size,
            offset_index=segment.offset_index.path, offset_index_size=segment.offset_index.size_in_bytes,
            time_index=segment.time_index.path, time_index_size=segment.time_index.size_in_bytes,
            transaction_index=segment.txn_index.path,
            producer_snapshot=snapshot_path(self.log.directory, end + 1),
            leader_epoch_checkpoint=leader_epoch_checkpoint(epochs))
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(self.tp), segment.base_offset, end, segment.max_timestamp_so_far,
            self.broker_id, self._clock.time_ms(), segment.size, epochs)
        self.metadata.add_segment(metadata)
        custom = self.rsm.copy_log_segment_data(metadata, data)
        finished = self.metadata.update_segment(RemoteLogSegmentMetadataUpdate(
            metadata.segment_id, self._clock.time_ms(), SegmentState.COPY_SEGMENT_FINISHED, self.broker_id, custom))
        self._manifests_pending[finished.segment_id] = finished
        self.rsm.write_manifest(finished)
        del self._manifests_pending[finished.segment_id]
        logger.info("remote_segment_copied", partition=str(self.tp), segment=str(metadata.segment_id),
                    start_offset=metadata.start_offset, end_offset=end, bytes=metadata.segment_size_in_bytes)
        return finished

    def _put_missing_manifests(self) -> None:
        """Put the manifests of finished segments that have none (a failed put, or a
        crash between recording COPY_SEGMENT_FINISHED and the put)."""
        if not self._manifests_checked:
            for metadata in self.rsm.missing_manifests(self.metadata.readable_segments(self.tp)):
                self._manifests_pending[metadata.segment_id] = metadata
            self._manifests_checked = True
        finished = {m.segment_id for m in self.metadata.readable_segments(self.tp)}
        for segment_id, metadata in list(self._manifests_pending.items()):
            if segment_id not in finished:
                del self._manifests_pending[segment_id]  # being deleted: no manifest
                continue
            self.rsm.write_manifest(metadata)
            del self._manifests_pending[segment_id]
            logger.info("remote_manifest_written", partition=str(self.tp), segment=str(segment_id))

    # ---- local retention ----------------------------------------------------------------

    def local_retention_pass(self, now_ms: int | None = None) -> retention.RetentionResult:
        """Delete copied local segments past local retention (see the module contract)."""
        now = self._clock.time_ms() if now_ms is None else now_ms
        config = self.log.config
        local = dataclasses.replace(config, retention_ms=config.effective_local_retention_ms,
                                    retention_bytes=config.effective_local_retention_bytes)
        total = retention.RetentionResult(self.log.name, self.log.log_start_offset)
        with self._lock:
            if self._stopped:
                return total
            for reason in (retention.RETENTION_BYTES, retention.RETENTION_MS):
                highest = self.metadata.highest_copied_offset(self.tp)
                chosen = retention.deletion(reason, self.log.segments.snapshot(), config=local,
                                            log_start_offset=self.log.log_start_offset, now_ms=now,
                                            log_name=self.log.name)
                if chosen is None:
                    continue
                ends = dict((s.base_offset, end) for s, end in segment_end_offsets(self.log))
                copied = []
                for segment in chosen.segments:
                    end = ends.get(segment.base_offset)
                    if end is None or end > highest:
                        break  # never a segment that is not in the store
                    copied.append(segment)
                if copied:
                    result = self.log.remove_segments(copied, chosen.reason)
                    for r, d in result.deleted.items():
                        total.deleted[r].segments += d.segments
                        total.deleted[r].bytes += d.bytes
        total.log_start_offset = self.log.log_start_offset
        return total

    # ---- remote retention ---------------------------------------------------------------

    def remote_retention_pass(self, now_ms: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Delete remote segments past total retention (see the module contract)."""
        now = self._clock.time_ms() if now_ms is None else now_ms
        with self._lock:
            if self._stopped or not self.log.config.remote_storage_enable or self._backing_off():
                return []
            doomed = self._expired_remote_segments(now)
            deleted = []
            try:
                for metadata in doomed:
                    self.rsm.delete_manifest(metadata)  # offline readers stop before the metadata says so
                    self._manifests_pending.pop(metadata.segment_id, None)
                    started = self._update(metadata, SegmentState.DELETE_SEGMENT_STARTED)
                    self.rsm.delete_log_segment_data(started)
                    deleted.append(self._update(started, SegmentState.DELETE_SEGMENT_FINISHED))
                    logger.info("remote_segment_deleted", partition=str(self.tp),
                                segment=str(metadata.segment_id), start_offset=metadata.start_offset,
                                end_offset=metadata.end_offset)
            except (RemoteStorageError, KafkaStorageError, OSError) as e:
                self._failed("delete", e)
            else:
                if doomed:
                    self._succeeded()
            if deleted:
                self._advance_log_start(max(m.end_offset for m in deleted) + 1)
            return deleted

    def _expired_remote_segments(self, now: int) -> list[RemoteLogSegmentMetadata]:
        config = self.log.config
        readable = self.metadata.readable_segments(self.tp)
        highest = self.metadata.highest_copied_offset(self.tp)
        doomed: list[RemoteLogSegmentMetadata] = []
        # Local bytes not yet in the store count towards retention.bytes (Kafka's onlyLocalLogSegmentsSize).
        only_local = sum(s.size for s in self.log.segments.snapshot().segments if s.base_offset > highest)
        breach = -1
        if config.retention_bytes >= 0:
            breach = only_local + sum(m.segment_size_in_bytes for m in readable) - config.retention_bytes
        for metadata in readable:
            below_start = metadata.end_offset < self._floor  # Kafka's isSegmentBreachByLogStartOffset
            too_old = config.retention_ms >= 0 and now - metadata.max_timestamp_ms > config.retention_ms
            too_big = breach >= 0 and breach - metadata.segment_size_in_bytes >= 0
            if not (below_start or too_old or too_big):
                break  # oldest first: the first that stays ends the pass
            doomed.append(metadata)
            breach -= metadata.segment_size_in_bytes
        return doomed

    def _advance_log_start(self, new_start: int) -> None:
        """After remote deletions: the log start follows, and local segments below it go."""
        remote_start = self.metadata.remote_log_start_offset(self.tp)
        target = new_start if remote_start is None else max(new_start, remote_start)
        target = min(target, self.log.log_end_offset)
        if target > self.log.log_start_offset:
            try:
                self.log.increase_log_start_offset(target, self._persist_log_start)
            except OffsetOutOfRangeError:
                return
            self.log.delete_segments_below_log_start()
