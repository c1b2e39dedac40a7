"""The share partitions of a broker and their durable state: what the ShareFetch,
ShareAcknowledge and share-group offsets handlers call (Kafka 4.2's
SharePartitionManager with its persister, on one node).

Contract
- `share_partition(group, tp)` gives the group's share partition of a topic
  partition, loading it on first use: the stored state (ReadShareGroupState,
  taking this broker's leader epoch), else a new SPSO by share.auto.offset.reset
  that is stored (InitializeShareGroupState) before the partition serves.
- `acquire` acquires records of a log read for a member (acquisition is not
  written; lock timeouts are applied first). `acknowledge` applies a member's
  acknowledgements and returns only once the new state is in
  `__share_group_state` (WriteShareGroupState): an answered acknowledgement
  survives a crash. `release_member`, `expire` (lock timeouts) and the log start
  moving past SPSO write their changes the same way.
- A write that fails (KafkaStorageError) propagates; the share partition is
  then dropped from memory and loads again from the store at its next use, so
  memory never runs ahead of the log (the records in flight become available).
- `alter_start_offset` (AlterShareGroupOffsets) starts a share partition over at
  an offset under a new state epoch; `delete_state` (DeleteShareGroupOffsets)
  removes it; `summary` (DescribeShareGroupOffsets) gives SPSO, leader epoch and
  lag (high watermark - SPSO - records already delivered past SPSO).
- `apply_settings(group)` takes the group's new share.* configs into its loaded
  partitions.

Thread safety: one lock serializes the manager; its methods block on log
appends (the core runs them in its executor).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence

from .config import ShareGroupSettings
from .errors import UNKNOWN_TOPIC_OR_PARTITION, ShareError
from .log_view import LogRead, ShareLog
from .partition import AckBatch, AcquiredRecords, Counters, SharePartition
from .session import TopicIdPartition
from .state_records import ShareStateKey
from .state_store import ShareGroupOffset, ShareStateStore

LogsFor = Callable[[uuid.UUID, int], ShareLog | None]
SettingsFor = Callable[[str], ShareGroupSettings]


class SharePartitionManager:
    def __init__(self, store: ShareStateStore, logs_for: LogsFor, settings_for: SettingsFor,
                 now_ms: Callable[[], int], leader_epoch: int = 0):
        self.store = store
        self._logs_for = logs_for
        self._settings_for = settings_for
        self._now_ms = now_ms
        self.leader_epoch = leader_epoch
        self._lock = threading.RLock()
        self._partitions: dict[ShareStateKey, SharePartition] = {}

    # ---- loading --------------------------------------------------------------------

    def _log(self, tp: TopicIdPartition) -> ShareLog:
        log = self._logs_for(tp.topic_id, tp.partition)
        if log is None:
            raise ShareError(UNKNOWN_TOPIC_OR_PARTITION, f"no partition {tp.partition} of topic id {tp.topic_id}")
        return log

    def share_partition(self, group_id: str, tp: TopicIdPartition) -> SharePartition:
        with self._lock:
            key = ShareStateKey(group_id, tp.topic_id, tp.partition)
            sp = self._partitions.get(key)
            if sp is not None:
                return sp
            log = self._log(tp)
            settings = self._settings_for(group_id)
            sp = SharePartition(group_id, str(tp.topic_id), tp.partition)
            self._configure(sp, settings)
            stored = self.store.read(key, self.leader_epoch)
            if stored is None or stored.start_offset < 0:
                start = SharePartition.initial_start_offset(settings.auto_offset_reset, log, self._now_ms(),
                                                            settings.read_committed)
                epoch = 0 if stored is None else stored.state_epoch
                self.store.initialize(key, epoch, start)
                self.store.read(key, self.leader_epoch)
                sp.load(start, (), epoch)
            else:
                sp.load(stored.start_offset, stored.state_batches, stored.state_epoch)
            self._partitions[key] = sp
            self._persist(key, sp, log)
            return sp

    @staticmethod
    def _configure(sp: SharePartition, settings: ShareGroupSettings) -> None:
        sp.max_in_flight = settings.max_record_locks
        sp.delivery_count_limit = settings.delivery_count_limit
        sp.record_lock_duration_ms = settings.record_lock_duration_ms
        sp.read_committed = settings.read_committed

    def apply_settings(self, group_id: str) -> None:
        with self._lock:
            settings = self._settings_for(group_id)
            for key, sp in self._partitions.items():
                if key.group_id == group_id:
                    self._configure(sp, settings)

    def counters(self) -> list[tuple[ShareStateKey, Counters]]:
        """The counters (records acquired, acknowledged, ...) of every loaded share partition."""
        return [(key, sp.counters) for key, sp in list(self._partitions.items())]

    def loaded(self, group_id: str | None = None) -> list[ShareStateKey]:
        return [k for k in self._partitions if group_id is None or k.group_id == group_id]

    # ---- writing ------------------------------------------------------------------

    def _persist(self, key: ShareStateKey, sp: SharePartition, log: ShareLog | None = None) -> None:
        """Write what changed in `sp` (after the log start moved past SPSO, if it did)."""
        if log is not None:
            sp.on_log_start_offset(log.log_start_offset())
        dirty = sp.take_dirty()
        if dirty is None:
            return
        start, batches = dirty
        try:
            self.store.write(key, sp.state_epoch, self.leader_epoch, start, batches, sp.delivery_complete_count())
        except BaseException:
            self._partitions.pop(key, None)
            raise

    # ---- serving ------------------------------------------------------------------

    def acquire(self, group_id: str, member_id: str, tp: TopicIdPartition, read: LogRead,
                max_records: int = 500, strict_max_records: bool = False) -> list[AcquiredRecords]:
        with self._lock:
            sp = self.share_partition(group_id, tp)
            key = ShareStateKey(group_id, tp.topic_id, tp.partition)
            acquired = sp.acquire(member_id, read, self._now_ms(), max_records, strict_max_records)
            self._persist(key, sp)  # lock timeouts and archived gaps or aborted records
            return acquired

    def acknowledge(self, group_id: str, member_id: str, tp: TopicIdPartition, batches: Sequence[AckBatch]) -> None:
        """Apply and write a member's acknowledgements; ShareError (nothing changed) or
        the write's error."""
        with self._lock:
            sp = self.share_partition(group_id, tp)
            key = ShareStateKey(group_id, tp.topic_id, tp.partition)
            try:
                sp.acknowledge(member_id, batches, self._now_ms())
            finally:
                self._persist(key, sp)  # lock timeouts applied before a refusal are written too

    def release_member(self, group_id: str, member_id: str, tps: Iterable[TopicIdPartition] | None = None) -> int:
        """Release what the member holds (in `tps`, else in every loaded partition of the group)."""
        released = 0
        with self._lock:
            for key, sp in list(self._partitions.items()):
                if key.group_id != group_id:
                    continue
                if tps is not None and TopicIdPartition(key.topic_id, key.partition) not in set(tps):
                    continue
                released += sp.release_member(member_id)
                self._persist(key, sp)
        return released

    def expire(self) -> int:
        """Apply the acquisition-lock timeouts due now, writing the changes; how many records."""
        expired = 0
        now = self._now_ms()
        with self._lock:
            for key, sp in list(self._partitions.items()):
                deadline = sp.next_lock_deadline()
                if deadline is not None and deadline <= now:
                    expired += sp.expire(now)
                    self._persist(key, sp)
        return expired

    def next_deadline(self) -> int | None:
        deadlines = [d for sp in self._partitions.values() if (d := sp.next_lock_deadline()) is not None]
        return min(deadlines, default=None)

    # ---- offsets APIs ---------------------------------------------------------------

    def alter_start_offset(self, group_id: str, tp: TopicIdPartition, offset: int) -> None:
        """AlterShareGroupOffsets of one partition (the group has no members: the caller checks)."""
        with self._lock:
            key = ShareStateKey(group_id, tp.topic_id, tp.partition)
            stored = self.store.read_summary(key)
            epoch = 0 if stored is None else stored.state_epoch + 1
            self.store.initialize(key, epoch, offset)
            self._partitions.pop(key, None)

    def delete_state(self, group_id: str, tp: TopicIdPartition) -> None:
        """DeleteShareGroupOffsets of one partition."""
        with self._lock:
            key = ShareStateKey(group_id, tp.topic_id, tp.partition)
            self.store.delete(key)
            self._partitions.pop(key, None)

    def summary(self, group_id: str, tp: TopicIdPartition) -> tuple[ShareGroupOffset | None, int]:
        """(stored state or None, lag or -1 when unknown) of one share partition."""
        key = ShareStateKey(group_id, tp.topic_id, tp.partition)
        stored = self.store.read_summary(key)
        if stored is None or stored.start_offset < 0:
            return stored, -1
        log = self._logs_for(tp.topic_id, tp.partition)
        if log is None:
            return stored, -1
        done = stored.delivery_complete_count
        if done < 0:
            done = sum(b.last_offset - b.first_offset + 1 for b in stored.state_batches if b.delivery_state in (2, 4))
        return stored, max(0, log.high_watermark() - stored.start_offset - done)


__all__ = ["LogsFor", "SettingsFor", "SharePartitionManager"]
