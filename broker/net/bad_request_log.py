"""Rate-limited logging of bad requests, so a flood of bad frames cannot fill the
disk with log lines.

Contract:
- `BadRequestLog(logger, interval_s=..., max_lines=...)`, one per broker (both
  listeners share it). `record(connection, reason, **fields)` is called for every
  bad request: the first one of a (connection, reason) is logged at once
  (`event`=reason, with `fields`); later ones of the same pair are counted and
  one line with the count (`repeated`=N, over `interval_s`) is written when the
  next one comes at least `interval_s` after the pair's last line.
- Broker-wide cap: at most `max_lines` lines in any `interval_s` window; past it,
  bad requests are only counted per reason, and one summary line
  (`bad_requests_not_logged`, counts by reason) is written when the window ends
  (a timer on the event loop, when one is given, else at the next record).
- `connection_closed(connection)` forgets the connection; its unreported counts
  go to the summary, so nothing is silently lost and a connection that sends one
  bad frame and closes (Kafka closes on every malformed request) costs one line
  at most, within the cap.
So under any flood the log grows by at most `max_lines` + 1 lines per interval.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

DEFAULT_INTERVAL_S = 10.0
DEFAULT_MAX_LINES = 20


class _PairState:
    __slots__ = ("last_line", "count", "fields")

    def __init__(self, last_line: float, fields: dict[str, Any]):
        self.last_line = last_line
        self.count = 0  # bad requests since the last line
        self.fields = fields


class BadRequestLog:
    def __init__(self, logger: Any, *, interval_s: float = DEFAULT_INTERVAL_S,
                 max_lines: int = DEFAULT_MAX_LINES, loop: asyncio.AbstractEventLoop | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval_s = interval_s
        self.max_lines = max_lines
        self.loop = loop
        self.clock = clock
        self._pairs: dict[tuple[Hashable, str], _PairState] = {}
        self._by_connection: dict[Hashable, list[str]] = {}
        self._window_start = clock()
        self._lines_in_window = 0
        self._not_logged: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None
        self.lines = 0  # lines written, for tests and stats

    def record(self, connection: Hashable, reason: str, /, **fields: Any) -> None:
        now = self.clock()
        self._roll_window(now)
        key = (connection, reason)
        state = self._pairs.get(key)
        if state is None:
            self._pairs[key] = _PairState(now, fields)
            self._by_connection.setdefault(connection, []).append(reason)
            self._line(reason, fields)
            return
        state.count += 1
        if now - state.last_line >= self.interval_s:
            count, state.count, state.last_line = state.count, 0, now
            self._line(reason, {**fields, "repeated": count, "interval_s": self.interval_s})

    def connection_closed(self, connection: Hashable) -> None:
        for reason in self._by_connection.pop(connection, ()):
            state = self._pairs.pop((connection, reason))
            if state.count:
                self._suppress(reason, state.count)

    # ---- the broker-wide cap ----

    def _line(self, reason: str, fields: dict[str, Any]) -> None:
        if self._lines_in_window >= self.max_lines:
            self._suppress(reason, fields.get("repeated", 1))
            return
        self._lines_in_window += 1
        self.lines += 1
        self.logger.warning(reason, **fields)

    def _suppress(self, reason: str, count: int) -> None:
        self._not_logged[reason] += count
        if self._timer is None and self.loop is not None:
            delay = max(0.0, self._window_start + self.interval_s - self.clock())
            self._timer = self.loop.call_later(delay, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        self._roll_window(self.clock())
        if self._not_logged and self.loop is not None:  # a window that has not ended yet
            self._timer = self.loop.call_later(self.interval_s, self._timer_fired)

    def _roll_window(self, now: float) -> None:
        if now - self._window_start < self.interval_s:
            return
        self._window_start = now
        self._lines_in_window = 0
        if self._not_logged:
            counts, self._not_logged = dict(self._not_logged), Counter()
            self.lines += 1
            self._lines_in_window = 1
            self.logger.warning("bad_requests_not_logged", counts=counts,
                                total=sum(counts.values()), interval_s=self.interval_s)

    def close(self) -> None:
        """Write what is still unreported (shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for connection in list(self._by_connection):
            self.connection_closed(connection)
        if self._not_logged:
            self._window_start = -float("inf")
            self._roll_window(self.clock())


__all__ = ["BadRequestLog", "DEFAULT_INTERVAL_S", "DEFAULT_MAX_LINES"]
