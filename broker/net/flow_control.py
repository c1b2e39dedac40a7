"""Flow control of one connection: when to read and when to wait before writing
(the job of uvicorn's protocols/http/flow_control.py).

- Reading: the connection decides *whether* it wants bytes (queued requests at
  `connection.max.queued.requests`, the write buffer over its high-water mark, the
  broker-wide request memory spent, EOF, shutdown, a fatal frame) and calls
  `set_reading(want)`; this class pauses or resumes the transport only on a change
  and counts the pauses (`ServerStats.read_pauses`).
- Writing: the transport calls `pause_writing` / `resume_writing` at its write
  buffer limits (`connection.write.buffer.bytes`, resume at a quarter); a writer
  awaits `writable()` before writing more. `close()` (the connection is lost) wakes
  every writer for good, so nobody waits on a dead socket.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class PauseCounters(Protocol):
    read_pauses: int
    write_pauses: int


class FlowControl:
    __slots__ = ("transport", "stats", "reading", "write_paused", "closed", "_writable")

    def __init__(self, stats: PauseCounters):
        self.transport: asyncio.Transport | None = None  # set by `attach` (connection_made)
        self.stats = stats
        self.reading = True
        self.write_paused = False
        self.closed = False
        self._writable = asyncio.Event()
        self._writable.set()

    def attach(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    # ---- reading ----

    def set_reading(self, want: bool) -> None:
        """Resume or pause reading from the transport when `want` changes."""
        transport = self.transport
        if self.closed or transport is None:
            return
        if want and not self.reading:
            self.reading = True
            transport.resume_reading()
        elif not want and self.reading:
            self.reading = False
            self.stats.read_pauses += 1
            transport.pause_reading()

    # ---- writing ----

    def pause_writing(self) -> None:
        self.write_paused = True
        self._writable.clear()
        self.stats.write_pauses += 1

    def resume_writing(self) -> None:
        self.write_paused = False
        self._writable.set()

    async def writable(self) -> None:
        """Return once the transport takes writes again (or the connection is gone)."""
        await self._writable.wait()

    def close(self) -> None:
        """The connection is lost: wake every writer, for good."""
        self.closed = True
        self._writable.set()


__all__ = ["FlowControl", "PauseCounters"]
