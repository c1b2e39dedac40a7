"""A blocking Kafka-protocol client for the tests, built on kio only (not on any
Kafka client library), to look at exact wire behaviour.

Contract: `KafkaWire(host, port)` connects; `call(request)` encodes the kio request
(header v1, or v2 for flexible versions), sends it, and returns the decoded kio
response of the same API and version; `send(request)` / `recv()` pipeline
(responses are matched in order); `send_raw(frame_body)` sends hand-made bytes
with a size field; `recv_raw()` returns one response frame (size stripped);
`at_eof()` tells whether the broker closed the connection.
"""

from __future__ import annotations

import io
import socket
import struct
from collections import deque

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from tests.broker.wire import NativeClient

TIMEOUT = 30.0
SIZE = struct.Struct(">i")


def encode(request, correlation_id: int, client_id: str | None = "strata-tests") -> bytes:
    cls = type(request)
    header_cls = cls.__header_schema__
    values = dict(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                  correlation_id=correlation_id, client_id=client_id)
    header = header_cls(**values)
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header)
    entity_writer(cls)(buffer, request)
    body = buffer.getvalue()
    return SIZE.pack(len(body)) + body


def decode(response_class, frame: bytes):
    """(correlation_id, response) from one response frame (size stripped)."""
    header, offset = entity_reader(response_class.__header_schema__)(frame, 0)  # (value, size read)
    response, size = entity_reader(response_class)(frame, offset)
    assert offset + size == len(frame), f"{offset + size} of {len(frame)} bytes decoded"
    return header.correlation_id, response


class KafkaWire:
    def __init__(self, host: str, port: int, timeout: float = TIMEOUT, client_id: str | None = "strata-tests"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self.pending: deque[tuple[int, type]] = deque()
        self.next_id = 1
        self.buffer = b""

    def send(self, request) -> int:
        correlation_id = self.next_id
        self.next_id += 1
        self.sock.sendall(encode(request, correlation_id, self.client_id))
        self.pending.append((correlation_id, load_response_schema(type(request).__api_key__,
                                                                  type(request).__version__)))
        return correlation_id

    def send_raw(self, body: bytes) -> None:
        self.sock.sendall(SIZE.pack(len(body)) + body)

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def recv_raw(self) -> bytes:
        (size,) = SIZE.unpack(self._read(4))
        return self._read(size)

    def recv(self):
        correlation_id, response_class = self.pending.popleft()
        got, response = decode(response_class, self.recv_raw())
        assert got == correlation_id, (got, correlation_id)
        return response

    def call(self, request):
        self.send(request)
        return self.recv()

    # The socket life cycle is the native test client's: at_eof, close, with-blocks.
    at_eof = NativeClient.at_eof
    close = NativeClient.close
    __enter__ = NativeClient.__enter__
    __exit__ = NativeClient.__exit__
