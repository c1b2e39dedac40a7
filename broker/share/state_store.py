"""The share-state store: Kafka's share coordinator (ShareCoordinatorShard)
over `__share_group_state`, serving the semantics of the internal APIs
InitializeShareGroupState, ReadShareGroupState, ReadShareGroupStateSummary,
WriteShareGroupState and DeleteShareGroupState.

Contract
- Every change is appended to the key's `__share_group_state` partition first
  (one batch with one record, through storage.log.Log.append) and applied in
  memory only after the append returned: what a caller was answered is in the
  log. A failed append (KafkaStorageError) changes nothing.
- initialize(key, state_epoch, start_offset): a ShareSnapshot with the new state
  epoch, SPSO and no batches (snapshot epoch one past the old one, 0 when new);
  a state epoch below the stored one is FENCED_STATE_EPOCH.
- read(key, leader_epoch): the stored state, None when the key has none (Kafka
  answers start offset -1, state epoch 0). A leader epoch below the stored one is
  FENCED_LEADER_EPOCH; a higher one is written (the share partition's new leader).
- write(key, state_epoch, leader_epoch, start_offset, batches): an uninitialized
  key is INVALID_REQUEST, an older leader epoch FENCED_LEADER_EPOCH, an older state
  epoch FENCED_STATE_EPOCH. It is written as a ShareUpdate (snapshot epoch = the
  current one; start offset -1 when not moved), or as a ShareSnapshot of the
  combined state once share.coordinator.snapshot.update.records.per.snapshot
  updates followed the last snapshot. Combining: the newer batches win where they
  overlap, offsets below SPSO are dropped, equal neighbours merge.
- delete(key): a tombstone under the ShareSnapshot key; nothing stored is no error.
- load(logs) rebuilds the state from the partitions' records in log order
  (snapshot replaces, update combines, tombstone forgets) and the update count
  since each key's snapshot, so the snapshot cadence survives a restart.

Methods block (log appends): the core runs them in its executor. `crash_point`
(tests) is called with the name of each step of a write.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import structlog

from broker.state.internal_records import replay_keyed_records
from kafka_format import build_batch
from storage.log import Log

from .errors import FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, INVALID_REQUEST, ShareError
from .partition import StateBatch
from .state_records import (
    SHARE_GROUP_STATE_TOPIC,
    SNAPSHOT_TYPE,
    UNKNOWN,
    UPDATE_TYPE,
    ShareSnapshot,
    ShareStateKey,
    ShareUpdate,
    decode,
    encode_key,
    encode_value,
)

log = structlog.get_logger("strata.share")

DEFAULT_SNAPSHOT_EVERY = 500  # share.coordinator.snapshot.update.records.per.snapshot
DEFAULT_PARTITIONS = 50  # share.coordinator.state.topic.num.partitions


def combine(old: Sequence[StateBatch], new: Sequence[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    """`new` over `old` (newer wins where they overlap), without offsets below
    `start_offset`, equal neighbours merged, in offset order."""
    pieces: list[StateBatch] = []
    for b in old:
        parts = [b]
        for n in new:
            cut: list[StateBatch] = []
            for p in parts:
                if n.last_offset < p.first_offset or n.first_offset > p.last_offset:
                    cut.append(p)
                    continue
                if p.first_offset < n.first_offset:
                    cut.append(p._replace(last_offset=n.first_offset - 1))
                if p.last_offset > n.last_offset:
                    cut.append(p._replace(first_offset=n.last_offset + 1))
            parts = cut
        pieces += parts
    pieces += new
    out: list[StateBatch] = []
    for b in sorted(pieces):
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = b._replace(first_offset=start_offset)
        if out and out[-1].last_offset + 1 == b.first_offset and out[-1][2:] == b[2:]:
            out[-1] = out[-1]._replace(last_offset=b.last_offset)
        else:
            out.append(b)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """The stored state of one share partition (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN


class ShareStateStore:
    def __init__(self, get_log: Callable[[int], Log], partitions: int = DEFAULT_PARTITIONS,
                 snapshot_every: int = DEFAULT_SNAPSHOT_EVERY, now_ms: Callable[[], int] | None = None,
                 on_append: Callable[[str, int], None] | None = None,
                 crash_point: Callable[[str], None] | None = None):
        self._get_log = get_log  # state partition -> its Log, created on first use by the core
        self.partitions = partitions
        self.snapshot_every = snapshot_every
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._on_append = on_append or (lambda topic, partition: None)
        self._crash_point = crash_point or (lambda step: None)
        self._lock = threading.Lock()
        self._states: dict[ShareStateKey, ShareGroupOffset] = {}
        self._updates: dict[ShareStateKey, int] = {}  # ShareUpdate records since the key's last snapshot

    # ---- reading ---------------------------------------------------------------------

    def state(self, key: ShareStateKey) -> ShareGroupOffset | None:
        return self._states.get(key)

    def keys(self, group_id: str | None = None) -> list[ShareStateKey]:
        return [k for k in self._states if group_id is None or k.group_id == group_id]

    def updates_since_snapshot(self, key: ShareStateKey) -> int:
        return self._updates.get(key, 0)

    def read(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareGroupOffset | None:
        """ReadShareGroupState: the state (None: uninitialized), taking a newer leader epoch."""
        with self._lock:
            current = self._states.get(key)
            if current is None:
                return None
            if leader_epoch != -1 and leader_epoch < current.leader_epoch:
                raise ShareError(FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} of {key} is older than "
                                                      f"{current.leader_epoch}")
            if leader_epoch > current.leader_epoch:
                self._write_locked(key, current, leader_epoch, -1, (), UNKNOWN)
            return self._states[key]

    def read_summary(self, key: ShareStateKey, leader_epoch: int = -1) -> ShareGroupOffset | None:
        """ReadShareGroupStateSummary: the state without taking the leader epoch."""
        current = self._states.get(key)
        if current is not None and leader_epoch != -1 and leader_epoch < current.leader_epoch:
            raise ShareError(FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} of {key} is older than "
                                                  f"{current.leader_epoch}")
        return current

    # ---- changing --------------------------------------------------------------------

    def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> None:
        with self._lock:
            current = self._states.get(key)
            if current is not None and state_epoch < current.state_epoch:
                raise ShareError(FENCED_STATE_EPOCH, f"state epoch {state_epoch} of {key} is older than "
                                                     f"{current.state_epoch}")
            now = self._now_ms()
            value = ShareSnapshot(0 if current is None else current.snapshot_epoch + 1, state_epoch, -1,
                                  start_offset, now, now)
            self._append(key, SNAPSHOT_TYPE, value)
            self._apply(key, value, now)

    def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: Sequence[StateBatch], delivery_complete_count: int = UNKNOWN) -> None:
        with self._lock:
            current = self._states.get(key)
            if current is None:
                raise ShareError(INVALID_REQUEST, f"write of {key}: the share partition is not initialized")
            if leader_epoch != -1 and leader_epoch < current.leader_epoch:
                raise ShareError(FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} of {key} is older than "
                                                      f"{current.leader_epoch}")
            if state_epoch < current.state_epoch:
                raise ShareError(FENCED_STATE_EPOCH, f"state epoch {state_epoch} of {key} is older than "
                                                     f"{current.state_epoch}")
            for b in batches:
                if b.first_offset > b.last_offset or b.delivery_state not in (0, 2, 4) or b.delivery_count < 0:
                    raise ShareError(INVALID_REQUEST, f"write of {key}: bad state batch {tuple(b)}")
            self._write_locked(key, current, max(leader_epoch, current.leader_epoch), start_offset,
                               tuple(batches), delivery_complete_count)

    def delete(self, key: ShareStateKey) -> None:
        with self._lock:
            if key not in self._states:
                return
            self._append(key, SNAPSHOT_TYPE, None)
            self._apply(key, None, 0)

    def _write_locked(self, key: ShareStateKey, current: ShareGroupOffset, leader_epoch: int, start_offset: int,
                      batches: tuple[StateBatch, ...], delivery_complete_count: int) -> None:
        value: ShareSnapshot | ShareUpdate
        if self._updates.get(key, 0) >= self.snapshot_every:
            merged = self._merged(current, ShareUpdate(current.snapshot_epoch, leader_epoch, start_offset, batches,
                                                       delivery_complete_count))
            value = ShareSnapshot(current.snapshot_epoch + 1, merged.state_epoch, merged.leader_epoch,
                                  merged.start_offset, merged.create_timestamp, self._now_ms(),
                                  merged.state_batches, merged.delivery_complete_count)
            self._append(key, SNAPSHOT_TYPE, value)
        else:
            value = ShareUpdate(current.snapshot_epoch, leader_epoch, start_offset, batches, delivery_complete_count)
            self._append(key, UPDATE_TYPE, value)
        self._apply(key, value, self._now_ms())

    def _append(self, key: ShareStateKey, record_type: int, value: ShareSnapshot | ShareUpdate | None) -> None:
        partition = key.state_partition(self.partitions)
        batch = build_batch([(encode_key(record_type, key), None if value is None else encode_value(value),
                              self._now_ms(), [])])
        self._crash_point("before-append")
        self._get_log(partition).append(batch)
        self._crash_point("after-append")
        self._on_append(SHARE_GROUP_STATE_TOPIC, partition)

    # ---- applying (writes and the replay of the log) ---------------------------------

    @staticmethod
    def _merged(current: ShareGroupOffset, update: ShareUpdate) -> ShareGroupOffset:
        start = current.start_offset if update.start_offset == -1 else update.start_offset
        return replace(current, leader_epoch=max(current.leader_epoch, update.leader_epoch), start_offset=start,
                       state_batches=combine(current.state_batches, update.state_batches, start),
                       delivery_complete_count=(current.delivery_complete_count
                                                if update.delivery_complete_count == UNKNOWN
                                                else update.delivery_complete_count))

    def _apply(self, key: ShareStateKey, value: ShareSnapshot | ShareUpdate | None, timestamp: int) -> None:
        """Take one record's value; `timestamp` (the write's time, the record's on replay)
        is the write timestamp an update leaves."""
        if value is None:
            self._states.pop(key, None)
            self._updates.pop(key, None)
        elif isinstance(value, ShareSnapshot):
            self._states[key] = ShareGroupOffset(
                value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
                value.create_timestamp, value.write_timestamp,
                combine((), value.state_batches, value.start_offset), value.delivery_complete_count)
            self._updates[key] = 0
        else:
            current = self._states.get(key)
            if current is None:
                return  # an update without its snapshot (deleted since): nothing to apply it to
            self._states[key] = replace(self._merged(current, value), write_timestamp=timestamp)
            self._updates[key] = self._updates.get(key, 0) + 1

    def load(self, logs: Iterable[Log]) -> int:
        """Rebuild from the existing `__share_group_state` logs; returns the records read."""
        records = 0
        with self._lock:
            self._states.clear()
            self._updates.clear()
            for partition_log in sorted(logs, key=lambda x: x.partition):
                if partition_log.topic == SHARE_GROUP_STATE_TOPIC:
                    records += self._load_partition(partition_log)
        log.info("share_group_state_loaded", share_partitions=len(self._states), records=records)
        return records

    def _load_partition(self, partition_log: Log) -> int:
        return replay_keyed_records(partition_log, lambda record: self._replay(record, partition_log.partition),
                                    "share_group_state_load_stopped")

    def _replay(self, record, partition: int) -> None:
        try:
            decoded = decode(bytes(record.key), None if record.value is None else bytes(record.value))
        except (ValueError, struct.error, UnicodeDecodeError) as e:
            log.warning("share_group_state_bad_record", partition=partition, offset=record.offset, error=str(e))
            return
        if decoded is None:
            return
        if decoded.value is None and decoded.record_type != SNAPSHOT_TYPE:
            return
        self._apply(decoded.key, decoded.value, record.timestamp)


__all__ = ["DEFAULT_PARTITIONS", "DEFAULT_SNAPSHOT_EVERY", "ShareGroupOffset", "ShareStateStore", "combine"]
