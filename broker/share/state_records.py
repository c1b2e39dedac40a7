"""`__share_group_state` records in Kafka 4.2's layouts (the share coordinator's
ShareSnapshotKey/Value and ShareUpdateKey/Value coordinator records).

    key    type:int16 (0 = ShareSnapshot, 1 = ShareUpdate; Kafka writes the record
           type as the key's version) | GroupId: string (int16 length + UTF-8) |
           TopicId: uuid (16 bytes) | Partition: int32          (not flexible)
    ShareSnapshotValue, version:int16 = 0, then flexible:
           SnapshotEpoch int32 | StateEpoch int32 | LeaderEpoch int32 |
           StartOffset int64 | CreateTimestamp int64 | WriteTimestamp int64 |
           StateBatches: compact array of {FirstOffset int64, LastOffset int64,
           DeliveryState int8, DeliveryCount int16, tags} |
           tags: 0 DeliveryCompleteCount int32 (written when not -1)
    ShareUpdateValue, version:int16 = 0, then flexible:
           SnapshotEpoch int32 | LeaderEpoch int32 | StartOffset int64 |
           StateBatches (as above) | tags: 0 DeliveryCompleteCount int32 (when not -1)
    A null value (tombstone) under a ShareSnapshot key deletes the share partition's state.
    Tagged fields of other numbers (in the value or in a batch) are read past, as
    Kafka's generated readers do.

The state partition of a key: `abs(javaHashCode("<group>:<topic id>:<partition>"))
% share.coordinator.state.topic.num.partitions`, as Kafka's SharePartitionKey
(the topic id in Kafka's base64 form). Decoding a damaged record raises
ValueError or struct.error.

Where each part comes from (apache/kafka; the 4.2 JSON files themselves were not to
be had, so the later changes are taken from the pull requests and tests that made them):
- Key fields, their types and "not flexible": share-coordinator/src/main/resources/
  common/message/ShareSnapshotKey.json and ShareUpdateKey.json (GroupId string,
  TopicId uuid, Partition int32, flexibleVersions none). The type prefix 0/1:
  ShareCoordinator's SHARE_SNAPSHOT_RECORD_KEY_VERSION = 0 and
  SHARE_UPDATE_RECORD_KEY_VERSION = 1, and DumpLogSegmentsTest's
  testShareGroupStateMessageParser, which prints the keys as `{"type":"0",...}` and
  `{"type":"1",...}`, a tombstone under a ShareSnapshot key as `<DELETE>`, and a key
  whose type is 32767 as an unknown record type.
- Value version 0 for both values: the same DumpLogSegmentsTest (`"version":"0"` for
  a ShareSnapshotValue and a ShareUpdateValue) and ShareCoordinatorShardTest, which
  replays ShareSnapshotValue version 0 records that carry a DeliveryCompleteCount.
- SnapshotEpoch int32 (it was uint16): PR #20016 "Change snapshot epoch type to int32
  in schema" (ShareSnapshotValue.json and ShareUpdateValue.json), in 4.1 by #20018.
- CreateTimestamp and WriteTimestamp, int64, after StartOffset and before
  StateBatches, in ShareSnapshotValue only: PR #19432 (KAFKA-18170), and the field
  order of DumpLogSegmentsTest's JSON (snapshotEpoch, stateEpoch, leaderEpoch,
  startOffset, createTimestamp, writeTimestamp, stateBatches).
- StateBatches and their four fields: the JSON files; DeliveryState 0 Available,
  2 Acknowledged, 4 Archived.
- DeliveryCompleteCount in both values: PR #20810 (KAFKA-19797, KIP-1226, Kafka 4.2);
  -1 means unknown (ShareGroupOffset.UNINITIALIZED_DELIVERY_COMPLETE_COUNT).
Not verified from a source: that DeliveryCompleteCount is a tagged field, its tag
number 0 and its place among the tags (inferred: the value version stayed 0 and
version 0 records of 4.1 must still read); that CreateTimestamp and WriteTimestamp
are plain (untagged) fields (inferred from their place in the JSON output, which
lists fields in schema order).
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass, field

from broker.state.group_offsets import partition_for
from broker.state.internal_records import FieldReader, encode_uvarint

from .partition import StateBatch

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0
DELIVERY_COMPLETE_COUNT_TAG = 0
UNKNOWN = -1

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
SNAPSHOT_HEAD = struct.Struct(">iiiqqq")  # SnapshotEpoch, StateEpoch, LeaderEpoch, StartOffset, Create/WriteTimestamp
UPDATE_HEAD = struct.Struct(">iiq")  # SnapshotEpoch, LeaderEpoch, StartOffset
BATCH = struct.Struct(">qqbh")  # FirstOffset, LastOffset, DeliveryState, DeliveryCount


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """One share partition: (group, topic id, partition)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        return f"{self.group_id}:{kafka_uuid_string(self.topic_id)}:{self.partition}"

    def state_partition(self, partitions: int) -> int:
        return partition_for(self.coordinator_key(), partitions)


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN


@dataclass(frozen=True, slots=True)
class StateRecord:
    """One decoded record: its type, key and value (None: a tombstone)."""

    record_type: int
    key: ShareStateKey
    value: ShareSnapshot | ShareUpdate | None = field(default=None)


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def encode_key(record_type: int, key: ShareStateKey) -> bytes:
    group = key.group_id.encode("utf-8")
    return b"".join((INT16.pack(record_type), INT16.pack(len(group)), group, key.topic_id.bytes,
                     INT32.pack(key.partition)))


def decode_key(raw: bytes) -> tuple[int, ShareStateKey] | None:
    """(record type, key); None for a record type that is not a share-state key."""
    r = FieldReader(raw)
    (record_type,) = r.unpack(INT16)
    if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE):
        return None
    group = r.string()
    topic_id = uuid.UUID(bytes=r.take(16))
    (partition,) = r.unpack(INT32)
    if r.pos != len(raw):
        raise ValueError(f"{len(raw) - r.pos} bytes after the share-state key")
    return record_type, ShareStateKey(group, topic_id, partition)


def _batches(batches: tuple[StateBatch, ...]) -> bytes:
    out = [encode_uvarint(len(batches) + 1)]
    for b in batches:
        out += [BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count), b"\x00"]
    return b"".join(out)


def _tags(delivery_complete_count: int) -> bytes:
    if delivery_complete_count == UNKNOWN:
        return b"\x00"
    return b"\x01" + encode_uvarint(DELIVERY_COMPLETE_COUNT_TAG) + encode_uvarint(4) + \
        INT32.pack(delivery_complete_count)


def encode_value(value: ShareSnapshot | ShareUpdate) -> bytes:
    if isinstance(value, ShareSnapshot):
        head = SNAPSHOT_HEAD.pack(value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
                                  value.create_timestamp, value.write_timestamp)
    else:
        head = UPDATE_HEAD.pack(value.snapshot_epoch, value.leader_epoch, value.start_offset)
    return INT16.pack(VALUE_VERSION) + head + _batches(value.state_batches) + _tags(value.delivery_complete_count)


def _read_batches(r: FieldReader) -> tuple[StateBatch, ...]:
    count = r.uvarint() - 1
    if count < 0:
        raise ValueError("null StateBatches")
    batches = []
    for _ in range(count):
        batches.append(StateBatch(*r.unpack(BATCH)))
        r.skip_tags()
    return tuple(batches)


def _read_tags(r: FieldReader) -> int:
    delivery_complete_count = UNKNOWN
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        data = r.take(size)
        if tag == DELIVERY_COMPLETE_COUNT_TAG:
            (delivery_complete_count,) = INT32.unpack(data)
    return delivery_complete_count


def decode_value(record_type: int, raw: bytes) -> ShareSnapshot | ShareUpdate:
    r = FieldReader(raw)
    (version,) = r.unpack(INT16)
    if version != VALUE_VERSION:
        raise ValueError(f"unknown share-state value version {version}")
    value: ShareSnapshot | ShareUpdate
    if record_type == SNAPSHOT_TYPE:
        snapshot_epoch, state_epoch, leader_epoch, start, created, written = r.unpack(SNAPSHOT_HEAD)
        batches = _read_batches(r)
        value = ShareSnapshot(snapshot_epoch, state_epoch, leader_epoch, start, created, written, batches,
                              _read_tags(r))
    else:
        epoch, leader_epoch, start = r.unpack(UPDATE_HEAD)
        batches = _read_batches(r)
        value = ShareUpdate(epoch, leader_epoch, start, batches, _read_tags(r))
    if r.pos != len(raw):
        raise ValueError(f"{len(raw) - r.pos} bytes after the share-state value")
    return value


def decode(key: bytes, value: bytes | None) -> StateRecord | None:
    """One record of `__share_group_state`; None for a key of another type."""
    decoded = decode_key(key)
    if decoded is None:
        return None
    record_type, state_key = decoded
    return StateRecord(record_type, state_key, None if value is None else decode_value(record_type, value))


__all__ = ["SHARE_GROUP_STATE_TOPIC", "SNAPSHOT_TYPE", "UNKNOWN", "UPDATE_TYPE", "ShareSnapshot", "ShareStateKey",
           "ShareUpdate", "StateRecord", "decode", "decode_key", "decode_value", "encode_key", "encode_value",
           "kafka_uuid_string"]
