"""The protocol-neutral types of the broker core (broker/core/): what both
protocols' adapters hand the core and get back from it.

- `FetchSpec`: one partition's read of a fetch (offset, byte limit, isolation,
  minOneMessage), as Kafka's FetchParams/PartitionData.
- `OffsetQuery` / `OffsetKind`: a ListOffsets or native OFFSETS lookup (Kafka's
  ListOffsetsRequest special timestamps), answered by `Log.fetch_offset_by_timestamp`.
- `AppendOutcome`: what an append answers (its result, the error code, the error).
- `IsolatedRead`: a read at an isolation level with its aborted transactions.
- `PartitionLog`: a partition's log as the core sees it, the storage side of the
  core that tests fake (tests/broker/core/); adapters read its name and offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple, Protocol

from kafka_format.errors import StrataError
from storage.config import LogConfig
from storage.file_records import FileSlice
from storage.log import AppendResult
from storage.producer_state import ProducerStateEntry
from storage.segment import TimestampOffset
from storage.txn_index import AbortedTxn

TopicPartition = tuple[str, int]
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # Kafka's IsolationLevel ids (Fetch, ListOffsets, native FETCH v2)

# The read result both protocols send: a slice of a segment file (sendfile), or its bytes.
RecordSlice = FileSlice


class ProducerStates(Protocol):
    """What the core reads of a partition's producer state (storage/producer_state.py)."""

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]: ...

    @property
    def ongoing(self) -> Mapping[int, int]: ...  # producer id -> first offset of its open transaction


class PartitionLog(Protocol):
    """A partition's log as the core sees it: the storage-facing protocol of the
    core (storage/log.py's Log implements it; tests/broker/core/ fakes it in
    memory). The adapters hold these to hand back to the core and read only the
    name and the offsets (`topic`, `partition`, `log_end_offset`,
    `log_start_offset`, `last_stable_offset`) of them."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def producer_state(self) -> ProducerStates: ...

    def append(self, data: Any, *, in_place: bool = False) -> AppendResult: ...

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool) -> AppendResult: ...

    def read(self, offset: int, max_bytes: int, min_one_message: bool = False,
             max_offset: int | None = None) -> FileSlice: ...

    def fetch_upper_bound(self, offset: int, found: FileSlice, limit: int) -> int: ...

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]: ...

    def fetch_offset_by_timestamp(self, timestamp: int, read_committed: bool = False) -> TimestampOffset | None: ...

    def delete_segments_below_log_start(self) -> Any: ...


class FetchSpec(NamedTuple):
    """One partition's read of a fetch: from `offset`, at most `max_bytes` of whole
    batches (the first one whole past it with `min_one_message`, Kafka's
    minOneMessage), up to the last stable offset under READ_COMMITTED."""

    offset: int
    max_bytes: int
    isolation_level: int = READ_UNCOMMITTED
    min_one_message: bool = False


class IsolatedRead(NamedTuple):
    """A fetch's read of one partition at an isolation level."""

    records: FileSlice
    high_watermark: int  # the log end (one replica)
    last_stable_offset: int
    aborted: tuple[tuple[int, int], ...] | None  # READ_COMMITTED: (producer id, first offset) of the range read


@dataclass(frozen=True)
class FetchIsolation:
    """What a Fetch at an isolation level sees of a partition: reads stop at
    `last_stable_offset` under read_committed, and `aborted` lists (producerId,
    firstOffset) of the aborted transactions whose data the range holds."""

    last_stable_offset: int
    aborted: tuple[tuple[int, int], ...] = ()


class OffsetKind(IntEnum):
    """What an offset query asks for; the special kinds carry Kafka's
    ListOffsetsRequest timestamps (-1 .. -5) as their values."""

    TIMESTAMP = 0  # the first record at or after a timestamp
    LATEST = -1  # the log end (the last stable offset under read_committed)
    EARLIEST = -2  # the log start
    MAX_TIMESTAMP = -3  # the first record holding the largest timestamp
    EARLIEST_LOCAL = -4  # the log start (nothing is tiered)
    LATEST_TIERED = -5  # nothing is tiered: no offset


_SPECIAL = (OffsetKind.LATEST, OffsetKind.EARLIEST, OffsetKind.MAX_TIMESTAMP, OffsetKind.EARLIEST_LOCAL,
            OffsetKind.LATEST_TIERED)  # by -timestamp - 1


@dataclass(frozen=True, slots=True)
class OffsetQuery:
    """One partition's offset lookup (Kafka's ListOffsets partition, native OFFSETS)."""

    kind: OffsetKind
    timestamp: int = -1  # TIMESTAMP: the time looked up (ms)
    read_committed: bool = False

    @classmethod
    def of(cls, timestamp: int, *, read_committed: bool = False) -> OffsetQuery:
        """The query a request's timestamp asks: a special timestamp's kind, else
        TIMESTAMP (a negative one no kind names included: the first record at or
        after it, as Kafka's lookup answers)."""
        if -len(_SPECIAL) <= timestamp < 0:
            return cls(_SPECIAL[-timestamp - 1], timestamp, read_committed)
        return cls(OffsetKind.TIMESTAMP, timestamp, read_committed)

    @property
    def wire_timestamp(self) -> int:
        """The timestamp as ListOffsets sends it (a kind's special value, or the time)."""
        return self.timestamp if self.kind is OffsetKind.TIMESTAMP else int(self.kind)


class AppendOutcome(NamedTuple):
    """An append's answer: its result (None when it failed), the Kafka error code,
    and the StrataError met (None on success or for another exception)."""

    result: AppendResult | None
    code: int
    error: StrataError | None


__all__ = ["AppendOutcome", "AppendResult", "FetchIsolation", "FetchSpec", "IsolatedRead", "OffsetKind",
           "OffsetQuery", "PartitionLog", "READ_COMMITTED", "READ_UNCOMMITTED", "RecordSlice", "TimestampOffset",
           "TopicPartition"]
