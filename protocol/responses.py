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
    13 HANDSHAKE       version:int16, count:int16, count x mechanism:str
    14 SASL_AUTHENTICATE authSize:int32, authBytes, sessionLifetimeMs:int64

Version 2 (`LAYOUTS_V2`): a non-NONE error's body is `message:str?` (the reason in
words, null when there is none) instead of nothing, and FETCH answers
`FetchResponseV2`:

     1 FETCH           highWatermark:int64, lastStableOffset:int64, logStartOffset:int64,
                       abortedCount:int32, abortedCount x (producerId:int64, firstOffset:int64),
                       messageSet (to the end of the frame)

MULTIFETCH and MULTIPRODUCE bodies have NO count prefix: the table writes the
request's `count:int16` but not the response's, and this is Kafka 0.7's
MultiMessageSetSend (size, error 0, then the sends back to back; the client
reads as many as it asked for). The body simply ends after the last item.

Contract:
- Each body (after a NONE error) is declared once, in `LAYOUTS` (construct, fields
  from wire.py), and compiled at import; `encode_response` and `parse_response`
  both run that declaration's compiled code. tests/protocol/test_protocol_layouts.py
  checks the declarations against the table in NATIVE.md.
- Server side: `encode_response(resp, version)` returns the whole frame as bytes,
  and `error_response(code, message, version)` the frame of an error: 6 bytes
  with an empty body in version 1, `message:str?` after the error in version 2
  (cut to the 32767 bytes a str holds). Any response whose error is not NONE
  encodes as exactly that, its `message` included from version 2 on. For sendfile,
  `fetch_response_header` and `multifetch_response_parts` return only the
  headers; the server writes the message-set bytes after them itself.
  `produce_response` is a successful PRODUCE answer in one pack (the hot path), and
  `fetch_v2_response_header` the bytes in front of a version-2 FETCH's message set.
  These five are hand-written struct (see HEADER and PRODUCE_FRAME).
- Client side: `parse_response(request_type, frame, version)` takes error + body (what
  FrameDecoder yields) and raises ProtocolError(CORRUPT_MESSAGE) on malformed
  bytes: truncation, trailing bytes, a bad str, a negative count or size, or a
  body after a non-NONE error; one try/except turns every internal parse error
  into it. An error response comes back as the type's dataclass with its
  neutral defaults (-1 offsets, empty tuples, None) and, in version 2, the
  broker's `message`.
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
from .requests import ACL_BINDING, AclBinding, RequestType
from .wire import (
    INT16_MAX,
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
    encode_nullable_str,
)

__all__ = [
    "Response", "ProduceResponse", "FetchResponse", "FetchResult", "MultiFetchResponse",
    "ProduceResult", "MultiProduceResponse", "OffsetsResponse", "EmptyResponse",
    "PartitionMetadata", "TopicMetadata", "MetadataResponse", "DescribeConfigResponse",
    "DeleteRecordsResponse", "FetchOffsetResponse",
    "DescribeAclsResponse", "DeleteAclsResponse", "ListenerInfo", "DescribeListenersResponse",
    "DeletedAcls", "HandshakeResponse", "SaslAuthenticateResponse",
    "AbortedTransaction", "FetchResponseV2",
    "encode_response", "error_response", "fetch_response_header", "fetch_v2_response_header",
    "multifetch_response_parts", "produce_response", "parse_response",
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
FETCH_V2_FIXED = struct.Struct(">ihqqqi")  # size, error, highWatermark, lastStableOffset, logStartOffset, count
ABORTED = struct.Struct(">qq")           # producerId, firstOffset


# ---- response values ----

@dataclass(frozen=True, slots=True)
class ProduceResponse:
    error: int
    base_offset: int = -1
    log_append_time: int = -1  # -1 unless the topic uses LogAppendTime
    message: str | None = None  # version 2: the reason for a non-NONE error


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: int
    message_set: Buffer = b""
    message: str | None = None


class FetchResult(NamedTuple):
    """One MULTIFETCH item (a MessageSetSend); unpacks as (error, message_set)."""
    error: int
    message_set: Buffer = b""


@dataclass(frozen=True, slots=True)
class MultiFetchResponse:
    error: int
    items: tuple[FetchResult, ...] = ()
    message: str | None = None

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
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(ProduceResult(*it) for it in self.items))


@dataclass(frozen=True, slots=True)
class OffsetsResponse:
    error: int
    offsets: tuple[int, ...] = ()
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", tuple(self.offsets))


@dataclass(frozen=True, slots=True)
class EmptyResponse:
    """CREATE_TOPIC, DELETE_TOPIC, ALTER_CONFIG and COMMIT_OFFSET."""
    error: int
    message: str | None = None


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
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))


@dataclass(frozen=True, slots=True)
class DescribeConfigResponse:
    error: int
    configs: tuple[tuple[str, str | None], ...] = ()
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", tuple((k, v) for k, v in self.configs))


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    error: int
    log_start_offset: int = -1
    message: str | None = None


@dataclass(frozen=True, slots=True)
class FetchOffsetResponse:
    error: int
    offset: int = -1
    metadata: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class HandshakeResponse:
    error: int
    version: int = -1  # the version in force on the connection from now on
    mechanisms: tuple[str, ...] = ()  # the SASL mechanisms the listener requires (none: empty)
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mechanisms", tuple(self.mechanisms))


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse:
    error: int
    auth_bytes: Buffer = b""
    session_lifetime_ms: int = 0
    message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeAclsResponse:
    error: int
    acls: tuple[AclBinding, ...] = ()
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "acls", tuple(AclBinding(*a) for a in self.acls))


class DeletedAcls(NamedTuple):
    """The bindings one DELETE_ACLS filter matched and removed."""
    acls: tuple[AclBinding, ...]


@dataclass(frozen=True, slots=True)
class DeleteAclsResponse:
    error: int
    deleted: tuple[DeletedAcls, ...] = ()  # one per filter, in order
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "deleted", tuple(DeletedAcls(tuple(d[0])) for d in self.deleted))


class ListenerInfo(NamedTuple):
    """One listener as DESCRIBE_LISTENERS answers it: `protocol` "kafka" or "native",
    its name and security protocol, and the address clients use (host "" = the
    listener takes every address: the host the client reached the broker at)."""
    protocol: str
    name: str
    security_protocol: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class DescribeListenersResponse:
    error: int
    listeners: tuple[ListenerInfo, ...] = ()
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "listeners", tuple(ListenerInfo(*item) for item in self.listeners))


class AbortedTransaction(NamedTuple):
    """An aborted transaction whose data a version-2 FETCH answer holds."""
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponseV2:
    """A FETCH answer in version 2: the partition's offsets, the aborted transactions
    in the range, then the message set."""
    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: tuple[AbortedTransaction, ...] = ()
    message_set: Buffer = b""
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "aborted", tuple(AbortedTransaction(*a) for a in self.aborted))


Response = (ProduceResponse | FetchResponse | MultiFetchResponse | MultiProduceResponse | OffsetsResponse |
           EmptyResponse | MetadataResponse | DescribeConfigResponse | DeleteRecordsResponse | DescribeAclsResponse |
           DeleteAclsResponse | DescribeListenersResponse |
           FetchOffsetResponse | HandshakeResponse | SaslAuthenticateResponse | FetchResponseV2)


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
    RequestType.HANDSHAKE: Record(HandshakeResponse, "version" / Int16sb,
                                  "count" / Rebuild(Int16sb, len_(this.mechanisms)),
                                  "mechanisms" / Items("count", Str), leading=NONE),
    RequestType.SASL_AUTHENTICATE: Record(
        SaslAuthenticateResponse, "authSize" / Length(Int32sb, "authBytes"), "authBytes" / MessageSet(this.authSize),
        "sessionLifetimeMs" / Int64sb, leading=NONE),
    RequestType.DESCRIBE_ACLS: Record(DescribeAclsResponse, "count" / Rebuild(Int32sb, len_(this.acls)),
                                      "acls" / Items("count", ACL_BINDING), leading=NONE),
    RequestType.CREATE_ACLS: _EMPTY,
    RequestType.DELETE_ACLS: Record(
        DeleteAclsResponse, "count" / Rebuild(Int16sb, len_(this.deleted)),
        "deleted" / Items("count", Record(DeletedAcls, "matched" / Rebuild(Int32sb, len_(this.acls)),
                                          "acls" / Items("matched", ACL_BINDING))), leading=NONE),
    RequestType.DESCRIBE_LISTENERS: Record(
        DescribeListenersResponse, "count" / Rebuild(Int16sb, len_(this.listeners)),
        "listeners" / Items("count", Record(ListenerInfo, "protocol" / Str, "name" / Str,
                                            "securityProtocol" / Str, "host" / Str, "port" / Int32sb)),
        leading=NONE),
}

LAYOUTS_V2: dict[RequestType, Record] = {
    **LAYOUTS,
    RequestType.FETCH: Record(
        FetchResponseV2, "highWatermark" / Int64sb, "lastStableOffset" / Int64sb, "logStartOffset" / Int64sb,
        "abortedCount" / Rebuild(Int32sb, len_(this.aborted)),
        "aborted" / Items("abortedCount", Record(AbortedTransaction, "producerId" / Int64sb,
                                                 "firstOffset" / Int64sb)),
        "messageSet" / MessageSet(), leading=NONE),
}
VERSIONS = {1: LAYOUTS, 2: LAYOUTS_V2}
MESSAGE_VERSION = 2  # from this version on an error's body is its message

_ERROR = ErrorField.compile()
_MESSAGE = NullableStr.compile()
_PARSERS: dict[int, dict[int, Construct]] = {
    v: {t: layout.compile() for t, layout in layouts.items()} for v, layouts in VERSIONS.items()}
_BUILDERS: dict[type, Construct] = {layout.cls: _PARSERS[v][t]
                                    for v, layouts in VERSIONS.items() for t, layout in layouts.items()}


# ---- server side: encoders ----

def error_response(code: int, message: str | None = None, version: int = 1) -> bytes:
    """The answer for any top-level error: `size=2 | error` with an empty body in
    version 1; in version 2 `message:str?` follows the error (cut to fit a str)."""
    if version < MESSAGE_VERSION:
        return HEADER.pack(ERROR_BYTES, code)
    body = encode_nullable_str(None if message is None else _fit(message))
    return HEADER.pack(ERROR_BYTES + len(body), code) + body


def _fit(message: str) -> str:
    """`message` cut to the INT16_MAX UTF-8 bytes a str holds (never mid-character)."""
    raw = message.encode("utf-8", "replace")
    return message if len(raw) <= INT16_MAX else raw[:INT16_MAX].decode("utf-8", "ignore")


def encode_response(resp: Response, version: int = 1) -> bytes:
    """The whole frame. A non-NONE top-level error gives `error_response(error,
    message, version)`."""
    try:
        if resp.error != ErrorCode.NONE:
            return error_response(resp.error, resp.message, version)
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


def fetch_v2_response_header(high_watermark: int, last_stable_offset: int, log_start_offset: int,
                             aborted: Sequence[tuple[int, int]], message_set_length: int) -> bytes:
    """The bytes in front of a successful version-2 FETCH's message set, which the
    server sends itself: the frame header, the three offsets, the aborted list."""
    body = FETCH_V2_FIXED.size - 4 + ABORTED.size * len(aborted) + message_set_length
    if message_set_length < 0 or body > INT32_MAX:
        raise ValueError(f"message set length {message_set_length} does not fit the frame")
    return b"".join([FETCH_V2_FIXED.pack(body, ErrorCode.NONE, high_watermark, last_stable_offset,
                                         log_start_offset, len(aborted)),
                     *(ABORTED.pack(producer_id, first) for producer_id, first in aborted)])


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

def parse_response(request_type: int, frame: Buffer, version: int = 1) -> Response:
    """Parse error + body of the answer to a request of `request_type`, as `version`
    lays it out. Raises ProtocolError(CORRUPT_MESSAGE) for bytes that do not follow
    the layout."""
    layout = _PARSERS[version].get(request_type)
    if layout is None:
        raise ValueError(f"unknown request type {request_type}")
    stream = FrameStream(frame)
    try:
        error = _ERROR.parsefunc(stream, None)
        if error != ErrorCode.NONE:
            cls = VERSIONS[version][RequestType(request_type)].cls  # a known type: its layout was found
            if version < MESSAGE_VERSION:
                stream.expect_end()  # an error carries an empty body
                return cls(error)
            message = _MESSAGE.parsefunc(stream, None)
            stream.expect_end()
            return cls(error, message=message)
        response = layout.parsefunc(stream, None)
        stream.expect_end()
    except PARSE_ERRORS as e:
        raise ProtocolError(ErrorCode.CORRUPT_MESSAGE, f"{describe(e)} at byte {stream.tell()}") from None
    return response
