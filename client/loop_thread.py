"""The event loop behind the blocking API: one daemon thread per process.

Why the sync API wraps the asyncio one (and not a sans-IO core under two socket
flavours): the interesting logic lives in time and concurrency (linger timers,
pipelined requests matched in order, retries with backoff, long polls), and
asyncio already expresses that. Writing it a second time over blocking sockets
and threads would double the code where bugs hide. The price is one thread
hop per blocking call (tens of microseconds), small next to a network round
trip. The wire work itself is already sans-IO: the `protocol` codec.

Contract:
- `LoopThread.shared()` returns the process-wide loop thread, started on first
  use (a daemon: it never keeps the process alive).
- `run(coro, timeout=None)` runs `coro` on the loop and blocks for its result,
  re-raising its exception. If the calling thread is interrupted (Ctrl-C) or
  the timeout passes, the coroutine is cancelled before the exception
  propagates, so nothing keeps running behind the caller's back.
- `submit(coro)` schedules `coro` and returns a concurrent.futures.Future.
- Calling `run` from the loop thread itself would deadlock: it raises
  RuntimeError instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any

__all__ = ["LoopThread"]


class LoopThread:
    _shared: LoopThread | None = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "strata-client-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls) -> LoopThread:
        with cls._shared_lock:
            if cls._shared is None or not cls._shared.is_alive:
                cls._shared = cls()
            return cls._shared

    @property
    def is_alive(self) -> bool:
        """Whether the loop's thread still runs."""
        return self._thread.is_alive()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine, timeout: float | None = None) -> Any:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking Strata client call was made on the client's own loop "
                               "thread; use the asyncio API there")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout} s") from None
        except BaseException:
            future.cancel()  # KeyboardInterrupt and friends: stop the work too
            raise

    def call_soon(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)
