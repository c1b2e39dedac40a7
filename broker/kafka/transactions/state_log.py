"""`__transaction_state`: the transaction coordinator's log, in Kafka's layouts.

Each change of a transactional id's state is one record, key = the id, value =
its whole state (the latest record per key wins, so the topic is compacted); a
null value (tombstone) forgets an expired id. Layouts (Kafka's
transaction-coordinator TransactionLogKey / TransactionLogValue schemas):

    key   version:int16 = 0 | TransactionalId: string (int16 length + UTF-8)
    value version:int16 = 1, then flexible (compact strings and arrays, tagged fields):
          ProducerId int64 | ProducerEpoch int16 | TransactionTimeoutMs int32 |
          TransactionStatus int8 | TransactionPartitions: nullable compact array of
          {Topic compact string, PartitionIds compact array of int32, tags} |
          TransactionLastUpdateTimestampMs int64 | TransactionStartTimestampMs int64 |
          tags: 0 PreviousProducerId int64, 1 NextProducerId int64,
                2 ClientTransactionVersion int16 (each only when not its default)
    Value version 0 is the same without the flexible encoding and the tags.

The id's partition: `abs(javaHashCode(id)) % transaction.state.log.num.partitions`,
as Kafka's TransactionStateManager.partitionFor. Records are written one batch
per change (`record`; `write` appends it, blocking), and read back whole at
start by `load` (blocking).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import structlog

from broker.state.group_offsets import partition_for
from broker.state.internal_records import FieldReader, encode_uvarint, replay_keyed_records
from broker.state.internal_topics import TRANSACTION_STATE_TOPIC
from kafka_format import build_batch

from ...core import PartitionLog
from .state import TxnMetadata, TxnState

log = structlog.get_logger("strata.transactions")

KEY_VERSION = 0
VALUE_VERSION = 1

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
HEAD = struct.Struct(">qhib")  # ProducerId, ProducerEpoch, TransactionTimeoutMs, TransactionStatus
TIMES = struct.Struct(">qq")  # TransactionLastUpdateTimestampMs, TransactionStartTimestampMs


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode("utf-8")
    return INT16.pack(KEY_VERSION) + INT16.pack(len(raw)) + raw


def decode_key(raw: bytes) -> str | None:
    """The transactional id of a key; None for a key version this is not."""
    r = FieldReader(raw)
    (version,) = r.unpack(INT16)
    if version != KEY_VERSION:
        return None
    (n,) = r.unpack(INT16)
    return r.take(n).decode("utf-8")


def encode_value(meta: TxnMetadata) -> bytes:
    out = [INT16.pack(VALUE_VERSION),
           HEAD.pack(meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state))]
    if meta.state == TxnState.EMPTY:
        out.append(encode_uvarint(0))  # null: Kafka writes no partitions for Empty
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out.append(encode_uvarint(len(by_topic) + 1))
        for topic, partitions in by_topic.items():
            raw = topic.encode("utf-8")
            out += [encode_uvarint(len(raw) + 1), raw, encode_uvarint(len(partitions) + 1),
                    b"".join(INT32.pack(p) for p in partitions), encode_uvarint(0)]
    out.append(TIMES.pack(meta.last_update_ms, meta.start_ms))
    tags = []
    if meta.previous_producer_id != -1:
        tags.append((0, INT64.pack(meta.previous_producer_id)))
    if meta.next_producer_id != -1:
        tags.append((1, INT64.pack(meta.next_producer_id)))
    if meta.client_version != 0:
        tags.append((2, INT16.pack(meta.client_version)))
    out.append(encode_uvarint(len(tags)))
    for tag, data in tags:
        out += [encode_uvarint(tag), encode_uvarint(len(data)), data]
    return b"".join(out)


def decode_value(transactional_id: str, raw: bytes) -> TxnMetadata:
    """The state a value holds (versions 0 and 1). ValueError/struct.error when damaged."""
    r = FieldReader(raw)
    (version,) = r.unpack(INT16)
    if version not in (0, 1):
        raise ValueError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    producer_id, epoch, timeout_ms, status = r.unpack(HEAD)
    partitions: set[tuple[str, int]] = set()
    count = r.uvarint() - 1 if flexible else r.unpack(INT32)[0]
    for _ in range(max(count, 0)):
        n = r.uvarint() - 1 if flexible else r.unpack(INT16)[0]
        topic = r.take(n).decode("utf-8")
        m = r.uvarint() - 1 if flexible else r.unpack(INT32)[0]
        for _ in range(max(m, 0)):
            partitions.add((topic, r.unpack(INT32)[0]))
        if flexible:
            r.skip_tags()
    last_update, start = r.unpack(TIMES)
    meta = TxnMetadata(transactional_id, producer_id, epoch, timeout_ms, TxnState(status), partitions,
                       start, last_update)
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            data = r.take(size)
            if tag == 0:
                meta.previous_producer_id = INT64.unpack(data)[0]
            elif tag == 1:
                meta.next_producer_id = INT64.unpack(data)[0]
            elif tag == 2:
                meta.client_version = INT16.unpack(data)[0]
    return meta


class TransactionStateLog:
    """Appends and reads `__transaction_state` (blocking methods: run them in the executor)."""

    def __init__(self, get_log: Callable[[str, int], PartitionLog], partition_count: Callable[[], int],
                 on_append: Callable[[str, int], None]):
        self._get_log = get_log  # (topic, partition) -> Log, creating the partition's log on first use
        self._partition_count = partition_count
        self._on_append = on_append
        # transactional id -> (partition count, its partition, its key): every change of
        # an id is written to the same place under the same key, computed once.
        self._placements: dict[str, tuple[int, int, bytes]] = {}

    def partition_for(self, transactional_id: str) -> int:
        return self._placement(transactional_id)[1]

    def _placement(self, transactional_id: str) -> tuple[int, int, bytes]:
        count = self._partition_count()
        placement = self._placements.get(transactional_id)
        if placement is None or placement[0] != count:
            placement = self._placements[transactional_id] = (
                count, partition_for(transactional_id, count), encode_key(transactional_id))
        return placement

    def record(self, meta: TxnMetadata) -> tuple[int, bytes]:
        """(partition, batch) holding the id's new state (a tombstone for Dead, which
        also forgets the id's placement)."""
        _, partition, key = self._placement(meta.transactional_id)
        if meta.state == TxnState.DEAD:
            del self._placements[meta.transactional_id]
            value = None
        else:
            value = encode_value(meta)
        return partition, build_batch([(key, value, meta.last_update_ms, [])])

    def write(self, meta: TxnMetadata) -> None:
        """Append the id's new state (blocking); it is the coordinator's commit point for a change."""
        partition, batch = self.record(meta)
        self._get_log(TRANSACTION_STATE_TOPIC, partition).append(batch)
        self._on_append(TRANSACTION_STATE_TOPIC, partition)

    def load(self, logs: list[PartitionLog]) -> dict[str, TxnMetadata]:
        """Every transactional id's latest state, from the topic's existing logs."""
        states: dict[str, TxnMetadata] = {}
        records = 0
        for partition_log in sorted(logs, key=lambda x: x.partition):
            if partition_log.topic == TRANSACTION_STATE_TOPIC:
                records += self._load_partition(partition_log, states)
        log.info("transaction_state_loaded", transactional_ids=len(states), records=records)
        return states

    def _load_partition(self, partition_log: PartitionLog, states: dict[str, TxnMetadata]) -> int:
        return replay_keyed_records(partition_log, lambda record: self._apply(record, states, partition_log.partition),
                                    "transaction_state_load_stopped")

    @staticmethod
    def _apply(record, states: dict[str, TxnMetadata], partition: int) -> None:
        try:
            transactional_id = decode_key(bytes(record.key))
            if transactional_id is None:
                return
            if record.value is None:
                states.pop(transactional_id, None)
                return
            states[transactional_id] = decode_value(transactional_id, bytes(record.value))
        except (ValueError, struct.error, UnicodeDecodeError) as e:
            log.warning("transaction_state_bad_record", partition=partition, offset=record.offset, error=str(e))


__all__ = ["TransactionStateLog", "decode_key", "decode_value", "encode_key", "encode_value"]
