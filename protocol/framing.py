"""Splitting a byte stream into frames: sans-IO, both directions.

Layout (NATIVE-PROTOCOL.md, "Framing"):

    request:   size:int32 | type:int16  | body
    response:  size:int32 | error:int16 | body

`size` counts every byte after the size field. The decoder strips the size field
and yields the rest (type+body or error+body), which is what `parse_request` and
`parse_response` take.

Contract:
- `feed(data)` hands over bytes as they arrive, in any split: one byte at a
  time, or several pipelined frames in one chunk. `bytes` are kept without a
  copy and must not change afterwards (bytes never do); any other bytes-like
  object is copied once on the way in.
- `next_frame()` returns the next whole frame, or None until one is complete.
  `frames()` iterates over every complete frame. A frame that lies inside one
  fed chunk is a memoryview of that chunk (no copy); a frame split across
  chunks is assembled into one bytearray allocated when its size is read (as
  Kafka's NetworkReceive does), and later chunks are copied into it as they
  arrive, so every byte is copied at most once and a 100 MB frame in 64 KiB
  chunks costs O(n).
- A size field above `max_frame_bytes` or below zero raises `FrameTooLarge`
  (code INVALID_REQUEST). The stream can no longer be trusted, so the decoder
  stays broken: every later call raises the same error and the owner must close
  the connection. The limit applies to the size field itself (it excludes the
  4-byte size field), as Kafka compares `socket.request.max.bytes`.
- A frame of 0 or 1 bytes (no room for type/error) raises ProtocolError
  (INVALID_REQUEST) once it has been consumed; framing is still in step, so the
  decoder stays usable and the server may answer and read on.

`FrameReader` is the same splitter for an asyncio.BufferedProtocol (the broker):
the transport receives into buffers it hands out (`get_buffer` /
`buffer_updated`), a large frame straight into its own buffer, optionally taken
from a `FramePool` that reuses buffers once nothing refers to them. Same frames,
limits and errors as FrameDecoder; see the classes.
"""

from __future__ import annotations

import struct
import sys
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from .errors import ErrorCode, ProtocolError

DEFAULT_MAX_FRAME_BYTES = 104857600  # socket.request.max.bytes

SIZE = struct.Struct(">i")  # the size field in front of every frame
MIN_FRAME = 2  # the int16 type (request) or int16 error (response)


class FrameTooLarge(ProtocolError):
    """A size field over the limit, or negative. The connection must close."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST,
                         f"frame size {size} is outside 0..{limit} (socket.request.max.bytes)")
        self.size = size
        self.limit = limit


def checked_frame(frame: memoryview) -> memoryview:
    """`frame`, or ProtocolError(INVALID_REQUEST) when it has no room for the type/error."""
    if len(frame) < MIN_FRAME:
        raise ProtocolError(ErrorCode.INVALID_REQUEST,
                            f"frame of {len(frame)} bytes has no room for an int16 type/error")
    return frame


class FrameDecoder:
    """Incremental frame splitter. See the module contract."""

    __slots__ = ("max_frame_bytes", "_chunks", "_buffered", "_size", "_assembly",
                 "_filled", "_broken")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunks: deque[memoryview] = deque()  # unconsumed input, in order
        self._buffered = 0  # total bytes in _chunks
        self._size: int | None = None  # size of the current frame once its field is read
        self._assembly: bytearray | None = None  # the current frame when it spans chunks
        self._filled = 0  # bytes of _assembly filled so far
        self._broken: FrameTooLarge | None = None

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet returned as frames (for back-pressure and tests)."""
        return self._buffered + self._filled + (4 if self._size is not None else 0)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._broken is not None:
            raise self._broken
        if not isinstance(data, bytes):
            data = bytes(data)
        if not data:
            return
        view = memoryview(data)
        if self._assembly is not None:  # fill the frame in progress straight away
            n = min(len(view), len(self._assembly) - self._filled)
            self._assembly[self._filled:self._filled + n] = view[:n]
            self._filled += n
            view = view[n:]
        if view:
            self._chunks.append(view)
            self._buffered += len(view)

    def next_frame(self) -> memoryview | None:
        if self._broken is not None:
            raise self._broken
        if self._assembly is not None:
            if self._filled < len(self._assembly):
                return None
            frame = memoryview(self._assembly)
            self._assembly, self._filled, self._size = None, 0, None
            return checked_frame(frame)
        if self._size is None:
            if self._buffered < SIZE.size:
                return None
            (size,) = SIZE.unpack(self._take(SIZE.size))
            if size < 0 or size > self.max_frame_bytes:
                self._broken = FrameTooLarge(size, self.max_frame_bytes)
                self._chunks.clear()
                self._buffered = 0
                raise self._broken
            self._size = size
        size = self._size
        if self._buffered >= size:
            self._size = None
            return checked_frame(self._take(size))
        # Incomplete: move what is here into the frame's own buffer; feed() fills the rest.
        self._assembly = bytearray(size)
        self._filled = 0
        while self._chunks:
            chunk = self._chunks.popleft()
            self._assembly[self._filled:self._filled + len(chunk)] = chunk
            self._filled += len(chunk)
        self._buffered = 0
        return None

    def frames(self) -> Iterator[memoryview]:
        """Every complete frame fed so far, in order."""
        while (frame := self.next_frame()) is not None:
            yield frame

    def _take(self, n: int) -> memoryview:
        """Remove the next n bytes (n <= _buffered); no copy when one chunk holds them."""
        if n == 0:
            return memoryview(b"")
        self._buffered -= n
        first = self._chunks[0]
        if len(first) >= n:
            if len(first) == n:
                self._chunks.popleft()
            else:
                self._chunks[0] = first[n:]
            return first[:n]
        out = bytearray(n)
        filled = 0
        while filled < n:
            chunk = self._chunks.popleft()
            k = min(len(chunk), n - filled)
            out[filled:filled + k] = chunk[:k]
            filled += k
            if k < len(chunk):
                self._chunks.appendleft(chunk[k:])
        return memoryview(out)


SCRATCH_BYTES = 64 * 1024  # FrameReader's buffer for sizes and small frames
DIRECT_MIN_BYTES = 16 * 1024  # a frame at least this large is received into its own buffer
POOL_BYTES = 16 * 1024 * 1024  # FramePool's default: buffers kept for reuse, in total
POOL_GRAIN = 64 * 1024  # pooled buffers are allocated in multiples of this


class FramePool:
    """Buffers for large frames, reused once nothing refers to them any more.

    `take(size)` returns a writable memoryview of exactly `size` bytes over a
    bytearray: a pooled one that is free (its capacity between `size` and twice
    that), else a new one (capacity rounded up to POOL_GRAIN; kept in the pool
    while the pool holds at most `max_bytes`, oldest free buffers making room).
    A buffer is free when the pool's own reference is the only one left: every
    memoryview of it, every buffer export (a C extension reading it, a write in
    progress) holds a reference (CPython's reference count), so a frame that a
    handler, an executor thread or a log still holds is never handed out again.
    Reuse spares zero-filling a fresh buffer and, more, the page faults of fresh
    memory (the allocator gives large blocks back to the kernel when they are
    freed from another thread). Not thread-safe: one event loop's thread takes;
    any thread may drop its references."""

    __slots__ = ("max_bytes", "_buffers", "_bytes")

    def __init__(self, max_bytes: int = POOL_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffers: list[bytearray] = []  # oldest first
        self._bytes = 0

    @property
    def pooled_bytes(self) -> int:
        return self._bytes

    def take(self, size: int) -> memoryview:
        buffers = self._buffers
        getrefcount = sys.getrefcount
        best = -1
        for i in range(len(buffers)):
            # 2 = the pool's reference + getrefcount's argument: nobody else holds it.
            if size <= len(buffers[i]) <= 2 * size and getrefcount(buffers[i]) == 2 and \
                    (best < 0 or len(buffers[i]) < len(buffers[best])):
                best = i
        if best >= 0:
            buf = buffers.pop(best)
            buffers.append(buf)  # most recently used last
            return memoryview(buf)[:size]
        capacity = -(-size // POOL_GRAIN) * POOL_GRAIN
        buf = bytearray(capacity)
        if capacity <= self.max_bytes // 2:  # a frame of half the pool or more: never pooled
            i = 0
            while self._bytes + capacity > self.max_bytes and i < len(buffers):
                if getrefcount(buffers[i]) == 2:  # make room: forget the oldest free one
                    self._bytes -= len(buffers.pop(i))
                else:
                    i += 1
            if self._bytes + capacity <= self.max_bytes:
                buffers.append(buf)
                self._bytes += capacity
        return memoryview(buf)[:size]


class ScratchBuffers:
    """FrameReaders' scratch buffers, lent while a reader has unconsumed bytes.

    A reader takes one when bytes arrive and gives it back once every byte in it
    is consumed, so an idle connection holds none (64 KiB each, 2,000 idle
    connections: 128 MiB otherwise). Up to `keep` free buffers are kept for the
    next reads. Not thread-safe (the event loop's thread)."""

    __slots__ = ("keep", "_free")

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._free: list[tuple[bytearray, memoryview]] = []

    def take(self, size: int) -> tuple[bytearray, memoryview]:
        if self._free and len(self._free[-1][0]) == size:
            return self._free.pop()
        buf = bytearray(size)
        return buf, memoryview(buf)

    def give(self, buf: bytearray, view: memoryview) -> None:
        if len(self._free) < self.keep and len(buf) == SCRATCH_BYTES:
            self._free.append((buf, view))


class RequestMemoryPool(Protocol):
    """What FrameReader reserves a large frame's bytes from (broker/net/request_memory.py)."""

    def reserve(self, n: int) -> bool: ...


INITIAL_FRAME_BYTES = 256 * 1024  # a large frame's first buffer; it doubles as bytes arrive
# A frame up to this size gets its whole buffer at once: the size of the clients' default
# produce requests (Kafka's max.request.size, librdkafka's batch.size and message.max.bytes).
WHOLE_FRAME_BYTES = 1024 * 1024


class FrameReader:
    """Frames received straight into their final buffer: the receiving side of an
    `asyncio.BufferedProtocol` (the broker's connections).

    Same frames, limits and errors as `FrameDecoder` (a size over the limit breaks
    the reader for good; a frame of 0 or 1 bytes raises ProtocolError once, and
    framing goes on); only the input side differs:
    - `get_buffer()` returns a writable memoryview to receive into and
      `buffer_updated(n)` says how many bytes landed there (the BufferedProtocol
      calls). `feed(data)` does both with a copy, for tests and tools.
    - Sizes and small frames land in a scratch buffer (SCRATCH_BYTES), lent by
      `scratch` (ScratchBuffers) while it holds unconsumed bytes and given back
      when it is empty; a complete small frame is copied out into a bytearray of
      its own. Once the size of a frame of DIRECT_MIN_BYTES or more has been read,
      the frame gets a buffer of its own (from `pool` when given: see FramePool),
      the bytes already received are copied in and `get_buffer` hands out the rest
      of it, so the socket's bytes are written by the kernel where the frame will
      stay. A frame of up to WHOLE_FRAME_BYTES (1 MiB: the clients' default
      produce requests) gets its whole buffer at once and is received without a
      copy. A larger one's buffer grows as the bytes arrive, never ahead of them:
      it starts at INITIAL_FRAME_BYTES (or what is already here) and doubles each
      time it is full, up to the announced size, so a connection that announces
      100 MB and sends nothing costs 256 KiB, not 100 MB (each growth copies
      what arrived: under one extra copy in all).
    - `memory` (optional, broker/net/request_memory.py): a large frame's announced size
      is reserved there before its buffer is made (`reserve(size)`, as Kafka's
      NetworkReceive allocates from the request memory pool); when it refuses,
      `waiting_for_memory` is True, nothing more is received, and the owner pauses
      reading until `retry_memory()` succeeds. Once begun, a frame is never stopped
      halfway (it could wait for memory only it holds). `take_reserved()` hands the
      bytes reserved for frames already returned to the owner, who releases them
      when the request is answered; `reserved_in_progress` is what the frame being
      received holds (released by the owner when the connection closes).
    - Every frame is a writable memoryview over a buffer no one else is using, so a
      handler may patch it (an append validates in place) and keep it.
    - Bytes received while nobody takes frames stay in the scratch buffer (the owner
      bounds that by pausing reads); if it is ever full of unread input it grows
      rather than fail.
    """

    __slots__ = ("max_frame_bytes", "pool", "memory", "scratch", "_scratch", "_scratch_view", "_start",
                 "_end", "_frame", "_size", "_filled", "_into_frame", "_broken", "waiting_for_memory",
                 "reserved_in_progress", "_returned_reserved")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *,
                 pool: FramePool | None = None, memory: RequestMemoryPool | None = None,
                 scratch: ScratchBuffers | None = None) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.pool = pool
        self.memory = memory
        self.scratch = scratch if scratch is not None else ScratchBuffers(keep=1)
        self._scratch: bytearray | None = None  # lent while it holds unconsumed bytes
        self._scratch_view: memoryview | None = None  # sliced for each receive (never resized)
        self._start = 0  # unconsumed scratch bytes are [_start, _end)
        self._end = 0
        self._frame: memoryview | None = None  # the large frame's buffer (may still grow)
        self._size = 0  # the large frame's announced size
        self._filled = 0
        self._into_frame = False  # the last get_buffer handed out the frame's rest
        self._broken: FrameTooLarge | None = None
        self.waiting_for_memory = False
        self.reserved_in_progress = 0  # reserved for the frame being received
        self._returned_reserved = 0  # reserved for frames returned, not yet taken by the owner

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return self._end - self._start + self._filled + (SIZE.size if self._frame is not None else 0)

    def take_reserved(self) -> int:
        n, self._returned_reserved = self._returned_reserved, 0
        return n

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        frame = self._frame
        if frame is not None and self._filled < self._size:
            if self._filled == len(frame):  # full: room for the next bytes, as they come
                self._grow()
                frame = self._frame
                assert frame is not None
            self._into_frame = True
            return frame[self._filled:]
        self._into_frame = False
        scratch, view = self._scratch, self._scratch_view  # lent together, given back together
        if scratch is None or view is None:
            scratch, view = self.scratch.take(SCRATCH_BYTES)
            self._scratch, self._scratch_view = scratch, view
            self._start = self._end = 0
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start and len(scratch) - self._end < len(scratch) // 4:
            # Little room left: move the unconsumed tail (a partial small frame) to the front.
            n = self._end - self._start
            scratch[:n] = scratch[self._start:self._end]
            self._start, self._end = 0, n
        if self._end == len(scratch):  # full of input nobody has taken yet: a bigger one
            n = self._end - self._start
            grown = bytearray(2 * len(scratch))
            grown[:n] = view[self._start:self._end]
            self._scratch = scratch = grown
            self._scratch_view = view = memoryview(grown)
            self._start, self._end = 0, n
        return view[self._end:]

    def buffer_updated(self, nbytes: int) -> bool:
        """Count `nbytes` received into the last `get_buffer`. False while the large
        frame being received is still incomplete (no frame can be ready yet)."""
        if self._into_frame:
            self._filled += nbytes
            return self._filled >= self._size
        self._end += nbytes
        return True

    def retry_memory(self) -> bool:
        """After `waiting_for_memory`: try again; True when receiving may go on."""
        if self.waiting_for_memory:
            self.waiting_for_memory = False
            self._begin_large_frame()
        return not self.waiting_for_memory

    def _new_buffer(self, capacity: int) -> memoryview:
        return self.pool.take(capacity) if self.pool is not None else memoryview(bytearray(capacity))

    def _grow(self) -> None:
        frame = self._frame
        assert frame is not None
        grown = self._new_buffer(min(self._size, 2 * len(frame)))
        grown[:self._filled] = frame[:self._filled]
        self._frame = grown

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` in (as if received); for tests and tools."""
        if self._broken is not None:
            raise self._broken
        view = memoryview(data).cast("B")
        while view:
            buf = self.get_buffer(len(view))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            buf.release()
            self.buffer_updated(n)
            view = view[n:]

    def next_frame(self) -> memoryview | None:
        if self._broken is not None:
            raise self._broken
        frame = self._frame
        if frame is not None:
            if self._filled < self._size:
                return None
            self._frame, self._filled = None, 0
            self._returned_reserved += self.reserved_in_progress
            self.reserved_in_progress = 0
            return checked_frame(frame[:self._size] if len(frame) != self._size else frame)
        if self.waiting_for_memory:
            return None
        start, end = self._start, self._end
        if end - start < SIZE.size:
            self._give_back_scratch()
            return None
        scratch = self._scratch
        assert scratch is not None
        (size,) = SIZE.unpack_from(scratch, start)
        if size < 0 or size > self.max_frame_bytes:
            self._broken = FrameTooLarge(size, self.max_frame_bytes)
            self._start = self._end = 0
            raise self._broken
        body = start + SIZE.size
        available = end - body
        if available >= size:
            self._start = body + size
            return checked_frame(memoryview(scratch[body:body + size]))
        if size < DIRECT_MIN_BYTES:
            return None  # stays in the scratch buffer until it is complete
        self._begin_large_frame()
        return None

    def _begin_large_frame(self) -> None:
        """A large frame's size is at the front of the scratch buffer: give the frame
        its first buffer (reserved first) and move what arrived of it there."""
        scratch = self._scratch
        assert scratch is not None and self._scratch_view is not None
        start, end = self._start, self._end
        (size,) = SIZE.unpack_from(scratch, start)
        body = start + SIZE.size
        available = end - body
        if self.memory is not None:
            if not self.memory.reserve(size):
                self.waiting_for_memory = True
                return
            self.reserved_in_progress = size
        first = size if size <= WHOLE_FRAME_BYTES else max(available, INITIAL_FRAME_BYTES)
        frame = self._frame = self._new_buffer(first)
        self._size = size
        frame[:available] = self._scratch_view[body:end]
        self._filled = available
        self._start = self._end = 0
        self._give_back_scratch()

    def _give_back_scratch(self) -> None:
        scratch, view = self._scratch, self._scratch_view
        if scratch is not None and view is not None and self._start == self._end:
            self.scratch.give(scratch, view)
            self._scratch = self._scratch_view = None
            self._start = self._end = 0

    def close(self) -> None:
        """The connection is gone: give the scratch buffer back, drop the frame."""
        self._start = self._end = 0
        self._give_back_scratch()
        self._frame = None

    def frames(self) -> Iterator[memoryview]:
        """Every complete frame received so far, in order."""
        while (frame := self.next_frame()) is not None:
            yield frame
