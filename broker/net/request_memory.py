"""Memory for requests being received, broker-wide: Kafka's `queued.max.request.bytes`.

Contract:
- `RequestMemory(max_bytes)` is one pool shared by every connection of both
  listeners; -1 (or 0) means no bound (Kafka's MemoryPool.NONE). A connection
  `reserve(n)`s bytes before it allocates them for a request frame (the frame's
  buffer grows as its bytes arrive: protocol/framing.py) and `release(n)`s them
  once the request is answered or the connection closes.
- As Kafka's SimpleMemoryPool for requests (non-strict), a reservation succeeds
  while anything is left, even if it takes the pool past its bound by one
  growth step; once the pool is spent it fails, and the connection stops
  reading (transport.pause_reading) after `wait(callback)`. Each `release` that
  leaves memory available calls the waiting callbacks, oldest first, until one
  of them finds the pool spent again (it waits again by calling `wait`).
- `give_back_memory()` asks the C allocator to return free memory to the system
  (glibc's malloc_trim(0)); a no-op elsewhere. The server calls it after many
  connections closed, so the memory they took leaves the process's RSS.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections import deque
from collections.abc import Callable

UNBOUNDED = -1


class RequestMemory:
    def __init__(self, max_bytes: int = UNBOUNDED):
        self.max_bytes = max_bytes if max_bytes > 0 else UNBOUNDED
        self.used = 0
        self.refusals = 0  # reservations refused (a connection paused), for stats and tests
        self._waiting: deque[Callable[[], None]] = deque()

    @property
    def bounded(self) -> bool:
        return self.max_bytes != UNBOUNDED

    @property
    def available(self) -> bool:
        return not self.bounded or self.used < self.max_bytes

    def reserve(self, n: int) -> bool:
        """Take `n` bytes; False (nothing taken) when the pool is spent."""
        if not self.available:
            self.refusals += 1
            return False
        self.used += n
        return True

    def release(self, n: int) -> None:
        if n <= 0:
            return
        self.used -= n
        while self._waiting and self.available:
            self._waiting.popleft()()

    def wait(self, callback: Callable[[], None]) -> None:
        """Call `callback` once memory is available again."""
        self._waiting.append(callback)

    def forget(self, callback: Callable[[], None]) -> None:
        """A closed connection no longer waits."""
        with contextlib.suppress(ValueError):
            self._waiting.remove(callback)


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _load_malloc_trim()


def give_back_memory() -> bool:
    """malloc_trim(0) where glibc has it; True when it ran."""
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True


__all__ = ["RequestMemory", "UNBOUNDED", "give_back_memory"]
