"""Committed consumer-group offsets, stored as Kafka stores them in `__consumer_offsets`.

Layout (Kafka's GroupMetadataManager / coordinator record schemas):

    key   OffsetCommitKey v1:    version:int16 = 1 | group:str | topic:str | partition:int32
    value OffsetCommitValue v3:  version:int16 = 3 | offset:int64 | leaderEpoch:int32 |
                                 metadata:str | commitTimestamp:int64
    (str = int16 length + UTF-8; a null value is a tombstone: the offset is deleted)

Each commit is one uncompressed magic-2 batch with one record (timestamp = the
commit time) appended to partition `abs(javaHashCode(group)) % partitions` of
`__consumer_offsets`, Kafka's `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`.

Contract:
- `commit` appends, and only then updates the in-memory map: an acknowledged
  commit is in the log (it survives a crash of the process). Commits that land on
  one offsets partition are serialized by a lock, so the log order and the map
  agree. Blocking: run it in the executor.
- `fetch` answers from memory: the Committed (offset, metadata, commit time,
  leader epoch), or None when nothing is committed. `groups()` and `committed_for(group)` list what is committed
  (Kafka's ListGroups / OffsetFetch of all topics).
- `commit_many` (Kafka's OffsetCommit) validates each partition and appends the
  valid ones as one batch; `delete_group_offsets` (DeleteGroups, OffsetDelete)
  tombstones a group's offsets in one batch. Both blocking.
- `load()` rebuilds the map from every existing `__consumer_offsets` partition at
  startup (latest record per key wins; a tombstone deletes). Keys of other
  versions (2 = group metadata) are skipped; values of versions 0..3 are read.
- `delete_topic_offsets(topic)` writes tombstones for every committed offset of a
  deleted topic, as Kafka's coordinator does, so a re-created topic starts clean.
- Null metadata: Kafka's value schema has a non-null string, so null is stored as
  "" plus a record header `strata.metadata.null` (Kafka's readers ignore headers);
  FETCH_OFFSET gives back exactly what was committed, null or not, across restarts.
- Consumer-protocol group records (KIP-848; key versions 3..8, Kafka's
  ConsumerGroup* coordinator records, encoded by
  broker/kafka/groups/consumer_records.py): `load()` keeps the latest value of each
  such key (`group_records()`); `write_records(group, rows)` (blocking) appends
  raw (key, value or None) rows as one batch to the group's partition.
- Transactional offsets (Kafka's TxnOffsetCommit): `commit_transactional` appends
  them as a transactional batch of the producer (its id and epoch, the next
  sequence of that producer on the offsets partition) and keeps them pending;
  `complete_transaction(producer_id, commit)`, called by the transaction
  coordinator once its COMMIT or ABORT marker is in the partition, applies them
  (commit) or drops them. `load()` does the same from the log: transactional
  records wait for their producer's control batch (COMMIT applies, ABORT drops);
  a transaction still open at the end stays pending for the coordinator.
- Leader epoch: Kafka's OffsetCommit (v6+) sends the committed leader epoch, which
  is stored in the value's leaderEpoch and answered by OffsetFetch. The native
  COMMIT_OFFSET sends none and stores -1, as do values of versions 0..2.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import structlog

from broker.state.internal_records import FieldReader
from broker.state.topic_registry import OFFSETS_TOPIC, TopicRegistry
from kafka_format import build_batch, iter_entries
from kafka_format.batch import PRODUCER_ID_OFFSET
from kafka_format.errors import StrataError, UnknownTopicOrPartitionError
from storage.log import Log

KEY_VERSION = 1
VALUE_VERSION = 3
NULL_METADATA_HEADER = "strata.metadata.null"
NO_LEADER_EPOCH = -1
READ_CHUNK = 1 << 20
GROUP_RECORD_TYPES = frozenset(range(3, 9))  # Kafka's ConsumerGroup* coordinator record keys

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
OFFSET_EPOCH = struct.Struct(">qi")

log = structlog.get_logger("strata.group_offsets")


class OffsetMetadataTooLargeError(StrataError):
    code = 12  # Kafka's OFFSET_METADATA_TOO_LARGE


class InvalidGroupIdError(StrataError):
    code = 24  # Kafka's INVALID_GROUP_ID


class Committed(NamedTuple):
    offset: int
    metadata: str | None
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH


class OffsetValue(NamedTuple):
    """One decoded OffsetCommitValue."""
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH


GroupKey = tuple[str, str, int]  # group, topic, partition


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: like Math.abs, but Integer.MIN_VALUE gives 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group: str, partitions: int) -> int:
    return kafka_abs(java_string_hash(group)) % partitions


def _str(text: str) -> bytes:
    raw = text.encode("utf-8")
    return INT16.pack(len(raw)) + raw


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return INT16.pack(KEY_VERSION) + _str(group) + _str(topic) + INT32.pack(partition)


def encode_value(offset: int, metadata: str, commit_timestamp: int,
                 leader_epoch: int = NO_LEADER_EPOCH) -> bytes:
    return (INT16.pack(VALUE_VERSION) + OFFSET_EPOCH.pack(offset, leader_epoch) + _str(metadata)
            + INT64.pack(commit_timestamp))


def decode_key(raw: bytes) -> GroupKey | None:
    """(group, topic, partition) of an offset-commit key; None for other key kinds."""
    c = FieldReader(raw)
    (version,) = c.unpack(INT16)
    if version not in (0, 1):
        return None  # 2 = group metadata
    return c.string(), c.string(), c.unpack(INT32)[0]


def decode_value(raw: bytes) -> OffsetValue | None:
    """The OffsetValue of an offset-commit value, versions 0..3 (leader epoch -1 before 3)."""
    c = FieldReader(raw)
    (version,) = c.unpack(INT16)
    if version in (0, 1, 2):
        (offset,) = c.unpack(INT64)
        metadata = c.string()
        (timestamp,) = c.unpack(INT64)
        return OffsetValue(offset, metadata, timestamp)
    if version == 3:
        offset, epoch = c.unpack(OFFSET_EPOCH)
        metadata = c.string()
        (timestamp,) = c.unpack(INT64)
        return OffsetValue(offset, metadata, timestamp, epoch)
    return None


class GroupOffsets:
    def __init__(self, registry: TopicRegistry, get_log: Callable[[str, int], Log], *,
                 metadata_max_bytes: int = 4096, clock: Callable[[], int] | None = None,
                 on_append: Callable[[str, int], None] | None = None):
        self.registry = registry
        self._get_log = get_log  # (topic, partition) -> Log, creating an offsets partition lazily
        self._on_append = on_append or (lambda topic, partition: None)  # wakes long-poll fetches
        self.metadata_max_bytes = metadata_max_bytes
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._committed: dict[GroupKey, Committed] = {}
        self._group_records: dict[bytes, bytes] = {}  # consumer-protocol group records
        # producer id -> its open transaction's offsets, applied by its COMMIT marker
        self._pending: dict[int, dict[GroupKey, Committed]] = {}
        self._partition_locks: dict[int, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    @property
    def partitions(self) -> int:
        count = self.registry.partitions(OFFSETS_TOPIC)
        if count is None:
            raise RuntimeError(f"{OFFSETS_TOPIC} is not registered")
        return count

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.partitions)

    # ---- startup ----------------------------------------------------------------------

    def load(self, existing_logs: list[Log]) -> int:
        """Rebuild the map from the offsets partitions that exist; returns records read."""
        records = 0
        for partition_log in sorted(existing_logs, key=lambda x: x.partition):
            if partition_log.topic != OFFSETS_TOPIC:
                continue
            records += self._load_partition(partition_log)
        log.info("group_offsets_loaded", committed=len(self._committed), records=records)
        return records

    def _load_partition(self, partition_log: Log) -> int:
        records = 0
        offset = partition_log.log_start_offset
        end = partition_log.log_end_offset
        while offset < end:
            with partition_log.read(offset, READ_CHUNK, min_one_message=True) as chunk:
                data = chunk.read()
            advanced = False
            for entry in iter_entries(data):
                if entry.last_offset < offset:
                    continue
                if entry.is_control or entry.is_transactional:
                    producer_id = INT64.unpack_from(data, entry.position + PRODUCER_ID_OFFSET)[0]
                    if entry.is_control:
                        for record in entry.records():
                            if record.key is not None and len(record.key) >= 4:
                                self.complete_transaction(producer_id, INT16.unpack_from(record.key, 2)[0] == 1)
                    else:
                        for record in entry.records():
                            if record.offset >= offset:
                                records += 1
                                self._apply(record, partition_log, self._pending.setdefault(producer_id, {}))
                else:
                    for record in entry.records():
                        if record.offset >= offset:
                            records += 1
                            self._apply(record, partition_log)
                offset = entry.last_offset + 1
                advanced = True
            if not advanced:
                log.warning("group_offsets_load_stopped", partition=partition_log.partition, offset=offset)
                break
        return records

    def _apply(self, record, partition_log: Log, into: dict[GroupKey, Committed] | None = None) -> None:
        """One record into the map (or into `into`, a transaction's pending offsets)."""
        committed = self._committed if into is None else into
        if record.key is None:
            return
        if len(record.key) >= 2 and INT16.unpack_from(record.key)[0] in GROUP_RECORD_TYPES:
            raw_key = bytes(record.key)
            if record.value is None:
                self._group_records.pop(raw_key, None)
            else:
                self._group_records[raw_key] = bytes(record.value)
            return
        try:
            key = decode_key(record.key)
            if key is None:
                return
            if record.value is None:
                committed.pop(key, None)
                return
            value = decode_value(record.value)
        except (ValueError, struct.error, UnicodeDecodeError):
            log.warning("group_offsets_bad_record", partition=partition_log.partition, offset=record.offset)
            return
        if value is None:
            log.warning("group_offsets_unknown_value_version", partition=partition_log.partition,
                        offset=record.offset)
            return
        is_null = any(name == NULL_METADATA_HEADER for name, _ in record.headers)
        committed[key] = Committed(value.offset, None if is_null else value.metadata,
                                   value.commit_timestamp, value.leader_epoch)

    # ---- transactional offsets ----------------------------------------------------------------

    def commit_transactional(self, group: str, producer_id: int, producer_epoch: int,
                             entries: list[tuple[str, int, int, str | None, int]]) -> list[StrataError | None]:
        """Kafka's TxnOffsetCommit: validate each (topic, partition, offset, metadata,
        leader epoch) and append the valid ones as one transactional batch of the
        producer; they stay pending until `complete_transaction` (blocking).
        Returns, in order, the error of each entry (None: written)."""
        if not group:
            raise InvalidGroupIdError("group id must not be empty")
        now = self._clock()
        errors, rows = self._commit_rows(group, entries, now)
        if not rows:
            return errors
        partition = self.partition_for(group)
        with self._lock_for(partition):
            offsets_log = self._get_log(OFFSETS_TOPIC, partition)
            entry = offsets_log.producer_state.producers.get(producer_id)
            sequence = entry.last_seq + 1 if entry is not None and entry.epoch == producer_epoch else 0
            batch = build_batch([(encode_key(*key), value, now, headers) for key, value, headers, _ in rows],
                                producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=sequence, is_transactional=True)
            offsets_log.append(batch)
            self._on_append(OFFSETS_TOPIC, partition)
            pending = self._pending.setdefault(producer_id, {})
            for key, _, _, committed in rows:
                pending[key] = committed
        return errors

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended: its pending offsets become committed
        (`commit`) or are dropped. Called once the marker is in the log."""
        pending = self._pending.pop(producer_id, None)
        if commit and pending:
            self._committed.update(pending)

    def _commit_rows(self, group: str, entries: list[tuple[str, int, int, str | None, int]], now: int
                     ) -> tuple[list[StrataError | None], list[tuple[GroupKey, bytes, list, Committed]]]:
        """The error of each (topic, partition, offset, metadata, leader epoch) entry, in order
        (None: valid), and the (key, value, headers, Committed) row of each valid one."""
        errors: list[StrataError | None] = []
        rows: list[tuple[GroupKey, bytes, list, Committed]] = []
        for topic, partition, offset, metadata, epoch in entries:
            try:
                self._check_entry(topic, partition, metadata)
            except StrataError as e:
                errors.append(e)
                continue
            errors.append(None)
            headers = [(NULL_METADATA_HEADER, None)] if metadata is None else []
            rows.append(((group, topic, partition), encode_value(offset, metadata or "", now, epoch), headers,
                         Committed(offset, metadata, now, epoch)))
        return errors, rows

    def _check_entry(self, topic: str, partition: int, metadata: str | None) -> None:
        if not 0 <= partition < self.registry.require(topic).partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
        if metadata is not None and len(metadata.encode("utf-8")) > self.metadata_max_bytes:
            raise OffsetMetadataTooLargeError(
                f"metadata is longer than offset.metadata.max.bytes {self.metadata_max_bytes}")

    # ---- requests ---------------------------------------------------------------------------

    def fetch(self, group: str, topic: str, partition: int) -> Committed | None:
        return self._committed.get((group, topic, partition))

    def groups(self) -> set[str]:
        """Every group with at least one committed offset (memory)."""
        return {key[0] for key in list(self._committed)}

    def all_committed(self) -> list[tuple[GroupKey, Committed]]:
        """((group, topic, partition), Committed) of every committed offset (memory)."""
        return list(self._committed.items())

    def committed_for(self, group: str) -> dict[tuple[str, int], Committed]:
        """(topic, partition) -> Committed of every offset `group` has committed (memory)."""
        return {(key[1], key[2]): value for key, value in list(self._committed.items())
                if key[0] == group}

    def commit_many(self, group: str, entries: list[tuple[str, int, int, str | None, int]]
                    ) -> list[StrataError | None]:
        """Validate every (topic, partition, offset, metadata, leader epoch) and append the valid ones
        as ONE batch, as Kafka's OffsetCommit writes one batch per request (blocking).
        Returns, in order, the error of each entry (None: committed)."""
        if not group:
            raise InvalidGroupIdError("group id must not be empty")
        now = self._clock()
        errors, rows = self._commit_rows(group, entries, now)
        if rows:
            self._write_rows(group, rows, now)
        return errors

    def delete_group_offsets(self, group: str, partitions: list[tuple[str, int]] | None = None) -> int:
        """Tombstone the committed offsets of `group` (all, or those of `partitions`)
        in one batch (blocking); returns how many were committed."""
        keys = [key for key in list(self._committed) if key[0] == group
                and (partitions is None or (key[1], key[2]) in partitions)]
        if keys:
            self._write_rows(group, [(key, None, [], None) for key in keys], self._clock())
        return len(keys)

    def commit(self, group: str, topic: str, partition: int, offset: int, metadata: str | None) -> None:
        """Validate and append one commit (blocking)."""
        if not group:
            raise InvalidGroupIdError("group id must not be empty")
        self._check_entry(topic, partition, metadata)
        now = self._clock()
        headers = [(NULL_METADATA_HEADER, None)] if metadata is None else []
        value = encode_value(offset, metadata or "", now)
        self._write(group, [((group, topic, partition), value, headers)], now,
                    Committed(offset, metadata, now))

    def delete_topic_offsets(self, topic: str) -> int:
        """Tombstone every committed offset of `topic` (blocking); returns how many."""
        doomed = [key for key in list(self._committed) if key[1] == topic]
        by_group: dict[str, list[GroupKey]] = {}
        for key in doomed:
            by_group.setdefault(key[0], []).append(key)
        now = self._clock()
        for group, keys in by_group.items():
            self._write(group, [(key, None, []) for key in keys], now, None)
        return len(doomed)

    def _write(self, group: str, rows: list[tuple[GroupKey, bytes | None, list]], now: int,
               committed: Committed | None) -> None:
        partition = self.partition_for(group)
        with self._lock_for(partition):
            batch = build_batch([(encode_key(*key), value, now, headers) for key, value, headers in rows])
            self._get_log(OFFSETS_TOPIC, partition).append(batch)
            self._on_append(OFFSETS_TOPIC, partition)
            for key, _, _ in rows:
                if committed is None:
                    self._committed.pop(key, None)
                else:
                    self._committed[key] = committed

    def _write_rows(self, group: str,
                    rows: Sequence[tuple[GroupKey, bytes | None, list, Committed | None]], now: int) -> None:
        """One batch of (key, value or None for a tombstone, headers, what the map gets)."""
        partition = self.partition_for(group)
        with self._lock_for(partition):
            batch = build_batch([(encode_key(*key), value, now, headers) for key, value, headers, _ in rows])
            self._get_log(OFFSETS_TOPIC, partition).append(batch)
            self._on_append(OFFSETS_TOPIC, partition)
            for key, _, _, committed in rows:
                if committed is None:
                    self._committed.pop(key, None)
                else:
                    self._committed[key] = committed

    def group_records(self) -> dict[bytes, bytes]:
        """The consumer-protocol group records loaded or written: key -> latest value."""
        return dict(self._group_records)

    def write_records(self, group: str, rows: list[tuple[bytes, bytes | None]]) -> None:
        """Append consumer-protocol group records (None = tombstone) as one batch. Blocking."""
        if not rows:
            return
        partition = self.partition_for(group)
        with self._lock_for(partition):
            batch = build_batch([(key, value, self._clock(), []) for key, value in rows])
            self._get_log(OFFSETS_TOPIC, partition).append(batch)
            self._on_append(OFFSETS_TOPIC, partition)
            for key, value in rows:
                if value is None:
                    self._group_records.pop(key, None)
                else:
                    self._group_records[key] = value

    def _lock_for(self, partition: int) -> threading.Lock:
        with self._locks_lock:
            return self._partition_locks.setdefault(partition, threading.Lock())
