"""How fast the broker accepts new connections: Kafka's connection creation rate
quotas (KIP-612), as its ConnectionQuotas.

Contract:
- `ConnectionRates(ip_quota, broker_rate, listener_rates, window_samples=,
  window_seconds=)`, one per broker (both listeners count against the same
  broker-wide rate, as Kafka's ConnectionQuotas). `ip_quota(ip)` gives an IP's
  `connection_creation_rate` client quota (the `ip` entity of that address, else
  the default `ip` entity: broker/core/quotas.py `ClientQuotas.ip_quota`), None for
  none. `broker_rate` is `max.connection.creation.rate`, `listener_rates` the
  `listener.name.<listener>.max.connection.creation.rate` of each listener that
  sets one (listener names lower-cased); INT_MAX (Kafka's default) is no limit.
- `admit(listener, ip, now_ms=None)` records a new connection and returns
  `Admission(delay_ms, close_after_ms)`, as Kafka's `ConnectionQuotas.inc`:
  - the connection counts on its listener's rate and the broker-wide rate; when
    one is over its limit, the connection waits for `delay_ms` (the longer of the
    two throttle times) before the broker reads anything from it. Kafka's
    acceptor stops accepting for that long (the connection waits in the accept
    backlog, where the kernel has already completed it); an asyncio server
    cannot hold back one accept, so Strata accepts it and reads nothing from it
    for that long: the client sees the same delay before its first answer.
  - then it counts on its IP's rate, when that IP has a quota; over the quota,
    the connection is not admitted: it is counted on no rate (Kafka unrecords it
    from the IP, listener and broker rates), held open without being read and
    closed after `close_after_ms`, as Kafka's acceptor delays closing a
    throttled connection (ConnectionThrottledException), so that a client that
    reconnects at once cannot go faster than its quota.
  The rates are Kafka's windowed Rate (broker/core/quotas.py `WindowedRate`:
  `quota.window.num` samples of `quota.window.size.seconds`); a throttle time is
  Kafka's (rate - limit) / limit × window, capped at one sample
  (`quota.window.size.seconds`, Kafka's ConnectionQuotas maxThrottleTimeMs).
- Counters: `delayed` (connections made to wait) and `throttled` (connections
  closed over their IP's quota).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from broker.core.quotas import WindowedRate

INT_MAX = 2**31 - 1
MAX_IP_RATES = 10_000  # IP rates kept before idle ones are dropped


class Admission(NamedTuple):
    delay_ms: int = 0  # read nothing from the connection for this long, then serve it
    close_after_ms: int = 0  # over the IP's quota: not admitted, closed after this long


ADMITTED = Admission()


class ConnectionRates:
    def __init__(self, ip_quota: Callable[[str], float | None], broker_rate: int = INT_MAX,
                 listener_rates: dict[str, int] | None = None, *, window_samples: int = 11,
                 window_seconds: int = 1):
        self.ip_quota = ip_quota
        self.broker_rate = broker_rate
        self.listener_rates = {name.lower(): rate for name, rate in (listener_rates or {}).items()
                               if rate < INT_MAX}
        self.window_samples = window_samples
        self.window_ms = window_seconds * 1000
        self._broker = self._new_rate()
        self._listeners: dict[str, WindowedRate] = {}
        self._ips: dict[str, WindowedRate] = {}
        self.delayed = 0
        self.throttled = 0

    def _new_rate(self) -> WindowedRate:
        return WindowedRate(self.window_ms, self.window_samples)

    def _record(self, rate: WindowedRate, limit: float, now_ms: float) -> int:
        """Count one connection on `rate`; the throttle time (ms) when over `limit`."""
        rate.record(1.0, now_ms)
        observed = rate.per_second(now_ms)
        if observed <= limit:
            return 0
        if limit <= 0:  # no connection at all: the longest wait
            return self.window_ms
        return min(round((observed - limit) / limit * rate.window_size_ms(now_ms)), self.window_ms)

    def admit(self, listener: str | None, ip: str, now_ms: float | None = None) -> Admission:
        now = time.monotonic() * 1000.0 if now_ms is None else now_ms
        limit = self.listener_rates.get(listener.lower()) if listener is not None else None
        listener_rate = None
        delay = 0
        if limit is not None:
            assert listener is not None
            listener_rate = self._listeners.get(listener.lower())
            if listener_rate is None:
                listener_rate = self._listeners[listener.lower()] = self._new_rate()
            delay = self._record(listener_rate, limit, now)
        broker_limited = self.broker_rate < INT_MAX
        if broker_limited:
            delay = max(delay, self._record(self._broker, self.broker_rate, now))
        if delay:
            self.delayed += 1
        quota = self.ip_quota(ip)
        if quota is None:
            return Admission(delay, 0) if delay else ADMITTED
        rate = self._ips.get(ip)
        if rate is None:
            if len(self._ips) >= MAX_IP_RATES:
                self._forget_idle(now)
            rate = self._ips[ip] = self._new_rate()
        throttle = self._record(rate, quota, now)
        if not throttle:
            return Admission(delay, 0) if delay else ADMITTED
        # Not admitted: it counts on no rate.
        rate.record(-1.0, now)
        if listener_rate is not None:
            listener_rate.record(-1.0, now)
        if broker_limited:
            self._broker.record(-1.0, now)
        self.throttled += 1
        return Admission(0, throttle)

    def _forget_idle(self, now_ms: float) -> None:
        span = self.window_ms * self.window_samples
        for ip, rate in list(self._ips.items()):
            if not rate.starts or rate.starts[-1] + span <= now_ms:
                del self._ips[ip]


__all__ = ["ADMITTED", "Admission", "ConnectionRates"]
