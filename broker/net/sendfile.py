"""The zero-copy writer: reply parts to a connection's transport, segment bytes
(FileSlices) by os.sendfile straight from the page cache.

Why this design (option "a"): uvloop implements neither loop.sendfile nor
loop.sock_sendfile (NotImplementedError), and it refuses loop.add_writer on a
socket a transport owns. The server keeps the Protocol/transport design (uvloop's
fast reads, writes and flow control for every other reply) and calls os.sendfile
directly on the transport's socket fd, but only while the transport's write
buffer is empty (uvloop's count includes libuv's queue), so the file bytes can
never overtake bytes the transport still holds. When the socket would block
(EAGAIN), a small piece (SENDFILE_FALLBACK_CHUNK, 16 KiB) is pread and written
through the transport: that is how the writer learns the socket drained (uvloop
calls resume_writing; the write limits are lowered to 0/0 while waiting so the
call comes at an empty buffer), and sendfile resumes from there. So only 16 KiB
per stall are copied; `sendfile_stats` counts both paths. The alternative, raw
non-blocking sockets with sock_recv_into and add_writer, gives up uvloop's
transport fast path and its flow control for every request to save those 16 KiB
per stall.

The fd is only used synchronously and after checking `transport.is_closing()`, so
a descriptor uvloop has closed (and the kernel may have reused) is never written.
If the kernel refuses sendfile for the file (EINVAL/ENOSYS/EOPNOTSUPP on an odd
filesystem), the writer logs it once and copies from then on.

TLS listeners (fd -1): the kernel cannot encrypt what sendfile sends (asyncio's TLS
runs in user space, over memory BIOs, so kernel TLS cannot take over either), so
segment bytes are pread and written through the transport, which encrypts them:
in 1 MiB chunks paced by the transport's flow control, and on the fast path
(`write_now`) a slice of up to 1 MiB at once. `sendfile_stats.copied_bytes` counts them.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields

import structlog

from broker.net.flow_control import FlowControl
from storage.file_records import FileSlice

SENDFILE_FALLBACK_CHUNK = 16 * 1024
COPY_CHUNK = 1024 * 1024  # TLS: segment bytes copied per write through the transport
CORK_LIMIT = 64 * 1024  # bytes held by a corked writer before they are written anyway
CORK_FRAME_LIMIT = 16 * 1024  # a request this large is handled after the held replies are written
SENDFILE_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", -1))

log = structlog.get_logger("strata.server")


class ConnectionClosed(Exception):
    """The connection went away while a reply was being written."""


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


def _copy(transport: asyncio.Transport, part: FileSlice, count: int) -> None:
    """pread `count` bytes of `part` and write them through the transport, advancing it."""
    chunk = os.pread(part.fileno(), count, part.position)
    if len(chunk) < count:
        raise OSError(f"segment file ended {part.length - len(chunk)} bytes early")
    transport.write(chunk)
    part.position += count
    part.length -= count
    sendfile_stats.copied_bytes += count
    sendfile_stats.copied_writes += 1


class SendfileWriter:
    """Writes reply parts to one connection's transport: bytes through the
    transport, FileSlices by sendfile on the socket `fd` (-1: copy them)."""

    __slots__ = ("transport", "fd", "flow", "write_high", "corked", "corked_size")

    def __init__(self, transport: asyncio.Transport, fd: int, flow: FlowControl, write_high: int):
        self.transport = transport
        self.fd = fd
        self.flow = flow
        self.write_high = write_high
        self.corked: list[bytes] | None = None  # bytes `write_now` holds while corked
        self.corked_size = 0

    def cork(self) -> None:
        """Hold the bytes `write_now` writes until `uncork`, which hands them to the
        transport in one write: the replies to the requests of one read go out in
        one send instead of a send each. Held bytes go first whenever a FileSlice
        follows them, and once CORK_LIMIT bytes are held."""
        if self.corked is None:
            self.corked = []
            self.corked_size = 0

    def uncork(self) -> None:
        """Write what `cork` held and stop holding."""
        corked, self.corked = self.corked, None
        if corked:
            self.transport.writelines(corked)

    def flush(self) -> None:
        """Write what `cork` held so far, still corked (before a request that takes
        a while, so the replies already made do not wait for it)."""
        if self.corked:
            self._flush_corked(self.corked)

    def _flush_corked(self, corked: list[bytes]) -> None:
        self.transport.writelines(corked)
        corked.clear()
        self.corked_size = 0

    def send_now(self, part: FileSlice) -> bool:
        """Send `part` with sendfile while the socket takes it (the transport's buffer
        must be empty), advancing it past what went; True when all of it went. False
        when the socket is full or sendfile is off (a kernel that refuses it for the
        file turns it off, logged once); other errors raise."""
        global _sendfile_supported
        if not _sendfile_supported or self.fd < 0:
            return False
        try:
            while part.length:
                sent = _sendfile(self.fd, part.fileno(), part.position, part.length)
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

    def write_now(self, reply: Sequence[bytes | FileSlice]) -> list | None:
        """Write a reply now, without waiting: bytes through the transport, a
        FileSlice by sendfile while nothing is buffered ahead of it. None when all of
        it went; else the rest, from the part that did not fit (a FileSlice advanced
        past what was sent), for `write` to finish (it also meets and reports a
        failing sendfile again). Slices that went are released."""
        transport = self.transport
        corked = self.corked
        for i, part in enumerate(reply):
            if not isinstance(part, FileSlice):
                if corked is None:
                    transport.write(part)
                    continue
                corked.append(part)
                self.corked_size += len(part)
                if self.corked_size >= CORK_LIMIT:
                    self._flush_corked(corked)
                continue
            if corked:
                self._flush_corked(corked)  # the held bytes go before the slice
            if self.fd < 0:  # TLS: the bytes go through the transport, which encrypts them
                if part.length > COPY_CHUNK or transport.get_write_buffer_size() >= self.write_high:
                    return list(reply[i:])
                try:
                    _copy(transport, part, part.length)
                except OSError:
                    return list(reply[i:])
                part.release()
                continue
            try:
                if transport.get_write_buffer_size() or not self.send_now(part):
                    return list(reply[i:])
            except OSError:
                return list(reply[i:])
            part.release()
        return None

    async def write(self, reply: Sequence[bytes | FileSlice]) -> None:
        """Write every part in order, waiting for the transport to drain as needed;
        every FileSlice is released, sent or not. Raises ConnectionClosed when the
        connection goes away meanwhile."""
        transport, flow = self.transport, self.flow
        try:
            for part in reply:
                if flow.closed or transport.is_closing():
                    raise ConnectionClosed()
                if isinstance(part, FileSlice):
                    await self._send_file(part)
                else:
                    transport.write(part)
                if flow.write_paused:
                    await flow.writable()
        finally:
            for part in reply:
                if isinstance(part, FileSlice):
                    part.release()

    async def _send_file(self, part: FileSlice) -> None:
        transport = self.transport
        if self.fd < 0:  # TLS: copied through the transport in chunks, paced by flow control
            while part.length:
                if self.flow.closed or transport.is_closing():
                    raise ConnectionClosed()
                _copy(transport, part, min(COPY_CHUNK, part.length))
                if self.flow.write_paused:
                    await self.flow.writable()
            return
        while part.length:
            if transport.get_write_buffer_size():
                await self._drained()
            if self.flow.closed or transport.is_closing():
                raise ConnectionClosed()
            if self.send_now(part):
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
        transport, flow = self.transport, self.flow
        if not transport.get_write_buffer_size():
            return
        transport.set_write_buffer_limits(high=0, low=0)  # pauses now: the buffer is not empty
        try:
            while transport.get_write_buffer_size() and not flow.closed:
                await flow.writable()
                if not flow.write_paused and transport.get_write_buffer_size():
                    await asyncio.sleep(0.001)  # never spin (uvloop resumes only at 0 here)
        finally:
            if not flow.closed and not transport.is_closing():
                transport.set_write_buffer_limits(high=self.write_high, low=self.write_high // 4)


__all__ = ["ConnectionClosed", "SENDFILE_FALLBACK_CHUNK", "SendfileStats", "SendfileWriter", "sendfile_stats"]
