"""Which log to clean next, and where each log's clean part ends (Kafka's
LogCleanerManager).

Contract:
- `cleaner-offset-checkpoint` (data directory, Kafka's text format, through
  OffsetCheckpointFile) holds each compacted log's first dirty offset. It is
  rewritten after a clean (`done_cleaning`), keeping only logs that still exist.
  One that cannot be read or parsed is logged (`cleaner_checkpoint_unreadable`)
  and reads as empty, as Kafka: every compacted log is cleaned from its start.
  A failed write (a full disk) is logged (`cleaner_checkpoint_write_failed`) and
  leaves the old file.
- `cleanable_offsets(log, checkpointed, now)`: first dirty = the checkpoint, or
  the log start offset when there is none, it is below the log start, or past
  the log end. First uncleanable = the lowest of the active segment's base, the
  first offset of the oldest open transaction (the first unstable offset) and
  the base of the first dirty segment whose largest timestamp is newer than
  now - min.compaction.lag.ms.
- `grab_filthiest_log(now)` looks at every log whose cleanup.policy contains
  compact, that is not being cleaned, paused or marked uncleanable: dirty ratio =
  cleanable bytes / (clean + cleanable bytes); a log qualifies above
  min.cleanable.dirty.ratio, or when max.compaction.lag.ms has passed since the
  first batch of a dirty segment (and it has cleanable bytes). The one with the
  highest ratio is marked in progress and returned.
- `abort_and_pause(tp)` makes a clean in progress stop at its next check
  (`check_aborted`, which raises CleaningAborted) and waits until it has;
  `resume(tp)` undoes one pause. A log being deleted is aborted, then `forget`
  drops its state and checkpoint entry.
- Thread-safe: one lock guards the states and the checkpoint file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import structlog

from kafka_format import LogEntry
from kafka_format.errors import KafkaStorageError

from .checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from .cleaner import CleaningAborted

if TYPE_CHECKING:
    from .log import Log

logger = structlog.get_logger("strata.cleaner")

TopicPartition = tuple[str, int]

IN_PROGRESS = "in_progress"
ABORTED = "aborted"


class OffsetsToClean(NamedTuple):
    first_dirty: int
    first_uncleanable: int
    force_update_checkpoint: bool


@dataclass
class LogToClean:
    tp: TopicPartition
    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def _non_active_from(log, offset: int) -> list:
    snapshot = log.segments.snapshot()
    return [s for s in snapshot.from_offset(offset) if s is not snapshot.last]


def first_batch_timestamp(segment) -> int:
    """The first entry's max timestamp, or -1 (Kafka's getFirstBatchTimestamp)."""
    for header in segment.log.iter_headers(0):
        return LogEntry(segment.log.read(header.position, header.size)).max_timestamp
    return -1


def cleanable_offsets(log, checkpointed: int | None, now_ms: int) -> OffsetsToClean:
    """Kafka's LogCleanerManager.cleanableOffsets (see the module contract)."""
    log_start = log.log_start_offset
    first_dirty = log_start if checkpointed is None else checkpointed
    force = False
    if first_dirty < log_start or first_dirty > log.log_end_offset:
        if checkpointed is not None and not (log.config.compact and log.config.delete):
            logger.warning("cleaner_checkpoint_reset", log=log.name, checkpointed=checkpointed,
                           log_start_offset=log_start, log_end_offset=log.log_end_offset)
        first_dirty, force = log_start, True
    # An open transaction's records are not cleaned (Kafka's firstUnstableOffset).
    candidates = [log.active_segment.base_offset, log.first_unstable_offset()]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in _non_active_from(log, first_dirty):
            if segment.largest_timestamp > now_ms - lag:
                candidates.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(candidates)), force)


def cleanable_bytes(log, first_dirty: int, uncleanable: int) -> tuple[int, int]:
    """(first uncleanable segment's base, bytes of the segments from first dirty to it)."""
    following = _non_active_from(log, uncleanable)
    first_uncleanable = following[0].base_offset if following else log.active_segment.base_offset
    low = min(first_dirty, first_uncleanable)
    size = sum(s.size for s in _segments_between(log, low, first_uncleanable))
    return first_uncleanable, size


def _segments_between(log, start: int, end: int) -> list:
    """Segments holding offsets in [start, end) (Kafka's logSegments(from, to))."""
    return [s for s in log.segments.snapshot().from_offset(start) if s.base_offset < end]


def max_compaction_delay(log, first_dirty: int, now_ms: int) -> int:
    """How far past max.compaction.lag.ms the oldest dirty record is (0: not past)."""
    timestamps = [t for t in (first_batch_timestamp(s) for s in _non_active_from(log, first_dirty)) if t > 0]
    if not timestamps:
        return 0
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    earliest = min(timestamps)
    return clean_until - earliest if earliest < clean_until else 0


class LogCleanerManager:
    def __init__(self, data_dir: str, logs: Callable[[], Mapping[TopicPartition, Log]]):
        self.checkpoint = OffsetCheckpointFile(os.path.join(data_dir, CLEANER_OFFSET_CHECKPOINT))
        self._logs = logs
        self._lock = threading.Condition()
        self._states: dict[TopicPartition, str | int] = {}  # in progress, aborted, or paused count
        self._uncleanable: set[TopicPartition] = set()
        self.dirtiest_ratio = 0.0

    # ---- checkpoints ------------------------------------------------------------------

    def all_checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            try:
                return self.checkpoint.read()
            except (KafkaStorageError, OSError) as e:
                # Kafka's allCleanerCheckpoints: every log is cleaned from its start again.
                logger.error("cleaner_checkpoint_unreadable", path=self.checkpoint.path,
                             error=str(e), action="cleaning every compacted log from its start")
                return {}

    def update_checkpoint(self, tp: TopicPartition, offset: int | None) -> None:
        """Set (or with None remove) one log's entry; entries of logs gone are dropped
        (and a log that is gone gets none)."""
        with self._lock:
            existing = self.logs()
            current = {k: v for k, v in self.all_checkpoints().items() if k in existing}
            if offset is None:
                current.pop(tp, None)
            elif tp in existing:
                current[tp] = offset
            self._write_checkpoint(current)

    def _write_checkpoint(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            self.checkpoint.write(offsets)
        except OSError as e:
            # The old file stays whole (atomic_write): a lagging checkpoint only means
            # cleaning those offsets again, and an entry of a deleted log is dropped
            # by the next write.
            logger.error("cleaner_checkpoint_write_failed", path=self.checkpoint.path,
                         error=e.strerror or str(e))

    def logs(self) -> Mapping[TopicPartition, Log]:
        return self._logs()

    # ---- choosing ---------------------------------------------------------------------

    def grab_filthiest_log(self, now_ms: int) -> LogToClean | None:
        with self._lock:
            checkpoints = self.all_checkpoints()
            candidates = []
            for tp, log in self.logs().items():
                if not log.config.compact or tp in self._states or tp in self._uncleanable:
                    continue
                try:
                    offsets = cleanable_offsets(log, checkpoints.get(tp), now_ms)
                    if offsets.force_update_checkpoint:
                        self.update_checkpoint(tp, offsets.first_dirty)
                    first_uncleanable, dirty_bytes = cleanable_bytes(log, offsets.first_dirty,
                                                                     offsets.first_uncleanable)
                    clean = sum(s.size for s in _segments_between(log, -1, offsets.first_dirty))
                    delay = max_compaction_delay(log, offsets.first_dirty, now_ms)
                except Exception:
                    logger.exception("cleaner_stats_failed", log=log.name)
                    self._uncleanable.add(tp)
                    continue
                ltc = LogToClean(tp, log, offsets.first_dirty, offsets.first_uncleanable, clean,
                                 dirty_bytes, delay > 0)
                if ltc.total_bytes > 0:
                    candidates.append(ltc)
            self.dirtiest_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
            eligible = [c for c in candidates
                        if (c.needs_compaction_now and c.cleanable_bytes > 0)
                        or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio]
            if not eligible:
                return None
            filthiest = max(eligible, key=lambda c: c.cleanable_ratio)
            self._states[filthiest.tp] = IN_PROGRESS
            return filthiest

    # ---- states -----------------------------------------------------------------------

    def check_aborted(self, tp: TopicPartition) -> None:
        with self._lock:
            if self._states.get(tp) == ABORTED:
                raise CleaningAborted(f"cleaning of {tp[0]}-{tp[1]} was aborted")

    def done_cleaning(self, tp: TopicPartition, end_offset: int | None) -> None:
        """The clean of `tp` is over: record `end_offset` (None: it failed or was
        aborted) and release the log."""
        with self._lock:
            state = self._states.get(tp)
            if state == ABORTED:
                self._states[tp] = 1  # paused, for whoever aborted it
            else:
                self._states.pop(tp, None)
                if end_offset is not None and tp in self.logs():
                    self.update_checkpoint(tp, end_offset)
            self._lock.notify_all()

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._lock:
            self._uncleanable.add(tp)

    def abort_and_pause(self, tp: TopicPartition, timeout: float = 60.0) -> None:
        """Stop a clean of `tp` at its next check and keep `tp` from being cleaned
        until `resume`; returns once no clean of `tp` runs."""
        with self._lock:
            state = self._states.get(tp)
            if state is None:
                self._states[tp] = 1
            elif state == IN_PROGRESS:
                self._states[tp] = ABORTED
            elif isinstance(state, int):
                self._states[tp] = state + 1
            if not self._lock.wait_for(lambda: isinstance(self._states.get(tp), int), timeout):
                raise KafkaStorageError(f"the cleaner did not stop cleaning {tp[0]}-{tp[1]}")

    def resume(self, tp: TopicPartition) -> None:
        with self._lock:
            state = self._states.get(tp)
            if isinstance(state, int):
                if state <= 1:
                    self._states.pop(tp)
                else:
                    self._states[tp] = state - 1

    def forget(self, tp: TopicPartition) -> None:
        """`tp` is deleted: drop its state and its checkpoint entry."""
        with self._lock:
            self._states.pop(tp, None)
            self._uncleanable.discard(tp)
            current = self.all_checkpoints()
            if tp in current:
                del current[tp]
                self._write_checkpoint(current)
