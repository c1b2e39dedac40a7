"""Idempotent producers: per-partition producer state and its `.snapshot` files
(Kafka's ProducerStateManager, ProducerStateEntry, ProducerAppendInfo).

Contract:
- Only magic-2 batches with producerId >= 0 are tracked. Native clients write
  producerId -1 and pay one header read per entry.
- Transactions (Kafka's ProducerAppendInfo): a transactional batch of a producer
  with no open transaction opens one at its first offset (the entry's
  `current_txn_first_offset`, kept in snapshots); a non-transactional batch while
  one is open is InvalidTxnStateError (48). A COMMIT or ABORT marker
  (`check_marker`, storage/txn_markers.py writes it) checks the producer's epoch
  (InvalidProducerEpochError) and the coordinator epoch (an older one than the
  producer's: TransactionCoordinatorFencedError, 52), takes both, and closes the
  open transaction, returned as a `CompletedTxn` (None when none was open).
  `first_unstable_offset` is the first offset of the oldest open transaction
  (None: none is open); the Log's last stable offset follows it.
  `last_stable_offset_after(completed)` is the lastStableOffset of an aborted
  transaction's `.txnindex` entry (storage/txn_index.py).
- `check(validated)` runs inside `Log.append`, under the log's lock, after offsets
  are assigned and before anything is written. It returns None (nothing to
  track), or a `PendingUpdate` whose `duplicate` is the cached batch when the set
  repeats one of a producer's last 5 batches (same epoch, first and last
  sequence): the caller then writes nothing and answers the original offsets, as
  Kafka does (not DUPLICATE_SEQUENCE_NUMBER). Otherwise `apply(update, end)`
  after the write records the batches. Rules, per batch, as Kafka's
  ProducerAppendInfo (ValidationType.Full):
    * epoch lower than the producer's: InvalidProducerEpochError (47);
    * epoch higher: the first sequence must be 0 unless the producer is unknown
      (OutOfOrderSequenceError, 45); the batches cached for the old epoch go;
    * same epoch: the first sequence must follow the last one (int32 wrap:
      MAX_VALUE is followed by 0), else OutOfOrderSequenceError; an unknown
      producer (no state: new, expired, or its records deleted) may start at any
      sequence (Kafka dropped UNKNOWN_PRODUCER_ID for this case);
    * a batch with producerId >= 0 and baseSequence < 0: InvalidRecordError.
- Snapshots: `<20-digit offset>.snapshot` in the partition directory, Kafka's
  layout (big-endian): version int16 (1) | crc uint32 (CRC32C of everything after
  it) | count int32 | count x (producerId int64, epoch int16, lastSequence int32,
  lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32,
  currentTxnFirstOffset int64). Only the last batch of each producer is kept in
  a snapshot (so after a reload only that batch is detected as a duplicate, as
  in Kafka). A snapshot at offset N is the state of the log below N. Every log
  gets them, with or without producers (an empty one is 10 bytes), so that no
  start has to scan a log from its first segment: the Log writes one at each
  roll (at the new segment's base), at each recovery-point checkpoint after a
  flush to the log end (at that offset; `encode()` under the log's lock, the
  file later) and at close (at the log end). `take_snapshot`/`write_snapshot`
  write with atomic_write, one writer at a time, and skip an offset that already
  has a snapshot (its content would be the same).
- `load(...)`: snapshots above the log end go; after an unclean shutdown so do
  those above the recovery point (written for data that was not yet flushed).
  The newest readable one that is left is loaded (a corrupt one is logged,
  deleted, and the next older tried; older ones off segment bases are deleted)
  and the log is replayed batch header by batch header from its offset to the
  log end (`loaded_from`, `batches_replayed`). Without any snapshot the replay
  starts at the first segment, except after a clean shutdown (a log from before
  snapshots were written for every log: Kafka's upgrade case, which also takes an
  empty snapshot at the log end of such a log when it holds data).
- Old snapshots go as in Kafka: `delete_snapshots_below(offset)` when the log
  start moves (retention, DELETE_RECORDS); `prune_snapshots(...)` after a
  recovery-point checkpoint keeps the snapshots at segment bases and every one
  from the newest at or below the checkpointed recovery point on.
- Producers idle for `producer.id.expiration.ms` (86400000) are dropped when a
  snapshot is loaded or taken (Kafka: a periodic task).
- The state is not thread-safe by itself: every call is made under the Log's
  lock (or before the Log is published), except `write_snapshot`, which takes the
  manager's own file lock and runs outside the Log's lock.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
import threading
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

import crc32c
import structlog

from kafka_format.batch import BATCH_HEADER, BATCH_OVERHEAD, CONTROL_BIT, FIELD_OFFSET, TRANSACTIONAL_BIT
from kafka_format.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafka_format.framing import MAGIC_V2

from .fileutil import atomic_write, parse_segment_file_name, segment_file_name
from .txn_index import AbortedTxn
from .txn_markers import TxnMarker, read_marker

logger = structlog.get_logger("strata.producer_state")

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000

_SNAP_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
_PRODUCER_ID = struct.Struct(">q")
_PRODUCER_ID_AT = FIELD_OFFSET["producer_id"]


class CorruptSnapshotError(Exception):
    pass


def increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer on one partition: its epoch and its last (up to 5) batches."""

    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp", "coordinator_epoch",
                 "current_txn_first_offset")

    def __init__(self, producer_id: int, epoch: int = NO_PRODUCER_EPOCH, last_timestamp: int = -1,
                 coordinator_epoch: int = -1, current_txn_first_offset: int = -1):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        other = ProducerStateEntry(self.producer_id, self.epoch, self.last_timestamp,
                                   self.coordinator_epoch, self.current_txn_first_offset)
        other.batches.extend(self.batches)
        return other

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def __repr__(self) -> str:
        return f"ProducerStateEntry(id={self.producer_id}, epoch={self.epoch}, batches={list(self.batches)})"


class ProducerBatch(NamedTuple):
    """What the producer state needs from one batch header (offsets assigned)."""

    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False

    @classmethod
    def from_header(cls, buf, position: int) -> ProducerBatch | None:
        (base_offset, _, _, magic, _, attributes, last_delta, _, max_ts, producer_id, epoch,
         base_seq, _) = BATCH_HEADER.unpack_from(buf, position)
        if magic != MAGIC_V2 or producer_id < 0 or attributes & CONTROL_BIT:
            return None
        return cls(producer_id, epoch, base_seq, increment_sequence(base_seq, last_delta) if base_seq >= 0
                   else base_seq, base_offset, base_offset + last_delta, max_ts,
                   bool(attributes & TRANSACTIONAL_BIT))


class CompletedTxn(NamedTuple):
    """A transaction its marker closed: from its first offset to the marker's."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class PendingUpdate(NamedTuple):
    entries: dict[int, ProducerStateEntry]  # producer id -> its state after the append
    duplicate: BatchMetadata | None


def producer_batches(validated) -> list[ProducerBatch]:
    """The tracked batches of a validated message set (empty for native clients)."""
    buf = validated.buffer
    found = []
    for info in validated.entries:
        if info.magic != MAGIC_V2:
            continue
        if _PRODUCER_ID.unpack_from(buf, info.position + _PRODUCER_ID_AT)[0] < 0:
            continue
        batch = ProducerBatch.from_header(buf, info.position)
        if batch is not None:
            found.append(batch)
    return found


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, segment_file_name(offset, SNAPSHOT_SUFFIX))


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = []
    count = 0
    for e in sorted(entries, key=lambda e: e.producer_id):
        last = e.batches[-1] if e.batches else None
        body.append(_SNAP_ENTRY.pack(
            e.producer_id, e.epoch, last.last_seq if last else NO_SEQUENCE,
            last.last_offset if last else -1, last.offset_delta if last else 0,
            e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset))
        count += 1
    payload = _COUNT.pack(count) + b"".join(body)
    return _SNAP_HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(payload)) + payload


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _SNAP_HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is too short")
    version, crc = _SNAP_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot version {version} is not {SNAPSHOT_VERSION}")
    payload = memoryview(data)[_SNAP_HEADER.size:]
    actual = crc32c.crc32c(payload)
    if actual != crc:
        raise CorruptSnapshotError(f"snapshot CRC {actual:#x} does not match the stored {crc:#x}")
    (count,) = _COUNT.unpack_from(payload, 0)
    if count < 0 or len(payload) != _COUNT.size + count * _SNAP_ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    entries = []
    for i in range(count):
        (producer_id, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch,
         txn_first) = _SNAP_ENTRY.unpack_from(payload, _COUNT.size + i * _SNAP_ENTRY.size)
        entry = ProducerStateEntry(producer_id, epoch, timestamp, coordinator_epoch, txn_first)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        entries.append(entry)
    return entries


class ProducerStateManager:
    def __init__(self, directory: str, name: str = "", *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS):
        self.directory = directory
        self.name = name or os.path.basename(directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self._snapshot_offsets: list[int] = []  # sorted: what is on disk (read by load or refresh)
        self._file_lock = threading.Lock()  # one snapshot file write or deletion at a time
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.first_unstable_offset: int | None = None  # the oldest open transaction's first offset
        self.loaded_from: int | None = None  # where the last load's replay started
        self.batches_replayed = 0  # how many batches the last load replayed

    # ---- the append path (under the log's lock) -----------------------------------------

    def check(self, validated) -> PendingUpdate | None:
        """Validate the set's batches against the state; see the module contract."""
        if not validated.has_producer_ids:
            return None  # the validator saw no producer id: nothing to walk again
        batches = producer_batches(validated)
        if not batches:
            return None
        updated: dict[int, ProducerStateEntry] = {}
        for batch in batches:
            current = self.producers.get(batch.producer_id)
            if current is not None:
                duplicate = current.find_duplicate(batch.epoch, batch.first_seq, batch.last_seq)
                if duplicate is not None:
                    return PendingUpdate({}, duplicate)
            entry = updated.get(batch.producer_id)
            if entry is None:
                entry = updated[batch.producer_id] = (
                    current.copy() if current is not None else ProducerStateEntry(batch.producer_id))
            self._validate(batch, current, entry)
            entry.add_batch(batch.epoch, batch.last_seq, batch.last_offset,
                            batch.last_offset - batch.first_offset, batch.max_timestamp)
            if entry.current_txn_first_offset >= 0 and not batch.is_transactional:
                raise InvalidTxnStateError(
                    f"{self.name}: expected a transactional write from producer {batch.producer_id} at offset "
                    f"{batch.first_offset}: its transaction from {entry.current_txn_first_offset} is open")
            _track_txn(entry, batch)
        return PendingUpdate(updated, None)

    def check_marker(self, marker: TxnMarker, offset: int) -> tuple[PendingUpdate, CompletedTxn | None]:
        """Validate a COMMIT/ABORT marker to be written at `offset` (Kafka's
        appendEndTxnMarker); `apply` records it once written."""
        current = self.producers.get(marker.producer_id)
        entry = current.copy() if current is not None else ProducerStateEntry(marker.producer_id)
        if marker.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{self.name}: marker of producer {marker.producer_id} at offset {offset} has epoch "
                f"{marker.producer_epoch}, older than the current epoch {entry.epoch}")
        if entry.coordinator_epoch > marker.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{self.name}: marker of producer {marker.producer_id} at offset {offset} has coordinator epoch "
                f"{marker.coordinator_epoch}, older than the current one {entry.coordinator_epoch}")
        return PendingUpdate({marker.producer_id: entry}, None), _end_txn(entry, marker, offset)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The last stable offset once `completed` is closed: the first offset of the
        oldest transaction still open (another producer's), else one past its marker."""
        others = [first for pid, first in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def _validate(self, batch: ProducerBatch, current: ProducerStateEntry | None,
                  entry: ProducerStateEntry) -> None:
        if batch.first_seq < 0:
            raise InvalidRecordError(
                f"{self.name}: batch of producer {batch.producer_id} has invalid sequence {batch.first_seq}")
        if batch.epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{self.name}: producer {batch.producer_id}'s epoch {batch.epoch} is older than "
                f"the current epoch {entry.epoch}")
        if batch.epoch != entry.epoch:
            if batch.first_seq != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"{self.name}: producer {batch.producer_id} bumped its epoch to {batch.epoch} "
                    f"with sequence {batch.first_seq} (expected 0)")
            return
        if current is None or current.epoch == NO_PRODUCER_EPOCH:
            return  # no state for this producer before this append: any sequence is accepted
        if not in_sequence(entry.last_seq, batch.first_seq):
            raise OutOfOrderSequenceError(
                f"{self.name}: out of order sequence for producer {batch.producer_id} at offset "
                f"{batch.first_offset}: {batch.first_seq} (incoming), {entry.last_seq} (current)")

    def apply(self, update: PendingUpdate, end_offset: int) -> None:
        """Record a written append's batches (after the segment append)."""
        self.producers.update(update.entries)
        changed = False
        for pid, entry in update.entries.items():
            changed = self._note_txn(pid, entry) or changed
        if changed:
            self._refresh_first_unstable()
        self.map_end_offset = end_offset

    def _note_txn(self, pid: int, entry: ProducerStateEntry) -> bool:
        """Follow `entry`'s open transaction in `ongoing`; True when that changed it."""
        first = entry.current_txn_first_offset
        if first >= 0:
            if self.ongoing.get(pid) == first:
                return False
            self.ongoing[pid] = first
            return True
        return self.ongoing.pop(pid, None) is not None

    def _refresh_first_unstable(self) -> None:
        # One reference swap: lock-free readers see the old or the new value.
        self.first_unstable_offset = min(self.ongoing.values()) if self.ongoing else None

    def update_end_offset(self, end_offset: int) -> None:
        self.map_end_offset = end_offset

    # ---- rebuilding from the log ----------------------------------------------------------

    def replay(self, batch: ProducerBatch) -> None:
        """Take a batch read from the log, without validation (Kafka's ValidationType.None)."""
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            entry = self.producers[batch.producer_id] = ProducerStateEntry(batch.producer_id)
        entry.add_batch(batch.epoch, batch.last_seq, batch.last_offset,
                        batch.last_offset - batch.first_offset, batch.max_timestamp)
        if _track_txn(entry, batch):
            self._note_txn(batch.producer_id, entry)
            self._refresh_first_unstable()
        self.map_end_offset = batch.last_offset + 1

    def replay_marker(self, marker: TxnMarker, offset: int) -> tuple[CompletedTxn, int] | None:
        """Take a marker read from the log, without validation; the transaction it
        closed with the last stable offset after it (None when none was open)."""
        entry = self.producers.get(marker.producer_id)
        if entry is None:
            entry = self.producers[marker.producer_id] = ProducerStateEntry(marker.producer_id)
        completed = _end_txn(entry, marker, offset)
        self.map_end_offset = offset + 1
        if completed is None:
            return None
        last_stable = self.last_stable_offset_after(completed)
        self._note_txn(marker.producer_id, entry)
        self._refresh_first_unstable()
        return completed, last_stable

    def load(self, segments, *, log_end: int, had_clean_shutdown: bool, now_ms: int,
             recovery_point: int | None = None, log_start: int = 0,
             rebuild_txn_index_from: int | None = None) -> None:
        """Rebuild the state of an opened log (see the module contract). After an
        unclean shutdown `recovery_point` bounds the snapshots that are trusted;
        `rebuild_txn_index_from` (a segment whose `.txnindex` the loader emptied)
        bounds them too, so the replay passes that segment's markers again.
        The replay also rebuilds the `.txnindex` entries of the markers it reads:
        those at or past its start are cut first (Kafka's recoverSegment rebuilds
        a recovered segment's; entries below a trusted snapshot were flushed with it)."""
        self.producers.clear()
        self.ongoing.clear()
        self.first_unstable_offset = None
        self.batches_replayed = 0
        self.refresh_snapshots()
        trusted_up_to = log_end
        if not had_clean_shutdown and recovery_point is not None:
            trusted_up_to = min(log_end, recovery_point)
        if rebuild_txn_index_from is not None:
            trusted_up_to = min(trusted_up_to, rebuild_txn_index_from)
        for offset in [o for o in self._snapshot_offsets if o > trusted_up_to or o < log_start]:
            self._delete_snapshot(offset)
        if not self._snapshot_offsets and had_clean_shutdown and rebuild_txn_index_from is None:
            self.loaded_from = self.map_end_offset = log_end
            if log_end > 0:
                self._snapshot_upgraded_log(log_end)
            return
        start = None
        for offset in reversed(list(self._snapshot_offsets)):
            try:
                with open(snapshot_path(self.directory, offset), "rb") as f:
                    entries = decode_snapshot(f.read())
            except (OSError, CorruptSnapshotError) as e:
                logger.warning("producer_snapshot_corrupt", log=self.name, offset=offset, error=str(e),
                               action="deleted; trying an older snapshot or rebuilding from the log")
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                if not self._expired(entry, now_ms):
                    self.producers[entry.producer_id] = entry
                    self._note_txn(entry.producer_id, entry)
            self._refresh_first_unstable()
            start = offset
            # Older snapshots off segment bases are of no more use (Kafka's removeStraySnapshots).
            self.prune_snapshots([segment.base_offset for segment in segments], start)
            break
        if start is None:
            start = segments.first.base_offset if len(segments) else 0
            # Worth a line only when there is data to scan (a new log has none).
            (logger.info if log_end > start else logger.debug)(
                "producer_state_rebuild", log=self.name, from_offset=start, to_offset=log_end,
                reason="no usable snapshot")
        self.loaded_from = self.map_end_offset = start
        if start < log_end:
            for segment in segments.snapshot().from_offset(start):
                segment.txn_index.truncate_to(start)
            self.batches_replayed = self._replay_from(segments, start)
        self.map_end_offset = log_end
        if self.batches_replayed and self.producers:
            logger.info("producer_state_loaded", log=self.name, snapshot=self.latest_snapshot_offset,
                        from_offset=start, batches_replayed=self.batches_replayed,
                        producers=len(self.producers))

    def _snapshot_upgraded_log(self, log_end: int) -> None:
        """A log with data, no snapshot and a clean shutdown comes from before every log
        had snapshots: like Kafka, take an (empty) one at the log end, so that a crash
        before its first roll or close does not make the next start rescan it whole."""
        try:
            self.take_snapshot(log_end)
        except OSError as e:
            logger.warning("producer_snapshot_failed", log=self.name, offset=log_end, error=str(e))

    def _replay_from(self, segments, start: int) -> int:
        """Replay every tracked batch from `start` to the log end; returns the batches
        read. The aborted transactions of the markers it reads go into their segment's
        `.txnindex`."""
        scanned = 0
        ordered = list(segments)
        for i, segment in enumerate(ordered):
            if i + 1 < len(ordered) and ordered[i + 1].base_offset <= start:
                continue  # wholly below the snapshot
            position = 0
            if segment.base_offset < start:
                position = segment.offset_index.lookup(start).position
            for header in segment.log.iter_headers(position):
                if header.last_offset < start or header.magic != MAGIC_V2:
                    continue
                raw = segment.log.read(header.position, BATCH_OVERHEAD)
                if len(raw) < BATCH_OVERHEAD:
                    raise CorruptRecordError(f"{self.name}: batch at {header.position} is cut short")
                batch = ProducerBatch.from_header(raw, 0)
                scanned += 1
                if batch is not None:
                    self.replay(batch)
                    continue
                marker = read_marker(raw, segment.log, header.position, header.size)
                if marker is None:
                    continue
                closed = self.replay_marker(marker, header.base_offset)
                if closed is None or not closed[0].aborted:
                    continue
                completed, last_stable = closed
                segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                    completed.last_offset, last_stable))
        return scanned

    # ---- snapshots --------------------------------------------------------------------------

    def list_snapshots(self) -> list[int]:
        """The offsets of the snapshot files in the directory, ascending."""
        found = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        for name in names:
            parsed = parse_segment_file_name(name)
            if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX:
                found.append(parsed[0])
        return sorted(found)

    def refresh_snapshots(self) -> None:
        """Read which snapshot files the directory holds (load does this too)."""
        with self._file_lock:
            self._snapshot_offsets = self.list_snapshots()

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshot_offsets)

    @property
    def latest_snapshot_offset(self) -> int | None:
        offsets = self._snapshot_offsets
        return offsets[-1] if offsets else None

    def has_snapshot(self, offset: int) -> bool:
        i = bisect.bisect_left(self._snapshot_offsets, offset)
        return i < len(self._snapshot_offsets) and self._snapshot_offsets[i] == offset

    def encode(self, now_ms: int | None = None) -> bytes:
        """The snapshot bytes of the state at `map_end_offset` (expired producers dropped)."""
        if now_ms is not None:
            self.remove_expired(now_ms)
        return encode_snapshot(self.producers.values())

    def take_snapshot(self, offset: int | None = None, now_ms: int | None = None) -> bool:
        """Write the state as the snapshot at `offset` (default: the map end), unless
        one is there already. Returns whether a file was written."""
        offset = self.map_end_offset if offset is None else offset
        if self.has_snapshot(offset):
            return False
        return self.write_snapshot(offset, self.encode(now_ms))

    def write_snapshot(self, offset: int, data: bytes) -> bool:
        """Write `data` (from `encode`) as the snapshot at `offset`, unless one is there."""
        with self._file_lock:
            if self.has_snapshot(offset):
                return False
            atomic_write(snapshot_path(self.directory, offset), data)
            bisect.insort(self._snapshot_offsets, offset)
            return True

    def prune_snapshots(self, segment_bases: Iterable[int], checkpointed: int) -> int:
        """Delete the snapshots no start will use: below the newest one at or below
        `checkpointed` (the recovery point on disk), except those at segment bases
        (Kafka keeps one per segment). Returns how many went."""
        offsets = self._snapshot_offsets
        usable = bisect.bisect_right(offsets, checkpointed)
        if usable <= 1:
            return 0
        bases = set(segment_bases)
        doomed = [o for o in offsets[:usable - 1] if o not in bases]
        for offset in doomed:
            self._delete_snapshot(offset)
        return len(doomed)

    def delete_snapshots_below(self, offset: int) -> None:
        for o in [o for o in self._snapshot_offsets if o < offset]:
            self._delete_snapshot(o)

    def _delete_snapshot(self, offset: int) -> None:
        with self._file_lock:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot_path(self.directory, offset))
            i = bisect.bisect_left(self._snapshot_offsets, offset)
            if i < len(self._snapshot_offsets) and self._snapshot_offsets[i] == offset:
                del self._snapshot_offsets[i]

    # ---- expiration ---------------------------------------------------------------------------

    def _expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset < 0
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired(self, now_ms: int) -> int:
        gone = [pid for pid, e in self.producers.items() if self._expired(e, now_ms)]
        for pid in gone:
            del self.producers[pid]
        return len(gone)


def _track_txn(entry: ProducerStateEntry, batch: ProducerBatch) -> bool:
    """A transactional batch opens its producer's transaction when none is open;
    True when it did."""
    if batch.is_transactional and entry.current_txn_first_offset < 0:
        entry.current_txn_first_offset = batch.first_offset
        return True
    return False


def _end_txn(entry: ProducerStateEntry, marker: TxnMarker, offset: int) -> CompletedTxn | None:
    """Apply a marker at `offset` to `entry` (Kafka's ProducerStateEntry.update)."""
    completed = None
    if entry.current_txn_first_offset >= 0:
        completed = CompletedTxn(entry.producer_id, entry.current_txn_first_offset, offset, not marker.commit)
    if marker.producer_epoch != entry.epoch:
        entry.epoch = marker.producer_epoch
        entry.batches.clear()
    entry.coordinator_epoch = marker.coordinator_epoch
    entry.last_timestamp = marker.timestamp
    entry.current_txn_first_offset = -1
    return completed
