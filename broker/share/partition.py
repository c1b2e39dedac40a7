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
  a gap between persisted state batches is AVAILABLE with delivery count 0 (it is
  fetched again).
- The state is held per run of offsets (`InFlightRun`, as Kafka's InFlightBatch),
  not per offset: the batches one fetch acquires for a member become one run; a
  run is split only where acknowledgements, releases or lock timeouts treat its
  offsets differently, and equal neighbours merge again. Each operation costs
  per run it touches, not per record.

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
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from operator import attrgetter
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
class InFlightRun:
    """Offsets first..last in one state: an acquired range (all the batches one fetch
    acquired for a member), or a part of one whose offsets were acknowledged apart."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str = EMPTY_MEMBER_ID
    deadline_ms: int = 0

    def same(self, other: InFlightRun) -> bool:
        return (self.state == other.state and self.delivery_count == other.delivery_count
                and self.member_id == other.member_id and self.deadline_ms == other.deadline_ms)


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
_FIRST = attrgetter("first")


def _merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            if last > out[-1][1]:
                out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


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
    counters: Counters = field(default_factory=Counters)
    # The in-flight offsets [start_offset, next_offset) as runs in offset order, each
    # offset in exactly one run.
    _runs: list[InFlightRun] = field(default_factory=list)
    _locks: list[tuple[int, int, int]] = field(default_factory=list)  # heap of (deadline, first, last)
    _dirty: list[tuple[int, int]] = field(default_factory=list)  # offset ranges changed since take_dirty
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
        self._runs.clear()
        self._locks.clear()
        self._dirty.clear()
        self.start_offset = self.next_offset = start_offset
        self.state_epoch = state_epoch
        for b in sorted(batches):
            first = max(b.first_offset, self.next_offset)
            if b.last_offset < first:
                continue
            state = RecordState(b.delivery_state)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            self._grow(first)
            self._append_run(InFlightRun(first, b.last_offset, state, b.delivery_count))
            self.next_offset = b.last_offset + 1
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
        run = self._runs[self._index(offset)]
        return run.state, run.delivery_count

    def delivery_complete_count(self) -> int:
        """In-flight offsets already ACKNOWLEDGED or ARCHIVED (past SPSO; Kafka's DeliveryCompleteCount)."""
        return sum(r.last - r.first + 1 for r in self._runs if r.state in _TERMINAL)

    def in_flight(self) -> int:
        return self.next_offset - self.start_offset

    def runs(self) -> int:
        """How many runs hold the in-flight state (one per acquisition unless acknowledged apart)."""
        return len(self._runs)

    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first AVAILABLE in-flight offset,
        else next_offset."""
        for run in self._runs:
            if run.state == RecordState.AVAILABLE:
                return run.first
        return self.next_offset

    def read_end(self, max_records: int) -> int:
        """The offset a read from next_fetch_offset() need not go past to find `max_records`
        offsets to acquire: past that many AVAILABLE in-flight offsets and new ones."""
        wanted = max_records
        for run in self._runs:
            if run.state == RecordState.AVAILABLE:
                size = run.last - run.first + 1
                if size >= wanted:
                    return run.first + wanted
                wanted -= size
        return self.next_offset + wanted

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything: an AVAILABLE in-flight record, or room for new ones."""
        return self.next_fetch_offset() < self.next_offset or self.in_flight() < self.max_in_flight

    def acquired_by(self, member_id: str) -> list[int]:
        return [o for r in self._runs if r.state == RecordState.ACQUIRED and r.member_id == member_id
                for o in range(r.first, r.last + 1)]

    # ---- the runs ----------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """The index of the run holding in-flight `offset`."""
        return bisect_right(self._runs, offset, key=_FIRST) - 1

    def _split(self, offset: int) -> int:
        """Make `offset` (in [SPSO, next_offset]) the first of a run; that run's index
        (len(runs) at next_offset)."""
        runs = self._runs
        if offset >= self.next_offset:
            return len(runs)
        i = self._index(offset)
        run = runs[i]
        if run.first == offset:
            return i
        tail = InFlightRun(offset, run.last, run.state, run.delivery_count, run.member_id, run.deadline_ms)
        run.last = offset - 1
        runs.insert(i + 1, tail)
        return i + 1

    def _slice(self, first: int, last: int) -> tuple[int, int]:
        """Split so that runs[i:j] hold exactly the in-flight offsets first..last; (i, j)."""
        i = self._split(first)
        return i, self._split(last + 1)

    def _coalesce(self, i: int, j: int) -> None:
        """Merge equal neighbours among runs[i - 1:j + 1]."""
        runs = self._runs
        k = max(i, 1)
        end = min(j + 1, len(runs))
        while k < end:
            prev, run = runs[k - 1], runs[k]
            if prev.same(run):
                prev.last = run.last
                del runs[k]
                end -= 1
            else:
                k += 1

    def _append_run(self, run: InFlightRun) -> None:
        """Add `run` at the end (its first is next_offset), merged into the last run when equal."""
        runs = self._runs
        if runs and runs[-1].same(run):
            runs[-1].last = run.last
        else:
            runs.append(run)

    def _grow(self, end: int) -> None:
        """Offsets from next_offset to `end` (exclusive) become in flight, AVAILABLE, never delivered."""
        if end > self.next_offset:
            self._append_run(InFlightRun(self.next_offset, end - 1, RecordState.AVAILABLE, 0))
            self.next_offset = end

    # ---- acquisition ------------------------------------------------------------------

    def acquire(self, member_id: str, read: LogRead, now_ms: int, max_records: int = _DEFAULT_MAX_RECORDS,
                strict_max_records: bool = False) -> list[AcquiredRecords]:
        """Acquire for `member_id` the deliverable offsets of the batches of `read`;
        the acquired runs, in offset order."""
        self.expire(now_ms)
        if not read.batches:
            return []
        skipped = {first for first, _ in aborted_offsets(read)}
        deadline = now_ms + self.record_lock_duration_ms
        acquired: list[AcquiredRecords] = []
        count = 0
        first_base = read.batches[0].base_offset
        covered = max(first_base if read.fetch_offset < 0 else min(read.fetch_offset, first_base),
                      self.start_offset)
        for batch in read.batches:
            # Offsets the read skipped (removed by compaction) are never delivered.
            if batch.base_offset > covered:
                self._archive_gap(covered, batch.base_offset)
            covered = max(covered, batch.last_offset + 1)
            if batch.last_offset < self.start_offset:
                continue
            if count >= max_records:
                break
            is_new = batch.last_offset >= self.next_offset
            if is_new and self.in_flight() >= self.max_in_flight and batch.base_offset >= self.next_offset:
                break
            first = max(batch.base_offset, self.start_offset)
            if batch.base_offset in skipped:
                self._archive_available(first, batch.last_offset, 1)
                continue
            if first >= self.next_offset:
                # New offsets (the common case): one run, merged into the acquisition before it.
                last = batch.last_offset
                if strict_max_records and count + (last - first + 1) > max_records:
                    last = first + (max_records - count) - 1  # the rest of the batch stays AVAILABLE
                self._grow(first)
                self._append_run(InFlightRun(first, last, RecordState.ACQUIRED, 1, member_id, deadline))
                self.next_offset = last + 1
                self._grow(batch.last_offset + 1)
                count += self._note(acquired, first, last, 1)
                continue
            self._grow(batch.last_offset + 1)
            i, j = self._slice(first, batch.last_offset)
            runs = self._runs
            k = i
            while k < j:
                run = runs[k]
                k += 1
                if run.state != RecordState.AVAILABLE:
                    continue
                if strict_max_records:
                    if count >= max_records:
                        break
                    if count + (run.last - run.first + 1) > max_records:
                        self._split(run.first + (max_records - count))  # the rest stays AVAILABLE
                        j += 1
                run.state = RecordState.ACQUIRED
                run.delivery_count += 1
                run.member_id = member_id
                run.deadline_ms = deadline
                count += self._note(acquired, run.first, run.last, run.delivery_count)
            self._coalesce(i, j)
        if acquired:
            heapq.heappush(self._locks, (deadline, acquired[0].first_offset, acquired[-1].last_offset))
            self.counters.acquired += count
        self._advance_start()
        return acquired

    @staticmethod
    def _note(acquired: list[AcquiredRecords], first: int, last: int, delivery_count: int) -> int:
        """Add first..last to the answer's runs; how many offsets."""
        if acquired and acquired[-1].last_offset == first - 1 and acquired[-1].delivery_count == delivery_count:
            acquired[-1] = AcquiredRecords(acquired[-1].first_offset, last, delivery_count)
        else:
            acquired.append(AcquiredRecords(first, last, delivery_count))
        return last - first + 1

    def _archive_available(self, first: int, last: int, min_count: int) -> None:
        """Archive the AVAILABLE offsets of first..last (the read's aborted or control
        batches), with a delivery count of at least `min_count`."""
        self._grow(last + 1)
        i, j = self._slice(first, last)
        archived = 0
        for run in self._runs[i:j]:
            if run.state == RecordState.AVAILABLE:
                run.state = RecordState.ARCHIVED
                run.delivery_count = max(run.delivery_count, min_count)
                archived += run.last - run.first + 1
                self._dirty.append((run.first, run.last))
        self.counters.archived += archived
        self._coalesce(i, j)

    def _archive_gap(self, first: int, end: int) -> None:
        lo, hi = max(first, self.start_offset), min(end, self.next_offset) - 1
        if lo <= hi:
            i, j = self._slice(lo, hi)
            for run in self._runs[i:j]:
                if run.state == RecordState.AVAILABLE:
                    run.state = RecordState.ARCHIVED
                    self._dirty.append((run.first, run.last))
            self._coalesce(i, j)
        if end > self.next_offset and first <= self.next_offset:
            lo = max(self.next_offset, self.start_offset)
            self._append_run(InFlightRun(lo, end - 1, RecordState.ARCHIVED, 0))
            self._dirty.append((lo, end - 1))
            self.next_offset = end

    # ---- acknowledgement --------------------------------------------------------------

    def _check_acquired(self, member_id: str, first: int, last: int) -> None:
        """ShareError INVALID_RECORD_STATE naming the first offset of first..last not
        acquired by `member_id`."""
        bad = None
        if first < self.start_offset:
            bad = first
        else:
            runs = self._runs
            i = self._index(first) if first < self.next_offset else len(runs)
            while i < len(runs) and runs[i].first <= last:
                run = runs[i]
                if run.state != RecordState.ACQUIRED or run.member_id != member_id:
                    bad = max(run.first, first)
                    break
                i += 1
            if bad is None and last >= self.next_offset:
                bad = max(first, self.next_offset)
        if bad is not None:
            raise ShareError(INVALID_RECORD_STATE, f"offset {bad} of {self.topic}-{self.partition} is not acquired "
                                                   f"by member {member_id}")

    def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> None:
        """Apply the acknowledgements of `member_id`, all or nothing; ShareError
        INVALID_REQUEST (malformed) or INVALID_RECORD_STATE (an offset not acquired by
        this member) changes nothing."""
        self.expire(now_ms)
        plan: list[tuple[int, int, AckType]] = []
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
            for t in set(b.types):
                if t not in AckType._value2member_map_:
                    raise ShareError(INVALID_REQUEST, f"unknown acknowledge type {t}")
            self._check_acquired(member_id, b.first_offset, b.last_offset)
            if len(b.types) == 1:
                plan.append((b.first_offset, b.last_offset, AckType(b.types[0])))
                continue
            run_first = b.first_offset
            for i in range(1, size + 1):
                if i == size or b.types[i] != b.types[i - 1]:
                    plan.append((run_first, b.first_offset + i - 1, AckType(b.types[i - 1])))
                    run_first = b.first_offset + i
        renewed_deadline = now_ms + self.record_lock_duration_ms
        renewed: list[tuple[int, int]] = []
        counters = self.counters
        for first, last, ack in plan:
            size = last - first + 1
            i, j = self._slice(first, last)
            for run in self._runs[i:j]:
                if ack == AckType.ACCEPT:
                    self._finish(run, RecordState.ACKNOWLEDGED)
                elif ack == AckType.RELEASE:
                    self._make_available(run)
                elif ack == AckType.RENEW:
                    run.deadline_ms = renewed_deadline
                else:  # REJECT, GAP
                    self._finish(run, RecordState.ARCHIVED)
            if ack == AckType.ACCEPT:
                counters.acknowledged += size
            elif ack == AckType.RELEASE:
                counters.released += size
            elif ack == AckType.RENEW:
                renewed.append((first, last))
            else:
                if ack == AckType.REJECT:
                    counters.rejected += size
                counters.archived += size
            self._coalesce(i, j)
        if renewed:
            heapq.heappush(self._locks, (renewed_deadline, renewed[0][0], renewed[-1][1]))
            counters.renewed += sum(last - first + 1 for first, last in renewed)
        self._advance_start()

    def _finish(self, run: InFlightRun, state: RecordState) -> None:
        run.state = state
        run.member_id = EMPTY_MEMBER_ID
        run.deadline_ms = 0
        self._dirty.append((run.first, run.last))

    def _make_available(self, run: InFlightRun) -> None:
        """ACQUIRED -> AVAILABLE, or ARCHIVED when its deliveries reached the limit."""
        if run.delivery_count >= self.delivery_count_limit:
            self._finish(run, RecordState.ARCHIVED)
            self.counters.archived += run.last - run.first + 1
        else:
            self._finish(run, RecordState.AVAILABLE)

    def release_member(self, member_id: str) -> int:
        """Release every record `member_id` holds (its share session closed or it
        left the group); how many."""
        released = 0
        for run in self._runs:
            if run.state == RecordState.ACQUIRED and run.member_id == member_id:
                released += run.last - run.first + 1
                self._make_available(run)
        if released:
            self.counters.released += released
            self._coalesce(0, len(self._runs))
            self._advance_start()
        return released

    def expire(self, now_ms: int) -> int:
        """Return to AVAILABLE (or archive) the records whose acquisition lock
        expired at or before `now_ms`; how many."""
        expired = 0
        while self._locks and self._locks[0][0] <= now_ms:
            deadline, first, last = heapq.heappop(self._locks)
            first, last = max(first, self.start_offset), min(last, self.next_offset - 1)
            if first > last:
                continue
            i = self._index(first)
            runs = self._runs
            hit = False
            while i < len(runs) and runs[i].first <= last:
                run = runs[i]
                if run.state == RecordState.ACQUIRED and run.deadline_ms == deadline:
                    hit = True
                    break
                i += 1
            if not hit:
                continue
            i, j = self._slice(first, last)
            for run in runs[i:j]:
                if run.state == RecordState.ACQUIRED and run.deadline_ms == deadline:
                    expired += run.last - run.first + 1
                    self._make_available(run)
            self._coalesce(i, j)
        if expired:
            self.counters.lock_timeouts += expired
            self._advance_start()
        return expired

    def next_lock_deadline(self) -> int | None:
        """The earliest pending lock deadline (the core's timer wakes then), if any."""
        return self._locks[0][0] if self._locks else None

    # ---- start offset -------------------------------------------------------------------

    def _advance_start(self) -> None:
        runs = self._runs
        k = 0
        while k < len(runs) and runs[k].state in _TERMINAL:
            k += 1
        if k:
            del runs[:k]
        start = runs[0].first if runs else self.next_offset
        if start != self.start_offset:
            self.start_offset = start
            self._start_dirty = True

    def on_log_start_offset(self, log_start: int) -> None:
        """The log's start moved to `log_start` (retention, DeleteRecords): offsets below it are gone."""
        if log_start <= self.start_offset:
            return
        if log_start >= self.next_offset:
            self._runs.clear()
        else:
            del self._runs[:self._split(log_start)]
        self.start_offset = log_start
        self.next_offset = max(self.next_offset, log_start)
        self._start_dirty = True
        self._advance_start()

    def reset_start_offset(self, offset: int) -> None:
        """AlterShareGroupOffsets: start again at `offset` with nothing in flight."""
        self._runs.clear()
        self._locks.clear()
        self._dirty.clear()
        self.start_offset = self.next_offset = offset
        self._start_dirty = True

    # ---- persistence --------------------------------------------------------------------

    def has_changes(self) -> bool:
        """Whether take_dirty has something to write."""
        return bool(self._dirty) or self._start_dirty

    def take_dirty(self) -> tuple[int, list[StateBatch]] | None:
        """(SPSO, the state batches changed since the last call), or None when nothing
        changed. ACQUIRED offsets are written as AVAILABLE with their delivery count."""
        if not self._dirty and not self._start_dirty:
            return None
        out: list[StateBatch] = []
        runs = self._runs
        for first, last in _merge_ranges(self._dirty):
            first, last = max(first, self.start_offset), min(last, self.next_offset - 1)
            if first > last:
                continue
            i = self._index(first)
            while i < len(runs) and runs[i].first <= last:
                run = runs[i]
                self._add_batch(out, max(run.first, first), min(run.last, last), run)
                i += 1
        self._dirty.clear()
        self._start_dirty = False
        return self.start_offset, out

    def snapshot_batches(self) -> list[StateBatch]:
        """The state of every in-flight offset that has one (not AVAILABLE and never delivered)."""
        out: list[StateBatch] = []
        for run in self._runs:
            if run.state != RecordState.AVAILABLE or run.delivery_count:
                self._add_batch(out, run.first, run.last, run)
        return out

    @staticmethod
    def _add_batch(out: list[StateBatch], first: int, last: int, run: InFlightRun) -> None:
        state = int(RecordState.AVAILABLE if run.state == RecordState.ACQUIRED else run.state)
        if out and out[-1].last_offset == first - 1 and out[-1].delivery_state == state \
                and out[-1].delivery_count == run.delivery_count:
            out[-1] = StateBatch(out[-1].first_offset, last, state, run.delivery_count)
        else:
            out.append(StateBatch(first, last, state, run.delivery_count))


__all__ = ["EMPTY_MEMBER_ID", "AckBatch", "AckType", "AcquiredRecords", "Counters", "InFlightRun", "RecordState",
           "SharePartition", "StateBatch"]
