"""A blocking native-protocol client for the broker tests, built on the codec only
(protocol.encode_request / FrameDecoder / parse_response), not on client/.

Contract: `NativeClient(host, port)` connects; `call(req)` sends one request and
returns the parsed response; `send(req)` / `recv()` pipeline (responses are
matched to requests in order); `send_raw(bytes, request_type)` sends hand-made
frames. `at_eof()` tells whether the broker closed the connection. `handshake(v)`
sends a HANDSHAKE and, on success, speaks the version the broker answers from then
on (requests encoded and responses parsed as that version lays them out).
"""

from __future__ import annotations

import socket
import struct
from collections import deque

from protocol import ErrorCode, FrameDecoder, HandshakeRequest, encode_request, parse_response

TIMEOUT = 30.0


class NativeClient:
    version = 1  # the version in force (tests that build a client by hand keep it)

    def __init__(self, host: str, port: int, timeout: float = TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.decoder = FrameDecoder(2**31 - 1)
        self.pending: deque = deque()  # request types, or (type, version) pairs

    def handshake(self, version: int = 2, client_id: str | None = "tests"):
        response = self.call(HandshakeRequest(version, client_id))
        if response.error == ErrorCode.NONE:
            self.version = response.version
        return response

    def send(self, request) -> None:
        self.sock.sendall(encode_request(request, self.version))
        self.pending.append((request.TYPE, self.version))

    def send_raw(self, data: bytes, request_type: int) -> None:
        self.sock.sendall(data)
        self.pending.append((request_type, self.version))

    def recv_frame(self) -> memoryview:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.decoder.feed(chunk)

    def recv(self):
        frame = self.recv_frame()
        item = self.pending.popleft()
        request_type, version = item if isinstance(item, tuple) else (item, self.version)
        return parse_response(request_type, bytes(frame), version)

    def call(self, request):
        self.send(request)
        return self.recv()

    def at_eof(self) -> bool:
        """True once the broker has closed the connection (reads what is left)."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> NativeClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def raw_frame(request_type: int, body: bytes) -> bytes:
    return struct.pack(">ih", 2 + len(body), request_type) + body
