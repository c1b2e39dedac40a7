"""One TCP connection to the broker, speaking the native protocol (asyncio).

Contract:
- `await AsyncConnection.open(bootstrap, ...)` connects to the first reachable
  address of `bootstrap` ("host:port", "[v6]:port", or a comma-separated list
  tried in order) or raises BrokerUnreachable naming every address tried.
- TLS: `open(..., ssl=context)` (client/security.py `ssl_context` makes one from
  Kafka-style settings: security.protocol=SSL, ssl.ca.location, ...). A failed
  handshake raises BrokerUnreachable saying so.
- `await conn.request(req, timeout_ms=None)` sends one request and returns its
  parsed response (`protocol` dataclasses). Requests are pipelined: many may be
  outstanding, and since the broker answers in request order, responses are
  matched to requests by a FIFO of pending slots. A top-level error code comes
  back in the response; raising for it is the caller's business
  (`errors.raise_for`), because only the caller knows what it asked.
- Failures: the connection breaking (or never answering within the timeout)
  fails every outstanding request with BrokerUnreachable (or RequestTimedOut)
  and closes the connection for good; a later `request` raises the same error
  at once. A timeout must close the connection: the late answer would
  otherwise be matched to the next request. Bytes that are not a valid
  response fail everything with StrataClientError(CORRUPT_MESSAGE).
- Encoding and parsing are entirely the `protocol` codec's: this module only
  moves frames.

Why a raw asyncio.Protocol and not streams: `data_received` feeds the codec's
FrameDecoder directly (no extra copy through a StreamReader) and
`connection_lost` is the one place where every outstanding request is failed.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl as ssl_module
from collections import deque

from protocol import FrameDecoder, ProtocolError, encode_request, parse_response
from protocol.errors import ErrorCode
from protocol.requests import Request

from .errors import BrokerUnreachable, RequestTimedOut, StrataClientError

__all__ = ["AsyncConnection", "parse_bootstrap", "DEFAULT_REQUEST_TIMEOUT_MS",
           "DEFAULT_CONNECT_TIMEOUT_MS"]

DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_CONNECT_TIMEOUT_MS = 10_000
# A client asks for at most what it can hold; the frame limit only guards the int32.
MAX_RESPONSE_FRAME = 2**31 - 1
# Above this much unsent data, `request` waits for the socket to drain.
WRITE_HIGH_WATER = 4 * 1024 * 1024


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """[(host, port), ...] from "h:p[,h:p...]"; IPv6 hosts go in brackets."""
    addresses = []
    for part in bootstrap.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("["):
            host, sep, port = part[1:].partition("]:")
        else:
            host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad bootstrap address {part!r}: expected HOST:PORT")
        addresses.append((host, int(port)))
    if not addresses:
        raise ValueError("no bootstrap address given")
    return addresses


def _reason(e: OSError) -> str:
    """A short cause: asyncio's own connect message repeats the address."""
    if isinstance(e, socket.gaierror) or not e.errno or e.errno < 0:
        return (e.strerror or str(e)).lower()
    return os.strerror(e.errno).lower()


class _BrokerProtocol(asyncio.Protocol):
    """The socket half: frames in, pending slots resolved in order."""

    def __init__(self, address: str):
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.pending: deque[tuple[int, asyncio.Future]] = deque()
        self.decoder = FrameDecoder(max_frame_bytes=MAX_RESPONSE_FRAME)
        self.error: StrataClientError | None = None  # set once: the connection is dead
        self._can_write = asyncio.Event()
        self._can_write.set()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.decoder.feed(data)
            for frame in self.decoder.frames():
                if not self.pending:
                    raise ProtocolError(ErrorCode.CORRUPT_MESSAGE, "a response nobody asked for")
                request_type, future = self.pending.popleft()
                response = parse_response(request_type, frame)
                if not future.done():  # a cancelled caller leaves its slot behind
                    future.set_result(response)
        except ProtocolError as e:
            self.fail(StrataClientError(f"bad response from {self.address}: {e.message}",
                                        ErrorCode.CORRUPT_MESSAGE))

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self.fail(BrokerUnreachable(f"connection to broker at {self.address} lost{reason}"))
        self._can_write.set()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    async def wait_writable(self) -> None:
        await self._can_write.wait()

    def fail(self, error: StrataClientError) -> StrataClientError:
        """Fail every outstanding request and close; later requests get `error` too.
        Returns the error the connection carries from now on (the first one given)."""
        if self.error is None:
            self.error = error
        standing = self.error
        while self.pending:
            _, future = self.pending.popleft()
            if not future.done():
                future.set_exception(error)
                # A caller that gave up waiting (cancelled, timed out) left this future
                # behind; mark the error seen so asyncio does not log it as lost.
                future.exception()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        return standing


class AsyncConnection:
    """A pipelining connection; see the module contract."""

    def __init__(self, protocol: _BrokerProtocol, request_timeout_ms: int):
        self._protocol = protocol
        self.address = protocol.address
        self.request_timeout_ms = request_timeout_ms

    @classmethod
    async def open(cls, bootstrap: str, *, connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
                   request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                   ssl: ssl_module.SSLContext | None = None) -> AsyncConnection:
        """`ssl`: connect with TLS (client/security.py makes the context from
        Kafka-style settings)."""
        loop = asyncio.get_running_loop()
        problems = []
        for host, port in parse_bootstrap(bootstrap):
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            try:
                _, protocol = await asyncio.wait_for(
                    loop.create_connection(functools.partial(_BrokerProtocol, address), host, port, ssl=ssl),
                    connect_timeout_ms / 1000)
            except TimeoutError:
                problems.append(f"{address}: no answer within {connect_timeout_ms} ms")
            except ssl_module.SSLError as e:
                problems.append(f"{address}: TLS handshake failed ({e.reason or e}); is it a TLS listener, "
                                "and do ssl.ca.location and the client certificate match it?")
            except ConnectionResetError as e:
                problems.append(f"{address}: {_reason(e)}"
                                + (" during the TLS handshake (not a TLS listener?)" if ssl else ""))
            except OSError as e:
                problems.append(f"{address}: {_reason(e)}")
            else:
                return cls(protocol, request_timeout_ms)
        raise BrokerUnreachable("cannot reach broker at " + "; ".join(problems))

    @property
    def closed(self) -> bool:
        return self._protocol.error is not None

    @property
    def in_flight(self) -> int:
        return len(self._protocol.pending)

    async def request(self, request: Request, timeout_ms: int | None = None):
        """Send `request`, wait for its response (see the module contract)."""
        protocol = self._protocol
        if protocol.error is not None:
            raise protocol.error
        frame = encode_request(request)
        future = asyncio.get_running_loop().create_future()
        transport = protocol.transport
        assert transport is not None  # create_connection returns after connection_made
        protocol.pending.append((request.TYPE, future))
        transport.write(frame)
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        try:
            if transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                await asyncio.wait_for(protocol.wait_writable(), timeout_ms / 1000)
            return await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
        except TimeoutError:
            raise protocol.fail(RequestTimedOut(
                f"no response from broker at {self.address} within {timeout_ms} ms "
                f"to {request.TYPE.name}")) from None

    def close(self) -> None:
        """Close at once; outstanding requests fail with BrokerUnreachable."""
        self._protocol.fail(BrokerUnreachable(f"connection to broker at {self.address} closed"))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.in_flight} in flight"
        return f"AsyncConnection({self.address}, {state})"
