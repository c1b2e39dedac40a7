"""Remote log metadata: what is in the remote store, kept durably in Kafka's
`__remote_log_metadata` record layout.

Contract:
- Types as KIP-405 names them: `TopicIdPartition` (topic, topic id, partition),
  `RemoteLogSegmentId` (that plus a random uuid per copy attempt, so a copy that
  crashed leaves objects no later metadata names), `RemoteLogSegmentMetadata`
  (offsets, max timestamp, size, leader epochs, state).
- States and transitions as Kafka's RemoteLogSegmentState: COPY_SEGMENT_STARTED
  (0) -> COPY_SEGMENT_FINISHED (1) -> DELETE_SEGMENT_STARTED (2) ->
  DELETE_SEGMENT_FINISHED (3); STARTED may also go straight to
  DELETE_SEGMENT_STARTED (an abandoned copy being cleaned up). Any other
  transition raises RemoteStorageError.
- Records: `encode_record` / `decode_record` write and read Kafka's
  RemoteLogSegmentMetadataRecord (apiKey 0), RemoteLogSegmentMetadataUpdateRecord
  (1) and RemotePartitionDeleteMetadataRecord (2), version 0, flexible encoding,
  behind the serde's frame (unsigned varints frame version 1, apiKey, version),
  the bytes Kafka's RemoteLogMetadataSerde puts in a record value.
- `RemoteLogMetadataStore` appends those records, one per record batch, to a
  partition log of its own (storage/log.py, in the directory it is given, for
  example `<log.dir>/__remote_log_metadata-0`) and flushes each before it returns:
  an event it acknowledged survives a crash. On open it replays the log and
  rebuilds its in-memory view. Thread-safe: one lock serializes events; readers
  see a consistent copy of a partition's segments.
- Readers see only COPY_SEGMENT_FINISHED segments (`readable_segments`,
  `segment_for_offset`); `highest_copied_offset` is the end offset of the last
  finished copy. `unfinished_segments` lists copies that never finished and
  deletions that never finished, for the copier to clean up.
  `was_copied` tells a deleted copy from an abandoned one.
  `pending_partition_deletes` lists the partitions whose last
  RemotePartitionDeleteMetadata is MARKED or STARTED (a deletion to finish).
"""

from __future__ import annotations

import base64
import enum
import struct
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kafka_format.builder import build_batch
from kafka_format.errors import CorruptRecordError, StrataError
from kafka_format.reader import iter_records
from kafka_format.varint import encode_uvarint

from ..config import LogConfig
from ..log import Log
from .errors import RemoteStorageError

FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY = 0
SEGMENT_UPDATE_API_KEY = 1
PARTITION_DELETE_API_KEY = 2
METADATA_TOPIC = "__remote_log_metadata"


class SegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_VALID_NEXT = {
    SegmentState.COPY_SEGMENT_STARTED: {SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED},
    SegmentState.COPY_SEGMENT_FINISHED: {SegmentState.DELETE_SEGMENT_STARTED},
    SegmentState.DELETE_SEGMENT_STARTED: {SegmentState.DELETE_SEGMENT_FINISHED},
    SegmentState.DELETE_SEGMENT_FINISHED: set(),
}


def uuid_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


@dataclass(frozen=True)
class TopicIdPartition:
    topic: str
    topic_id: uuid.UUID
    partition: int

    def __str__(self) -> str:
        return f"{uuid_string(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp, uuid.uuid4())

    def __str__(self) -> str:
        return f"{self.topic_id_partition}/{uuid_string(self.id)}"


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int  # the segment's last offset
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]  # (leader epoch, start offset)
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    def with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        if update.state not in _VALID_NEXT[self.state]:
            raise RemoteStorageError(f"remote segment {self.segment_id}: invalid state transition "
                                     f"{self.state.name} -> {update.state.name}")
        return replace(self, state=update.state, event_timestamp_ms=update.event_timestamp_ms,
                       broker_id=update.broker_id,
                       custom_metadata=update.custom_metadata if update.custom_metadata is not None
                       else self.custom_metadata)


@dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: SegmentState
    broker_id: int
    custom_metadata: bytes | None = None


@dataclass(frozen=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: PartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


Event = RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata


# ---- the wire layout (flexible version 0 of Kafka's message schemas) -------------------------

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_EPOCH_ENTRY = struct.Struct(">iq")


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def uvarint(self, value: int) -> None:
        self.out += encode_uvarint(value)

    def topic_id_partition(self, tp: TopicIdPartition) -> None:
        name = tp.topic.encode()
        self.uvarint(len(name) + 1)
        self.out += name
        self.out += tp.topic_id.bytes
        self.out += _I32.pack(tp.partition)
        self.uvarint(0)  # no tagged fields

    def segment_id(self, sid: RemoteLogSegmentId) -> None:
        self.topic_id_partition(sid.topic_id_partition)
        self.out += sid.id.bytes
        self.uvarint(0)

    def nullable_bytes(self, data: bytes | None) -> None:
        if data is None:
            self.uvarint(0)
        else:
            self.uvarint(len(data) + 1)
            self.out += data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"remote log metadata record ends early (at byte {self.pos}, wanted {n})")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            (byte,) = self.take(1)
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
            if shift > 28:
                raise CorruptRecordError("remote log metadata record: unsigned varint longer than 5 bytes")

    def unpack(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack(self.take(fmt.size))
        return int(value)

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())  # an unknown tagged field is skipped, as Kafka does

    def topic_id_partition(self) -> TopicIdPartition:
        length = self.uvarint()
        if length == 0:
            raise CorruptRecordError("remote log metadata record: null topic name")
        name = self.take(length - 1).decode()
        topic_id = uuid.UUID(bytes=self.take(16))
        partition = self.unpack(_I32)
        self.tagged_fields()
        return TopicIdPartition(name, topic_id, partition)

    def segment_id(self) -> RemoteLogSegmentId:
        tp = self.topic_id_partition()
        sid = uuid.UUID(bytes=self.take(16))
        self.tagged_fields()
        return RemoteLogSegmentId(tp, sid)

    def nullable_bytes(self) -> bytes | None:
        length = self.uvarint()
        return None if length == 0 else self.take(length - 1)


def encode_record(event: Event) -> bytes:
    """The serde bytes of one event (frame version, apiKey, version 0, the message)."""
    w = _Writer()
    w.uvarint(FRAME_VERSION)
    if isinstance(event, RemoteLogSegmentMetadata):
        w.uvarint(SEGMENT_METADATA_API_KEY)
        w.uvarint(0)
        w.segment_id(event.segment_id)
        w.out += _I64.pack(event.start_offset) + _I64.pack(event.end_offset)
        w.out += _I32.pack(event.broker_id) + _I64.pack(event.max_timestamp_ms) + _I64.pack(event.event_timestamp_ms)
        w.uvarint(len(event.segment_leader_epochs) + 1)
        for epoch, offset in event.segment_leader_epochs:
            w.out += _EPOCH_ENTRY.pack(epoch, offset)
            w.uvarint(0)
        w.out += _I32.pack(event.segment_size_in_bytes)
        w.nullable_bytes(event.custom_metadata)
        w.out += _I8.pack(event.state)
    elif isinstance(event, RemoteLogSegmentMetadataUpdate):
        w.uvarint(SEGMENT_UPDATE_API_KEY)
        w.uvarint(0)
        w.segment_id(event.segment_id)
        w.out += _I32.pack(event.broker_id) + _I64.pack(event.event_timestamp_ms)
        w.nullable_bytes(event.custom_metadata)
        w.out += _I8.pack(event.state)
    else:
        w.uvarint(PARTITION_DELETE_API_KEY)
        w.uvarint(0)
        w.topic_id_partition(event.topic_id_partition)
        w.out += _I32.pack(event.broker_id) + _I64.pack(event.event_timestamp_ms)
        w.out += _I8.pack(event.state)
    w.uvarint(0)  # the message's tagged fields
    return bytes(w.out)


def decode_record(data: bytes) -> Event:
    """The event in serde bytes; CorruptRecordError names what is wrong."""
    r = _Reader(data)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise CorruptRecordError(f"remote log metadata record: unknown frame version {frame}")
    api_key, version = r.uvarint(), r.uvarint()
    if version != 0:
        raise CorruptRecordError(f"remote log metadata record: apiKey {api_key} version {version} is not supported")
    try:
        event: Event
        if api_key == SEGMENT_METADATA_API_KEY:
            sid = r.segment_id()
            start, end = r.unpack(_I64), r.unpack(_I64)
            broker, max_ts, event_ts = r.unpack(_I32), r.unpack(_I64), r.unpack(_I64)
            count = r.uvarint() - 1
            if count < 0:
                raise CorruptRecordError("remote log metadata record: null SegmentLeaderEpochs")
            epochs = []
            for _ in range(count):
                epochs.append(_EPOCH_ENTRY.unpack(r.take(_EPOCH_ENTRY.size)))
                r.tagged_fields()
            size = r.unpack(_I32)
            custom = r.nullable_bytes()
            state = SegmentState(r.unpack(_I8))
            event = RemoteLogSegmentMetadata(sid, start, end, max_ts, broker, event_ts, size,
                                             tuple((int(e), int(o)) for e, o in epochs), state, custom)
        elif api_key == SEGMENT_UPDATE_API_KEY:
            sid = r.segment_id()
            broker, event_ts = r.unpack(_I32), r.unpack(_I64)
            custom = r.nullable_bytes()
            event = RemoteLogSegmentMetadataUpdate(sid, event_ts, SegmentState(r.unpack(_I8)), broker, custom)
        elif api_key == PARTITION_DELETE_API_KEY:
            tp = r.topic_id_partition()
            broker, event_ts = r.unpack(_I32), r.unpack(_I64)
            event = RemotePartitionDeleteMetadata(tp, PartitionDeleteState(r.unpack(_I8)), event_ts, broker)
        else:
            raise CorruptRecordError(f"remote log metadata record: unknown apiKey {api_key}")
    except (ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"remote log metadata record (apiKey {api_key}): {e}") from None
    r.tagged_fields()
    if r.pos != len(r.data):
        raise CorruptRecordError(f"remote log metadata record (apiKey {api_key}): "
                                 f"{len(r.data) - r.pos} bytes after the message")
    return event


# ---- the durable store ------------------------------------------------------------------------

# The metadata partition keeps every event: no time or size retention, small segments.
METADATA_LOG_CONFIG = LogConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=16 * 1024 * 1024)
_READ_BYTES = 1024 * 1024


class RemoteLogMetadataStore:
    """The remote log metadata of every tiered partition, durable in a partition log."""

    def __init__(self, directory: str, *, partition: int = 0) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._segments: dict[TopicIdPartition, dict[uuid.UUID, RemoteLogSegmentMetadata]] = {}
        self._partition_deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
        self._copied: set[uuid.UUID] = set()  # segments that reached COPY_SEGMENT_FINISHED
        self.log = Log.open(directory, METADATA_TOPIC, partition, METADATA_LOG_CONFIG)
        self._replay()

    def _replay(self) -> None:
        offset = self.log.log_start_offset
        end = self.log.log_end_offset
        while offset < end:
            with self.log.read(offset, _READ_BYTES, min_one_message=True) as found:
                data = found.read()
            if not data:
                break
            for record in iter_records(data):
                if record.offset < offset or record.value is None:
                    continue
                try:
                    self._apply(decode_record(record.value))
                except (CorruptRecordError, RemoteStorageError) as e:
                    raise RemoteStorageError(f"{self.directory}: remote log metadata at offset "
                                             f"{record.offset} cannot be replayed: {e}") from None
                offset = record.offset + 1

    def _apply(self, event: Event) -> None:
        self._commit(event, self._check(event))

    def _check(self, event: Event) -> RemoteLogSegmentMetadata | None:
        """The segment metadata `event` leads to (None for a partition event), or
        RemoteStorageError when it does not follow from the current view."""
        if isinstance(event, RemoteLogSegmentMetadata):
            if event.state != SegmentState.COPY_SEGMENT_STARTED:
                raise RemoteStorageError(f"remote segment {event.segment_id}: a new segment's state must be "
                                         f"COPY_SEGMENT_STARTED, not {event.state.name}")
            if event.segment_id.id in self._segments.get(event.topic_id_partition, {}):
                raise RemoteStorageError(f"remote segment {event.segment_id} already exists")
            return event
        if isinstance(event, RemoteLogSegmentMetadataUpdate):
            current = self._segments.get(event.segment_id.topic_id_partition, {}).get(event.segment_id.id)
            if current is None:
                raise RemoteStorageError(f"remote segment {event.segment_id} is not known")
            return current.with_update(event)
        return None

    def _commit(self, event: Event, metadata: RemoteLogSegmentMetadata | None) -> None:
        if metadata is not None:
            self._segments.setdefault(metadata.topic_id_partition, {})[metadata.segment_id.id] = metadata
            if metadata.state == SegmentState.COPY_SEGMENT_FINISHED:
                self._copied.add(metadata.segment_id.id)
        elif isinstance(event, RemotePartitionDeleteMetadata):
            self._partition_deletes[event.topic_id_partition] = event

    def _append(self, event: Event) -> None:
        """Check, write durably, then apply (lock held)."""
        metadata = self._check(event)
        try:
            self.log.append(build_batch([(None, encode_record(event))]))
            self.log.flush()
        except (OSError, StrataError) as e:
            raise RemoteStorageError(f"{self.directory}: remote log metadata not written: {e}") from e
        self._commit(event, metadata)

    # ---- events ---------------------------------------------------------------------------

    def add_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        with self._lock:
            self._append(metadata)

    def update_segment(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        with self._lock:
            self._append(update)
            return self._segments[update.segment_id.topic_id_partition][update.segment_id.id]

    def put_partition_delete(self, event: RemotePartitionDeleteMetadata) -> None:
        with self._lock:
            self._append(event)

    # ---- views ----------------------------------------------------------------------------

    def segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Every segment of `tp` in any state, by start offset then event time."""
        with self._lock:
            found = list(self._segments.get(tp, {}).values())
        return sorted(found, key=lambda m: (m.start_offset, m.event_timestamp_ms))

    def readable_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The COPY_SEGMENT_FINISHED segments of `tp`, by start offset."""
        return [m for m in self.segments(tp) if m.state == SegmentState.COPY_SEGMENT_FINISHED]

    def unfinished_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Copies that never finished and deletions that never finished."""
        return [m for m in self.segments(tp)
                if m.state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED)]

    def was_copied(self, segment_id: RemoteLogSegmentId) -> bool:
        """Whether the segment reached COPY_SEGMENT_FINISHED (a deletion of copied
        data, not the cleanup of an abandoned copy)."""
        with self._lock:
            return segment_id.id in self._copied

    def segment_for_offset(self, tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        """The readable segment holding `offset`, or None."""
        for m in self.readable_segments(tp):
            if m.start_offset <= offset <= m.end_offset:
                return m
        return None

    def highest_copied_offset(self, tp: TopicIdPartition) -> int:
        """The end offset of the last finished copy, or -1 when none."""
        readable = self.readable_segments(tp)
        return max((m.end_offset for m in readable), default=-1)

    def remote_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        readable = self.readable_segments(tp)
        return readable[0].start_offset if readable else None

    def remote_size_bytes(self, tp: TopicIdPartition) -> int:
        return sum(m.segment_size_in_bytes for m in self.readable_segments(tp))

    def partition_delete(self, tp: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        with self._lock:
            return self._partition_deletes.get(tp)

    def pending_partition_deletes(self) -> list[TopicIdPartition]:
        """Partitions whose deletion was recorded (DELETE_PARTITION_MARKED or _STARTED)
        and not finished."""
        with self._lock:
            return [tp for tp, event in self._partition_deletes.items()
                    if event.state != PartitionDeleteState.DELETE_PARTITION_FINISHED]

    def partitions(self) -> Iterable[TopicIdPartition]:
        with self._lock:
            return list(self._segments)

    def close(self) -> None:
        self.log.close()
