"""The TCP listener: the listening socket, its connections, and what they share.

Contract:
- `BrokerServer(handlers, ..., listener=...)` is one listener (broker/net/listeners.py)
  of one protocol: the native `Handlers` (a `PerConnection`, which gives each
  connection its own RequestHandlers) or the Kafka listener's
  `broker.kafka.KafkaApis` (a `RequestHandlers`; both in broker/net/connection.py). An SSL
  listener listens with its TLS context (broker/net/tls.py): connections begin once the
  handshake is done, and a failed handshake closes the socket without reaching the
  handlers. Each accepted socket is a `Connection`
  (broker/net/connection.py: frames in, replies out, in order), with its own
  `FlowControl` (broker/net/flow_control.py) and `SendfileWriter` (broker/net/sendfile.py).
  The server holds what the connections share: limits, the `FramePool` of large
  frames' buffers, scratch buffers, `stats`, and the broker-wide RequestMemory,
  ConnectionLimits and BadRequestLog (both listeners get the same ones).
- Connections: `ConnectionRates` (broker/net/connection_rates.py: the IP's
  `connection_creation_rate` quota, max.connection.creation.rate and its
  listener override, shared by both listeners) may make a new connection wait
  before it is read, or hold it unread and close it after a throttle time (not
  admitted); then `ConnectionLimits` (max.connections, max.connections.per.ip
  and overrides, shared by both listeners) may refuse it, and it is closed at
  once; connections held for a rate are closed at shutdown. connections.max.idle.ms closes connections with nothing in
  flight and no read or reply for that long. After a burst of closes the server
  collects garbage and calls malloc_trim(0), so their memory leaves the RSS.
- `shutdown(timeout)` stops accepting, answers pending long polls, lets every
  connection finish the requests it has already read (bounded by `timeout`),
  then closes (or, past the timeout, aborts) every connection.
- `on_connection_closed(context)` (optional, given at construction) is called with the
  ConnectionContext of each connection that closed, after the server forgot it.
- `stats` counts requests, pauses and refusals so tests can watch them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import structlog

from broker.admin.metrics import RequestStats
from broker.net.bad_request_log import BadRequestLog
from broker.net.connection import Connection
from broker.net.connection_limits import ConnectionLimits
from broker.net.connection_rates import ADMITTED, Admission, ConnectionRates
from broker.net.listeners import ConnectionContext, Listener
from broker.net.request_handlers import CloseConnection, FastPath, PerConnection, RequestHandlers
from broker.net.request_memory import RequestMemory, give_back_memory
from broker.net.sendfile import SENDFILE_FALLBACK_CHUNK, SendfileStats, sendfile_stats
from protocol.framing import FramePool, ScratchBuffers

LISTEN_BACKLOG = 1024
TRIM_AFTER_CLOSES = 64  # connections closed before the C heap's free memory is given back
TRIM_DELAY_S = 0.5  # after the first of them: one trim per burst of closes
IDLE_CHECK_MIN_S = 0.05  # how often idle connections are looked for: a quarter of
IDLE_CHECK_MAX_S = 10.0  # connections.max.idle.ms, within these bounds
TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a TLS handshake not done by then closes the connection

log = structlog.get_logger("strata.server")


@dataclass
class ServerStats:
    connections_accepted: int = 0
    requests: int = 0
    frames_too_large: int = 0
    read_pauses: int = 0
    write_pauses: int = 0
    max_queued_requests: int = 0  # the most requests ever queued on one connection
    begun_early: int = 0  # requests begun before their turn (pipelined PRODUCEs, `begin`)
    connections_refused: int = 0  # over max.connections / max.connections.per.ip
    idle_closed: int = 0  # closed after connections.max.idle.ms without activity
    answered_at_once: int = 0  # requests answered by the fast path (`handle_now`), sent whole or not
    tls_handshake_failures: int = 0  # TLS listeners: handshakes that failed (socket closed)
    throttle_mutes: int = 0  # connections muted after a reply a client quota throttled (KIP-219)
    throttle_mute_ms: int = 0  # the throttle times of those mutes, summed
    connections_delayed: int = 0  # made to wait by max.connection.creation.rate (broker or listener)
    connections_throttled: int = 0  # closed after a delay: over the IP's connection_creation_rate

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}



class HandshakeFailures:
    """A TLS listener's failed handshakes, as its ServerTls reports them (broker/net/tls.py;
    the TLS layer closed that socket): counted in the listener's ServerStats and logged
    rate-limited per listener and reason. The peer is not known at that layer. Made
    before the ServerTls, with the listener's stats and the broker's BadRequestLog."""

    def __init__(self, listener_name: str, stats: ServerStats, bad_requests: BadRequestLog):
        self.listener_name = listener_name
        self.stats = stats
        self.bad_requests = bad_requests

    def __call__(self, reason: str) -> None:
        self.stats.tls_handshake_failures += 1
        self.bad_requests.record(("tls", self.listener_name), "tls_handshake_failed",
                                 listener=self.listener_name, reason=reason)


class BoundPort:
    """A listening address bound before the broker is built, so a busy port fails the
    start before any storage work; it accepts nothing until `serve` names the
    BrokerServer its connections belong to."""

    def __init__(self, server: asyncio.Server, serving: list[BrokerServer]):
        self._server = server
        self._serving = serving  # the BrokerServer, once `serve` named it

    @classmethod
    async def bind(cls, host: str, port: int, tls: Any = None) -> BoundPort:
        """Bind and listen on (host, port), with TLS when `tls` (broker.net.tls.ServerTls) is given."""
        serving: list[BrokerServer] = []
        server = await asyncio.get_running_loop().create_server(
            lambda: Connection(serving[0]), host, port, reuse_address=True, backlog=LISTEN_BACKLOG,
            start_serving=False, ssl=tls.context if tls is not None else None,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls is not None else None)
        return cls(server, serving)

    @property
    def address(self) -> tuple[str, int]:
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def serve(self, server: BrokerServer) -> None:
        """Accept connections, each served by `server`."""
        self._serving.append(server)
        await self._server.start_serving()

    def close(self) -> None:
        self._server.close()

    async def wait_closed(self) -> None:
        await self._server.wait_closed()


class BrokerServer:
    """The listening socket and every open connection."""

    def __init__(self, handlers: RequestHandlers | PerConnection, *, max_frame_bytes: int, max_queued_requests: int,
                 write_buffer_high: int, bad_requests: BadRequestLog | None = None,
                 memory: RequestMemory | None = None, limits: ConnectionLimits | None = None,
                 rates: ConnectionRates | None = None, idle_ms: int = -1, listener: Listener | None = None,
                 request_stats: list[RequestStats] | None = None, port: BoundPort | None = None,
                 stats: ServerStats | None = None,
                 on_connection_closed: Callable[[ConnectionContext], None] | None = None):
        self.handlers = handlers
        # Told of each connection that closed (its ConnectionContext), after the server forgot it:
        # state the handlers keep per connection ends with it (Kafka: share sessions).
        self.on_connection_closed = on_connection_closed
        # The listener this server serves (name, security protocol, TLS context);
        # every connection's ConnectionContext names it.
        self.listener = listener
        # Metrics: the RequestStats of this listener's protocol, by api slot (None: off).
        self.request_stats = request_stats
        # Shared by the broker's listeners: queued.max.request.bytes, max.connections*.
        self.memory = memory or RequestMemory()
        self.limits = limits
        self.rates = rates
        self.held: set[asyncio.Transport] = set()  # over an IP's connection rate: closed after a delay
        self.idle_s = idle_ms / 1000 if idle_ms >= 0 else None  # connections.max.idle.ms
        self.scratch = ScratchBuffers()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed_since_trim = 0
        self._trim_timer: asyncio.TimerHandle | None = None
        # Bad frames are logged rate-limited (shared by the broker's listeners).
        self.bad_requests = bad_requests or BadRequestLog(log, loop=handlers.loop)
        self.loop = handlers.loop
        self.max_frame_bytes = max_frame_bytes
        self.max_queued_requests = max_queued_requests
        self.write_buffer_high = write_buffer_high
        self.connections: set[Connection] = set()
        self.frame_pool = FramePool()  # large frames' buffers, shared by the connections
        # The listener's counters; made before the server when its TLS reports failed
        # handshakes to them (HandshakeFailures).
        self.stats = stats if stats is not None else ServerStats()
        self.closing = False
        self._port = port  # the listening address (BoundPort.bind), serving from `start_serving` on

    async def start_serving(self) -> None:
        assert self._port is not None
        await self._port.serve(self)

    def close(self) -> None:
        """Give the port back (startup failed before serving)."""
        if self._port is not None:
            self._port.close()

    @property
    def address(self) -> tuple[str, int]:
        assert self._port is not None
        return self._port.address

    def admit(self, conn: Connection) -> Admission | None:
        """Count a new connection against the connection rates, then max.connections(.per.ip)
        (Kafka's ConnectionQuotas.inc): None when refused (closed at once); else how
        long to wait before reading it, or, over its IP's rate, when to close it."""
        ip = conn.peer[0] if isinstance(conn.peer, tuple) and conn.peer else str(conn.peer)
        admission = ADMITTED
        if self.rates is not None:
            admission = self.rates.admit(self.listener.name if self.listener is not None else None, ip)
            if admission.close_after_ms:
                self.stats.connections_throttled += 1
                self.bad_requests.record(conn.peer, "connection_throttled", peer=conn.peer,
                                         reason=f"over the connection_creation_rate quota of {ip}",
                                         throttle_ms=admission.close_after_ms)
                return admission
            if admission.delay_ms:
                self.stats.connections_delayed += 1
        if self.limits is None:
            return admission
        reason = self.limits.admit(ip)
        if reason is not None:
            self.stats.connections_refused += 1
            self.bad_requests.record(conn.peer, "connection_refused", peer=conn.peer, reason=reason)
            return None
        conn.ip = ip
        return admission

    def hold(self, transport: asyncio.Transport, delay_ms: int) -> None:
        """Keep a connection that was not admitted open, unread, for `delay_ms`, then
        close it (Kafka's acceptor delays closing a throttled connection)."""
        transport.pause_reading()
        self.held.add(transport)

        def close() -> None:
            self.held.discard(transport)
            transport.abort()

        self.loop.call_later(delay_ms / 1000, close)

    def connection_made(self, conn: Connection) -> None:
        self.connections.add(conn)
        self.stats.connections_accepted += 1
        if self.idle_s is not None and self._idle_timer is None:
            self._schedule_idle_check()
        log.debug("connection_opened", peer=conn.peer)

    def connection_lost(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if conn.ip is not None and self.limits is not None:
            self.limits.release(conn.ip)
            conn.ip = None
        self.bad_requests.connection_closed(conn.peer)
        log.debug("connection_closed", peer=conn.peer)
        if self.on_connection_closed is not None:
            try:
                self.on_connection_closed(conn.context)
            except Exception as e:  # noqa: BLE001 - the connection is gone either way; logged
                log.error("connection_closed_callback_failed", peer=conn.peer, error=str(e))
        self._closed_since_trim += 1
        if self._closed_since_trim >= TRIM_AFTER_CLOSES and self._trim_timer is None:
            self._trim_timer = self.loop.call_later(TRIM_DELAY_S, self._trim)

    def _trim(self) -> None:
        """Many connections closed: give the C heap's free memory back to the system
        (their buffers and objects were freed, but glibc keeps freed heap memory)."""
        self._trim_timer = None
        self._closed_since_trim = 0
        gc.collect()  # closed connections in reference cycles (task <-> connection) go now
        give_back_memory()

    # ---- connections.max.idle.ms ----

    def _schedule_idle_check(self) -> None:
        assert self.idle_s is not None
        self._idle_timer = self.loop.call_later(max(IDLE_CHECK_MIN_S, min(self.idle_s / 4, IDLE_CHECK_MAX_S)),
                                                self._close_idle)

    def _close_idle(self) -> None:
        """Close connections with nothing in flight and no read or reply for
        connections.max.idle.ms, as Kafka's Selector does."""
        self._idle_timer = None
        assert self.idle_s is not None
        deadline = self.loop.time() - self.idle_s
        closed = 0
        for conn in list(self.connections):
            if conn.last_active <= deadline and not conn.in_flight and not conn.lost:
                conn.close_idle()
                closed += 1
        if closed:
            self.stats.idle_closed += closed
            log.debug("idle_connections_closed", count=closed, idle_ms=int(self.idle_s * 1000))
        if self.connections and not self.closing:
            self._schedule_idle_check()

    async def shutdown(self, timeout: float) -> None:
        self.closing = True
        for timer in (self._idle_timer, self._trim_timer):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._trim_timer = None
        if self._port is not None:
            self._port.close()
        self.handlers.begin_shutdown()
        for transport in list(self.held):
            transport.abort()
        self.held.clear()
        connections = list(self.connections)
        for conn in connections:
            conn.drain()
        if connections:
            done, pending = await asyncio.wait([c.closed for c in connections], timeout=timeout)
            if pending:
                log.warning("shutdown_timeout", connections=len(pending), timeout_s=timeout)
                for conn in connections:
                    if not conn.closed.done():
                        conn.abort()
                await asyncio.wait([c.closed for c in connections], timeout=5)
        if self._port is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._port.wait_closed(), 5)


def format_address(host: str, port: int) -> str:
    """HOST:PORT, with an IPv6 host in brackets."""
    try:
        if socket.inet_pton(socket.AF_INET6, host):
            return f"[{host}]:{port}"
    except OSError:
        pass
    return f"{host}:{port}"


__all__ = ["BrokerServer", "CloseConnection", "Connection", "FastPath", "HandshakeFailures", "RequestHandlers",
           "SendfileStats",
           "ServerStats", "sendfile_stats", "format_address", "SENDFILE_FALLBACK_CHUNK"]
