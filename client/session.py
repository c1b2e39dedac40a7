"""A client's link to the broker: one connection, made on first use and remade
after it breaks, plus the bounded retry rule every client shares.

Contract:
- `BrokerSession(bootstrap, ..., security={...})` does no I/O until the first
  request; `security` holds Kafka-style TLS settings (security.protocol=SSL,
  ssl.ca.location, ...: client/security.py). Every
  request goes through the current connection; when that connection has died
  (BrokerUnreachable, RequestTimedOut) the next request opens a new one.
  Concurrent callers share one connection attempt.
- `await session.request(req, timeout_ms)` returns the raw response;
  `await session.call(req, context)` also raises for a top-level error code,
  with the broker's reason when the connection speaks version 2.
- `await session.request_v2(req, what, timeout_ms)` is `request` for what only
  version 2 of the protocol has (a read_committed FETCH): on a connection that
  speaks version 1 it raises StrataClientError(INVALID_REQUEST) naming `what`.
- `await session.retrying(op, what)` runs `op()` (a coroutine function) and
  retries it on retriable errors only (transport failures: BrokerUnreachable,
  RequestTimedOut), at most `retries` times, sleeping `retry_backoff_ms`,
  doubled after each failure up to `retry_backoff_max_ms`. Broker error codes
  are never retried: on a single-node broker an unknown topic stays unknown.
- `close()` closes the connection; outstanding requests fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from protocol import ErrorCode
from protocol.requests import Request

from .connection import DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_REQUEST_TIMEOUT_MS, AsyncConnection
from .errors import StrataClientError, raise_for
from .sasl import sasl_credentials
from .security import ssl_context

__all__ = ["BrokerSession"]

T = TypeVar("T")


class BrokerSession:
    def __init__(self, bootstrap: str, *, request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS, retries: int = 5,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 security: Mapping[str, str] | None = None):
        self.bootstrap = bootstrap
        # security.protocol, ssl.* (client/security.py); a bad setting fails here.
        self.ssl = ssl_context(security)
        self.sasl = sasl_credentials(security or {})  # SASL_*: sasl.mechanism, username, password
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._connection: AsyncConnection | None = None
        self._connecting: asyncio.Lock | None = None  # made lazily: needs the running loop
        self._closed = False

    async def connection(self) -> AsyncConnection:
        if self._closed:
            raise StrataClientError("client is closed")
        conn = self._connection
        if conn is not None and not conn.closed:
            return conn
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            conn = self._connection
            if conn is None or conn.closed:
                conn = self._connection = await AsyncConnection.open(
                    self.bootstrap, connect_timeout_ms=self.connect_timeout_ms,
                    request_timeout_ms=self.request_timeout_ms, ssl=self.ssl,
                    sasl=self.sasl)
            return conn

    async def request(self, request: Request, timeout_ms: int | None = None):
        conn = await self.connection()
        return await conn.request(request, timeout_ms)

    async def request_v2(self, request: Request, what: str, timeout_ms: int | None = None):
        conn = await self.connection()
        if conn.version < 2:
            raise StrataClientError(f"{what} needs a broker that speaks native protocol version 2 "
                                    f"(this one speaks {conn.version})", ErrorCode.INVALID_REQUEST)
        return await conn.request(request, timeout_ms)

    async def call(self, request: Request, context: str, timeout_ms: int | None = None):
        response = await self.request(request, timeout_ms)
        raise_for(response.error, context, response.message)
        return response

    async def retrying(self, op: Callable[[], Awaitable[T]], retries: int | None = None) -> T:
        retries = self.retries if retries is None else retries
        backoff = self.retry_backoff_ms
        attempt = 0
        while True:
            try:
                return await op()
            except StrataClientError as e:
                if not e.retriable or attempt >= retries or self._closed:
                    raise
            attempt += 1
            await asyncio.sleep(backoff / 1000)
            backoff = min(backoff * 2, self.retry_backoff_max_ms)

    def close(self) -> None:
        self._closed = True
        if self._connection is not None:
            self._connection.close()
            self._connection = None
