"""The HTTP admin port: Prometheus metrics and health checks (admin.port).

Contract:
- `AdminServer(metrics, ready)` serves HTTP/1.1 with asyncio on the broker's loop
  (one coroutine per connection, no threads), one request per connection
  (`Connection: close`), GET or HEAD:
  - `/metrics`: the Prometheus text exposition of `metrics` (broker/admin/metrics.py);
    404 when the broker runs without metrics.
  - `/health/live`: 200 while the process serves HTTP at all.
  - `/health/ready`: 200 once `ready()` is true (recovery done, listeners bound
    and serving), 503 before and while shutting down; the body's lines after the
    first are `detail()`'s (tiered storage's copy lag and store errors).
  Anything else: 404 (unknown path), 405 (another method), 400 (not HTTP, or a
  request head over MAX_HEAD_BYTES or slower than HEAD_TIMEOUT_S).
- `bind(host, port)` listens (port 0: any free port) and returns the bound
  address; `close()` stops listening and closes open connections.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from broker.admin.metrics import CONTENT_TYPE, BrokerMetrics

MAX_HEAD_BYTES = 16 * 1024
HEAD_TIMEOUT_S = 10.0
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}

log = structlog.get_logger("strata.admin")


class AdminServer:
    """Metrics and health over HTTP on the broker's loop (see the module contract)."""

    def __init__(self, metrics: BrokerMetrics | None, ready: Callable[[], bool],
                 detail: Callable[[], list[str]] | None = None):
        self.metrics = metrics
        self.ready = ready
        self.detail = detail
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task] = set()

    async def bind(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True,
                                                  limit=MAX_HEAD_BYTES)
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            status, body, content_type, head_only = await self._answer(reader)
            head = (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("ascii")
            writer.write(head if head_only else head + body)
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("admin_request_failed")
        finally:
            if task is not None:
                self._clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, bytes, str, bool]:
        text = "text/plain; charset=utf-8"
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return 400, b"bad request\n", text, False
        if len(head) > MAX_HEAD_BYTES:
            return 400, b"request head too large\n", text, False
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, b"bad request line\n", text, False
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return 405, b"only GET and HEAD\n", text, False
        head_only = method == b"HEAD"
        if target == b"/metrics" and self.metrics is not None:
            return 200, self.metrics.render(), CONTENT_TYPE, head_only
        if target == b"/health/live":
            return 200, b"live\n", text, head_only
        if target == b"/health/ready":
            if self.ready():
                lines = ["ready", *(self.detail() if self.detail is not None else ())]
                return 200, "".join(line + "\n" for line in lines).encode(), text, head_only
            return 503, b"not ready\n", text, head_only
        return 404, b"not found: /metrics, /health/live, /health/ready\n", text, head_only
