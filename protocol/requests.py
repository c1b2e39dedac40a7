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
    13 HANDSHAKE      version:int16, clientId:str?
    14 SASL_AUTHENTICATE mechanism:str, authSize:int32, authBytes

    (str? = nullable: length -1 is None; every other str must not be null.)

Version 2 (a connection after a HANDSHAKE that settled on 2; `LAYOUTS_V2`) ends two
bodies with one more field; every other body is the same:

     1 FETCH          ..., maxWaitMs:int32, isolationLevel:int8 (0 read_uncommitted, 1 read_committed)
     7 METADATA       ..., allowAutoTopicCreation:int8

Contract:
- Each body is declared once, in `LAYOUTS` (version 1) and `LAYOUTS_V2` (version 2:
  LAYOUTS with FETCH and METADATA's trailing fields), construct with fields from
  wire.py, and compiled at import; `parse_request(frame, version)` and
  `encode_request(req, version)` both run the compiled code of that version's
  declaration. A version-2 field has a default in its dataclass, the version-1
  meaning (isolation 0, no auto-creation), and version 1 neither reads nor writes it.
  tests/protocol/test_protocol_layouts.py checks the declarations against the
  tables in NATIVE.md.
- `parse_request(frame)` checks syntax only and raises ProtocolError
  (INVALID_REQUEST) for an unknown type, a truncated body, trailing bytes, a str
  that is not UTF-8, a negative str length other than -1 or a null where none is
  allowed, a negative count, and a setSize that is negative or runs past the
  frame. Names, partitions, offsets and configs are the broker's to judge. One
  try/except turns every internal parse error into that ProtocolError.
- Message sets are not parsed (storage validates them and answers
  CORRUPT_MESSAGE); they come back as memoryview slices of the frame, no copy.
  The slice keeps the frame's buffer alive for as long as it is held.
- `encode_request(req)` returns the whole frame, size field included, built with
  one join. Values the wire cannot carry raise ValueError; anything that is not a
  request raises TypeError.
- `parse_produce(frame)` is the broker's hot path for a PRODUCE: hand-written
  struct (see PRODUCE_HEAD), accepting and refusing exactly what `parse_request`
  does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, NamedTuple

from construct import Construct, Int8sb, Int16sb, Int32sb, Int64sb, Rebuild, len_, this

from .errors import ErrorCode, ProtocolError
from .wire import (
    PARSE_ERRORS,
    Buffer,
    FrameStream,
    Items,
    Length,
    MessageSet,
    NullableStr,
    PartsStream,
    Record,
    Str,
    Tagged,
    describe,
)

__all__ = [
    "RequestType", "Request", "ProduceRequest", "FetchRequest", "FetchItem", "MultiFetchRequest",
    "ProduceItem", "MultiProduceRequest", "OffsetsRequest", "CreateTopicRequest",
    "DeleteTopicRequest", "MetadataRequest", "DescribeConfigRequest", "AlterConfigRequest",
    "DeleteRecordsRequest", "CommitOffsetRequest", "FetchOffsetRequest", "HandshakeRequest",
    "SaslAuthenticateRequest", "AclBinding", "AclBindingFilter", "DescribeAclsRequest", "CreateAclsRequest",
    "DeleteAclsRequest", "DescribeListenersRequest",
    "ACL_BINDING", "ACL_FILTER", "IsolationLevel", "PROTOCOL_VERSION", "parse_request",
    "parse_produce", "encode_request",
]

PROTOCOL_VERSION = 2  # the highest version of the native protocol this codec speaks

Configs = tuple[tuple[str, str | None], ...]


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
    HANDSHAKE = 13
    SASL_AUTHENTICATE = 14
    # Project extensions (NATIVE.md "ACLs"): 100 + Kafka's API key.
    DESCRIBE_ACLS = 129
    CREATE_ACLS = 130
    DELETE_ACLS = 131
    # Project extension (NATIVE.md "Listeners"): 100 + Kafka's DescribeCluster (60).
    DESCRIBE_LISTENERS = 160


class IsolationLevel(IntEnum):
    """FETCH's isolationLevel (version 2), Kafka's numbers."""
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


# Hand-written struct, not a layout: the frame header (framing, one pack per frame) and
# the start of a PRODUCE, which the broker reads for every PRODUCE (`parse_produce`, and
# broker/native/produce.py keys executor runs with them). Here the compiled layout costs
# several times as much per call (bench/protocol_micro.py), on the path whose target
# is the broker's produce latency (bench/broker.py: p99 within 3x of an echo server).
HEADER = struct.Struct(">ih")          # size, type
PRODUCE_HEAD = struct.Struct(">hh")    # type, topic length: the start of a PRODUCE frame
PRODUCE_FIXED = struct.Struct(">ii")   # partition, setSize
TYPE_BYTES = 2                         # the type field: what `size` counts beyond the body


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
    isolation_level: int = IsolationLevel.READ_UNCOMMITTED  # version 2 on


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
    allow_auto_topic_creation: bool = False  # version 2 on; int8, non-zero = true

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "allow_auto_topic_creation", bool(self.allow_auto_topic_creation))


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


@dataclass(frozen=True, slots=True)
class HandshakeRequest:
    """The first request of a version-2 client: its highest version and its id."""
    TYPE: ClassVar[RequestType] = RequestType.HANDSHAKE
    version: int
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class SaslAuthenticateRequest:
    """One round of a SASL exchange: exactly the bytes of Kafka's SaslAuthenticate."""
    TYPE: ClassVar[RequestType] = RequestType.SASL_AUTHENTICATE
    mechanism: str
    auth_bytes: Buffer = b""


class AclBinding(NamedTuple):
    """An ACL as the native ACL requests carry it; Kafka's numbers for the enums
    (resource type TOPIC=2 GROUP=3 CLUSTER=4 TRANSACTIONAL_ID=5; pattern LITERAL=3
    PREFIXED=4; operation ALL=2 READ=3 ... IDEMPOTENT_WRITE=12; permission DENY=2 ALLOW=3)."""
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


class AclBindingFilter(NamedTuple):
    """Kafka's AclBindingFilter: null strings and ANY (1) match everything; pattern
    MATCH (2) matches the bindings that apply to the named resource."""
    resource_type: int = 1
    name: str | None = None
    pattern_type: int = 1
    principal: str | None = None
    host: str | None = None
    operation: int = 1
    permission: int = 1


@dataclass(frozen=True, slots=True)
class DescribeAclsRequest:
    """The ACLs one filter matches (the filter's fields, flat)."""
    TYPE: ClassVar[RequestType] = RequestType.DESCRIBE_ACLS
    resource_type: int = 1
    name: str | None = None
    pattern_type: int = 1
    principal: str | None = None
    host: str | None = None
    operation: int = 1
    permission: int = 1

    @property
    def filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.resource_type, self.name, self.pattern_type, self.principal, self.host,
                                self.operation, self.permission)


@dataclass(frozen=True, slots=True)
class CreateAclsRequest:
    TYPE: ClassVar[RequestType] = RequestType.CREATE_ACLS
    acls: tuple[AclBinding, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "acls", tuple(self.acls))


@dataclass(frozen=True, slots=True)
class DeleteAclsRequest:
    TYPE: ClassVar[RequestType] = RequestType.DELETE_ACLS
    filters: tuple[AclBindingFilter, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "filters", tuple(self.filters))


@dataclass(frozen=True, slots=True)
class DescribeListenersRequest:
    """Where the broker's listeners of both protocols are (no fields)."""
    TYPE: ClassVar[RequestType] = RequestType.DESCRIBE_LISTENERS


Request = (ProduceRequest | FetchRequest | MultiFetchRequest | MultiProduceRequest | OffsetsRequest |
          CreateTopicRequest | DeleteTopicRequest | MetadataRequest | DescribeConfigRequest |
          AlterConfigRequest | DeleteRecordsRequest | CommitOffsetRequest | FetchOffsetRequest |
          HandshakeRequest | SaslAuthenticateRequest | DescribeAclsRequest | CreateAclsRequest |
          DeleteAclsRequest | DescribeListenersRequest)


# ---- the layouts: each body declared once, parsed and built by its compiled code ----

def _configs(count: str) -> Construct:
    return Items(count, Record(tuple, "key" / Str, "value" / NullableStr))


def _produce_fields() -> list[Construct]:
    return ["topic" / Str, "partition" / Int32sb, "setSize" / Length(Int32sb, "messageSet"),
            "messageSet" / MessageSet(this.setSize)]


ACL_BINDING = Record(AclBinding, "resourceType" / Int8sb, "name" / Str, "patternType" / Int8sb,
                     "principal" / Str, "host" / Str, "operation" / Int8sb, "permission" / Int8sb)
ACL_FILTER = Record(AclBindingFilter, "resourceType" / Int8sb, "name" / NullableStr, "patternType" / Int8sb,
                    "principal" / NullableStr, "host" / NullableStr, "operation" / Int8sb,
                    "permission" / Int8sb)

LAYOUTS: dict[RequestType, Record] = {
    RequestType.PRODUCE: Record(ProduceRequest, *_produce_fields()),
    RequestType.FETCH: Record(FetchRequest, "topic" / Str, "partition" / Int32sb, "offset" / Int64sb,
                              "maxBytes" / Int32sb, "maxWaitMs" / Int32sb),
    RequestType.MULTIFETCH: Record(
        MultiFetchRequest, "count" / Rebuild(Int16sb, len_(this.items)),
        "items" / Items("count", Record(FetchItem, "topic" / Str, "partition" / Int32sb, "offset" / Int64sb,
                                        "maxBytes" / Int32sb))),
    RequestType.MULTIPRODUCE: Record(
        MultiProduceRequest, "count" / Rebuild(Int16sb, len_(this.items)),
        "items" / Items("count", Record(ProduceItem, *_produce_fields()))),
    RequestType.OFFSETS: Record(OffsetsRequest, "topic" / Str, "partition" / Int32sb, "time" / Int64sb,
                                "maxNumber" / Int32sb),
    RequestType.CREATE_TOPIC: Record(
        CreateTopicRequest, "topic" / Str, "partitions" / Int32sb,
        "configCount" / Rebuild(Int16sb, len_(this.configs)), "configs" / _configs("configCount")),
    RequestType.DELETE_TOPIC: Record(DeleteTopicRequest, "topic" / Str),
    RequestType.METADATA: Record(MetadataRequest, "count" / Rebuild(Int16sb, len_(this.topics)),
                                 "topics" / Items("count", Str)),
    RequestType.DESCRIBE_CONFIG: Record(DescribeConfigRequest, "topic" / Str),
    RequestType.ALTER_CONFIG: Record(AlterConfigRequest, "topic" / Str,
                                     "count" / Rebuild(Int16sb, len_(this.configs)), "configs" / _configs("count")),
    RequestType.DELETE_RECORDS: Record(DeleteRecordsRequest, "topic" / Str, "partition" / Int32sb,
                                       "offset" / Int64sb),
    RequestType.COMMIT_OFFSET: Record(CommitOffsetRequest, "group" / Str, "topic" / Str, "partition" / Int32sb,
                                      "offset" / Int64sb, "metadata" / NullableStr),
    RequestType.FETCH_OFFSET: Record(FetchOffsetRequest, "group" / Str, "topic" / Str, "partition" / Int32sb),
    RequestType.HANDSHAKE: Record(HandshakeRequest, "version" / Int16sb, "clientId" / NullableStr),
    RequestType.SASL_AUTHENTICATE: Record(
        SaslAuthenticateRequest, "mechanism" / Str, "authSize" / Length(Int32sb, "authBytes"),
        "authBytes" / MessageSet(this.authSize)),
    RequestType.DESCRIBE_ACLS: Record(DescribeAclsRequest, *ACL_FILTER.subcons),
    RequestType.CREATE_ACLS: Record(CreateAclsRequest, "count" / Rebuild(Int16sb, len_(this.acls)),
                                    "acls" / Items("count", ACL_BINDING)),
    RequestType.DELETE_ACLS: Record(DeleteAclsRequest, "count" / Rebuild(Int16sb, len_(this.filters)),
                                    "filters" / Items("count", ACL_FILTER)),
    RequestType.DESCRIBE_LISTENERS: Record(DescribeListenersRequest),
}

LAYOUTS_V2: dict[RequestType, Record] = {
    **LAYOUTS,
    RequestType.FETCH: Record(FetchRequest, *LAYOUTS[RequestType.FETCH].subcons, "isolationLevel" / Int8sb),
    RequestType.METADATA: Record(MetadataRequest, *LAYOUTS[RequestType.METADATA].subcons,
                                 "allowAutoTopicCreation" / Int8sb),
}
VERSIONS = {1: LAYOUTS, 2: LAYOUTS_V2}

# type:int16, then that type's body: what FrameDecoder yields for a request, per version.
_REQUEST = {v: Tagged("request type", layouts).compile() for v, layouts in VERSIONS.items()}
_BODIES: dict[int, dict[type, Construct]] = {
    v: {layout.cls: layout.compile() for layout in layouts.values()} for v, layouts in VERSIONS.items()}


def parse_request(frame: Buffer, version: int = 1) -> Request:
    """Parse type + body (a frame from FrameDecoder) as `version` lays it out.
    Raises ProtocolError(INVALID_REQUEST)."""
    stream = FrameStream(frame)
    try:
        request = _REQUEST[version].parsefunc(stream, None)
        stream.expect_end()
    except PARSE_ERRORS as e:
        raise ProtocolError(ErrorCode.INVALID_REQUEST, f"{describe(e)} at byte {stream.tell()}") from None
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
    return req.topic, req.partition, memoryview(req.message_set)


def encode_request(req: Request, version: int = 1) -> bytes:
    """The whole frame, `size:int32 | type:int16 | body`, as `version` lays it out, in one join."""
    layout = _BODIES[version].get(type(req))
    if layout is None:
        raise TypeError(f"not a native request: {req!r}")
    stream = PartsStream()
    try:
        layout.buildfunc(req, stream, None)
        return b"".join([HEADER.pack(TYPE_BYTES + stream.size, req.TYPE), *stream.parts])
    except struct.error as e:
        raise ValueError(f"{type(req).__name__}: {e}") from None

