"""How long a request's handler runs on the event loop: the request time that
`request_percentage` quotas limit (broker/core/quotas.py).

Contract:
- Kafka's ClientRequestQuotaManager counts the time a request spends on the
  broker's request handler and network threads. Strata's handlers are coroutines
  on one event loop, interleaved with other connections' and waiting for long
  polls or the I/O threads; `HandlerClock` counts only the time the handler's own
  code runs on the loop: `timed(coro)` is an awaitable that runs `coro` and adds
  the duration of each of its steps (from being resumed to its next suspension)
  to `seconds`; the waits between steps (a long poll, an append in the executor,
  other connections' requests) are not counted. Storage work done in the I/O
  threads is not counted either.
- `start()` / `stop()` time a synchronous stretch (the fast path, a native
  PRODUCE begun early); `elapsed()` is the time counted so far, the step in
  progress included, for a handler that charges its quota before it returns
  (Produce, Fetch).
- Listeners make a clock only while a `request_percentage` quota is set
  (`PartitionService.request_quotas`), so timing costs nothing otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from time import perf_counter
from typing import Any, TypeVar

T = TypeVar("T")


class HandlerClock:
    __slots__ = ("seconds", "_started")

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started: float | None = None

    def start(self) -> None:
        self._started = perf_counter()

    def stop(self) -> None:
        started = self._started
        if started is not None:
            self.seconds += perf_counter() - started
            self._started = None

    def elapsed(self) -> float:
        started = self._started
        return self.seconds + (perf_counter() - started if started is not None else 0.0)

    def timed(self, awaitable: Awaitable[T]) -> Awaitable[T]:
        return _Timed(self, awaitable)

    def steps(self, awaitable: Awaitable[T]) -> Generator[Any, Any, T]:
        """Run `awaitable` step by step as `yield from` would, timing each step."""
        coro = awaitable.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            self.start()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as done:
                return done.value
            finally:
                self.stop()
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # a cancellation: the coroutine handles it
                value, error = None, e


class _Timed:
    __slots__ = ("clock", "coro")

    def __init__(self, clock: HandlerClock, awaitable: Awaitable[Any]):
        self.clock = clock
        self.coro = awaitable

    def __await__(self) -> Generator[Any, Any, Any]:
        return self.clock.steps(self.coro)


__all__ = ["HandlerClock"]
