"""Mutated Kafka requests for the wire fuzz test, built from kio's encoders.

Contract:
- `sample_requests(topic, api_versions)` returns well-formed request frames (size
  field stripped; header v1, or v2 for flexible versions) for every API and
  version in `api_versions` ((api_key, min, max) as ApiVersions lists them):
  every field gets a plausible value (arrays hold one or two items, strings name
  `topic`, records are a real batch), so a mutation starts from bytes the broker
  would accept.
- `Mutator(seed).mutate(frame)` returns one mutated copy: bit flips, a truncation,
  a length or count field set to -1 / huge / a random value, random bytes spliced
  in, a random api version, or a random api key; the result always begins with a
  4-byte api key/version pair so the broker reads a header (or refuses it).
- `FuzzClient(host, port).run(frames, stop)` sends the frames pipelined in
  batches over one connection at a time and reads the answers; when the broker
  closes the connection (as it must for a malformed request) it reconnects and
  resumes right after the last answered request's successor, so every frame is
  read by the broker and none is lost in a dead socket's buffer. It returns
  (`answered`, `reconnects`). A request unanswered after ANSWER_TIMEOUT (a long
  poll) is skipped the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import random
import socket
import struct
import typing
import uuid
from collections.abc import Iterable
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_writer

from kafka_format import build_batch

SIZE = struct.Struct(">i")
HEADER = struct.Struct(">hhi")
BATCH_SIZE = 64  # requests pipelined before reading answers
# A request may legitimately wait (a long-poll Fetch, a JoinGroup whose mutated
# timeouts are large): past this the client gives up on it and goes on after it.
ANSWER_TIMEOUT = 1.0
SENTINEL = HEADER.pack(18, 0, 0) + b"\xff\xff"  # ApiVersions v0, null client id
INTERESTING_INT32 = (-1, -2, 0, 1, 0x7FFFFFFF, -0x80000000, 0xFFFF, 0x10000)
HUGE_VARINTS = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x01",
                b"\xff\xff\xff\xff\xff\x01", b"\x00")


def _value(cls: type, field: dataclasses.Field, hint: Any, topic: str, records: bytes) -> Any:
    kind = field.metadata.get("kafka_type")
    args = typing.get_args(hint)
    if type(None) in args:
        hint = next(a for a in args if a is not type(None))
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        item_args = typing.get_args(item)
        if type(None) in item_args:
            item = next(a for a in item_args if a is not type(None))
        if dataclasses.is_dataclass(item):
            return tuple(_entity(item, topic, records) for _ in range(1 + (field.name == "partitions")))  # type: ignore[arg-type]
        return (_primitive(kind, field.name, topic, records),)
    if dataclasses.is_dataclass(hint):
        return _entity(hint, topic, records)  # type: ignore[arg-type]  # a dataclass type
    return _primitive(kind, field.name, topic, records)


def _primitive(kind: str | None, name: str, topic: str, records: bytes) -> Any:
    import datetime

    if kind == "string":
        return topic if "name" in name or "topic" in name else "fuzz"
    if kind in ("bytes",):
        return b"fuzz"
    if kind == "records":
        return records
    if kind == "bool":
        return False
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=10)
    if kind == "datetime_i64":
        return datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    if kind == "float64":
        return 0.0
    if name in ("acks",):
        return 1
    if name in ("partition_index", "index", "partition"):
        return 0
    if kind == "int8":
        return 0
    return 1 if kind in ("int16", "int32", "int64", "uint16") else 0


def _entity(cls: type, topic: str, records: bytes):
    hints = typing.get_type_hints(cls)
    values = {f.name: _value(cls, f, hints[f.name], topic, records) for f in dataclasses.fields(cls)}
    return cls(**values)


def encode_frame(request, correlation_id: int, client_id: str | None = "fuzz") -> bytes:
    """Header + body of a kio request (size field stripped)."""
    cls = type(request)
    header_cls = cls.__header_schema__
    header = header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                        correlation_id=correlation_id, client_id=client_id)
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header)
    entity_writer(cls)(buffer, request)
    return buffer.getvalue()


def sample_requests(topic: str, api_versions: Iterable[tuple[int, int, int]]) -> list[bytes]:
    records = build_batch([(b"k", b"fuzz value")])
    frames = []
    for api_key, low, high in api_versions:
        for version in range(low, high + 1):
            cls = load_request_schema(api_key, version)
            frames.append(encode_frame(_entity(cls, topic, records), 0))
    return frames


class Mutator:
    def __init__(self, seed: int):
        self.random = random.Random(seed)

    def mutate(self, frame: bytes) -> bytes:
        rnd = self.random
        data = bytearray(frame)
        how = rnd.randrange(8)
        if how == 0:  # bit flips in the body
            for _ in range(rnd.randint(1, 4)):
                at = rnd.randrange(len(data))
                data[at] ^= 1 << rnd.randrange(8)
        elif how == 1:  # truncation
            del data[rnd.randrange(4, max(5, len(data))):]
        elif how == 2:  # an int32 (legacy count/length) set to an edge value
            at = rnd.randrange(8, max(9, len(data) - 3))
            data[at:at + 4] = struct.pack(">I", rnd.choice(INTERESTING_INT32) & 0xFFFFFFFF)
        elif how == 3:  # an int16 (legacy string length) set to -1 / huge
            at = rnd.randrange(8, max(9, len(data) - 1))
            data[at:at + 2] = struct.pack(">h", rnd.choice((-1, -2, 0x7FFF, 0)))
        elif how == 4:  # a varint (compact count/length) replaced by null / huge
            at = rnd.randrange(8, max(9, len(data)))
            data[at:at + 1] = rnd.choice(HUGE_VARINTS)
        elif how == 5:  # random bytes spliced in
            at = rnd.randrange(len(data))
            data[at:at] = rnd.randbytes(rnd.randint(1, 16))
        elif how == 6:  # a random api version
            data[2:4] = struct.pack(">h", rnd.randrange(-2, 40))
        else:  # a random api key with the same body
            data[0:2] = struct.pack(">h", rnd.randrange(-1, 100))
        if len(data) < 4:
            data = bytearray(frame[:4])
        return bytes(data)


class FuzzClient:
    def __init__(self, host: str, port: int, timeout: float = ANSWER_TIMEOUT):
        self.address = (host, port)
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.reconnects = 0

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def run(self, frames: list[bytes]) -> tuple[int, int]:
        """Send every frame (see the module contract): (answered, reconnects)."""
        answered = 0
        i = 0
        while i < len(frames):
            if self.sock is None:
                self.sock = self._connect()
            batch = frames[i:i + BATCH_SIZE]
            wire = bytearray()
            # Correlation id = index in the batch; an ApiVersions after the batch is
            # always answered, so the end of the batch is seen even when its last
            # request has no answer (a Produce mutated to acks=0).
            for n, frame in enumerate(batch + [SENTINEL]):
                if len(frame) >= 8:
                    frame = frame[:4] + SIZE.pack(n) + frame[8:]
                wire += SIZE.pack(len(frame)) + frame
            with contextlib.suppress(OSError):  # closed while sending: the answers read below say how far it got
                self.sock.sendall(wire)
            last = self._answers(len(batch) + 1)
            if last == len(batch):
                last -= 1  # the sentinel's answer
            answered += last + 1 if last is not None else 0
            if last is not None and last == len(batch) - 1:
                i += len(batch)
                continue
            # Closed (or silent: acks=0 produce, then closed) after `last`: the next
            # frame is the one the broker refused; go on after it on a new connection.
            i += (last + 1 if last is not None else 0) + 1
            self.close()
            self.reconnects += 1
        return answered, self.reconnects

    def _answers(self, expected: int) -> int | None:
        """Read answers until the batch's last one or EOF; the highest correlation id seen."""
        assert self.sock is not None
        buffer = bytearray()
        last = None
        self.sock.settimeout(self.timeout)
        while True:
            while len(buffer) >= 4:
                (size,) = SIZE.unpack_from(buffer, 0)
                if len(buffer) < 4 + size:
                    break
                (correlation_id,) = SIZE.unpack_from(buffer, 4)
                last = correlation_id if last is None else max(last, correlation_id)
                del buffer[:4 + size]
            if last == expected - 1:
                return last
            try:
                chunk = self.sock.recv(1 << 16)
            except (TimeoutError, ConnectionError):  # closed, or a request that waits
                chunk = b""
            if not chunk:
                return last
            buffer += chunk
