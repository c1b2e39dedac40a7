"""The share partitions of a broker and their durable state: what the ShareFetch,
ShareAcknowledge and share-group offsets handlers call (Kafka 4.2's
SharePartitionManager with its persister, on one node).

Contract
- `share_partition(group, tp)` gives the group's share partition of a topic
  partition, loading it on first use: the stored state (ReadShareGroupState,
  taking this broker's leader epoch), else a new SPSO by share.auto.offset.reset
  that is stored (InitializeShareGroupState) before the partition serves. A
  loaded one is returned without blocking (`loaded_partition` gives it or None).
- In memory (no log I/O; the core calls them on its event loop): `acquire`
  acquires records of a log read for a member (acquisition is not written, as
  Kafka's; lock timeouts are applied first), `apply_acknowledgements` applies a
  member's acknowledgements (all or nothing per partition), `release` releases
  what a member holds, `apply_timeouts` applies the acquisition-lock timeouts due.
  Each records the share partitions it changed.
- Writing: `take_writes()` (in memory) takes every change not yet written as one
  `WriteRound` (per changed share partition one WriteShareGroupState: one
  ShareUpdate, or a ShareSnapshot at the snapshot cadence); `write(round)`
  (blocking) appends them; `settle(round)` (in memory) takes the outcome. Rounds
  are written one at a time, in the order they were taken: a later round's state
  never lands before an earlier one's. The caller answers an acknowledgement only
  after a round taken after it was written without a failure for its partition:
  an answered acknowledgement survives a crash. One round covers every
  acknowledgement of a request (and of the requests that came meanwhile).
- A write that fails (KafkaStorageError) is that partition's failure in the
  round; the share partition is then dropped from memory and loads again from
  the store at its next use, so memory never runs ahead of the log (the records
  in flight become available). Changes made to it in memory between the write
  and the drop fail in the next round with the same error.
- `alter_start_offset` (AlterShareGroupOffsets) starts a share partition over at
  an offset under a new state epoch; `delete_state` (DeleteShareGroupOffsets)
  removes it; `summary` (DescribeShareGroupOffsets) gives SPSO, leader epoch and
  lag (high watermark - SPSO - records already delivered past SPSO).
- `apply_settings(group)` takes the group's new share.* configs into its loaded
  partitions.

Thread safety: the in-memory methods run on one thread (the core's event loop);
one lock serializes loading; the store serializes its appends.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .config import ShareGroupSettings
from .errors import UNKNOWN_TOPIC_OR_PARTITION, ShareError
from .log_view import LogRead, ShareLog
from .partition import AckBatch, AcquiredRecords, Counters, SharePartition, StateBatch
from .session import TopicIdPartition
from .state_records import ShareStateKey
from .state_store import ShareGroupOffset, ShareStateStore

LogsFor = Callable[[uuid.UUID, int], ShareLog | None]
SettingsFor = Callable[[str], ShareGroupSettings]


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """One WriteShareGroupState of a round: the changed state batches of one share partition."""

    key: ShareStateKey
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int


@dataclass(slots=True)
class WriteRound:
    """The changes `take_writes` took, and after `write` the failure of each partition that failed."""

    writes: list[PendingWrite] = field(default_factory=list)
    failures: dict[ShareStateKey, Exception] = field(default_factory=dict)

    def failure(self, group_id: str, tp: TopicIdPartition) -> Exception | None:
        return self.failures.get(ShareStateKey(group_id, tp.topic_id, tp.partition))


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
        self._changed: set[ShareStateKey] = set()  # changed in memory since the last take_writes
        self._failed: dict[ShareStateKey, Exception] = {}  # dropped after a failed write, not loaded since

    # ---- loading --------------------------------------------------------------------

    def _log(self, tp: TopicIdPartition) -> ShareLog:
        log = self._logs_for(tp.topic_id, tp.partition)
        if log is None:
            raise ShareError(UNKNOWN_TOPIC_OR_PARTITION, f"no partition {tp.partition} of topic id {tp.topic_id}")
        return log

    def loaded_partition(self, group_id: str, tp: TopicIdPartition) -> SharePartition | None:
        return self._partitions.get(ShareStateKey(group_id, tp.topic_id, tp.partition))

    def share_partition(self, group_id: str, tp: TopicIdPartition) -> SharePartition:
        key = ShareStateKey(group_id, tp.topic_id, tp.partition)
        sp = self._partitions.get(key)
        if sp is not None:
            return sp
        with self._lock:
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
            sp.on_log_start_offset(log.log_start_offset())
            dirty = sp.take_dirty()
            if dirty is not None:
                self.store.write(key, sp.state_epoch, self.leader_epoch, dirty[0], dirty[1],
                                 sp.delivery_complete_count())
            self._failed.pop(key, None)
            self._partitions[key] = sp
            return sp

    @staticmethod
    def _configure(sp: SharePartition, settings: ShareGroupSettings) -> None:
        sp.max_in_flight = settings.max_record_locks
        sp.delivery_count_limit = settings.delivery_count_limit
        sp.record_lock_duration_ms = settings.record_lock_duration_ms
        sp.read_committed = settings.read_committed

    def apply_settings(self, group_id: str) -> None:
        settings = self._settings_for(group_id)
        for key, sp in list(self._partitions.items()):
            if key.group_id == group_id:
                self._configure(sp, settings)

    def counters(self) -> list[tuple[ShareStateKey, Counters]]:
        """The counters (records acquired, acknowledged, ...) of every loaded share partition."""
        return [(key, sp.counters) for key, sp in list(self._partitions.items())]

    def loaded(self, group_id: str | None = None) -> list[ShareStateKey]:
        return [k for k in list(self._partitions) if group_id is None or k.group_id == group_id]

    # ---- in memory ------------------------------------------------------------------

    def acquire(self, group_id: str, member_id: str, tp: TopicIdPartition, read: LogRead,
                max_records: int = 500, strict_max_records: bool = False) -> list[AcquiredRecords]:
        """Acquire records of `read` for the member (loading the share partition first
        when it is not loaded). Nothing is written; what the acquisition archived or
        timed out goes with the next round."""
        sp = self.share_partition(group_id, tp)
        acquired = sp.acquire(member_id, read, self._now_ms(), max_records, strict_max_records)
        if sp.has_changes():
            self._changed.add(ShareStateKey(group_id, tp.topic_id, tp.partition))
        return acquired

    def apply_acknowledgements(self, group_id: str, member_id: str, tp: TopicIdPartition,
                               batches: Sequence[AckBatch]) -> None:
        """Apply a member's acknowledgements of a loaded share partition in memory; ShareError
        (nothing acknowledged) when refused. The next round writes them (and the lock
        timeouts applied before a refusal)."""
        sp = self.share_partition(group_id, tp)
        try:
            sp.acknowledge(member_id, batches, self._now_ms())
        finally:
            if sp.has_changes():
                self._changed.add(ShareStateKey(group_id, tp.topic_id, tp.partition))

    def release(self, group_id: str, member_id: str, tps: Iterable[TopicIdPartition] | None = None) -> int:
        """Release in memory what the member holds (in `tps`, else in every loaded partition of the group)."""
        wanted = None if tps is None else set(tps)
        released = 0
        for key, sp in list(self._partitions.items()):
            if key.group_id != group_id:
                continue
            if wanted is not None and TopicIdPartition(key.topic_id, key.partition) not in wanted:
                continue
            released += sp.release_member(member_id)
            if sp.has_changes():
                self._changed.add(key)
        return released

    def apply_timeouts(self) -> list[ShareStateKey]:
        """Apply the acquisition-lock timeouts due now in memory; the share partitions with records made available."""
        now = self._now_ms()
        expired = []
        for key, sp in list(self._partitions.items()):
            deadline = sp.next_lock_deadline()
            if deadline is not None and deadline <= now and sp.expire(now):
                expired.append(key)
            if sp.has_changes():
                self._changed.add(key)
        return expired

    def next_deadline(self) -> int | None:
        deadlines = [d for sp in list(self._partitions.values()) if (d := sp.next_lock_deadline()) is not None]
        return min(deadlines, default=None)

    # ---- writing ------------------------------------------------------------------

    def has_changes(self) -> bool:
        return bool(self._changed)

    def take_writes(self) -> WriteRound:
        """Every change not yet written, as one round (in memory)."""
        round_ = WriteRound()
        changed, self._changed = self._changed, set()
        for key in changed:
            sp = self._partitions.get(key)
            if sp is None:
                failed = self._failed.get(key)
                if failed is not None:
                    round_.failures[key] = failed
                continue
            dirty = sp.take_dirty()
            if dirty is not None:
                round_.writes.append(PendingWrite(key, sp.state_epoch, self.leader_epoch, dirty[0], tuple(dirty[1]),
                                                  sp.delivery_complete_count()))
        return round_

    def write(self, round_: WriteRound) -> WriteRound:
        """Append the round's writes (blocking); a failed one is recorded in `round_.failures`."""
        for w in round_.writes:
            try:
                self.store.write(w.key, w.state_epoch, w.leader_epoch, w.start_offset, w.batches,
                                 w.delivery_complete_count)
            except Exception as e:  # noqa: BLE001 - each partition's failure is its own answer
                round_.failures[w.key] = e
        return round_

    def settle(self, round_: WriteRound) -> None:
        """Take the round's outcome (in memory): a share partition whose write failed is dropped."""
        for key, error in round_.failures.items():
            if self._partitions.pop(key, None) is not None:
                self._failed[key] = error

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


__all__ = ["LogsFor", "PendingWrite", "SettingsFor", "SharePartitionManager", "WriteRound"]
