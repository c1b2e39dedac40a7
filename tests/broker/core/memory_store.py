"""An in-memory partition store: the storage side of the broker core
(broker/core/types.py `PartitionLog`, and what PartitionService asks of the log
manager and the topic registry), with no files, for handler tests that drive the
native and Kafka adapters through the core (Tansu's pattern: handlers tested
against an in-memory Storage).

A `MemoryLog` keeps whole record batches in a list with their offsets: an append
assigns the next offsets, a transactional batch opens its producer's
transaction, `append_txn_marker` closes it (an abort is listed for
`aborted_transactions`), reads return whole batches up to the byte limit.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.core import AppendResult, TimestampOffset
from kafka_format.errors import OffsetOutOfRangeError
from storage.config import LogConfig
from storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from storage.producer_state import ProducerStateEntry
from storage.txn_index import AbortedTxn
from storage.txn_markers import TxnMarker, build_marker

BASE_OFFSET = struct.Struct(">q")  # at 0
ATTRIBUTES = struct.Struct(">h")  # at 21
LAST_OFFSET_DELTA = struct.Struct(">i")  # at 23
MAX_TIMESTAMP_FIELD = struct.Struct(">q")  # at 35
PRODUCER_ID = struct.Struct(">q")  # at 43
TRANSACTIONAL = 0x10


class MemorySlice:
    """A read's bytes, with what FileSlice offers the adapters (`length`, `read`,
    `release`) and where the read stopped (`next_offset`)."""

    def __init__(self, data: bytes, next_offset: int):
        self.data = data
        self.length = len(data)
        self.next_offset = next_offset
        self.released = False

    def read(self) -> bytes:
        return self.data

    def release(self) -> None:
        self.released = True


@dataclass
class Batch:
    base: int
    last: int
    max_timestamp: int
    data: bytes


@dataclass
class MemoryProducerState:
    producers: dict[int, ProducerStateEntry] = field(default_factory=dict)
    ongoing: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its transaction


class MemoryLog:
    """One partition's batches in memory (broker/core/types.py `PartitionLog`; its
    reads are MemorySlices, which offer what the core and the adapters use of a FileSlice)."""

    def __init__(self, topic: str, partition: int, config: LogConfig | None = None):
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self.config = config or LogConfig()
        self.batches: list[Batch] = []
        self.log_start_offset = 0
        self.producer_state = MemoryProducerState()
        self.aborted: list[AbortedTxn] = []

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return max(min([*self.producer_state.ongoing.values(), self.log_end_offset]), self.log_start_offset)

    def _add(self, data: bytes) -> Batch:
        base = self.log_end_offset
        stored = bytearray(data)
        BASE_OFFSET.pack_into(stored, 0, base)
        batch = Batch(base, base + LAST_OFFSET_DELTA.unpack_from(stored, 23)[0],
                      MAX_TIMESTAMP_FIELD.unpack_from(stored, 35)[0], bytes(stored))
        self.batches.append(batch)
        return batch

    def append(self, data: Any, *, in_place: bool = False) -> AppendResult:
        batch = self._add(bytes(data))
        attributes = ATTRIBUTES.unpack_from(batch.data, 21)[0]
        producer_id = PRODUCER_ID.unpack_from(batch.data, 43)[0]
        if attributes & TRANSACTIONAL and producer_id >= 0:
            self.producer_state.ongoing.setdefault(producer_id, batch.base)
        return AppendResult(batch.base, batch.last, -1, batch.last - batch.base + 1, self.log_start_offset)

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool) -> AppendResult:
        first = self.producer_state.ongoing.pop(producer_id, None)
        marker = TxnMarker(producer_id, producer_epoch, coordinator_epoch, commit, 0)
        batch = self._add(build_marker(marker))
        if first is not None and not commit:
            self.aborted.append(AbortedTxn(producer_id, first, batch.base, self.last_stable_offset))
        return AppendResult(batch.base, batch.last, -1, 1, self.log_start_offset)

    def read(self, offset: int, max_bytes: int, min_one_message: bool = False,
             max_offset: int | None = None) -> MemorySlice:
        end = self.log_end_offset
        if offset == end:
            return MemorySlice(b"", end)
        if not self.log_start_offset <= offset < end:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range [{self.log_start_offset}, {end}]")
        parts: list[bytes] = []
        size, next_offset = 0, offset
        for batch in self.batches:
            if batch.last < offset:
                continue
            if max_offset is not None and batch.base >= max_offset:
                break
            if size + len(batch.data) > max_bytes and not (min_one_message and not parts):
                break
            parts.append(batch.data)
            size += len(batch.data)
            next_offset = batch.last + 1
        return MemorySlice(b"".join(parts), next_offset)

    def fetch_upper_bound(self, offset: int, found: Any, limit: int) -> int:
        return min(found.next_offset, limit)

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < upper_bound]

    def fetch_offset_by_timestamp(self, timestamp: int, read_committed: bool = False) -> TimestampOffset | None:
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self.last_stable_offset if read_committed else self.log_end_offset)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampOffset(-1, self.log_start_offset)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampOffset(-1, -1)
        stamped = [b for b in self.batches if b.max_timestamp >= 0 and b.last >= self.log_start_offset]
        if timestamp == MAX_TIMESTAMP:
            if not stamped:
                return None
            top = max(stamped, key=lambda b: b.max_timestamp)  # the first on a tie
            return TimestampOffset(top.max_timestamp, top.base)
        for batch in stamped:
            if batch.max_timestamp >= timestamp:
                return TimestampOffset(batch.max_timestamp, batch.base)
        return None

    def delete_segments_below_log_start(self) -> None:
        self.batches = [b for b in self.batches if b.last >= self.log_start_offset]


@dataclass
class MemoryTopic:
    name: str
    partitions: int
    internal: bool = False
    topic_id: str = ""
    configs: dict[str, str] = field(default_factory=dict)
    log_config: LogConfig = field(default_factory=LogConfig)


class MemoryStore:
    """The topics and their logs: what PartitionService asks of the topic registry
    (`get`, `by_id`, `log_config`, `create`, `delete`) and of the log manager
    (`get_log`, `get_or_create_log`, `set_log_start_offset`)."""

    def __init__(self) -> None:
        self.topics: dict[str, MemoryTopic] = {}
        self.logs: dict[tuple[str, int], MemoryLog] = {}
        self.defaults = LogConfig()

    def add_topic(self, name: str, partitions: int = 1, *, internal: bool = False) -> list[MemoryLog]:
        self.topics[name] = MemoryTopic(name, partitions, internal, topic_id=f"{len(self.topics):032x}")
        if internal:
            return []
        logs = [MemoryLog(name, p) for p in range(partitions)]
        for partition_log in logs:
            self.logs[(name, partition_log.partition)] = partition_log
        return logs

    # the registry's side
    def get(self, name: str) -> MemoryTopic | None:
        return self.topics.get(name)

    def by_id(self, topic_id: str) -> MemoryTopic | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def log_config(self, name: str) -> LogConfig:
        return self.defaults

    def names(self) -> Iterable[str]:
        return list(self.topics)

    # the log manager's side
    def get_log(self, topic: str, partition: int) -> MemoryLog | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig) -> MemoryLog:
        found = self.logs.get((topic, partition))
        if found is None:
            found = self.logs[(topic, partition)] = MemoryLog(topic, partition, config)
        return found

    def set_log_start_offset(self, partition_log: MemoryLog, offset: int) -> int:
        partition_log.log_start_offset = max(partition_log.log_start_offset, offset)
        return partition_log.log_start_offset
