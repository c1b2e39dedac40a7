"""How many connections the broker accepts: Kafka's `max.connections`,
`max.connections.per.ip` and `max.connections.per.ip.overrides`.

Contract:
- `ConnectionLimits(max_connections, max_per_ip, overrides)`, one per broker (both
  listeners count against the same limits, as Kafka's ConnectionQuotas).
  `overrides` is Kafka's text form, `host:count,host:count` (a host name or an IP
  address; names are resolved once, when the limits are built); `parse_overrides`
  checks it and raises ValueError with the reason.
- `admit(ip)` counts a new connection and returns None, or refuses it (counting
  nothing) and returns the reason: over the per-IP limit (the override for that
  address, else max.connections.per.ip) or over max.connections. The server
  closes a refused connection at once, as Kafka does for the per-IP limit (Kafka
  makes a new connection wait in the accept backlog at the broker-wide limit; an
  asyncio server cannot stop accepting for a while, so Strata closes it too).
- `release(ip)` uncounts a closed connection that was admitted.
"""

from __future__ import annotations

import socket
from collections import Counter

INT_MAX = 2**31 - 1


def parse_overrides(text: str) -> dict[str, int]:
    """`host:count,...` -> {host: count}; ValueError when malformed."""
    overrides: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, colon, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not colon or not host or not count.strip().isdigit():
            raise ValueError(f"expected HOST:COUNT, got {item!r}")
        overrides[host] = int(count)
    return overrides


def _resolve(host: str) -> list[str]:
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})
    except OSError:
        return [host]


class ConnectionLimits:
    def __init__(self, max_connections: int = INT_MAX, max_per_ip: int = INT_MAX,
                 overrides: str | dict[str, int] = ""):
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        given = parse_overrides(overrides) if isinstance(overrides, str) else dict(overrides)
        self.overrides: dict[str, int] = {}
        for host, count in given.items():
            for address in _resolve(host):
                self.overrides[address] = count
        self.total = 0
        self.by_ip: Counter[str] = Counter()
        self.refused = 0

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    def admit(self, ip: str) -> str | None:
        if self.by_ip[ip] >= self.limit_for(ip):
            self.refused += 1
            return f"too many connections from {ip} (max.connections.per.ip {self.limit_for(ip)})"
        if self.total >= self.max_connections:
            self.refused += 1
            return f"too many connections (max.connections {self.max_connections})"
        self.by_ip[ip] += 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]


__all__ = ["ConnectionLimits", "parse_overrides"]
