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
- Each body (after a NONE error) is declared once, in `LAYOUTS` (construct, fields
  from wire.py), and compiled at import; `encode_response` and `parse_response`
  both run that declaration's compiled code. tests/protocol/test_protocol_layouts.py
  checks the declarations against the table in NATIVE.md.
- Server side: `encode_response(resp)` returns the whole frame as bytes, and
  `error_response(code)` the 6-byte frame of an error with an empty body (any
  response whose error is not NONE encodes as exactly that). For sendfile,
  `fetch_response_header` and `multifetch_response_parts` return only the
  headers; the server writes the message-set bytes after them itself.
  `produce_response` is a successful PRODUCE answer in one pack (the hot path).
  These four are hand-written struct (see HEADER and PRODUCE_FRAME).
- Client side: `parse_response(request_type, frame)` takes error + body (what
  FrameDecoder yields) and raises ProtocolError(CORRUPT_MESSAGE) on malformed
  bytes: truncation, trailing bytes, a bad str, a negative count or size, or a
  body after a non-NONE error; one try/except turns every internal parse error
  into it. An error response comes back as the type's dataclass with its
  neutral defaults (-1 offsets, empty tuples, None).
  Error codes are `ErrorCode` members, or plain ints for codes not in the table.
- Message sets come back as memoryview slices of the frame, no copy.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from construct import Construct, Int16sb, Int32sb, Int64sb, Rebuild, len_, this

from .errors import ErrorCode, ProtocolError
from .requests import RequestType
from .wire import (
    PARSE_ERRORS,
    Buffer,
    ErrorField,
    FrameStream,
    Items,
    Length,
    MessageSet,
    NullableStr,
    PartsStream,
    Record,
    Str,
    UntilEnd,
    describe,
)

__all__ = [
    "Response", "ProduceResponse", "FetchResponse", "FetchResult", "MultiFetchResponse",
    "ProduceResult", "MultiProduceResponse", "OffsetsResponse", "EmptyResponse",
    "PartitionMetadata", "TopicMetadata", "MetadataResponse", "DescribeConfigResponse",
    "DeleteRecordsResponse", "FetchOffsetResponse",
    "encode_response", "error_response", "fetch_response_header", "multifetch_response_parts",
    "produce_response", "parse_response",
]

# Hand-written struct, not a layout: the frame header, which starts every answer and
# which the broker writes in front of each FETCH and MULTIFETCH message set it sends
# with sendfile, and a whole successful PRODUCE answer in one pack (`produce_response`,
# every PRODUCE). The compiled layout costs several times as much per call here
# (bench/protocol_micro.py), on the paths whose targets are the broker's produce
# latency and fetch throughput (bench/broker.py).
HEADER = struct.Struct(">ih")            # size, error: every frame, and each MessageSetSend
ERROR_BYTES = 2                          # the error field: what `size` counts beyond the body
INT32_MAX = 2**31 - 1
PRODUCE_FRAME = struct.Struct(">ihqq")   # size, error, baseOffset, logAppendTime


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
    configs: tuple[tuple[str, str | None], ...] = ()

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


Response = (ProduceResponse | FetchResponse | MultiFetchResponse | MultiProduceResponse | OffsetsResponse |
           EmptyResponse | MetadataResponse | DescribeConfigResponse | DeleteRecordsResponse |
           FetchOffsetResponse)


# ---- the layouts: each body (after a NONE error) declared once, compiled ----

NONE = (ErrorCode.NONE,)  # the error, from the frame header, heads every response value
_EMPTY = Record(EmptyResponse, leading=NONE)

LAYOUTS: dict[RequestType, Record] = {
    RequestType.PRODUCE: Record(ProduceResponse, "baseOffset" / Int64sb, "logAppendTime" / Int64sb, leading=NONE),
    RequestType.FETCH: Record(FetchResponse, "messageSet" / MessageSet(), leading=NONE),
    RequestType.MULTIFETCH: Record(
        MultiFetchResponse,
        "items" / UntilEnd(Record(FetchResult, "size" / Length(Int32sb, "messageSet", ERROR_BYTES),
                                  "error" / ErrorField, "messageSet" / MessageSet(this.size - ERROR_BYTES))),
        leading=NONE),
    RequestType.MULTIPRODUCE: Record(
        MultiProduceResponse,
        "items" / UntilEnd(Record(ProduceResult, "error" / ErrorField, "baseOffset" / Int64sb,
                                  "logAppendTime" / Int64sb)),
        leading=NONE),
    RequestType.OFFSETS: Record(OffsetsResponse, "count" / Rebuild(Int32sb, len_(this.offsets)),
                                "offsets" / Items("count", Int64sb), leading=NONE),
    RequestType.CREATE_TOPIC: _EMPTY,
    RequestType.DELETE_TOPIC: _EMPTY,
    RequestType.METADATA: Record(
        MetadataResponse, "count" / Rebuild(Int32sb, len_(this.topics)),
        "topics" / Items("count", Record(
            TopicMetadata, "topic" / Str, "error" / ErrorField,
            "partitions" / Rebuild(Int32sb, len_(this.partitionList)),
            "partitionList" / Items("partitions", Record(PartitionMetadata, "partition" / Int32sb,
                                                         "logStartOffset" / Int64sb, "logEndOffset" / Int64sb)))),
        leading=NONE),
    RequestType.DESCRIBE_CONFIG: Record(
        DescribeConfigResponse, "count" / Rebuild(Int16sb, len_(this.configs)),
        "configs" / Items("count", Record(tuple, "key" / Str, "value" / NullableStr)), leading=NONE),
    RequestType.ALTER_CONFIG: _EMPTY,
    RequestType.DELETE_RECORDS: Record(DeleteRecordsResponse, "logStartOffset" / Int64sb, leading=NONE),
    RequestType.COMMIT_OFFSET: _EMPTY,
    RequestType.FETCH_OFFSET: Record(FetchOffsetResponse, "offset" / Int64sb, "metadata" / NullableStr,
                                     leading=NONE),
}

_ERROR = ErrorField.compile()
_PARSERS: dict[int, Construct] = {t: layout.compile() for t, layout in LAYOUTS.items()}
_BUILDERS: dict[type, Construct] = {layout.cls: _PARSERS[t] for t, layout in LAYOUTS.items()}


# ---- server side: encoders ----

def error_response(code: int) -> bytes:
    """`size=2 | error | (empty body)`: the answer for any top-level error."""
    return HEADER.pack(ERROR_BYTES, code)


def encode_response(resp: Response) -> bytes:
    """The whole frame. A non-NONE top-level error gives `error_response(error)`."""
    try:
        if resp.error != ErrorCode.NONE:
            return error_response(resp.error)
        layout = _BUILDERS.get(type(resp))
        if layout is None:
            raise TypeError(f"not a native response: {resp!r}")
        stream = PartsStream()
        layout.buildfunc(resp, stream, None)
        return b"".join([HEADER.pack(ERROR_BYTES + stream.size, ErrorCode.NONE), *stream.parts])
    except struct.error as e:
        raise ValueError(f"{type(resp).__name__}: {e}") from None


def produce_response(base_offset: int, log_append_time: int) -> bytes:
    """A successful PRODUCE answer, the whole frame: `encode_response(ProduceResponse(NONE,
    ...))` in one pack (the broker's hot path)."""
    try:
        return PRODUCE_FRAME.pack(PRODUCE_FRAME.size - 4, ErrorCode.NONE, base_offset, log_append_time)
    except struct.error as e:
        raise ValueError(f"ProduceResponse: {e}") from None


def fetch_response_header(error: int, message_set_length: int) -> bytes:
    """The 6 bytes in front of a FETCH message set the server sends itself."""
    if error != ErrorCode.NONE and message_set_length:
        raise ValueError("an error response carries an empty message set")
    if not 0 <= message_set_length <= INT32_MAX - ERROR_BYTES:
        raise ValueError(f"message set length {message_set_length} does not fit the frame")
    return HEADER.pack(ERROR_BYTES + message_set_length, error)


def multifetch_response_parts(items: Sequence[tuple[int, int]]) -> tuple[bytes, list[bytes]]:
    """Headers for a MULTIFETCH response sent with sendfile.

    `items` is (error, message_set_length) per requested partition, in request
    order. Returns the 6-byte top-level header (error NONE, size covering every
    item) and one 6-byte MessageSetSend header per item; the server writes
    top, then header[i] followed by item i's message set bytes, for each i.
    """
    headers = []
    total = ERROR_BYTES
    for error, length in items:
        if length < 0 or length > INT32_MAX - ERROR_BYTES:
            raise ValueError(f"message set length {length} does not fit the frame")
        headers.append(HEADER.pack(ERROR_BYTES + length, error))
        total += HEADER.size + length
    if total > INT32_MAX:
        raise ValueError(f"MULTIFETCH response of {total} bytes exceeds an int32 size")
    return HEADER.pack(total, ErrorCode.NONE), headers


# ---- client side: parse_response ----

_ON_ERROR: dict[int, type] = {t: layout.cls for t, layout in LAYOUTS.items()}


def parse_response(request_type: int, frame: Buffer) -> Response:
    """Parse error + body of the answer to a request of `request_type`.
    Raises ProtocolError(CORRUPT_MESSAGE) for bytes that do not follow the layout."""
    layout = _PARSERS.get(request_type)
    if layout is None:
        raise ValueError(f"unknown request type {request_type}")
    stream = FrameStream(frame)
    try:
        error = _ERROR.parsefunc(stream, None)
        if error != ErrorCode.NONE:
            stream.expect_end()  # an error carries an empty body
            return _ON_ERROR[request_type](error)
        response = layout.parsefunc(stream, None)
        stream.expect_end()
    except PARSE_ERRORS as e:
        raise ProtocolError(ErrorCode.CORRUPT_MESSAGE, f"{describe(e)} at byte {stream.tell()}") from None
    return response
