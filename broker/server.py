"""The TCP server: an asyncio Protocol around the sans-IO codec, with flow control,
zero-copy FETCH, and a server state that knows its connections.

Contract:
- One `Connection` per socket, an asyncio.BufferedProtocol: the transport receives
  straight into a `FrameReader` (protocol/framing.py), so the bytes of a large frame
  land once, by the kernel, in the buffer the frame keeps (one of the server's
  `FramePool`, reused once nothing refers to it). Frames queue up and one task per
  connection handles them strictly one after another and writes each reply before
  the next one starts: responses are in request order, and a request sees the
  effects of every earlier request on the same connection (as Kafka, which mutes a
  channel while its request is in flight). A long-poll FETCH therefore delays later
  responses of its own connection, never other connections.
- Fast path: while a connection is idle (nothing queued, nothing being handled, the
  write buffer under its limit, not draining), a frame just read is handled right in
  the socket callback: `handle_now` (optional; native: a PRODUCE appended inline, a
  FETCH that need not wait) answers it synchronously and the reply is written at
  once, a FileSlice by sendfile while the socket takes it (the rest, if any, goes to
  the task), so a request costs no task wake-up, no future, no Event (an
  asyncio.Event wait also costs a getpid). A frame `handle_now` declines (None) queues for the task as before; a
  keyed frame is begun at once. Since the connection was idle, every earlier
  request is answered by then: order and visibility are those of the task.
- Streaming: a frame the handlers key with `run_key` (native: a PRODUCE large enough
  for the executor, keyed by partition) is handled with `begin`, which starts it at
  once and returns the future of its reply. While every request from the one being
  answered to the last one read is begun with the same key, a new frame with that
  key is begun as soon as it is read, before its turn: its append queues behind the
  earlier ones (the partition's appender runs them in order), so a stream of
  pipelined PRODUCEs keeps the append thread busy while replies still go out in
  order, each one when its own append is done. Any other request breaks the streak
  and waits for every earlier reply, as before. `stats.begun_early` counts them.
- A frame over `socket.request.max.bytes` is answered INVALID_REQUEST (after the
  responses to the requests before it) and the connection is closed. Bad frames
  are logged through the broker's `BadRequestLog` (rate-limited per connection
  and reason, with a broker-wide cap: broker/log_limiter.py). A frame the
  codec cannot parse is answered by the handlers and the connection stays open.
- The server serves any `RequestHandlers`: the native `Handlers` and the Kafka
  listener's `broker.kafka.KafkaApis` share this machinery (flow control, order,
  sendfile). A handler may answer nothing (None: Kafka's acks=0, order kept) or
  raise CloseConnection (earlier replies are flushed, then the connection closes).
- Half-close: after the client's EOF, queued requests are still answered, then
  the connection closes.
- `BrokerServer.shutdown(timeout)` stops accepting, answers pending long polls,
  lets every connection finish the requests it has already read (bounded by
  `timeout`), then closes (or, past the timeout, aborts) every connection.

Flow control (a slow or stalled reader never makes the broker buffer without bound):
- Reading from a connection pauses while `connection.max.queued.requests`
  requests (default 16) are read but not yet answered: frames are only taken out
  of the decoder while there is room, so a chunk full of tiny pipelined requests
  stays as raw bytes in the decoder (at most one socket read, 256 KiB in uvloop).
- Reading also pauses while the transport is paused for writing: its write buffer
  is above `connection.write.buffer.bytes` (default 256 KiB; resume at a quarter).
  The request task waits for the drain before writing more (and the fast path
  stops at the high-water mark: the next frames queue), so per connection the
  broker holds at most: one socket read + the queued frames + one reply in memory
  + the write buffer (<= high-water mark + the largest single write).
- Reading also pauses while a frame of 16 KiB or more cannot begin because the
  broker-wide `RequestMemory` (queued.max.request.bytes) is spent; it resumes
  when answered requests (or closed connections) give memory back. A frame's
  reservation is released once every request read on its connection is
  answered. Buffers grow as bytes arrive (protocol/framing.py).
- Connections: `ConnectionLimits` (max.connections, max.connections.per.ip and
  overrides, shared by both listeners) may refuse a new connection, which is
  closed at once; connections.max.idle.ms closes connections with nothing in
  flight and no read or reply for that long. After a burst of closes the server
  collects garbage and calls malloc_trim(0), so their memory leaves the RSS.
- `stats` counts pauses so tests can watch this happen.

Zero-copy FETCH, and why this design (option "a"): uvloop implements neither
loop.sendfile nor loop.sock_sendfile (NotImplementedError), and it refuses
loop.add_writer on a socket a transport owns. We keep the Protocol/transport design
(uvloop's fast reads, writes and flow control for every other reply) and call
os.sendfile directly on the transport's socket fd, but only while the transport's
write buffer is empty (uvloop's count includes libuv's queue), so the file bytes
can never overtake bytes the transport still holds. When the socket would block
(EAGAIN), a small piece (SENDFILE_FALLBACK_CHUNK, 16 KiB) is pread and written
through the transport: that is how we learn the socket drained (uvloop calls
resume_writing; we lower the write limits to 0/0 while waiting so the call comes
at an empty buffer), and sendfile resumes from there. So only 16 KiB per stall are
copied; `sendfile_stats` counts both paths. The alternative, raw non-blocking
sockets with sock_recv_into and add_writer, gives up uvloop's transport fast path
and its flow control for every request to save those 16 KiB per stall.
The fd is only used synchronously and after checking `transport.is_closing()`, so
a descriptor uvloop has closed (and the kernel may have reused) is never written.
If the kernel refuses sendfile for the file (EINVAL/ENOSYS/EOPNOTSUPP on an odd
filesystem), the server logs it once and copies from then on.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import socket
from collections import deque
from dataclasses import dataclass, fields
from typing import Any, Protocol, Union

import structlog

from protocol import FrameTooLarge, ProtocolError
from protocol.framing import FramePool, FrameReader, ScratchBuffers
from storage.file_records import FileSlice

from .connection_limits import ConnectionLimits
from .handlers import Reply
from .log_limiter import BadRequestLog
from .request_memory import RequestMemory, give_back_memory

SENDFILE_FALLBACK_CHUNK = 16 * 1024
LISTEN_BACKLOG = 1024
TRIM_AFTER_CLOSES = 64  # connections closed before the C heap's free memory is given back
TRIM_DELAY_S = 0.5  # after the first of them: one trim per burst of closes
IDLE_CHECK_MIN_S = 0.05  # how often idle connections are looked for: a quarter of
IDLE_CHECK_MAX_S = 10.0  # connections.max.idle.ms, within these bounds
SENDFILE_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", -1))

log = structlog.get_logger("strata.server")


@dataclass
class SendfileStats:
    """What FETCH replies cost: bytes the kernel sent straight from the page cache
    (sendfile) versus bytes copied through Python (after EAGAIN, or without sendfile)."""

    calls: int = 0
    bytes: int = 0
    would_block: int = 0
    copied_bytes: int = 0
    copied_writes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# Module-level on purpose: the one place os.sendfile is called counts here.
sendfile_stats = SendfileStats()
_sendfile_supported = True


def _sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    """os.sendfile, counted. Raises BlockingIOError when the socket is full."""
    try:
        sent = os.sendfile(out_fd, in_fd, offset, count)
    except BlockingIOError:
        sendfile_stats.would_block += 1
        raise
    sendfile_stats.calls += 1
    sendfile_stats.bytes += sent
    return sent


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

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class _Fatal:
    """Queue marker: answer INVALID_REQUEST, then close (the framing is lost)."""

    __slots__ = ("error",)

    def __init__(self, error: ProtocolError):
        self.error = error


class _Begun:
    """Queue marker: a request already begun (`RequestHandlers.begin`); its reply is
    the future's result."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future):
        self.future = future


QueueItem = Union[memoryview, bytes, list, _Fatal, _Begun]


class ConnectionClosed(Exception):
    pass


class CloseConnection(Exception):
    """Raised by `handle` when the protocol says to close without an answer (Kafka: a
    request it cannot parse, an unsupported API version). Earlier replies are flushed."""


class RequestHandlers(Protocol):
    """What a `BrokerServer` serves: the native `Handlers` or `broker.kafka.KafkaApis`.

    - `handle(frame, peer)`: the reply parts in order (bytes, or FileSlices sent with
      sendfile and released by the connection), None for no reply at all (Kafka's
      acks=0), or raise CloseConnection. Must not raise anything else.
    - `bad_frame_reply(error)`: the reply to a frame the decoder refused while the
      framing is still in step (too short); None closes the connection instead.
    - `fatal_reply(error)`: what to write before closing after a frame over
      socket.request.max.bytes (may be empty).
    - `begin_shutdown()`: answer long polls now.
    - Optional: `handle_now(frame, peer)`: the reply if it can be made at once with no
      waiting (same answer as `handle`), or None, having done nothing, to send the
      frame to `handle`. Never raises. Called only when every earlier request on the
      connection is answered.
    - Optional, both or neither: `run_key(frame)` and `begin(frame, peer)`. A frame
      with a run key (not None) is handled by `begin`, which starts the work and
      returns a future of the reply (never raises; the future never fails). Work
      begun for frames of the same key takes effect in the order begun (the native
      handlers: large PRODUCEs, keyed by partition, appended in order by the
      partition's appender). So the server may begin a keyed frame before its turn,
      as soon as it is read, when every request before it on the connection is
      already begun with the same key: appends stream through the executor while
      replies still go out in order, each after the previous one."""

    loop: asyncio.AbstractEventLoop

    async def handle(self, frame: memoryview, peer: Any = None) -> Reply | None: ...

    def bad_frame_reply(self, error: ProtocolError) -> Reply | None: ...

    def fatal_reply(self, error: ProtocolError) -> Reply: ...

    def begin_shutdown(self) -> None: ...


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: "BrokerServer"):
        self.server = server
        self.handlers: RequestHandlers = server.handlers
        self.max_queued = server.max_queued_requests
        self.write_high = server.write_buffer_high
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.decoder = FrameReader(server.max_frame_bytes, pool=server.frame_pool, memory=server.memory,
                                   scratch=server.scratch)
        # BufferedProtocol.get_buffer: where the next bytes from the socket go, straight
        # into the frame being received when it is a large one. The decoder's own bound
        # method (uvloop keeps the one it finds here): a Python call less per read.
        self.get_buffer = self.decoder.get_buffer
        self._run_key = getattr(self.handlers, "run_key", None)
        self._begin = getattr(self.handlers, "begin", None)
        self._handle_now = getattr(self.handlers, "handle_now", None)
        # Not None: every item from the one being handled to the end of the queue is a
        # request begun with this run key, so a new frame with it may begin at once.
        self._streak: Any = None
        self.queue: deque[QueueItem] = deque()
        self.busy = 0  # requests being handled or their replies written
        self.reading = True
        self.write_paused = False
        self.eof = False
        self.draining = False
        self.fatal = False
        self.lost = False
        self._fd = -1
        self._writable = asyncio.Event()
        self._writable.set()
        # The request task parks on this future while there is nothing to do (a plain
        # future: an asyncio.Event costs a get_running_loop, hence a getpid, per wait).
        self._idle: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self.closed = server.loop.create_future()
        self.ip: str | None = None  # counted in the server's ConnectionLimits while open
        self.last_active = server.loop.time()  # the last read or reply (connections.max.idle.ms)
        self.held_memory = 0  # RequestMemory bytes of frames read and not yet answered
        self._waiting_for_memory = False

    # ---- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        if not self.server.admit(self):
            self.fatal = True
            transport.abort()  # over max.connections(.per.ip): closed at once, as Kafka
            return
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        transport.set_write_buffer_limits(high=self.write_high, low=self.write_high // 4)
        self.server.connection_made(self)
        self._task = self.server.loop.create_task(self._serve())
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
        return True  # keep the write side open: queued requests still get answers

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._writable.set()
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
        self.write_paused = True
        self._writable.clear()
        self.server.stats.write_pauses += 1
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._writable.set()
        self._update_reading()

    # ---- reading and flow control -------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests read and not yet answered."""
        return len(self.queue) + self.busy

    def _take_frames(self) -> None:
        """Move complete frames from the decoder into the queue while there is room.

        While the connection is idle (nothing queued, nothing being handled or written),
        a frame is handled right here instead: a keyed frame is begun at once, and
        (the write buffer below its limit, not draining) `handle_now` answers what
        needs no waiting (native: a PRODUCE appended inline), its reply written at
        once, without waking the request task. Every earlier request is answered by
        then, so order and "each request sees the effects of the earlier ones" hold
        as on the task."""
        stats = self.server.stats
        while not self.fatal and self.in_flight < self.max_queued:
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
            if self.queue or self.busy:
                if self._streak is not None and self._run_key(frame) == self._streak:  # type: ignore[misc]
                    self.queue.append(_Begun(self._begin(frame, self.peer)))  # type: ignore[misc]
                    stats.begun_early += 1
                else:
                    self.queue.append(frame)
                    self._streak = None
                continue
            # Idle: nothing before this frame is unanswered.
            if self._run_key is not None and (key := self._run_key(frame)) is not None:
                self.queue.append(_Begun(self._begin(frame, self.peer)))  # type: ignore[misc]
                self._streak = key
                continue
            self._streak = None
            if self._handle_now is not None and not (self.write_paused or self.draining or self.lost
                                                     or self.transport.is_closing()):  # type: ignore[union-attr]
                reply = self._handle_now(frame, self.peer)
                if reply is not None:
                    del frame  # a pooled buffer is free again once nothing refers to it
                    stats.answered_at_once += 1
                    rest = self._write_now(reply)
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

    def _write_now(self, reply: Reply) -> Reply | None:
        """Write a reply now: bytes through the transport, a FileSlice by sendfile
        straight to the socket while nothing is buffered ahead of it. None when all
        of it went; else the rest, from the part that did not fit (a FileSlice
        advanced past what was sent), for the task, which sends and releases it
        (and reports a failing sendfile)."""
        transport = self.transport
        assert transport is not None
        for i, part in enumerate(reply):
            if not isinstance(part, FileSlice):
                transport.write(part)
                continue
            try:
                if transport.get_write_buffer_size() or not self._sendfile_now(part):
                    return reply[i:]
            except OSError:
                return reply[i:]  # the task's _send_file meets it again and reports it
            part.release()
        return None

    def _wake(self) -> None:
        idle = self._idle
        if idle is not None and not idle.done():
            idle.set_result(None)

    def _update_reading(self) -> None:
        if self.lost or self.transport is None:
            return
        want = not (self.fatal or self.eof or self.draining or self.write_paused
                    or self.in_flight >= self.max_queued or self.decoder.waiting_for_memory)
        if want and not self.reading:
            self.reading = True
            self.transport.resume_reading()
        elif not want and self.reading:
            self.reading = False
            self.server.stats.read_pauses += 1
            self.transport.pause_reading()

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
        transport = self.transport
        assert transport is not None
        try:
            while True:
                if not self.queue:
                    if self.fatal or self.eof or self.draining or self.lost:
                        break
                    self._idle = idle = self.server.loop.create_future()
                    await idle
                    self._idle = None
                    continue
                if self.write_paused and not self.lost:  # `_take_frames` filled the write buffer
                    await self._writable.wait()
                    continue
                item = self.queue.popleft()
                self.busy = 1
                if isinstance(item, _Fatal):
                    for part in self.handlers.fatal_reply(item.error):
                        transport.write(part)
                    break
                if isinstance(item, list):
                    await self._write_reply(item)
                elif isinstance(item, _Begun):
                    reply = await item.future
                    if reply is not None:
                        await self._write_reply(reply)
                elif self._run_key is not None and (key := self._run_key(item)) is not None:
                    future = self._begin(item, self.peer)  # type: ignore[misc]
                    self._begin_queued(key)
                    reply = await future
                    if reply is not None:
                        await self._write_reply(reply)
                else:
                    try:
                        reply = await self.handlers.handle(item, self.peer)
                    except CloseConnection:
                        break
                    if reply is not None:
                        await self._write_reply(reply)
                self.server.stats.requests += 1
                self.busy = 0
                self.last_active = self.server.loop.time()
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
            if isinstance(item, (list, _Fatal, _Begun)) or self._run_key(item) != key:  # type: ignore[misc]
                self._streak = None
                return
            queue[i] = _Begun(self._begin(item, self.peer))  # type: ignore[misc]
            self.server.stats.begun_early += 1
        self._streak = key

    async def _write_reply(self, reply: Reply) -> None:
        transport = self.transport
        assert transport is not None
        try:
            for part in reply:
                if self.lost or transport.is_closing():
                    raise ConnectionClosed()
                if isinstance(part, FileSlice):
                    await self._send_file(part)
                else:
                    transport.write(part)
                if self.write_paused:
                    await self._writable.wait()
        finally:
            for part in reply:
                if isinstance(part, FileSlice):
                    part.release()

    def _sendfile_now(self, part: FileSlice) -> bool:
        """Send `part` with sendfile while the socket takes it (the transport's buffer
        must be empty), advancing it past what went; True when all of it went. False
        when the socket is full or sendfile is off (a kernel that refuses it for the
        file turns it off, logged once); other errors raise."""
        global _sendfile_supported
        if not _sendfile_supported or self._fd < 0:
            return False
        try:
            while part.length:
                sent = _sendfile(self._fd, part.fileno(), part.position, part.length)
                if sent == 0:
                    raise OSError(f"segment file ended {part.length} bytes early")
                part.position += sent
                part.length -= sent
        except BlockingIOError:
            return False
        except OSError as e:
            if e.errno not in SENDFILE_UNSUPPORTED:
                raise
            _sendfile_supported = False
            log.warning("sendfile_unsupported", error=str(e))
            return False
        return True

    async def _send_file(self, part: FileSlice) -> None:
        transport = self.transport
        assert transport is not None
        while part.length:
            if transport.get_write_buffer_size():
                await self._drained()
            if self.lost or transport.is_closing():
                raise ConnectionClosed()
            if self._sendfile_now(part):
                return
            # The socket is full (or sendfile is off): copy a little, to learn when it drains.
            chunk = os.pread(part.fileno(), min(SENDFILE_FALLBACK_CHUNK, part.length), part.position)
            if not chunk:
                raise OSError(f"segment file ended {part.length} bytes early")
            transport.write(chunk)
            part.position += len(chunk)
            part.length -= len(chunk)
            sendfile_stats.copied_bytes += len(chunk)
            sendfile_stats.copied_writes += 1

    async def _drained(self) -> None:
        """Wait until the transport's write buffer is empty (uvloop calls
        resume_writing at the low-water mark, so lower it to 0 meanwhile)."""
        transport = self.transport
        assert transport is not None
        if not transport.get_write_buffer_size():
            return
        transport.set_write_buffer_limits(high=0, low=0)  # pauses now: the buffer is not empty
        try:
            while transport.get_write_buffer_size() and not self.lost:
                await self._writable.wait()
                if not self.write_paused and transport.get_write_buffer_size():
                    await asyncio.sleep(0.001)  # never spin (uvloop resumes only at 0 here)
        finally:
            if not self.lost and not transport.is_closing():
                transport.set_write_buffer_limits(high=self.write_high, low=self.write_high // 4)


class BrokerServer:
    """The listening socket and every open connection."""

    def __init__(self, handlers: RequestHandlers, *, max_frame_bytes: int, max_queued_requests: int,
                 write_buffer_high: int, bad_requests: BadRequestLog | None = None,
                 memory: RequestMemory | None = None, limits: ConnectionLimits | None = None,
                 idle_ms: int = -1):
        self.handlers = handlers
        # Shared by the broker's listeners: queued.max.request.bytes, max.connections*.
        self.memory = memory or RequestMemory()
        self.limits = limits
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
        self.stats = ServerStats()
        self.closing = False
        self._server: asyncio.AbstractServer | None = None

    async def bind(self, host: str, port: int) -> tuple[str, int]:
        """Bind and listen, but accept nothing until `start_serving` (so a busy port
        fails the start before any storage work)."""
        self._server = await self.loop.create_server(
            lambda: Connection(self), host, port, reuse_address=True, backlog=LISTEN_BACKLOG,
            start_serving=False)
        return self.address

    async def start_serving(self) -> None:
        assert self._server is not None
        await self._server.start_serving()

    def close(self) -> None:
        """Give the port back (startup failed before serving)."""
        if self._server is not None:
            self._server.close()

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    def admit(self, conn: Connection) -> bool:
        """Count a new connection against max.connections(.per.ip); False: refused."""
        if self.limits is None:
            return True
        ip = conn.peer[0] if isinstance(conn.peer, tuple) and conn.peer else str(conn.peer)
        reason = self.limits.admit(ip)
        if reason is not None:
            self.stats.connections_refused += 1
            self.bad_requests.record(conn.peer, "connection_refused", peer=conn.peer, reason=reason)
            return False
        conn.ip = ip
        return True

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
        if self._server is not None:
            self._server.close()
        self.handlers.begin_shutdown()
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
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except asyncio.TimeoutError:
                pass


def format_address(host: str, port: int) -> str:
    """HOST:PORT, with an IPv6 host in brackets."""
    try:
        if socket.inet_pton(socket.AF_INET6, host):
            return f"[{host}]:{port}"
    except OSError:
        pass
    return f"{host}:{port}"


__all__ = ["BrokerServer", "CloseConnection", "Connection", "RequestHandlers", "SendfileStats",
           "ServerStats", "sendfile_stats",
           "format_address", "SENDFILE_FALLBACK_CHUNK"]
