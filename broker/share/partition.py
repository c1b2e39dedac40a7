"""One share partition: the delivery state of one topic-partition for one share
group (KIP-932; Kafka 4.2's SharePartition), as a pure state machine. Times are
the `now_ms` the caller passes (an injectable clock upstream); nothing sleeps.

State
- SPSO (`start_offset`): every offset below it is done (acknowledged, archived,
  or never to be delivered). `next_offset`: the first offset never fetched; the
  in-flight records are the offsets in [SPSO, next_offset) and `end_offset`
  (SPEO) is next_offset - 1, the last of them (SPSO - 1 when none is in flight).
- Each in-flight offset is AVAILABLE (0), ACQUIRED (1, by a member, until a lock
  deadline), ACKNOWLEDGED (2) or ARCHIVED (4) with a delivery count. An offset in
  [SPSO, next_offset) without an entry is AVAILABLE with delivery count 0 (a gap
  between persisted state batches: it is fetched again).

Transitions (Kafka's RecordState.validateTransition)
- acquire: AVAILABLE -> ACQUIRED, delivery count + 1, lock deadline = now +
  share.record.lock.duration.ms. New offsets are acquired only while fewer than
  share.partition.max.record.locks offsets are in flight (whole batches, as
  Kafka's batch_optimized acquisition), and at most `max_records` per call
  (batch boundaries may exceed it; `strict_max_records` cuts inside a batch).
- acknowledge by the acquiring member: ACCEPT -> ACKNOWLEDGED; RELEASE ->
  AVAILABLE; REJECT and GAP -> ARCHIVED; RENEW keeps it ACQUIRED with a new
  deadline. Any offset of an acknowledgement not ACQUIRED by that member fails the
  whole acknowledgement with INVALID_RECORD_STATE and changes nothing; bad
  ranges or types give INVALID_REQUEST.
- A return to AVAILABLE (release, lock timeout, the member leaving) of a record
  whose delivery count reached share.delivery.count.limit archives it instead
  (a poison record is delivered at most that many times).
- read_committed: the core reads up to the LSO; batches of aborted transactions
  are archived without being delivered. Control batches are archived in both
  isolation levels (a client has nothing to acknowledge in them). Offsets that a
  read skips (compacted away) are archived as gaps.
- SPSO advances past every leading ACKNOWLEDGED / ARCHIVED offset; when nothing
  is left in flight it is next_offset. A log start offset past SPSO moves SPSO to
  it (records deleted by retention are gone).

Persistence: each change returns nothing; `take_dirty()` gives the state batches
changed since the last call (ACQUIRED written as AVAILABLE with its delivery
count, as acquisition is not persisted, following Kafka), for the
WriteShareGroupState of the share-state store; `snapshot_batches()` gives all.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from .config import BY_DURATION, EARLIEST, AutoOffsetReset
from .errors import INVALID_RECORD_STATE, INVALID_REQUEST, ShareError
from .log_view import LogRead, ShareLog, aborted_offsets

EMPTY_MEMBER_ID = "00000000-0000-0000-0000-000000000000"  # Kafka's Uuid.ZERO_UUID: acquired by no member


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """The acknowledge types of ShareFetch / ShareAcknowledge (AcknowledgeTypes)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AcquiredRecords(NamedTuple):
    """One run of acquired offsets with one delivery count (ShareFetchResponse AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AckBatch(NamedTuple):
    """One AcknowledgementBatch: offsets first..last, with one type for all or one per offset."""

    first_offset: int
    last_offset: int
    types: Sequence[int]


class StateBatch(NamedTuple):
    """A persisted range of offsets in one state (0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str = EMPTY_MEMBER_ID
    deadline_ms: int = 0


@dataclass(slots=True)
class Counters:
    """What happened in this share partition (the metrics read them)."""

    acquired: int = 0
    acknowledged: int = 0
    released: int = 0
    rejected: int = 0
    archived: int = 0
    lock_timeouts: int = 0
    renewed: int = 0


_TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_DEFAULT_MAX_RECORDS = 500


@dataclass
class SharePartition:
    group_id: str
    topic: str
    partition: int
    max_in_flight: int = 2000
    delivery_count_limit: int = 5
    record_lock_duration_ms: int = 30_000
    read_committed: bool = False
    start_offset: int = 0
    next_offset: int = 0
    state_epoch: int = 0
    records: dict[int, InFlight] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    _locks: list[tuple[int, int, int]] = field(default_factory=list)  # heap of (deadline, first, last)
    _dirty: set[int] = field(default_factory=set)
    _start_dirty: bool = False

    # ---- construction --------------------------------------------------------------

    @classmethod
    def initial_start_offset(cls, reset: AutoOffsetReset, log: ShareLog, now_ms: int,
                             read_committed: bool = False) -> int:
        """SPSO of a share partition without persisted state (share.auto.offset.reset):
        earliest -> the log start; latest -> the LSO (read_committed) or the high
        watermark; by_duration -> the first offset with a timestamp at or after
        now - duration, else latest."""
        latest = log.last_stable_offset() if read_committed else log.high_watermark()
        if reset.strategy == EARLIEST:
            return log.log_start_offset()
        if reset.strategy == BY_DURATION:
            found = log.offset_for_timestamp(now_ms - reset.duration_ms)
            return latest if found is None else max(found, log.log_start_offset())
        return latest

    def load(self, start_offset: int, batches: Iterable[StateBatch], state_epoch: int = 0) -> None:
        """Take persisted state (ReadShareGroupState): SPSO and the state batches
        at or past it. The last batch's last offset bounds what was fetched."""
        self.records.clear()
        self._locks.clear()
        self._dirty.clear()
        self.start_offset = self.next_offset = start_offset
        self.state_epoch = state_epoch
        for b in sorted(batches):
            if b.last_offset < start_offset:
                continue
            state = RecordState(b.delivery_state)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            for offset in range(max(b.first_offset, start_offset), b.last_offset + 1):
                self.records[offset] = InFlight(state, b.delivery_count)
            self.next_offset = max(self.next_offset, b.last_offset + 1)
        self._advance_start()

    # ---- views -----------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """SPEO: the last offset in flight (SPSO - 1 when none is)."""
        return self.next_offset - 1

    def state_of(self, offset: int) -> tuple[RecordState, int] | None:
        """(state, delivery count) of an in-flight offset; None outside [SPSO, next_offset)."""
        if not self.start_offset <= offset < self.next_offset:
            return None
        rec = self.records.get(offset)
        return (RecordState.AVAILABLE, 0) if rec is None else (rec.state, rec.delivery_count)

    def delivery_complete_count(self) -> int:
        """In-flight offsets already ACKNOWLEDGED or ARCHIVED (past SPSO; Kafka's DeliveryCompleteCount)."""
        return sum(1 for r in self.records.values() if r.state in _TERMINAL)

    def in_flight(self) -> int:
        return self.next_offset - self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first AVAILABLE in-flight offset,
        else next_offset."""
        for offset in range(self.start_offset, self.next_offset):
            rec = self.records.get(offset)
            if rec is None or rec.state == RecordState.AVAILABLE:
                return offset
        return self.next_offset

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything: an AVAILABLE in-flight record, or room for new ones."""
        return self.next_fetch_offset() < self.next_offset or self.in_flight() < self.max_in_flight

    def acquired_by(self, member_id: str) -> list[int]:
        return [o for o, r in self.records.items() if r.state == RecordState.ACQUIRED and r.member_id == member_id]

    # ---- acquisition ------------------------------------------------------------------

    def acquire(self, member_id: str, read: LogRead, now_ms: int, max_records: int = _DEFAULT_MAX_RECORDS,
                strict_max_records: bool = False) -> list[AcquiredRecords]:
        """Acquire for `member_id` the deliverable offsets of the batches of `read`;
        the acquired runs, in offset order."""
        self.expire(now_ms)
        if not read.batches:
            return []
        skipped: list[tuple[int, int]] = list(aborted_offsets(read))
        skip_set = {o for first, last in skipped for o in range(first, last + 1)} if skipped else set()
        deadline = now_ms + self.record_lock_duration_ms
        acquired: list[int] = []
        first_base = read.batches[0].base_offset
        covered = max(first_base if read.fetch_offset < 0 else min(read.fetch_offset, first_base),
                      self.start_offset)
        for batch in read.batches:
            # Offsets the read skipped (removed by compaction) are never delivered.
            self._archive_gap(covered, batch.base_offset)
            covered = max(covered, batch.last_offset + 1)
            if batch.last_offset < self.start_offset:
                continue
            if len(acquired) >= max_records:
                break
            is_new = batch.last_offset >= self.next_offset
            if is_new and self.in_flight() >= self.max_in_flight and batch.base_offset >= self.next_offset:
                break
            for offset in range(max(batch.base_offset, self.start_offset), batch.last_offset + 1):
                if offset >= self.next_offset:
                    self.next_offset = offset + 1
                    rec = self.records[offset] = InFlight(RecordState.AVAILABLE, 0)
                else:
                    rec = self.records.get(offset)  # type: ignore[assignment]
                    if rec is None:
                        rec = self.records[offset] = InFlight(RecordState.AVAILABLE, 0)
                    elif rec.state != RecordState.AVAILABLE:
                        continue
                if offset in skip_set:
                    rec.state = RecordState.ARCHIVED
                    rec.delivery_count = max(rec.delivery_count, 1)
                    self._dirty.add(offset)
                    self.counters.archived += 1
                    continue
                if strict_max_records and len(acquired) >= max_records:
                    # The rest of the batch stays AVAILABLE for the next fetch.
                    continue
                rec.state = RecordState.ACQUIRED
                rec.delivery_count += 1
                rec.member_id = member_id
                rec.deadline_ms = deadline
                acquired.append(offset)
        if acquired:
            heapq.heappush(self._locks, (deadline, acquired[0], acquired[-1]))
            self.counters.acquired += len(acquired)
        self._advance_start()
        return self._runs(acquired)

    def _archive_gap(self, first: int, end: int) -> None:
        for offset in range(max(first, self.start_offset), min(end, self.next_offset)):
            rec = self.records.get(offset)
            if rec is None or rec.state == RecordState.AVAILABLE:
                self.records[offset] = InFlight(RecordState.ARCHIVED, rec.delivery_count if rec else 0)
                self._dirty.add(offset)
        if end > self.next_offset and first <= self.next_offset:
            for offset in range(max(self.next_offset, self.start_offset), end):
                self.records[offset] = InFlight(RecordState.ARCHIVED, 0)
                self._dirty.add(offset)
            self.next_offset = max(self.next_offset, end)

    def _runs(self, offsets: list[int]) -> list[AcquiredRecords]:
        runs: list[AcquiredRecords] = []
        for offset in offsets:
            count = self.records[offset].delivery_count
            if runs and runs[-1].last_offset == offset - 1 and runs[-1].delivery_count == count:
                runs[-1] = runs[-1]._replace(last_offset=offset)
            else:
                runs.append(AcquiredRecords(offset, offset, count))
        return runs

    # ---- acknowledgement --------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> None:
        """Apply the acknowledgements of `member_id`, all or nothing; ShareError
        INVALID_REQUEST (malformed) or INVALID_RECORD_STATE (an offset not acquired by
        this member) changes nothing."""
        self.expire(now_ms)
        plan: list[tuple[int, AckType]] = []
        previous_last = -1
        for b in batches:
            if b.first_offset > b.last_offset:
                raise ShareError(INVALID_REQUEST, f"acknowledgement batch {b.first_offset}-{b.last_offset}: "
                                                  "the first offset is after the last")
            if b.first_offset <= previous_last:
                raise ShareError(INVALID_REQUEST, "acknowledgement batches overlap or are out of order")
            previous_last = b.last_offset
            size = b.last_offset - b.first_offset + 1
            if len(b.types) not in (1, size):
                raise ShareError(INVALID_REQUEST, f"acknowledgement batch {b.first_offset}-{b.last_offset} has "
                                                  f"{len(b.types)} acknowledge types (1 or {size} expected)")
            for t in b.types:
                if t not in AckType._value2member_map_:
                    raise ShareError(INVALID_REQUEST, f"unknown acknowledge type {t}")
            for i, offset in enumerate(range(b.first_offset, b.last_offset + 1)):
                rec = self.records.get(offset) if self.start_offset <= offset < self.next_offset else None
                if rec is None or rec.state != RecordState.ACQUIRED or rec.member_id != member_id:
                    raise ShareError(INVALID_RECORD_STATE,
                                     f"offset {offset} of {self.topic}-{self.partition} is not acquired by member "
                                     f"{member_id}")
                plan.append((offset, AckType(b.types[0] if len(b.types) == 1 else b.types[i])))
        renewed_deadline = now_ms + self.record_lock_duration_ms
        renewed: list[int] = []
        for offset, ack in plan:
            rec = self.records[offset]
            if ack == AckType.ACCEPT:
                self._finish(offset, rec, RecordState.ACKNOWLEDGED)
                self.counters.acknowledged += 1
            elif ack == AckType.RELEASE:
                self._make_available(offset, rec)
                self.counters.released += 1
            elif ack == AckType.RENEW:
                rec.deadline_ms = renewed_deadline
                renewed.append(offset)
            else:  # REJECT, GAP
                self._finish(offset, rec, RecordState.ARCHIVED)
                if ack == AckType.REJECT:
                    self.counters.rejected += 1
                self.counters.archived += 1
        if renewed:
            heapq.heappush(self._locks, (renewed_deadline, renewed[0], renewed[-1]))
            self.counters.renewed += len(renewed)
        self._advance_start()

    def _finish(self, offset: int, rec: InFlight, state: RecordState) -> None:
        rec.state = state
        rec.member_id = EMPTY_MEMBER_ID
        self._dirty.add(offset)

    def _make_available(self, offset: int, rec: InFlight) -> None:
        """ACQUIRED -> AVAILABLE, or ARCHIVED when its deliveries reached the limit."""
        if rec.delivery_count >= self.delivery_count_limit:
            self._finish(offset, rec, RecordState.ARCHIVED)
            self.counters.archived += 1
        else:
            self._finish(offset, rec, RecordState.AVAILABLE)

    def release_member(self, member_id: str) -> int:
        """Release every record `member_id` holds (its share session closed or it
        left the group); how many."""
        released = 0
        for offset, rec in self.records.items():
            if rec.state == RecordState.ACQUIRED and rec.member_id == member_id:
                self._make_available(offset, rec)
                released += 1
        self.counters.released += released
        self._advance_start()
        return released

    def expire(self, now_ms: int) -> int:
        """Return to AVAILABLE (or archive) the records whose acquisition lock
        expired at or before `now_ms`; how many."""
        expired = 0
        while self._locks and self._locks[0][0] <= now_ms:
            deadline, first, last = heapq.heappop(self._locks)
            for offset in range(max(first, self.start_offset), last + 1):
                rec = self.records.get(offset)
                if rec is not None and rec.state == RecordState.ACQUIRED and rec.deadline_ms == deadline:
                    self._make_available(offset, rec)
                    expired += 1
        if expired:
            self.counters.lock_timeouts += expired
            self._advance_start()
        return expired

    def next_lock_deadline(self) -> int | None:
        """The earliest pending lock deadline (the core's timer wakes then), if any."""
        return self._locks[0][0] if self._locks else None

    # ---- start offset -------------------------------------------------------------------

    def _advance_start(self) -> None:
        start, records = self.start_offset, self.records
        while start < self.next_offset:
            rec = records.get(start)
            if rec is None or rec.state not in _TERMINAL:
                break
            del records[start]
            self._dirty.discard(start)
            start += 1
        if start != self.start_offset:
            self.start_offset = start
            self._start_dirty = True

    def on_log_start_offset(self, log_start: int) -> None:
        """The log's start moved to `log_start` (retention, DeleteRecords): offsets below it are gone."""
        if log_start <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start, self.next_offset)):
            self.records.pop(offset, None)
            self._dirty.discard(offset)
        self.start_offset = log_start
        self.next_offset = max(self.next_offset, log_start)
        self._start_dirty = True
        self._advance_start()

    def reset_start_offset(self, offset: int) -> None:
        """AlterShareGroupOffsets: start again at `offset` with nothing in flight."""
        self.records.clear()
        self._locks.clear()
        self._dirty.clear()
        self.start_offset = self.next_offset = offset
        self._start_dirty = True

    # ---- persistence --------------------------------------------------------------------

    def take_dirty(self) -> tuple[int, list[StateBatch]] | None:
        """(SPSO, the state batches changed since the last call), or None when nothing
        changed. ACQUIRED offsets are written as AVAILABLE with their delivery count."""
        if not self._dirty and not self._start_dirty:
            return None
        offsets = sorted(o for o in self._dirty if o >= self.start_offset)
        self._dirty.clear()
        self._start_dirty = False
        return self.start_offset, self._batches(offsets)

    def snapshot_batches(self) -> list[StateBatch]:
        """The state of every in-flight offset that has one."""
        return self._batches(sorted(self.records))

    def _batches(self, offsets: Iterable[int]) -> list[StateBatch]:
        out: list[StateBatch] = []
        for offset in offsets:
            rec = self.records.get(offset)
            if rec is None:
                continue
            state = RecordState.AVAILABLE if rec.state == RecordState.ACQUIRED else rec.state
            if out and out[-1].last_offset == offset - 1 and out[-1].delivery_state == state \
                    and out[-1].delivery_count == rec.delivery_count:
                out[-1] = out[-1]._replace(last_offset=offset)
            else:
                out.append(StateBatch(offset, offset, int(state), rec.delivery_count))
        return out


__all__ = ["EMPTY_MEMBER_ID", "AckBatch", "AckType", "AcquiredRecords", "Counters", "InFlight", "RecordState",
           "SharePartition", "StateBatch"]
