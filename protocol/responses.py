"""Native responses: dataclasses, server-side encoders, `parse_response`.

Layout (NATIVE-PROTOCOL.md, "Request types"); the frame is
`size:int32 | error:int16 | body`, and the body is empty whenever error != NONE:

     0 PRODUCE         baseOffset:int64, logAppendTime:int64
     1 FETCH           messageSet (raw log bytes up to the end of the frame)
     2 MULTIFETCH      count x MessageSetSend (size:int32, error:int16, messageSet)
     3 MULTIPRODUCE    count x (error:int16, baseOffset:int64, logAppendTime:int64)
     4 OFFSETS         count:int32, count x offset:int64
     5 CREATE_TOPIC    (empty)
     6 DELETE_TOPIC    (empty)
     7 METADATA        count:int32, count x (topic:str, error:int16, partitions:int32,
                         partitions x (partition:int32, logStartOffset:int64, logEndOffset:int64))
     8 DESCRIBE_CONFIG count:int16, count x (key:str, value:str?)
     9 ALTER_CONFIG    (empty)
    10 DELETE_RECORDS  logStartOffset:int64
    11 COMMIT_OFFSET   (empty)
    12 FETCH_OFFSET    offset:int64, metadata:str?   (-1 and null when none)

MULTIFETCH and MULTIPRODUCE bodies have NO count prefix: the table writes the
request's `count:int16` but not the response's, and this is Kafka 0.7's
MultiMessageSetSend (size, error 0, then the sends back to back; the client
reads as many as it asked for). The body simply ends after the last item.

Contract:
- Server side: `encode_response(resp)` returns the whole frame as bytes, and
  `error_response(code)` the 6-byte frame of an error with an empty body (any
  response whose error is not NONE encodes as exactly that). For sendfile,
  `fetch_response_header` and `multifetch_response_parts` return only the
  headers; the server writes the message-set bytes after them itself.
- Client side: `parse_response(request_type, frame)` takes error + body (what
  FrameDecoder yields) and raises ProtocolError(CORRUPT_MESSAGE) on malformed
  bytes: truncation, trailing bytes, a bad str, a negative count or size, or a
  body after a non-NONE error. An error response comes back as the type's
  dataclass with its neutral defaults (-1 offsets, empty tuples, None).
  Error codes are `ErrorCode` members, or plain ints for codes not in the table.
- Message sets come back as memoryview slices of the frame, no copy.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence, Union

from .errors import ErrorCode, as_error_code
from .requests import RequestType
from .wire import (INT16, INT32, INT32_MAX, INT64, Reader, check_count16,
                   encode_nullable_str, encode_str)

__all__ = [
    "Response", "ProduceResponse", "FetchResponse", "FetchResult", "MultiFetchResponse",
    "ProduceResult", "MultiProduceResponse", "OffsetsResponse", "EmptyResponse",
    "PartitionMetadata", "TopicMetadata", "MetadataResponse", "DescribeConfigResponse",
    "DeleteRecordsResponse", "FetchOffsetResponse",
    "encode_response", "error_response", "fetch_response_header", "multifetch_response_parts",
    "produce_response", "parse_response",
]

Buffer = Union[bytes, bytearray, memoryview]

HEADER = struct.Struct(">ih")            # size, error: every frame, and each MessageSetSend
PRODUCE_BODY = struct.Struct(">qq")      # baseOffset, logAppendTime
PRODUCE_FRAME = struct.Struct(">ihqq")   # size, error, baseOffset, logAppendTime: a whole PRODUCE answer
PRODUCE_RESULT = struct.Struct(">hqq")   # error, baseOffset, logAppendTime (MULTIPRODUCE item)
TOPIC_FIXED = struct.Struct(">hi")       # error, partitions (after the topic str)
PARTITION_METADATA = struct.Struct(">iqq")  # partition, logStartOffset, logEndOffset
OFFSET = INT64
COUNT16, COUNT32 = INT16, INT32


# ---- response values ----

@dataclass(frozen=True, slots=True)
class ProduceResponse:
    error: int
    base_offset: int = -1
    log_append_time: int = -1  # -1 unless the topic uses LogAppendTime


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: int
    message_set: Buffer = b""


class FetchResult(NamedTuple):
    """One MULTIFETCH item (a MessageSetSend); unpacks as (error, message_set)."""
    error: int
    message_set: Buffer = b""


@dataclass(frozen=True, slots=True)
class MultiFetchResponse:
    error: int
    items: tuple[FetchResult, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(FetchResult(*it) for it in self.items))


class ProduceResult(NamedTuple):
    """One MULTIPRODUCE item; unpacks as (error, base_offset, log_append_time)."""
    error: int
    base_offset: int = -1
    log_append_time: int = -1


@dataclass(frozen=True, slots=True)
class MultiProduceResponse:
    error: int
    items: tuple[ProduceResult, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(ProduceResult(*it) for it in self.items))


@dataclass(frozen=True, slots=True)
class OffsetsResponse:
    error: int
    offsets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", tuple(self.offsets))


@dataclass(frozen=True, slots=True)
class EmptyResponse:
    """CREATE_TOPIC, DELETE_TOPIC, ALTER_CONFIG and COMMIT_OFFSET."""
    error: int


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic: str
    error: int
    partitions: tuple[PartitionMetadata, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple(self.partitions))


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    error: int
    topics: tuple[TopicMetadata, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))


@dataclass(frozen=True, slots=True)
class DescribeConfigResponse:
    error: int
    configs: tuple[tuple[str, Union[str, None]], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", tuple((k, v) for k, v in self.configs))


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    error: int
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchOffsetResponse:
    error: int
    offset: int = -1
    metadata: str | None = None


Response = Union[ProduceResponse, FetchResponse, MultiFetchResponse, MultiProduceResponse,
                 OffsetsResponse, EmptyResponse, MetadataResponse, DescribeConfigResponse,
                 DeleteRecordsResponse, FetchOffsetResponse]


# ---- server side: encoders ----

def _frame(error: int, body: Sequence[Buffer]) -> bytes:
    size = INT16.size + sum(memoryview(part).nbytes for part in body)
    return b"".join([HEADER.pack(size, error), *body])


def error_response(code: int) -> bytes:
    """`size=2 | error | (empty body)`: the answer for any top-level error."""
    return HEADER.pack(INT16.size, code)


def produce_response(base_offset: int, log_append_time: int) -> bytes:
    """A successful PRODUCE answer, the whole frame: `encode_response(ProduceResponse(NONE,
    ...))` in one pack (the broker's hot path)."""
    try:
        return PRODUCE_FRAME.pack(INT16.size + PRODUCE_BODY.size, ErrorCode.NONE, base_offset, log_append_time)
    except struct.error as e:
        raise ValueError(f"ProduceResponse: {e}") from None


def fetch_response_header(error: int, message_set_length: int) -> bytes:
    """The 6 bytes in front of a FETCH message set the server sends itself."""
    if error != ErrorCode.NONE and message_set_length:
        raise ValueError("an error response carries an empty message set")
    if not 0 <= message_set_length <= INT32_MAX - INT16.size:
        raise ValueError(f"message set length {message_set_length} does not fit the frame")
    return HEADER.pack(INT16.size + message_set_length, error)


def multifetch_response_parts(items: Sequence[tuple[int, int]]) -> tuple[bytes, list[bytes]]:
    """Headers for a MULTIFETCH response sent with sendfile.

    `items` is (error, message_set_length) per requested partition, in request
    order. Returns the 6-byte top-level header (error NONE, size covering every
    item) and one 6-byte MessageSetSend header per item; the server writes
    top, then header[i] followed by item i's message set bytes, for each i.
    """
    headers = []
    total = INT16.size
    for error, length in items:
        if length < 0 or length > INT32_MAX - INT16.size:
            raise ValueError(f"message set length {length} does not fit the frame")
        headers.append(HEADER.pack(INT16.size + length, error))
        total += HEADER.size + length
    if total > INT32_MAX:
        raise ValueError(f"MULTIFETCH response of {total} bytes exceeds an int32 size")
    return HEADER.pack(total, ErrorCode.NONE), headers


def _str_pairs(pairs: Sequence[tuple[str, str | None]]) -> list[bytes]:
    out = [COUNT16.pack(check_count16(len(pairs)))]
    for key, value in pairs:
        out += [encode_str(key), encode_nullable_str(value)]
    return out


def _encode_body(resp: Response) -> list[Buffer]:
    t = type(resp)
    if t is ProduceResponse:
        return [PRODUCE_BODY.pack(resp.base_offset, resp.log_append_time)]
    if t is FetchResponse:
        return [resp.message_set]
    if t is MultiFetchResponse:
        out: list[Buffer] = []
        for error, message_set in resp.items:
            out += [HEADER.pack(INT16.size + memoryview(message_set).nbytes, error), message_set]
        return out
    if t is MultiProduceResponse:
        return [PRODUCE_RESULT.pack(*item) for item in resp.items]
    if t is OffsetsResponse:
        return [COUNT32.pack(len(resp.offsets)), *(OFFSET.pack(o) for o in resp.offsets)]
    if t is EmptyResponse:
        return []
    if t is MetadataResponse:
        out = [COUNT32.pack(len(resp.topics))]
        for topic in resp.topics:
            out += [encode_str(topic.topic), TOPIC_FIXED.pack(topic.error, len(topic.partitions))]
            out += [PARTITION_METADATA.pack(p.partition, p.log_start_offset, p.log_end_offset)
                    for p in topic.partitions]
        return out
    if t is DescribeConfigResponse:
        return _str_pairs(resp.configs)
    if t is DeleteRecordsResponse:
        return [OFFSET.pack(resp.log_start_offset)]
    if t is FetchOffsetResponse:
        return [OFFSET.pack(resp.offset), encode_nullable_str(resp.metadata)]
    raise TypeError(f"not a native response: {resp!r}")


def encode_response(resp: Response) -> bytes:
    """The whole frame. A non-NONE top-level error gives `error_response(error)`."""
    try:
        if resp.error != ErrorCode.NONE:
            return error_response(resp.error)
        return _frame(ErrorCode.NONE, _encode_body(resp))
    except struct.error as e:
        raise ValueError(f"{type(resp).__name__}: {e}") from None


# ---- client side: parse_response ----

def _produce(r: Reader, error: int) -> ProduceResponse:
    return ProduceResponse(error, *r.unpack(PRODUCE_BODY))


def _fetch(r: Reader, error: int) -> FetchResponse:
    return FetchResponse(error, r.rest())


def _multifetch(r: Reader, error: int) -> MultiFetchResponse:
    items = []
    while r.remaining:
        size = r.int32()
        if size < INT16.size:
            raise r.fail(f"MessageSetSend size {size} has no room for its error")
        item_error = as_error_code(r.int16())
        items.append(FetchResult(item_error, r.take(size - INT16.size)))
    return MultiFetchResponse(error, tuple(items))


def _multiproduce(r: Reader, error: int) -> MultiProduceResponse:
    items = []
    while r.remaining:
        item_error, base_offset, log_append_time = r.unpack(PRODUCE_RESULT)
        items.append(ProduceResult(as_error_code(item_error), base_offset, log_append_time))
    return MultiProduceResponse(error, tuple(items))


def _offsets(r: Reader, error: int) -> OffsetsResponse:
    return OffsetsResponse(error, tuple(r.int64() for _ in range(r.count32())))


def _metadata(r: Reader, error: int) -> MetadataResponse:
    topics = []
    for _ in range(r.count32()):
        name = r.string()
        topic_error, count = r.unpack(TOPIC_FIXED)
        if count < 0:
            raise r.fail(f"negative partition count {count}")
        partitions = tuple(PartitionMetadata(*r.unpack(PARTITION_METADATA)) for _ in range(count))
        topics.append(TopicMetadata(name, as_error_code(topic_error), partitions))
    return MetadataResponse(error, tuple(topics))


def _describe_config(r: Reader, error: int) -> DescribeConfigResponse:
    return DescribeConfigResponse(error, tuple((r.string(), r.nullable_string())
                                               for _ in range(r.count16())))


def _fetch_offset(r: Reader, error: int) -> FetchOffsetResponse:
    return FetchOffsetResponse(error, r.int64(), r.nullable_string())


_PARSERS: dict[int, Callable[[Reader, int], Response]] = {
    RequestType.PRODUCE: _produce,
    RequestType.FETCH: _fetch,
    RequestType.MULTIFETCH: _multifetch,
    RequestType.MULTIPRODUCE: _multiproduce,
    RequestType.OFFSETS: _offsets,
    RequestType.CREATE_TOPIC: lambda r, e: EmptyResponse(e),
    RequestType.DELETE_TOPIC: lambda r, e: EmptyResponse(e),
    RequestType.METADATA: _metadata,
    RequestType.DESCRIBE_CONFIG: _describe_config,
    RequestType.ALTER_CONFIG: lambda r, e: EmptyResponse(e),
    RequestType.DELETE_RECORDS: lambda r, e: DeleteRecordsResponse(e, r.int64()),
    RequestType.COMMIT_OFFSET: lambda r, e: EmptyResponse(e),
    RequestType.FETCH_OFFSET: _fetch_offset,
}

_ON_ERROR: dict[int, Callable[[int], Response]] = {
    RequestType.PRODUCE: ProduceResponse,
    RequestType.FETCH: FetchResponse,
    RequestType.MULTIFETCH: MultiFetchResponse,
    RequestType.MULTIPRODUCE: MultiProduceResponse,
    RequestType.OFFSETS: OffsetsResponse,
    RequestType.CREATE_TOPIC: EmptyResponse,
    RequestType.DELETE_TOPIC: EmptyResponse,
    RequestType.METADATA: MetadataResponse,
    RequestType.DESCRIBE_CONFIG: DescribeConfigResponse,
    RequestType.ALTER_CONFIG: EmptyResponse,
    RequestType.DELETE_RECORDS: DeleteRecordsResponse,
    RequestType.COMMIT_OFFSET: EmptyResponse,
    RequestType.FETCH_OFFSET: FetchOffsetResponse,
}


def parse_response(request_type: int, frame: Buffer) -> Response:
    """Parse error + body of the answer to a request of `request_type`."""
    parser = _PARSERS.get(request_type)
    if parser is None:
        raise ValueError(f"unknown request type {request_type}")
    r = Reader(frame, ErrorCode.CORRUPT_MESSAGE)
    error = as_error_code(r.int16())
    if error != ErrorCode.NONE:
        r.finish()  # an error carries an empty body
        return _ON_ERROR[request_type](error)
    response = parser(r, error)
    r.finish()
    return response
