"""Kafka's wire format around kio: request headers in, framed responses out.

Contract:
- `peek_header(frame)` reads api_key, api_version and correlation_id (the first
  8 bytes of every Kafka request header, whatever its version) so the broker can
  answer even a request it cannot decode.
- `decode_request(frame, request_class)` decodes the request header (v1, or v2 with
  tagged fields for flexible versions: kio's `__header_schema__`) and the body;
  any malformed input raises `MalformedRequest`: the bytes are first checked
  against the schema by `request_check` (kio itself reads a null array where the
  schema forbids one as None, and aborts the process on a huge array count).
- `encode_response(correlation_id, response)` frames a kio response:
  `size:int32 | header | body`, with header v0 (correlation id) or v1 (plus an
  empty tagged-field section) as kio's `__header_schema__` says; ApiVersions'
  header is always v0 (kio's schemas encode that).
- `encode_spliced(correlation_id, response, slices)` does the same for a response
  whose `records` fields hold marker bytes made by `RecordsSplicer.marker`: the
  markers are found in kio's encoding and replaced by the FileSlices themselves
  (the length prefix rewritten: int32 for classic versions, unsigned varint
  length+1 for flexible ones), so fetched bytes go to the socket with sendfile and
  are never copied into Python objects. The result is the reply part list.
- `make(cls, **values)` builds a kio entity for any version of a schema: keys the
  version does not have are dropped, ints become `ErrorCode` / `timedelta` where
  the field wants them, and missing required fields get neutral values (0, "",
  None for nullable, () for arrays). One handler thus serves every version.
- `error_response(response_class, code)` is a generic answer carrying `code` in
  every top-level error field (for errors that escape a handler).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import os
import struct
import typing
import uuid
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import RequestPayload, ResponsePayload

from kafka_format.varint import encode_uvarint as uvarint

from ..core import RecordSlice
from .request_check import MalformedRequest, check_request

HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
INT32 = struct.Struct(">i")
MARKER_SIZE = 16  # < 127, so a flexible length prefix of a marker is one byte
ZERO_UUID = uuid.UUID(int=0)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def peek_header(frame) -> tuple[int, int, int]:
    if len(frame) < HEADER_PREFIX.size:
        raise MalformedRequest(f"request of {len(frame)} bytes has no room for a header")
    return HEADER_PREFIX.unpack_from(frame, 0)


def decode_request(frame, request_class: type[RequestPayload]) -> tuple[Any, Any]:
    """(kio RequestHeader, kio request) from one frame (size field stripped). The
    bytes are checked against the schema first (request_check: null where null is
    not allowed, counts the frame cannot hold), as kio does not."""
    data = frame.toreadonly() if isinstance(frame, memoryview) else frame
    check_request(data, request_class)
    try:
        header, offset = entity_reader(request_class.__header_schema__)(data, 0)  # (value, size)
        body, size = entity_reader(request_class)(data, offset)
    except Exception as e:  # kio raises ValueError, IndexError, UnicodeDecodeError, ...
        raise MalformedRequest(f"cannot decode {request_class.__name__}: {e!r}") from None
    return header, body


# ---- responses ---------------------------------------------------------------------------------

def _header_bytes(correlation_id: int, response_class: type[ResponsePayload]) -> bytes:
    if response_class.__header_schema__.__version__ >= 1:
        return INT32.pack(correlation_id) + b"\x00"  # v1: no tagged fields
    return INT32.pack(correlation_id)


def encode_body(response) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(response))(buffer, response)
    return buffer.getvalue()


def encode_response(correlation_id: int, response) -> bytes:
    header = _header_bytes(correlation_id, type(response))
    body = encode_body(response)
    return INT32.pack(len(header) + len(body)) + header + body


class RecordsSplicer:
    """Markers for `records` fields; `encode_spliced` swaps them for the slices."""

    __slots__ = ("_prefix", "slices")

    def __init__(self) -> None:
        self._prefix = os.urandom(MARKER_SIZE - 4)
        self.slices: list[tuple[bytes, RecordSlice]] = []

    def marker(self, found: RecordSlice) -> bytes:
        """What to put in a records field for `found` (taken over: released with the reply)."""
        marker = self._prefix + INT32.pack(len(self.slices))
        self.slices.append((marker, found))
        return marker

    def release(self) -> None:
        for _, found in self.slices:
            found.release()
        self.slices.clear()


def encode_spliced(correlation_id: int, response, splicer: RecordsSplicer) -> list:
    """The framed reply as parts: bytes and the FileSlices in place of the markers."""
    flexible = type(response).__flexible__
    header = _header_bytes(correlation_id, type(response))
    body = encode_body(response)
    old_prefix = uvarint(MARKER_SIZE + 1) if flexible else INT32.pack(MARKER_SIZE)
    parts: list = []
    position = 0
    size = len(header) + len(body)
    pending = header
    for marker, found in splicer.slices:
        at = body.find(marker, position)
        if at < 0 or body[at - len(old_prefix):at] != old_prefix:
            raise AssertionError("records marker not found in the encoded response")
        new_prefix = uvarint(found.length + 1) if flexible else INT32.pack(found.length)
        parts.append(pending + body[position:at - len(old_prefix)] + new_prefix)
        parts.append(found)
        pending = b""
        size += found.length - MARKER_SIZE - len(old_prefix) + len(new_prefix)
        position = at + MARKER_SIZE
    parts.append(pending + body[position:])
    parts[0] = INT32.pack(size) + parts[0]
    splicer.slices.clear()  # the reply owns them now
    return parts


# ---- building entities for any version -----------------------------------------------------------

@cache
def _schema(cls: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}


def has_field(cls: type, name: str) -> bool:
    return name in _schema(cls)


@cache
def nested(cls: type, name: str) -> type:
    """The entity class of field `name` (an array of entities, or one entity)."""
    _, hint = _schema(cls)[name]
    for candidate in (hint, *typing.get_args(hint)):
        for inner in (candidate, *typing.get_args(candidate)):
            if isinstance(inner, type) and dataclasses.is_dataclass(inner):
                return inner
    raise TypeError(f"{cls.__name__}.{name} is not an entity field")


def _coerce(field: dataclasses.Field, hint: Any, value: Any) -> Any:
    kind = field.metadata.get("kafka_type")
    if value is None:
        return None
    if kind == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64") and not isinstance(value, datetime.timedelta):
        return datetime.timedelta(milliseconds=int(value))
    if kind == "datetime_i64" and not isinstance(value, datetime.datetime):
        if value < 0 and type(None) in typing.get_args(hint):
            return None  # written as -1
        return EPOCH + datetime.timedelta(milliseconds=int(value))
    if kind == "uuid" and isinstance(value, str):
        return uuid.UUID(value)
    return value


def _neutral(field: dataclasses.Field, hint: Any) -> Any:
    kind = field.metadata.get("kafka_type")
    args = typing.get_args(hint)
    if type(None) in args:
        return None
    origin = typing.get_origin(hint)
    if origin is tuple:
        return ()
    if kind == "error_code":
        return ErrorCode.none
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kind in ("string",):
        return ""
    if kind in ("bytes", "records"):
        return b""
    if kind == "bool":
        return False
    if kind == "uuid":
        return ZERO_UUID
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return make(hint)
    return 0


def make(cls: type, **values: Any):
    """An entity of `cls` from the values it has fields for (see the module contract)."""
    schema = _schema(cls)
    kwargs = {}
    for name, (field, hint) in schema.items():
        if name in values:
            kwargs[name] = _coerce(field, hint, values[name])
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            kwargs[name] = _neutral(field, hint)
    return cls(**kwargs)


def error_response(response_class: type, code: int):
    """A response with `code` in its top-level error field(s) and nothing else."""
    values = {name: code for name, (field, _) in _schema(response_class).items()
              if field.metadata.get("kafka_type") == "error_code"}
    return make(response_class, **values)


__all__ = ["MalformedRequest", "RecordsSplicer", "decode_request", "encode_response",
           "encode_spliced", "error_response", "has_field", "make", "nested", "peek_header",
           "uvarint", "ErrorCode"]
