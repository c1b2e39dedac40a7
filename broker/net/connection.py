"""One client connection: frames in, replies out, in request order.

- `Connection` is an asyncio.BufferedProtocol: the transport receives straight into a
  `FrameReader` (protocol/framing.py), so a large frame's bytes land once, in the
  buffer the frame keeps (one of the server's `FramePool`). One task per connection
  handles the queued frames strictly one after another and writes each reply before
  the next one starts: responses are in request order and a request sees the effects
  of every earlier one on its connection (as Kafka mutes a channel while a request is
  in flight); a long-poll FETCH delays only its own connection.
- Collaborators: `FlowControl` (broker/net/flow_control.py: when to read, when to wait
  before writing), `SendfileWriter` (broker/net/sendfile.py: reply parts, segment bytes
  by sendfile), the `RequestHandlers` (broker/net/request_handlers.py: the native
  `Handlers` or `broker.kafka.KafkaApis`, with their fast path, streaming of keyed
  frames and per-connection state), and `ConnectionHost`, what it needs of its server.
- A frame over `socket.request.max.bytes` is answered with `fatal_reply` after the
  earlier replies, then the connection closes; bad frames are logged through the
  `BadRequestLog` (broker/net/bad_request_log.py). A handler may answer None (Kafka's
  acks=0), raise CloseConnection (earlier replies flushed, then close) or
  CloseAfterReply(reply).
- A throttled request (`ConnectionContext.throttle_ms`, broker/core/quotas.py) mutes
  the connection after its reply is handed to the socket (KIP-219), for both protocols.
- After the client's EOF queued requests are still answered, then the connection
  closes; `drain()` (shutdown) reads nothing more, answers what is queued, closes.
- Every request answered is timed on the RequestStats of its type (broker/admin/metrics.py).

Flow control (reading pauses for `connection.max.queued.requests` unanswered requests,
a write buffer over `connection.write.buffer.bytes`, or spent `queued.max.request.bytes`),
the fast path and memory under abuse: broker/SERVER.md.
"""

from __future__ import annotations

import asyncio
from collections import deque
from time import perf_counter
from typing import Any, Protocol

import structlog

from broker.admin.metrics import UNKNOWN_API, RequestStats
from broker.net.bad_request_log import BadRequestLog
from broker.net.connection_rates import Admission
from broker.net.flow_control import FlowControl, PauseCounters
from broker.net.listeners import ConnectionContext, Listener
from broker.net.request_handlers import (
    NO_FAST_PATH,
    CloseAfterReply,
    CloseConnection,
    FastPath,
    Frame,
    PerConnection,
    RequestHandlers,
)
from broker.net.request_memory import RequestMemory
from broker.net.sendfile import CORK_FRAME_LIMIT, ConnectionClosed, SendfileWriter
from broker.net.tls import peer_certificate_subject
from broker.security.principal import NoMatchingRule
from protocol import FrameTooLarge, ProtocolError
from protocol.framing import FramePool, FrameReader, ScratchBuffers

log = structlog.get_logger("strata.server")


class _Fatal:
    """Queue marker: answer with `fatal_reply`, then close (the framing is lost)."""

    __slots__ = ("error",)

    def __init__(self, error: ProtocolError):
        self.error = error


class _Begun:
    """Queue marker: a request already begun (`FastPath.begin`); its reply is the
    future's result; `api` is its frame's `api_slot`."""

    __slots__ = ("future", "api")

    def __init__(self, future: asyncio.Future, api: int):
        self.future = future
        self.api = api


def api_slot(frame: Frame) -> int:
    """The request type (native) or api key (Kafka) a frame starts with, as an index
    into a protocol's RequestStats; UNKNOWN_API for anything over 255. A frame has
    its two bytes (FrameReader checks MIN_FRAME)."""
    return UNKNOWN_API if frame[0] else frame[1]


QueueItem = memoryview | bytes | list | _Fatal | _Begun


class ConnectionStats(PauseCounters, Protocol):
    requests: int
    frames_too_large: int
    max_queued_requests: int
    begun_early: int
    answered_at_once: int
    throttle_mutes: int
    throttle_mute_ms: int


class ConnectionHost(Protocol):
    """What a Connection needs of its server (broker.net.server.BrokerServer)."""

    handlers: RequestHandlers | PerConnection
    loop: asyncio.AbstractEventLoop
    max_frame_bytes: int
    max_queued_requests: int
    write_buffer_high: int
    frame_pool: FramePool
    memory: RequestMemory
    scratch: ScratchBuffers
    bad_requests: BadRequestLog
    closing: bool
    listener: Listener | None
    request_stats: list[RequestStats] | None

    @property
    def stats(self) -> ConnectionStats: ...

    def admit(self, conn: Connection) -> Admission | None: ...

    def hold(self, transport: asyncio.Transport, delay_ms: int) -> None: ...

    def connection_made(self, conn: Connection) -> None: ...

    def connection_lost(self, conn: Connection) -> None: ...


class Connection(asyncio.BufferedProtocol):
    """One socket: frames in (FrameReader), requests handled in order, replies out
    (SendfileWriter), reading paced by FlowControl. See the module contract."""

    def __init__(self, server: ConnectionHost):
        self.server = server
        self.context = ConnectionContext(server.listener)  # what the handlers know of this connection
        handlers = server.handlers
        self.handlers: RequestHandlers = (handlers.for_connection(self.context)
                                          if isinstance(handlers, PerConnection) else handlers)
        self.max_queued = server.max_queued_requests
        self.write_high = server.write_buffer_high
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.decoder = FrameReader(server.max_frame_bytes, pool=server.frame_pool, memory=server.memory,
                                   scratch=server.scratch)
        # BufferedProtocol.get_buffer, where the next bytes from the socket go, is the
        # decoder's own (straight into the frame being received when it is a large
        # one): the transport calls it with no pass-through call per read.
        self.get_buffer = self.decoder.get_buffer  # type: ignore[method-assign]
        # The fast path, if the handlers declare it (bound once: a Python call less per frame).
        fast = self.handlers if isinstance(self.handlers, FastPath) else NO_FAST_PATH
        self._run_key = fast.run_key
        self._begin = fast.begin
        self._handle_now = fast.handle_now
        # Not None: every item from the one being handled to the end of the queue is a
        # request begun with this run key, so a new frame with it may begin at once.
        self._streak: Any = None
        self.queue: deque[QueueItem] = deque()
        self.busy = 0  # requests being handled or their replies written
        self.flow = FlowControl(server.stats)
        self.writer: SendfileWriter | None = None  # once connected
        self.eof = False
        self.tls = False  # a TLS transport (set when connected): it cannot stay half-open
        self.draining = False
        self.fatal = False
        self.lost = False
        # The request task parks on this future while there is nothing to do (a plain
        # future: an asyncio.Event costs a get_running_loop, hence a getpid, per wait).
        self._idle: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self.closed = server.loop.create_future()
        self._request_stats = server.request_stats  # None: metrics off
        self.ip: str | None = None  # counted in the server's ConnectionLimits while open
        self.last_active = server.loop.time()  # the last read or reply (connections.max.idle.ms)
        self.held_memory = 0  # RequestMemory bytes of frames read and not yet answered
        self._waiting_for_memory = False
        # Client quotas (KIP-219): after a throttled request's reply, nothing more is
        # read or handled until the throttle time has passed.
        self.muted = False
        self._unmute_timer: asyncio.TimerHandle | None = None
        self._unmuted: asyncio.Future | None = None

    # ---- asyncio.Protocol -------------------------------------------------------------------

    # asyncio types the argument BaseTransport; it is a socket transport (uvloop's do not
    # subclass asyncio.Transport, so isinstance cannot narrow it).
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.peer = self.context.peer = transport.get_extra_info("peername")
        admission = self.server.admit(self)
        if admission is None:
            self.fatal = True
            transport.abort()  # over max.connections(.per.ip): closed at once, as Kafka
            return
        if admission.close_after_ms:  # over its IP's connection_creation_rate: closed later, as Kafka
            self.fatal = True
            self.server.hold(transport, admission.close_after_ms)
            return
        sock = transport.get_extra_info("socket")
        tls = self.tls = self.context.listener is not None and self.context.listener.tls is not None
        if tls:  # the handshake is done: the client's certificate, if it sent one
            try:
                self.context.certificate_presented(peer_certificate_subject(transport))
            except NoMatchingRule as e:  # Kafka: the principal cannot be built, authentication fails
                self.server.bad_requests.record(self.peer, "authentication_failed", peer=self.peer, reason=str(e))
                self.fatal = True
                transport.abort()
                return
        self.flow.attach(transport)
        # Segment bytes cannot go by sendfile past user-space TLS: on TLS they are
        # copied through the transport (fd -1), which encrypts them.
        self.writer = SendfileWriter(transport, sock.fileno() if sock is not None and not tls else -1,
                                     self.flow, self.write_high)
        transport.set_write_buffer_limits(high=self.write_high, low=self.write_high // 4)
        self.server.connection_made(self)
        self._task = self.server.loop.create_task(self._serve())
        if admission.delay_ms:  # over max.connection.creation.rate: read nothing for that long
            self._mute_for(admission.delay_ms)
        if self.server.closing:
            self.drain()

    def buffer_updated(self, nbytes: int) -> None:
        if self.fatal or self.lost:
            return
        self.last_active = self.server.loop.time()
        if self.decoder.buffer_updated(nbytes):
            self._take_frames()
        elif self.decoder.waiting_for_memory:
            self._wait_for_memory()

    def eof_received(self) -> bool:
        self.eof = True
        self._update_reading()
        self._wake()
        # Plaintext: keep the write side open, so queued requests still get answers. TLS
        # cannot half-close (asyncio closes the transport whatever this returns, and warns
        # in plain text on stderr when it is True), so there the answer is False.
        return not self.tls

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.context.sasl is not None:
            self.context.sasl.close()
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
        self.flow.close()
        self._wake()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self.server.connection_lost(self)
        self.queue.clear()
        memory = self.server.memory
        if self._waiting_for_memory:
            memory.forget(self._memory_available)
        memory.release(self.held_memory + self.decoder.reserved_in_progress)
        self.held_memory = self.decoder.reserved_in_progress = 0
        self.decoder.close()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self.flow.pause_writing()
        self._update_reading()

    def resume_writing(self) -> None:
        self.flow.resume_writing()
        self._update_reading()

    # ---- reading and flow control -------------------------------------------------------------

    @property
    def reading(self) -> bool:
        """Whether the transport is reading (FlowControl)."""
        return self.flow.reading

    @property
    def write_paused(self) -> bool:
        return self.flow.write_paused

    @property
    def in_flight(self) -> int:
        """Requests read and not yet answered."""
        return len(self.queue) + self.busy

    def _take_frames(self) -> None:
        """`_take_queued_frames`, the writer corked meanwhile: the replies written at
        once to the frames of one read leave in one send."""
        writer = self.writer
        if writer is None:
            self._take_queued_frames()
            return
        writer.cork()
        try:
            self._take_queued_frames()
        finally:
            writer.uncork()

    def _take_queued_frames(self) -> None:
        """Move complete frames from the decoder into the queue while there is room.

        While the connection is idle (nothing queued, nothing being handled or written),
        a frame is handled right here instead: a keyed frame is begun at once, and
        (the write buffer below its limit, not draining) `handle_now` answers what
        needs no waiting (native: a PRODUCE appended inline), its reply written at
        once, without waking the request task. Every earlier request is answered by
        then, so order and "each request sees the effects of the earlier ones" hold
        as on the task."""
        stats = self.server.stats
        queue = self.queue
        while not self.fatal and not self.muted and self.in_flight < self.max_queued:
            try:
                frame = self.decoder.next_frame()
            except FrameTooLarge as e:
                self.fatal = True
                stats.frames_too_large += 1
                self.server.bad_requests.record(self.peer, "frame_too_large", peer=self.peer, size=e.size,
                                                limit=e.limit)
                self.queue.append(_Fatal(e))
                self._streak = None
                break
            except ProtocolError as e:
                self.server.bad_requests.record(self.peer, "bad_frame", peer=self.peer, error=str(e))
                reply = self.handlers.bad_frame_reply(e)  # framing is still in step
                if reply is None:
                    self.fatal = True
                    self.queue.append(_Fatal(e))
                    self._streak = None
                    break
                self.queue.append(reply)
                self._streak = None
                continue
            if frame is None:
                break
            if queue or self.busy:
                if self._streak is not None and self._run_key(frame) == self._streak:
                    queue.append(_Begun(self._begin(frame, self.context), api_slot(frame)))
                    stats.begun_early += 1
                else:
                    self.queue.append(frame)
                    self._streak = None
                continue
            # Idle: nothing before this frame is unanswered.
            if (key := self._run_key(frame)) is not None:
                self.queue.append(_Begun(self._begin(frame, self.context), api_slot(frame)))
                self._streak = key
                continue
            self._streak = None
            writer, transport = self.writer, self.transport  # set: frames come once connected
            if writer is not None and transport is not None and not (
                    self.flow.write_paused or self.draining or self.lost or transport.is_closing()):
                if len(frame) >= CORK_FRAME_LIMIT:
                    writer.flush()  # a large request takes a while: the replies made so far go first
                timed = self._request_stats
                if timed is not None:
                    started = perf_counter()
                reply = self._handle_now(frame, self.context)
                if reply is not None:
                    if timed is not None:
                        api = api_slot(frame)
                    del frame  # a pooled buffer is free again once nothing refers to it
                    stats.answered_at_once += 1
                    rest = writer.write_now(reply)
                    self._mute_if_throttled()
                    if timed is not None:
                        timed[api].observe(perf_counter() - started)
                    if rest is None:
                        stats.requests += 1
                    else:
                        self.queue.append(rest)  # the socket is full: the task sends (and counts) it
                    continue
            self.queue.append(frame)
        if len(self.queue) > stats.max_queued_requests:
            stats.max_queued_requests = len(self.queue)
        self.held_memory += self.decoder.take_reserved()
        if self.held_memory and not (self.queue or self.busy):  # every request read is answered
            self.server.memory.release(self.held_memory)
            self.held_memory = 0
        if self.decoder.waiting_for_memory:
            self._wait_for_memory()
        if self.queue:
            self._wake()
        self._update_reading()

    def _wait_for_memory(self) -> None:
        """queued.max.request.bytes is spent: read nothing more until memory comes back."""
        if not self._waiting_for_memory:
            self._waiting_for_memory = True
            self.server.memory.wait(self._memory_available)
        self._update_reading()

    def _memory_available(self) -> None:
        self._waiting_for_memory = False
        if self.lost:
            return
        if not self.decoder.retry_memory():
            self._wait_for_memory()  # spent again: wait for the next release
            return
        self._take_frames()

    def _wake(self) -> None:
        idle = self._idle
        if idle is not None and not idle.done():
            idle.set_result(None)

    def _update_reading(self) -> None:
        if self.lost or self.transport is None:
            return
        self.flow.set_reading(not (self.fatal or self.eof or self.draining or self.flow.write_paused or self.muted
                                   or self.in_flight >= self.max_queued or self.decoder.waiting_for_memory))

    def _mute_if_throttled(self) -> None:
        """A handler gave the request just answered a throttle time (client quotas,
        broker/core/quotas.py): read and handle nothing more on this connection for that
        long (Kafka's channel mute, KIP-219: the reply goes out first)."""
        throttle_ms = self.context.throttle_ms
        if not throttle_ms or self.lost:
            return
        self.context.throttle_ms = 0
        stats = self.server.stats
        stats.throttle_mutes += 1
        stats.throttle_mute_ms += throttle_ms
        self._mute_for(throttle_ms)

    def _mute_for(self, delay_ms: int) -> None:
        """Read and handle nothing on this connection for `delay_ms`."""
        self.muted = True
        if self._unmute_timer is not None:
            self._unmute_timer.cancel()
        self._unmute_timer = self.server.loop.call_later(delay_ms / 1000, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._unmute_timer = None
        self.muted = False
        waiting = self._unmuted
        if waiting is not None and not waiting.done():
            waiting.set_result(None)
        if self.lost:
            return
        self._take_frames()

    def drain(self) -> None:
        """Shutdown: read nothing more; answer what is queued, then close."""
        self.draining = True
        self._update_reading()
        self._wake()

    def abort(self) -> None:
        if self.transport is not None and not self.lost:
            self.transport.abort()

    def close_idle(self) -> None:
        """connections.max.idle.ms passed with nothing in flight: close."""
        if self.transport is not None and not self.lost:
            self.transport.close()

    # ---- the request task -----------------------------------------------------------------------

    async def _serve(self) -> None:
        transport, writer = self.transport, self.writer
        assert transport is not None and writer is not None
        try:
            while True:
                if not self.queue:
                    if self.fatal or self.eof or self.draining or self.lost:
                        break
                    self._idle = idle = self.server.loop.create_future()
                    await idle
                    self._idle = None
                    continue
                if self.flow.write_paused and not self.lost:  # `_take_frames` filled the write buffer
                    await self.flow.writable()
                    continue
                if self.muted and not (self.lost or self.draining):  # throttled: wait out the mute
                    self._unmuted = unmuted = self.server.loop.create_future()
                    await unmuted
                    self._unmuted = None
                    continue
                item = self.queue.popleft()
                self.busy = 1
                timed = self._request_stats
                if timed is not None:
                    started = perf_counter()
                    api = item.api if isinstance(item, _Begun) else None if isinstance(item, (list, _Fatal)) \
                        else api_slot(item)
                if isinstance(item, _Fatal):
                    for part in self.handlers.fatal_reply(item.error):
                        transport.write(part)
                    break
                if isinstance(item, list):
                    await writer.write(item)
                elif isinstance(item, _Begun):
                    reply = await item.future
                    if reply is not None:
                        await writer.write(reply)
                elif (key := self._run_key(item)) is not None:
                    future = self._begin(item, self.context)
                    self._begin_queued(key)
                    reply = await future
                    if reply is not None:
                        await writer.write(reply)
                else:
                    try:
                        reply = await self.handlers.handle(item, self.context)
                    except CloseAfterReply as e:
                        await writer.write(e.reply)
                        break
                    except CloseConnection:
                        break
                    if reply is not None:
                        await writer.write(reply)
                self.server.stats.requests += 1
                if timed is not None and api is not None:
                    timed[api].observe(perf_counter() - started)
                self.busy = 0
                self.last_active = self.server.loop.time()
                self._mute_if_throttled()
                self._take_frames()  # room again: frames waiting in the decoder
        except asyncio.CancelledError:
            if not self.lost:
                transport.abort()
            raise
        except (ConnectionClosed, ConnectionError) as e:
            log.debug("connection_dropped", peer=self.peer, error=repr(e))
            transport.abort()
            return
        except Exception:
            log.exception("connection_failed", peer=self.peer)
            transport.abort()
            return
        transport.close()  # flushes what is buffered first

    def _begin_queued(self, key: Any) -> None:
        """The request being handled was just begun with run key `key`: begin the
        frames queued right behind it with the same key too, and keep streaming new
        ones (`_streak`) if that leaves nothing else queued."""
        queue = self.queue
        for i in range(len(queue)):
            item = queue[i]
            if isinstance(item, (list, _Fatal, _Begun)) or self._run_key(item) != key:
                self._streak = None
                return
            queue[i] = _Begun(self._begin(item, self.context), api_slot(item))
            self.server.stats.begun_early += 1
        self._streak = key
