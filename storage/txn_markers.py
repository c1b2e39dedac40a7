"""Transaction markers: the COMMIT and ABORT control batches that close a
producer's transaction on a partition (Kafka's EndTransactionMarker and
ControlRecordType).

Contract:
- A marker is a magic-2 batch with the control and transactional attribute bits,
  the producer's id and epoch, baseSequence -1, and one record: key = version
  int16 (0) | type int16 (0 ABORT, 1 COMMIT), value = version int16 (0) |
  coordinatorEpoch int32, big-endian, no headers (Kafka's layout, byte for byte).
- `marker_set(marker, offset, config)` gives the batch at `offset` as the
  validated set `Log.append_txn_marker` writes (clients may not write control
  batches: the validator refuses them, so markers never pass through it).
- `read_marker(...)` decodes a marker batch from a log file (None for any other
  batch, and for a control batch a compaction emptied).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kafka_format.batch import BATCH_HEADER, CONTROL_BIT, decode_records
from kafka_format.builder import build_batch
from kafka_format.entries import EntryTable
from kafka_format.errors import CorruptRecordError
from kafka_format.framing import LOG_APPEND_TIME, MAGIC_V2

from .config import LogConfig
from .validator import LEADER_EPOCH_ON_APPEND, ValidatedSet

ABORT, COMMIT = 0, 1  # Kafka's ControlRecordType
CONTROL_KEY = struct.Struct(">hh")  # version, type
MARKER_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch
CONTROL_KEY_VERSION = MARKER_VALUE_VERSION = 0


class TxnMarker(NamedTuple):
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    timestamp: int

    @property
    def type_name(self) -> str:
        return "COMMIT" if self.commit else "ABORT"


def build_marker(marker: TxnMarker, offset: int = 0, *, log_append_time: bool = False) -> bytes:
    """The marker's control batch with base offset `offset`."""
    key = CONTROL_KEY.pack(CONTROL_KEY_VERSION, COMMIT if marker.commit else ABORT)
    value = MARKER_VALUE.pack(MARKER_VALUE_VERSION, marker.coordinator_epoch)
    return build_batch([(key, value, marker.timestamp)], base_offset=offset,
                       timestamp_type=LOG_APPEND_TIME if log_append_time else 0,
                       producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                       base_sequence=-1, partition_leader_epoch=LEADER_EPOCH_ON_APPEND,
                       is_transactional=True, is_control=True)


def marker_set(marker: TxnMarker, offset: int, config: LogConfig) -> ValidatedSet:
    """The marker as a validated set of one batch at `offset`, ready to append."""
    data = bytearray(build_marker(marker, offset, log_append_time=config.log_append_time))
    entries = EntryTable()
    entries.add(0, len(data), MAGIC_V2, offset, marker.timestamp, 0)
    return ValidatedSet(data, offset, offset, marker.timestamp, offset,
                        marker.timestamp if config.log_append_time else -1, entries, 1, True)


def parse_marker_record(key: bytes | None, value: bytes | None) -> tuple[bool, int] | None:
    """(commit, coordinator epoch) of a control record, None when it is no
    transaction marker. CorruptRecordError for a marker too short."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes is too short")
    _, kind = CONTROL_KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < MARKER_VALUE.size:
        raise CorruptRecordError("end transaction marker value is too short")
    return kind == COMMIT, MARKER_VALUE.unpack_from(value)[1]


def decode_marker(batch: bytes) -> TxnMarker | None:
    """The marker a whole control batch holds (None: not a transaction marker, or empty)."""
    (_, _, _, magic, _, attributes, _, base_ts, max_ts, producer_id, epoch, _,
     count) = BATCH_HEADER.unpack_from(batch, 0)
    if magic != MAGIC_V2 or not attributes & CONTROL_BIT or count < 1:
        return None
    record = decode_records(batch, BATCH_HEADER.size, len(batch), count, 0, base_ts, attributes, max_ts)[0]
    parsed = parse_marker_record(record.key, record.value)
    if parsed is None:
        return None
    return TxnMarker(producer_id, epoch, parsed[1], parsed[0], record.timestamp)


def read_marker(header: bytes, file_records, position: int, size: int) -> TxnMarker | None:
    """The marker of the batch at `position` in `file_records`, whose first bytes
    `header` already holds; None unless it is a control batch with a marker."""
    (_, _, _, magic, _, attributes, *_rest) = BATCH_HEADER.unpack_from(header, 0)
    if magic != MAGIC_V2 or not attributes & CONTROL_BIT:
        return None
    return decode_marker(file_records.read(position, size))
