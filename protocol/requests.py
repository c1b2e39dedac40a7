"""Native requests: one frozen dataclass per type, `parse_request`, `encode_request`.

Layout (NATIVE-PROTOCOL.md, "Request types"); the frame is
`size:int32 | type:int16 | body`, and `parse_request` takes what FrameDecoder
yields (type + body):

     0 PRODUCE        topic:str, partition:int32, setSize:int32, messageSet
     1 FETCH          topic:str, partition:int32, offset:int64, maxBytes:int32, maxWaitMs:int32
     2 MULTIFETCH     count:int16, count x (topic:str, partition:int32, offset:int64, maxBytes:int32)
     3 MULTIPRODUCE   count:int16, count x (topic:str, partition:int32, setSize:int32, messageSet)
     4 OFFSETS        topic:str, partition:int32, time:int64, maxNumber:int32
     5 CREATE_TOPIC   topic:str, partitions:int32, configCount:int16, count x (key:str, value:str?)
     6 DELETE_TOPIC   topic:str
     7 METADATA       count:int16, count x topic:str            (count 0 = all topics)
     8 DESCRIBE_CONFIG topic:str
     9 ALTER_CONFIG   topic:str, count:int16, count x (key:str, value:str?)  (null = default)
    10 DELETE_RECORDS topic:str, partition:int32, offset:int64  (-1 = log end)
    11 COMMIT_OFFSET  group:str, topic:str, partition:int32, offset:int64, metadata:str?
    12 FETCH_OFFSET   group:str, topic:str, partition:int32

    (str? = nullable: length -1 is None; every other str must not be null.)

Contract:
- `parse_request(frame)` checks syntax only and raises ProtocolError
  (INVALID_REQUEST) for an unknown type, a truncated body, trailing bytes, a str
  that is not UTF-8, a negative str length other than -1 or a null where none is
  allowed, a negative count, and a setSize that is negative or runs past the
  frame. Names, partitions, offsets and configs are the broker's to judge.
- Message sets are not parsed (storage validates them and answers
  CORRUPT_MESSAGE); they come back as memoryview slices of the frame, no copy.
  The slice keeps the frame's buffer alive for as long as it is held.
- `encode_request(req)` returns the whole frame, size field included, built with
  one join. Values the wire cannot carry raise ValueError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, ClassVar, Iterable, Union

from .errors import ErrorCode, ProtocolError
from .wire import (INT16, INT32, Reader, check_count16, encode_nullable_str, encode_str)

__all__ = [
    "RequestType", "Request", "ProduceRequest", "FetchRequest", "FetchItem", "MultiFetchRequest",
    "ProduceItem", "MultiProduceRequest", "OffsetsRequest", "CreateTopicRequest",
    "DeleteTopicRequest", "MetadataRequest", "DescribeConfigRequest", "AlterConfigRequest",
    "DeleteRecordsRequest", "CommitOffsetRequest", "FetchOffsetRequest",
    "parse_request", "parse_produce", "encode_request",
]

Buffer = Union[bytes, bytearray, memoryview]
Configs = tuple[tuple[str, Union[str, None]], ...]


class RequestType(IntEnum):
    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4
    CREATE_TOPIC = 5
    DELETE_TOPIC = 6
    METADATA = 7
    DESCRIBE_CONFIG = 8
    ALTER_CONFIG = 9
    DELETE_RECORDS = 10
    COMMIT_OFFSET = 11
    FETCH_OFFSET = 12


# One struct per fixed run of fields (the strs in between are read on their own).
HEADER = struct.Struct(">ih")          # size, type
PRODUCE_HEAD = struct.Struct(">hh")    # type, topic length: the start of a PRODUCE frame
PRODUCE_FIXED = struct.Struct(">ii")   # partition, setSize
FETCH_FIXED = struct.Struct(">iqii")   # partition, offset, maxBytes, maxWaitMs
FETCH_ITEM_FIXED = struct.Struct(">iqi")  # partition, offset, maxBytes
OFFSETS_FIXED = struct.Struct(">iqi")  # partition, time, maxNumber
CREATE_FIXED = struct.Struct(">ih")    # partitions, configCount
DELETE_RECORDS_FIXED = struct.Struct(">iq")  # partition, offset
COMMIT_FIXED = struct.Struct(">iq")    # partition, offset
PARTITION = INT32                      # FETCH_OFFSET's partition
COUNT16 = INT16


def _pairs(configs: Iterable[tuple[str, str | None]]) -> Configs:
    return tuple((k, v) for k, v in configs)


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    TYPE: ClassVar[RequestType] = RequestType.PRODUCE
    topic: str
    partition: int
    message_set: Buffer


@dataclass(frozen=True, slots=True)
class FetchRequest:
    TYPE: ClassVar[RequestType] = RequestType.FETCH
    topic: str
    partition: int
    offset: int
    max_bytes: int
    max_wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class FetchItem:
    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class MultiFetchRequest:
    TYPE: ClassVar[RequestType] = RequestType.MULTIFETCH
    items: tuple[FetchItem, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))


@dataclass(frozen=True, slots=True)
class ProduceItem:
    topic: str
    partition: int
    message_set: Buffer


@dataclass(frozen=True, slots=True)
class MultiProduceRequest:
    TYPE: ClassVar[RequestType] = RequestType.MULTIPRODUCE
    items: tuple[ProduceItem, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))


@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    TYPE: ClassVar[RequestType] = RequestType.OFFSETS
    LATEST: ClassVar[int] = -1
    EARLIEST: ClassVar[int] = -2
    topic: str
    partition: int
    time: int
    max_number: int


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    TYPE: ClassVar[RequestType] = RequestType.CREATE_TOPIC
    topic: str
    partitions: int
    configs: Configs = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _pairs(self.configs))


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    TYPE: ClassVar[RequestType] = RequestType.DELETE_TOPIC
    topic: str


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    TYPE: ClassVar[RequestType] = RequestType.METADATA
    topics: tuple[str, ...] = ()  # empty = every topic

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))


@dataclass(frozen=True, slots=True)
class DescribeConfigRequest:
    TYPE: ClassVar[RequestType] = RequestType.DESCRIBE_CONFIG
    topic: str


@dataclass(frozen=True, slots=True)
class AlterConfigRequest:
    TYPE: ClassVar[RequestType] = RequestType.ALTER_CONFIG
    topic: str
    configs: Configs  # value None = back to the default

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _pairs(self.configs))


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    TYPE: ClassVar[RequestType] = RequestType.DELETE_RECORDS
    LOG_END: ClassVar[int] = -1
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class CommitOffsetRequest:
    TYPE: ClassVar[RequestType] = RequestType.COMMIT_OFFSET
    group: str
    topic: str
    partition: int
    offset: int
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class FetchOffsetRequest:
    TYPE: ClassVar[RequestType] = RequestType.FETCH_OFFSET
    group: str
    topic: str
    partition: int


Request = Union[ProduceRequest, FetchRequest, MultiFetchRequest, MultiProduceRequest,
                OffsetsRequest, CreateTopicRequest, DeleteTopicRequest, MetadataRequest,
                DescribeConfigRequest, AlterConfigRequest, DeleteRecordsRequest,
                CommitOffsetRequest, FetchOffsetRequest]


# ---- parsing: one function per type, each reading the body in wire order ----

def _message_set(r: Reader, set_size: int) -> memoryview:
    if set_size < 0:
        raise r.fail(f"negative setSize {set_size}")
    return r.take(set_size)


def _produce(r: Reader) -> ProduceRequest:
    topic = r.string()
    partition, set_size = r.unpack(PRODUCE_FIXED)
    return ProduceRequest(topic, partition, _message_set(r, set_size))


def _fetch(r: Reader) -> FetchRequest:
    return FetchRequest(r.string(), *r.unpack(FETCH_FIXED))


def _multifetch(r: Reader) -> MultiFetchRequest:
    return MultiFetchRequest(tuple(FetchItem(r.string(), *r.unpack(FETCH_ITEM_FIXED))
                                   for _ in range(r.count16())))


def _produce_item(r: Reader) -> ProduceItem:
    topic = r.string()
    partition, set_size = r.unpack(PRODUCE_FIXED)
    return ProduceItem(topic, partition, _message_set(r, set_size))


def _multiproduce(r: Reader) -> MultiProduceRequest:
    return MultiProduceRequest(tuple(_produce_item(r) for _ in range(r.count16())))


def _offsets(r: Reader) -> OffsetsRequest:
    return OffsetsRequest(r.string(), *r.unpack(OFFSETS_FIXED))


def _configs(r: Reader, count: int) -> Configs:
    return tuple((r.string(), r.nullable_string()) for _ in range(count))


def _create_topic(r: Reader) -> CreateTopicRequest:
    topic = r.string()
    partitions, count = r.unpack(CREATE_FIXED)
    if count < 0:
        raise r.fail(f"negative configCount {count}")
    return CreateTopicRequest(topic, partitions, _configs(r, count))


def _alter_config(r: Reader) -> AlterConfigRequest:
    topic = r.string()
    return AlterConfigRequest(topic, _configs(r, r.count16()))


def _metadata(r: Reader) -> MetadataRequest:
    return MetadataRequest(tuple(r.string() for _ in range(r.count16())))


def _delete_records(r: Reader) -> DeleteRecordsRequest:
    return DeleteRecordsRequest(r.string(), *r.unpack(DELETE_RECORDS_FIXED))


def _commit_offset(r: Reader) -> CommitOffsetRequest:
    group, topic = r.string(), r.string()
    partition, offset = r.unpack(COMMIT_FIXED)
    return CommitOffsetRequest(group, topic, partition, offset, r.nullable_string())


def _fetch_offset(r: Reader) -> FetchOffsetRequest:
    group, topic = r.string(), r.string()
    return FetchOffsetRequest(group, topic, r.unpack(PARTITION)[0])


_PARSERS: dict[int, Callable[[Reader], Request]] = {
    RequestType.PRODUCE: _produce,
    RequestType.FETCH: _fetch,
    RequestType.MULTIFETCH: _multifetch,
    RequestType.MULTIPRODUCE: _multiproduce,
    RequestType.OFFSETS: _offsets,
    RequestType.CREATE_TOPIC: _create_topic,
    RequestType.DELETE_TOPIC: lambda r: DeleteTopicRequest(r.string()),
    RequestType.METADATA: _metadata,
    RequestType.DESCRIBE_CONFIG: lambda r: DescribeConfigRequest(r.string()),
    RequestType.ALTER_CONFIG: _alter_config,
    RequestType.DELETE_RECORDS: _delete_records,
    RequestType.COMMIT_OFFSET: _commit_offset,
    RequestType.FETCH_OFFSET: _fetch_offset,
}


def parse_request(frame: Buffer) -> Request:
    """Parse type + body (a frame from FrameDecoder). Raises ProtocolError(INVALID_REQUEST)."""
    r = Reader(frame, ErrorCode.INVALID_REQUEST)
    type_ = r.int16()
    parser = _PARSERS.get(type_)
    if parser is None:
        raise r.fail(f"unknown request type {type_}")
    request = parser(r)
    r.finish()
    return request


def parse_produce(frame: Buffer) -> tuple[str, int, memoryview]:
    """A PRODUCE's (topic, partition, messageSet) without building a ProduceRequest:
    the broker's hot path. Accepts and refuses exactly what `parse_request` does for a
    PRODUCE frame (anything else, including another request type, raises
    ProtocolError(INVALID_REQUEST)); a frame the quick check does not take is handed
    to `parse_request`, so errors carry its messages."""
    view = memoryview(frame)
    try:
        type_, topic_len = PRODUCE_HEAD.unpack_from(view)
        if type_ == RequestType.PRODUCE and topic_len >= 0:
            at = PRODUCE_HEAD.size + topic_len
            partition, set_size = PRODUCE_FIXED.unpack_from(view, at)
            start = at + PRODUCE_FIXED.size
            if set_size >= 0 and start + set_size == len(view) and view.format == "B" and view.ndim == 1:
                return str(view[PRODUCE_HEAD.size:at], "utf-8"), partition, view[start:]
    except (struct.error, UnicodeDecodeError):
        pass
    req = parse_request(frame)  # raises the ProtocolError that says what is wrong
    if not isinstance(req, ProduceRequest):
        raise ProtocolError(ErrorCode.INVALID_REQUEST, f"expected a PRODUCE, got type {req.TYPE}")
    return req.topic, req.partition, req.message_set  # type: ignore[return-value]


# ---- encoding: each function returns the body as a list of byte strings ----

def _produce_parts(topic: str, partition: int, message_set: Buffer) -> list[Buffer]:
    view = memoryview(message_set)
    return [encode_str(topic), PRODUCE_FIXED.pack(partition, view.nbytes), message_set]


def _config_parts(configs: Configs) -> list[bytes]:
    out = [COUNT16.pack(check_count16(len(configs)))]
    for key, value in configs:
        out += [encode_str(key), encode_nullable_str(value)]
    return out


def _encode_body(req: Request) -> list[Buffer]:
    t = type(req)
    if t is ProduceRequest:
        return _produce_parts(req.topic, req.partition, req.message_set)
    if t is FetchRequest:
        return [encode_str(req.topic), FETCH_FIXED.pack(req.partition, req.offset,
                                                        req.max_bytes, req.max_wait_ms)]
    if t is MultiFetchRequest:
        out = [COUNT16.pack(check_count16(len(req.items)))]
        for it in req.items:
            out += [encode_str(it.topic), FETCH_ITEM_FIXED.pack(it.partition, it.offset,
                                                                it.max_bytes)]
        return out
    if t is MultiProduceRequest:
        out = [COUNT16.pack(check_count16(len(req.items)))]
        for it in req.items:
            out += _produce_parts(it.topic, it.partition, it.message_set)
        return out
    if t is OffsetsRequest:
        return [encode_str(req.topic), OFFSETS_FIXED.pack(req.partition, req.time,
                                                          req.max_number)]
    if t is CreateTopicRequest:
        return [encode_str(req.topic),  # CREATE_FIXED, split: the count heads the configs
                INT32.pack(req.partitions), *_config_parts(req.configs)]
    if t is DeleteTopicRequest or t is DescribeConfigRequest:
        return [encode_str(req.topic)]
    if t is MetadataRequest:
        return [COUNT16.pack(check_count16(len(req.topics))),
                *(encode_str(topic) for topic in req.topics)]
    if t is AlterConfigRequest:
        return [encode_str(req.topic), *_config_parts(req.configs)]
    if t is DeleteRecordsRequest:
        return [encode_str(req.topic), DELETE_RECORDS_FIXED.pack(req.partition, req.offset)]
    if t is CommitOffsetRequest:
        return [encode_str(req.group), encode_str(req.topic),
                COMMIT_FIXED.pack(req.partition, req.offset), encode_nullable_str(req.metadata)]
    if t is FetchOffsetRequest:
        return [encode_str(req.group), encode_str(req.topic), PARTITION.pack(req.partition)]
    raise TypeError(f"not a native request: {req!r}")


def encode_request(req: Request) -> bytes:
    """The whole frame, `size:int32 | type:int16 | body`, in one join."""
    try:
        body = _encode_body(req)
        size = INT16.size + sum(memoryview(part).nbytes for part in body)
        return b"".join([HEADER.pack(size, req.TYPE), *body])
    except struct.error as e:
        raise ValueError(f"{type(req).__name__}: {e}") from None
