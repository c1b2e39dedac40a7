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
- Version: `open` first sends a HANDSHAKE (the codec's PROTOCOL_VERSION) and
  speaks the version the broker answers (`conn.version`); a peer that closes the
  connection instead (a Kafka listener does) raises BrokerUnreachable asking
  whether the address is the native listener; a broker of version 1
  answers the unknown type with INVALID_REQUEST and the connection stays at
  version 1. From version 2 on, error responses carry the broker's reason
  (`response.message`).
- SASL: when the HANDSHAKE lists mechanisms, `open(..., sasl=credentials)`
  (client/sasl.py) authenticates with SASL_AUTHENTICATE before anything else;
  without credentials, or with a mechanism the listener does not offer, or when
  the broker refuses them, `open` raises AuthenticationFailed with the broker's
  reason. A session lifetime in the answer (connections.max.reauth.ms) schedules
  re-authentication on the same connection at 85% of it.
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

from protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    HandshakeRequest,
    ProtocolError,
    encode_request,
    parse_response,
)
from protocol.errors import ErrorCode
from protocol.requests import Request, SaslAuthenticateRequest

from .errors import AuthenticationFailed, BrokerUnreachable, RequestTimedOut, StrataClientError
from .sasl import SaslCredentials, SaslFailed, run_exchange_async

__all__ = ["AsyncConnection", "parse_bootstrap", "DEFAULT_REQUEST_TIMEOUT_MS",
           "DEFAULT_CONNECT_TIMEOUT_MS", "CLIENT_ID"]

CLIENT_ID = "strata-python"  # what the HANDSHAKE names this client

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
        self.version = 1  # until the HANDSHAKE's answer says otherwise
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
                response = parse_response(request_type, frame, self.version)
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
        self._sasl: SaslCredentials | None = None
        self._reauth: asyncio.TimerHandle | None = None
        self._protocol = protocol
        self.address = protocol.address
        self.request_timeout_ms = request_timeout_ms

    @classmethod
    async def open(cls, bootstrap: str, *, connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
                   request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                   ssl: ssl_module.SSLContext | None = None,
                   sasl: SaslCredentials | None = None) -> AsyncConnection:
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
                conn = cls(protocol, request_timeout_ms)
                conn._sasl = sasl
                await conn._handshake()
                return conn
        raise BrokerUnreachable("cannot reach broker at " + "; ".join(problems))

    async def _handshake(self) -> None:
        """Settle the version with the broker (see the module contract)."""
        try:
            response = await self.request(HandshakeRequest(PROTOCOL_VERSION, CLIENT_ID))
        except BrokerUnreachable as e:
            raise BrokerUnreachable(f"{e}: it closed the connection at the first request, as a Kafka listener "
                                    f"does; is {self.address} the broker's native listener?") from None
        if response.error != ErrorCode.NONE:
            return  # a version-1 broker: HANDSHAKE is a type it does not know
        self._protocol.version = response.version
        if response.mechanisms:
            offered = ", ".join(response.mechanisms)
            if self._sasl is None:
                self.close()
                raise AuthenticationFailed(f"broker at {self.address} requires SASL ({offered}): set "
                                           "security.protocol=SASL_PLAINTEXT or SASL_SSL, sasl.mechanism, "
                                           "sasl.username and sasl.password")
            if self._sasl.mechanism not in response.mechanisms:
                self.close()
                raise AuthenticationFailed(f"broker at {self.address} offers SASL {offered}, "
                                           f"not {self._sasl.mechanism}")
            await self.authenticate()

    async def authenticate(self) -> None:
        """One SASL exchange (see the module contract); raises AuthenticationFailed."""
        credentials = self._sasl
        assert credentials is not None
        lifetimes_ms: list[int] = []

        async def round_trip(message: bytes) -> bytes:
            response = await self.request(SaslAuthenticateRequest(credentials.mechanism, message))
            if response.error != ErrorCode.NONE:
                self.close()
                raise AuthenticationFailed(f"SASL authentication with broker at {self.address} failed: "
                                           f"{response.message or ErrorCode(response.error).name}")
            lifetimes_ms.append(response.session_lifetime_ms)
            return bytes(response.auth_bytes)

        try:
            await run_exchange_async(credentials, round_trip)
        except SaslFailed as e:
            self.close()
            raise AuthenticationFailed(f"SASL authentication with broker at {self.address} failed: {e}") from None
        except BrokerUnreachable as e:
            raise AuthenticationFailed(f"SASL authentication with broker at {self.address} failed: "
                                       f"the broker closed the connection ({e})") from None
        if lifetimes_ms[-1] > 0:
            loop = asyncio.get_running_loop()
            self._reauth = loop.call_later(lifetimes_ms[-1] * 0.85 / 1000, self._reauthenticate)

    def _reauthenticate(self) -> None:
        if not self.closed:
            task = asyncio.ensure_future(self.authenticate())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    @property
    def version(self) -> int:
        """The native protocol version this connection speaks."""
        return self._protocol.version

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
        frame = encode_request(request, protocol.version)
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
        if self._reauth is not None:
            self._reauth.cancel()
        self._protocol.fail(BrokerUnreachable(f"connection to broker at {self.address} closed"))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.in_flight} in flight"
        return f"AsyncConnection({self.address}, {state})"
