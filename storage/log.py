"""The partition log: append, read, roll, flush and look up offsets.

Contract:
- Thread-safe. Appends, rolls and truncations are serialized by one lock; reads
  take no lock: they use a snapshot of the segment list and of the log end, so
  they never see a half-written entry nor an entry past the log end.
- Every call is a bounded piece of blocking work (one validated message set, one
  fsync, one segment scan). The broker decides where each runs (broker/core/:
  reads and small appends with no fsync due on its event loop, the rest in an
  executor).
- `append` returns only after the data is written (and fsynced when
  `flush.messages` says so): an acknowledged append survives a process crash.
- An OSError of an append or a flush (disk full, I/O error) raises
  KafkaStorageError (code 56) through `io_errors` (storage/io_errors.py: one
  log line per episode); the failed append leaves the log as it was (the
  segment cuts back what it wrote), so appends resume as soon as writes work.
- A roll schedules no fsync of its own: `flush_rolled()` (called by the
  manager's periodic task) fsyncs segments that rolled and moves the recovery
  point, as Kafka's asynchronous flush-on-roll does.
- The active segment's appends reserve disk blocks ahead of them
  (RESERVE_AHEAD_BYTES, FileRecords' contract): the files' sizes and bytes do
  not change, and a roll or close gives the rest back.
- The Log owns its lock; the layer below it (LogSegments, the swap protocol of
  storage/segment_swap.py, the renames to `.deleted` of
  storage/pending_deletions.py) is not thread-safe and is changed only through
  the Log's locked mutators, as Kafka's LocalLog relies on UnifiedLog's lock:
  - `roll()` starts a new active segment;
  - `remove_segments(segments, reason)` removes the log's oldest segments for a
    retention reason: it rolls first when every segment goes, moves the log start
    to the first segment left (before the segments leave the copy-on-write list,
    so a reader that sees the list without them sees the new start) and renames
    their files to `.deleted`; the files go `file.delete.delay.ms` later, in
    `delete_due_files`. Readers holding an older snapshot or a FileSlice keep
    reading: nothing is closed at this point;
  - `delete_old_segments()` / `delete_segments_below_log_start()` ask the
    retention policy (storage/retention.py) rule by rule, each rule one step under
    the lock (decide, then remove), and log what went;
  - `replace_segments(new, old)` swaps a cleaned segment in (storage/segment_swap.py);
    the cleaner (storage/cleaner.py) writes it outside the lock and ends with this
    call, as Kafka's Cleaner.cleanSegments ends in replaceSegments.
- Idempotent producers (storage/producer_state.py): `append` checks batches with
  producerId >= 0 against `producer_state` after assigning offsets and before
  writing, under the lock, for both protocols (native clients send producerId -1
  and are not tracked). A duplicate of a cached batch returns the original offsets
  and writes nothing; a gap or a stale epoch raises. Every log (with producers or
  not) writes a snapshot at each roll, at close, and at a recovery-point
  checkpoint: a flush that brings the recovery point to the log end encodes the
  state under the lock, and `write_checkpoint_snapshot()` (the manager's
  checkpoint, before the recovery-point file) writes it, so an unclean start
  finds a snapshot at its recovery point and replays only the data above it.
  `prune_snapshots` (after the checkpoint file) drops the ones no start will use;
  snapshots below the log start go with it.
- Transactions: a transactional batch opens its producer's transaction;
  `append_txn_marker` (the coordinator's WriteTxnMarkers, under the lock) writes
  the COMMIT/ABORT control batch that closes it and, for an abort, the
  `.txnindex` entry of the segment holding the marker, before the end moves.
  The producer state is updated before the log end moves, so a lock-free reader
  never sees data of a transaction the last stable offset does not yet hold back.
  `last_stable_offset` (the first offset of the oldest open transaction, else the
  log end; never below the log start), `read(..., max_offset=)` (a read_committed
  fetch stops there), `fetch_upper_bound` and `aborted_transactions` (Kafka's
  collectAbortedTransactions) serve read_committed fetches, lock-free.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from kafka_format.errors import KafkaStorageError, OffsetOutOfRangeError, RecordListTooLargeError, RecordValidationError

from . import retention
from .clock import SYSTEM_CLOCK, SystemClock
from .config import LogConfig
from .file_records import FileSlice
from .fileutil import segment_file_name
from .io_errors import StorageErrorEpisodes
from .loader import LogLoader
from .max_timestamp import max_timestamp_in
from .pending_deletions import PendingDeletions
from .producer_state import ProducerStateManager
from .producer_state import logger as producer_state_logger
from .retention import RetentionResult
from .segment import LogSegment, TimestampOffset
from .segment_swap import SwapAborted, swap_segments
from .segments import LogSegments
from .txn_index import AbortedTxn
from .txn_markers import TxnMarker, marker_set
from .validator import validate_and_assign

# How far past an append the active segment's blocks are reserved, at most
# (capped by segment.bytes). Writing into reserved blocks skips ext4's per-page
# delayed allocation, a large share of a big append's cost (bench/storage.py
# prints plain writes and writes into reserved blocks side by side). 2 MiB keeps
# the space held per partition small, and one fallocate serves many appends.
RESERVE_AHEAD_BYTES = 2 * 1024 * 1024

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest), `fetch_offset_by_timestamp`
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    log_start_offset: int


class LogEnd(NamedTuple):
    """The log end offset and where it sits: what a reader may see."""

    offset: int
    segment: LogSegment
    position: int


class Log:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 segments: LogSegments, *, log_start_offset: int, recovery_point: int,
                 next_offset: int, clock: SystemClock = SYSTEM_CLOCK,
                 rng: random.Random | None = None,
                 producer_state: ProducerStateManager | None = None,
                 io_errors: StorageErrorEpisodes | None = None):
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments = segments
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._last_flush_ms = clock.monotonic_ms()
        self._closed = False
        self.io_errors = io_errors or StorageErrorEpisodes(directory)
        # (offset, bytes) of the producer state at the last flush that reached the log end,
        # waiting for the next recovery-point checkpoint to be written as a snapshot.
        self._flushed_state: tuple[int, bytes] | None = None
        self.pending_deletions = PendingDeletions()  # `.deleted` segments awaiting file.delete.delay.ms
        active = segments.active
        self._end = LogEnd(next_offset, active, active.size)
        # Idempotent producers (storage/producer_state.py): checked under self._lock in append.
        if producer_state is None:
            producer_state = ProducerStateManager(directory, f"{topic}-{partition}")
            producer_state.refresh_snapshots()
            producer_state.update_end_offset(next_offset)
        self.producer_state = producer_state

    @classmethod
    def open(cls, directory: str, topic: str, partition: int, config: LogConfig, *,
             log_start_offset: int = 0, recovery_point: int = 0, had_clean_shutdown: bool = False,
             clock: SystemClock = SYSTEM_CLOCK, rng: random.Random | None = None,
             io_errors: StorageErrorEpisodes | None = None) -> Log:
        """Open (creating if needed) and recover the log in `directory`."""
        os.makedirs(directory, exist_ok=True)
        rng = rng or random.Random()
        loaded = LogLoader(directory, config, clock=clock, log_start_offset=log_start_offset,
                           recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown,
                           roll_jitter=lambda: roll_jitter_ms(config, rng)).load()
        producer_state = ProducerStateManager(directory, f"{topic}-{partition}")
        producer_state.load(loaded.segments, log_end=loaded.next_offset,
                            had_clean_shutdown=had_clean_shutdown, now_ms=clock.time_ms(),
                            recovery_point=loaded.recovery_point, log_start=loaded.log_start_offset,
                            rebuild_txn_index_from=loaded.txn_rebuild_from)
        return cls(directory, topic, partition, config, loaded.segments,
                   log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
                   next_offset=loaded.next_offset, clock=clock, rng=rng, producer_state=producer_state,
                   io_errors=io_errors)

    # ---- state --------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_end_offset(self) -> int:
        return self._end.offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.active

    @property
    def size_in_bytes(self) -> int:
        return self.segments.snapshot().size_in_bytes()

    def update_config(self, config: LogConfig) -> None:
        self.config = config  # one reference swap: readers see the old or the new whole

    # ---- appending ----------------------------------------------------------------------

    def append(self, data, *, in_place: bool = False) -> AppendResult:
        """Validate `data` (a message set), assign offsets and write it.

        `in_place=True` lets the validator patch a writable `data` the caller
        no longer needs (a request frame) instead of copying it."""
        with self._lock:
            self._check_open()
            config = self.config
            now = self._clock.time_ms()
            try:
                validated = validate_and_assign(data, next_offset=self._end.offset, now_ms=now, config=config,
                                                in_place=in_place)
            except RecordValidationError as e:
                raise e.in_partition(self.topic, self.partition) from None
            # Idempotent producers: check before writing; a duplicate is answered, not written.
            producer_update = self.producer_state.check(validated)
            if producer_update is not None and producer_update.duplicate is not None:
                dup = producer_update.duplicate
                return AppendResult(dup.first_offset, dup.last_offset,
                                    dup.timestamp if validated.log_append_time != -1 else -1,
                                    dup.offset_delta + 1, self._log_start_offset)
            size = len(validated.buffer)
            if size > config.segment_bytes:
                raise RecordListTooLargeError(
                    f"message set of {size} bytes is larger than segment.bytes {config.segment_bytes}")
            try:
                segment = self._maybe_roll(size, validated, now, config)
                segment.append(validated.last_offset, validated,
                               min(RESERVE_AHEAD_BYTES, config.segment_bytes))
            except OSError as e:
                raise self.io_errors.failed(e, operation="append", log_name=self.name) from None
            self.io_errors.succeeded()
            # The producer state first: a reader that sees the new end sees the
            # transactions it opened (the last stable offset never passes them).
            end_offset = validated.last_offset + 1
            if producer_update is not None:
                self.producer_state.apply(producer_update, end_offset)
            else:
                self.producer_state.update_end_offset(end_offset)
            self._end = LogEnd(end_offset, segment, segment.size)
            flush_due = end_offset - self._recovery_point >= config.flush_messages
        if flush_due:
            self.flush()
        return AppendResult(validated.first_offset, validated.last_offset, validated.log_append_time,
                            validated.record_count, self._log_start_offset)

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool) -> AppendResult:
        """Write a COMMIT or ABORT marker for the producer's transaction (Kafka's
        WriteTxnMarkers on one partition, storage/txn_markers.py): it closes the open
        transaction, if any; an aborted one is recorded in the `.txnindex` of the
        segment that holds the marker, before the last stable offset moves past it.
        InvalidProducerEpochError / TransactionCoordinatorFencedError for a stale
        marker; then nothing is written."""
        with self._lock:
            self._check_open()
            config = self.config
            now = self._clock.time_ms()
            offset = self._end.offset
            validated = marker_set(TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit, now),
                                   offset, config)
            update, completed = self.producer_state.check_marker(
                TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit, now), offset)
            try:
                segment = self._maybe_roll(len(validated.buffer), validated, now, config)
                segment.append(offset, validated, min(RESERVE_AHEAD_BYTES, config.segment_bytes))
                if completed is not None and completed.aborted:
                    segment.txn_index.append(AbortedTxn(
                        producer_id, completed.first_offset, completed.last_offset,
                        self.producer_state.last_stable_offset_after(completed)))
            except OSError as e:
                raise self.io_errors.failed(e, operation="append", log_name=self.name) from None
            self.io_errors.succeeded()
            self.producer_state.apply(update, offset + 1)
            self._end = LogEnd(offset + 1, segment, segment.size)
            flush_due = self._end.offset - self._recovery_point >= config.flush_messages
        if flush_due:
            self.flush()
        return AppendResult(offset, offset, validated.log_append_time, 1, self._log_start_offset)

    def _maybe_roll(self, size: int, validated, now: int, config: LogConfig) -> LogSegment:
        segment = self._end.segment
        if segment.should_roll(messages_size=size, max_timestamp_in_messages=validated.max_timestamp,
                               max_offset_in_messages=validated.last_offset, now_ms=now,
                               segment_bytes=config.segment_bytes, segment_ms=config.segment_ms):
            return self._roll(validated.first_offset)
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op when the active one is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._end.offset)

    def _roll(self, expected_next_offset: int) -> LogSegment:
        new_base = max(expected_next_offset, self._end.offset)
        active = self._end.segment
        if active.base_offset == new_base and active.size == 0:
            return active
        config = self.config
        for suffix in (".index", ".timeindex", ".txnindex"):  # stale leftovers would be taken as valid
            stale = os.path.join(self.directory, segment_file_name(new_base, suffix))
            if os.path.exists(stale):
                os.unlink(stale)
        if os.path.exists(os.path.join(self.directory, segment_file_name(new_base, ".log"))):
            raise KafkaStorageError(f"{self.name}: segment {new_base} already exists; cannot roll")
        active.on_became_inactive()
        segment = LogSegment.open(self.directory, new_base, index_interval_bytes=config.index_interval_bytes,
                                  max_index_size=config.segment_index_bytes,
                                  roll_jitter_ms=roll_jitter_ms(config, self._rng), clock=self._clock)
        self.segments.add(segment)
        self._end = LogEnd(self._end.offset, segment, 0)
        # Kafka snapshots the producer state at every roll, at the new segment's base. The
        # snapshot only spares a later start some reading: a failure (a full disk) does
        # not fail the append that rolled.
        try:
            self.producer_state.take_snapshot(new_base, self._clock.time_ms())
        except OSError as e:
            self.io_errors.failed(e, operation="producer state snapshot", log_name=self.name)
        return segment

    # ---- reading ------------------------------------------------------------------

    def first_unstable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the log end."""
        end = self._end.offset  # first: the producer state is updated before the end moves
        first = self.producer_state.first_unstable_offset
        return end if first is None else min(first, end)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first unstable offset (the high watermark is the log end on
        one node), never below the log start."""
        return max(self.first_unstable_offset(), self._log_start_offset)

    def read(self, offset: int, max_bytes: int, min_one_message: bool = False,
             max_offset: int | None = None) -> FileSlice:
        """Entries from the one holding `offset`, at most `max_bytes` (see LogSegment.read).

        At the log end: an empty slice. Below the log start or past the log end:
        OffsetOutOfRangeError. `max_offset` (the last stable offset, for a
        read_committed fetch) stops the read before the batch holding it: at or
        past it the slice is empty. The caller releases the slice when sent."""
        end = self._end
        snapshot = self.segments.snapshot()  # before the start: retention moves the start first
        start = self._log_start_offset
        if offset == end.offset:
            return end.segment.log.slice(end.position, 0)
        if offset < start or offset > end.offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {end.offset}] for {self.name}")
        bound = None  # (segment, position) the read stops at
        if max_offset is not None and max_offset < end.offset:
            if offset >= max_offset:
                return end.segment.log.slice(end.position, 0)
            bound = self._position_of(snapshot, max_offset, end)
        segment = snapshot.floor(offset) or snapshot.first
        while segment is not None:
            max_position = end.position if segment is end.segment else None
            if bound is not None and segment is bound[0]:
                max_position = bound[1]
            found = segment.read(offset, max_bytes, max_position, min_one_message)
            if found is not None:
                return found
            if segment is end.segment or (bound is not None and segment is bound[0]):
                break
            segment = snapshot.higher(segment.base_offset)
        return end.segment.log.slice(end.position, 0)

    @staticmethod
    def _position_of(snapshot, offset: int, end: LogEnd) -> tuple[LogSegment, int]:
        """The segment and position of the batch holding `offset` (below the log end)."""
        segment = snapshot.floor(offset) or snapshot.first
        max_position = end.position if segment is end.segment else None
        found = segment.translate_offset(offset)
        if found is None or (max_position is not None and found.position >= max_position):
            return segment, segment.size if max_position is None else max_position
        return segment, found.position

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper_bound), from the
        `.txnindex` of each segment from the one holding `start` on, until an entry
        shows that no later one can overlap (Kafka's collectAbortedTransactions: an
        entry lives in its marker's segment, which may come after `upper_bound`).
        Lock-free: a reader's view of the segments."""
        snapshot = self.segments.snapshot()
        found: list[AbortedTxn] = []
        for segment in snapshot.from_offset(start):
            txns, complete = segment.txn_index.collect(start, upper_bound)
            found += txns
            if complete:
                break
        return found

    def fetch_upper_bound(self, offset: int, found: FileSlice, limit: int) -> int:
        """The offset just past what a read from `offset` returned in `found`, at most
        `limit` (Kafka's fetchUpperBoundOffset): the next batch's base offset, or the
        next segment's base when the read ended its segment."""
        snapshot = self.segments.snapshot()
        segment = snapshot.floor(offset) or snapshot.first
        while segment is not None and segment.log is not found.records:
            segment = snapshot.higher(segment.base_offset)
        if segment is None:
            return limit
        stop = found.position + found.length
        start = max(found.position, segment.offset_index.lookup_by_position(stop).position)
        for header in segment.log.iter_headers(start):
            if header.position >= stop:
                return min(header.base_offset, limit)
            if header.position + header.size > stop:  # a batch the read cut: counted in
                return min(header.last_offset + 1, limit)
        following = snapshot.higher(segment.base_offset)
        return limit if following is None else min(following.base_offset, limit)

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The earliest record whose timestamp is >= `timestamp` (Kafka's
        fetchOffsetByTimestamp); -2/-1 give the log start / end offsets."""
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, self._log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self._end.offset)
        start = self._log_start_offset
        for segment in self.segments.snapshot():
            if segment.max_timestamp_so_far < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    def fetch_offset_by_timestamp(self, timestamp: int, read_committed: bool = False) -> TimestampOffset | None:
        """The (timestamp, offset) a ListOffsets `timestamp` names (Kafka's
        UnifiedLog.fetchOffsetByTimestamp); the special timestamps answer timestamp -1:
        LATEST_TIMESTAMP the log end (`read_committed`: the last stable offset),
        EARLIEST_TIMESTAMP and EARLIEST_LOCAL_TIMESTAMP the log start (nothing is
        tiered), LATEST_TIERED_TIMESTAMP offset -1 (nothing is tiered),
        MAX_TIMESTAMP the first record holding the largest timestamp
        (storage/max_timestamp.py), any other the first record whose timestamp is
        >= it. None: no record answers it. The log ends are read from memory; a
        lookup reads segments (blocking)."""
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self.last_stable_offset if read_committed else self._end.offset)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampOffset(-1, self._log_start_offset)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampOffset(-1, -1)
        if timestamp == MAX_TIMESTAMP:
            start = self._log_start_offset
            return max_timestamp_in(self.segments.snapshot(), start)
        return self.offset_for_timestamp(timestamp)

    def increase_log_start_offset(self, new_start: int, persist: Callable[[int], None] | None = None) -> int:
        """Move the log start offset forward to `new_start` (DELETE_RECORDS); records
        below it can no longer be read. Returns the log start offset. `persist(new_start)`
        runs first, under the lock (LogManager writes the checkpoint): when it raises,
        nothing changes."""
        with self._lock:
            self._check_open()
            if new_start > self._end.offset:
                raise OffsetOutOfRangeError(
                    f"offset {new_start} is past the log end {self._end.offset} of {self.name}")
            if new_start > self._log_start_offset:
                if persist is not None:
                    persist(new_start)
                self._update_log_start_offset(new_start)
            return self._log_start_offset

    def _update_log_start_offset(self, offset: int) -> None:
        """Kafka's updateLogStartOffset (lock held): the recovery point follows the start."""
        self._log_start_offset = offset
        if self._recovery_point < offset:
            self._recovery_point = offset
        self.producer_state.delete_snapshots_below(offset)

    # ---- removing segments (retention, DELETE_RECORDS) -------------------------------------

    def delete_old_segments(self, now_ms: int | None = None) -> RetentionResult:
        """Kafka's retention pass: segments below the log start, past retention.bytes,
        older than retention.ms go (the rules: storage/retention.py)."""
        now = self._clock.time_ms() if now_ms is None else now_ms
        return self._apply_retention(retention.rules(self.config), now)

    def delete_segments_below_log_start(self) -> RetentionResult:
        """Only the log-start-offset rule (whole segments below it go), for DELETE_RECORDS."""
        return self._apply_retention((retention.LOG_START_OFFSET,), self._clock.time_ms())

    def remove_segments(self, segments: Sequence[LogSegment], reason: str) -> RetentionResult:
        """Remove `segments`, the log's oldest in order, for `reason` (one of
        retention.REASONS), under the lock (see the module contract). The first
        segment that is no longer the log's (a concurrent pass or a cleaner swap
        took it) and every one after it stay."""
        if reason not in retention.REASONS:
            raise ValueError(f"unknown segment deletion reason {reason!r}")
        started = time.perf_counter()
        result = RetentionResult(self.name, self._log_start_offset)
        with self._lock:
            self._check_open()
            self._remove_oldest_segments(segments, reason, result)
        return self._finish_removal(result, started)

    def _apply_retention(self, reasons: Sequence[str], now_ms: int) -> RetentionResult:
        started = time.perf_counter()
        result = RetentionResult(self.name, self._log_start_offset)
        for reason in reasons:
            with self._lock:  # one rule, one step: decide on the current list, then remove
                if self._closed:
                    break
                chosen = retention.deletion(reason, self.segments.snapshot(), config=self.config,
                                            log_start_offset=self._log_start_offset, now_ms=now_ms,
                                            log_name=self.name)
                if chosen is not None:
                    self._remove_oldest_segments(chosen.segments, chosen.reason, result)
        return self._finish_removal(result, started)

    def _finish_removal(self, result: RetentionResult, started: float) -> RetentionResult:
        result.log_start_offset = self._log_start_offset
        result.duration_ms = (time.perf_counter() - started) * 1000
        retention.log_result(result)
        return result

    def _remove_oldest_segments(self, segments: Sequence[LogSegment], reason: str,
                                result: RetentionResult) -> None:
        """Kafka's deleteSegments (lock held): see `remove_segments`."""
        current = self.segments.snapshot().segments
        count = 0
        for mine, theirs in zip(current, segments, strict=False):
            if mine is not theirs:
                break
            count += 1
        doomed = list(segments[:count])
        if not doomed:
            return
        if count == len(current):
            # A log always has a segment: roll an empty one at the log end first.
            rolled = self._roll(self._end.offset)
            result.rolled = True
            if doomed[-1] is rolled:
                doomed.pop()
            if not doomed:
                return
        following = self.segments.snapshot().higher(doomed[-1].base_offset)
        assert following is not None  # the roll above guarantees a survivor
        if following.base_offset > self._log_start_offset:
            self._update_log_start_offset(following.base_offset)
        stats = result.deleted[reason]
        for segment in doomed:
            stats.segments += 1
            stats.bytes += segment.size
            self.segments.remove(segment.base_offset)
        self._retire(doomed)

    def _retire(self, segments: list[LogSegment]) -> None:
        """Rename segments that left the list to `.deleted`; their files go after
        file.delete.delay.ms (lock held)."""
        self.pending_deletions.retire(segments, self._clock.monotonic_ms() + self.config.file_delete_delay_ms)

    def delete_due_files(self, now_ms: int | None = None) -> int:
        """Remove the files of deleted segments whose file.delete.delay.ms has passed
        (`now_ms` on the clock's monotonic scale); returns how many segments."""
        return self.pending_deletions.delete_due(self._clock.monotonic_ms() if now_ms is None else now_ms)

    # ---- compaction (storage/cleaner.py, storage/segment_swap.py) -------------------------

    def replace_segments(self, new_segment: LogSegment, old_segments: list[LogSegment],
                         step: Callable[[str], None] | None = None) -> None:
        """Swap a cleaned segment (files `.cleaned`) in for `old_segments`, crash-safely,
        under the lock (storage/segment_swap.py). SwapAborted when the log is closed or
        the old segments are no longer all its own; then nothing changed."""
        with self._lock:
            if self._closed:
                raise SwapAborted(f"log {self.name} is closed")
            swap_segments(self.directory, self.segments, new_segment, old_segments, self._retire,
                          log_name=self.name, step=step or _no_step)

    def last_offsets_of_active_producers(self) -> dict[int, int]:
        """Each active idempotent producer's last offset, read under the lock (Kafka's
        lastRecordsOfActiveProducers): the cleaner keeps those batches."""
        with self._lock:
            return {pid: entry.last_offset for pid, entry in self.producer_state.producers.items()
                    if entry.last_offset >= 0}

    # ---- durability -------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below `up_to` (default: the log end) and move the recovery point."""
        target = self._end.offset if up_to is None else min(up_to, self._end.offset)
        if target <= self._recovery_point:
            return
        try:
            for segment in self.segments.snapshot().from_offset(self._recovery_point):
                if segment.base_offset >= target:
                    break
                segment.flush()
        except OSError as e:
            raise self.io_errors.failed(e, operation="flush", log_name=self.name) from None
        with self._lock:
            self._recovery_point = max(self._recovery_point, target)
            self._last_flush_ms = self._clock.monotonic_ms()
            if target == self._end.offset and not self.producer_state.has_snapshot(target):
                self._flushed_state = (target, self.producer_state.encode())

    def write_checkpoint_snapshot(self) -> bool:
        """Write the producer state captured by the last flush to the log end as the
        snapshot at that offset (the manager calls this before it writes the
        recovery-point checkpoint). Returns whether a file was written."""
        with self._lock:
            pending, self._flushed_state = self._flushed_state, None
        if pending is None:
            return False
        try:
            return self.producer_state.write_snapshot(*pending)
        except OSError as e:  # a full disk: an unclean start replays from an older snapshot
            self.io_errors.failed(e, operation="producer state snapshot", log_name=self.name)
            return False

    def prune_snapshots(self, checkpointed_recovery_point: int) -> int:
        """Delete the snapshots below the newest one at or below the recovery point on
        disk, except those at segment bases (ProducerStateManager.prune_snapshots)."""
        bases = [segment.base_offset for segment in self.segments.snapshot()]
        with self._lock:
            return self.producer_state.prune_snapshots(bases, checkpointed_recovery_point)

    def flush_rolled(self) -> None:
        """fsync segments that are no longer active (Kafka's flush after a roll)."""
        self.flush(self._end.segment.base_offset)

    def maybe_flush(self) -> bool:
        """Flush when the last one is older than `flush.ms`; True when it did."""
        if self._clock.monotonic_ms() - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            self._last_flush_ms = self._clock.monotonic_ms()
            return True
        return False

    # ---- life cycle ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.name} is closed")

    def close(self) -> None:
        """Close every segment (trimming indexes); does not flush."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self.producer_state.take_snapshot(self._end.offset)  # a clean load needs no scan
            except OSError as e:
                producer_state_logger.warning("producer_snapshot_failed", log=self.name, error=str(e))
            for segment in self.segments:
                segment.close()
            self.pending_deletions.close()  # their `.deleted` files stay for the loader

    def __repr__(self) -> str:
        return (f"Log({self.name}, start={self._log_start_offset}, end={self._end.offset}, "
                f"segments={len(self.segments)})")


def _no_step(name: str) -> None:
    return None


def roll_jitter_ms(config: LogConfig, rng: random.Random) -> int:
    """Kafka's random segment jitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
    if config.segment_jitter_ms <= 0:
        return 0
    return rng.randrange(min(config.segment_jitter_ms, config.segment_ms))
