"""Clocks injected into the log, so that roll, flush and retention rules can be
driven by tests without sleeping."""

import time


class SystemClock:
    """Wall-clock milliseconds (for timestamps) and a monotonic clock (for intervals)."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def time_ms(self) -> int:
        return self.now_ms

    def monotonic_ms(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


SYSTEM_CLOCK = SystemClock()
