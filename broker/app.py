"""The broker's life cycle: start storage and the server, run, shut down in order.

Contract:
- `BrokerApp(config).start()` opens the data directory (LogManager.startup: lock,
  recovery), loads the topic registry and reconciles it with the directories,
  registers `__consumer_offsets`, rebuilds committed offsets from it, then listens.
  Every expected failure raises `StartupError` with a one-line message (the data
  directory is locked, the port is in use, the registry is damaged, ...), after
  releasing whatever had been opened.
- `request_shutdown()` (signal handlers call it) makes `run_until_shutdown()`
  shut down gracefully: stop accepting, finish in-flight requests (bounded by
  shutdown.timeout.ms), close connections, stop the periodic tasks, wait for the
  executor, then LogManager.shutdown(): flush, checkpoints, clean-shutdown marker.
  A second request skips the wait for in-flight requests.
- Periodic tasks, after log.initial.task.delay.ms: LogManager.flush_due every
  log.flush.scheduler.interval.ms (at most 1 s apart), LogManager.checkpoint every
  log.flush.offset.checkpoint.interval.ms. Both run in the executor; a failure is
  logged and the task carries on. Retention is not scheduled yet (a later issue).
- `run_broker(config, ready=...)` is the whole process for `strata serve`: it
  configures logging, runs the app on uvloop, prints the ready line, handles
  SIGTERM/SIGINT, and returns the exit code (0 after a graceful shutdown).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import structlog

from storage.errors import StrataError
from storage.manager import LogManager

from .config import BrokerConfig
from .handlers import Handlers
from .server import BrokerServer, format_address, sendfile_stats
from .topics import TopicRegistry

log = structlog.get_logger("strata.app")


class StartupError(Exception):
    """An expected startup failure; the message is one line for the user."""


class BrokerApp:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.manager: LogManager | None = None
        self.registry: TopicRegistry | None = None
        self.handlers: Handlers | None = None
        self.server: BrokerServer | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.address: tuple[str, int] | None = None
        self._stop = asyncio.Event()
        self._force = False
        self._tasks: list[asyncio.Task] = []
        self._stopped = False

    # ---- start ------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        config = self.config
        loop = asyncio.get_running_loop()
        self.executor = ThreadPoolExecutor(config.num_io_threads, thread_name_prefix="strata-io")

        def blocking(fn, *args):
            return loop.run_in_executor(self.executor, fn, *args)

        registry = TopicRegistry(config.data_dir, config.log_defaults, num_partitions=config.num_partitions)
        manager = LogManager(config.data_dir, config_for=registry.log_config)
        self.handlers = handlers = Handlers(config, manager, registry, self.executor, loop)
        self.server = server = BrokerServer(handlers, max_frame_bytes=config.socket_request_max_bytes,
                                            max_queued_requests=config.max_queued_requests,
                                            write_buffer_high=config.write_buffer_high)
        opened = False
        try:
            # The port first: a busy port fails at once, before any recovery work.
            try:
                self.address = await server.bind(config.host, config.port)
            except OSError as e:
                reason = os.strerror(e.errno) if e.errno else str(e)
                raise StartupError(f"cannot listen on {format_address(config.host, config.port)}: "
                                   f"{reason}") from None
            try:
                await blocking(registry.load)
                await blocking(manager.startup)
                opened = True
                await blocking(registry.reconcile, manager)
                await blocking(registry.ensure_internal_topic, config.offsets_topic_num_partitions)
                await blocking(handlers.offsets.load, manager.logs())
            except StrataError as e:
                raise StartupError(str(e)) from None
            except OSError as e:
                raise StartupError(f"cannot use data directory {config.data_dir}: "
                                   f"{e.strerror or e}") from None
            await server.start_serving()
        except BaseException:
            server.close()
            if opened:
                await blocking(manager.shutdown)
            self.executor.shutdown(wait=True)
            raise
        self.manager, self.registry = manager, registry
        self._tasks = [
            loop.create_task(self._every("flush", config.flush_interval_ms, manager.flush_due)),
            loop.create_task(self._every("checkpoint", config.checkpoint_interval_ms, manager.checkpoint)),
        ]
        log.info("broker_started", address=format_address(*self.address), data_dir=config.data_dir,
                 topics=len(registry.names()), settings=config.explicit())
        return self.address

    async def _every(self, name: str, interval_ms: int, work: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.config.initial_task_delay_ms / 1000)
        while True:
            try:
                await loop.run_in_executor(self.executor, work)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic_task_failed", task=name)
            await asyncio.sleep(max(interval_ms, 1) / 1000)

    # ---- stop -------------------------------------------------------------------------------

    def request_shutdown(self) -> None:
        if self._stop.is_set():
            self._force = True
            log.warning("shutdown_forced")
            if self.server is not None:
                for conn in list(self.server.connections):
                    conn.abort()
            return
        log.info("shutdown_requested")
        self._stop.set()

    async def run_until_shutdown(self) -> None:
        await self._stop.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        loop = asyncio.get_running_loop()
        if self.server is not None:
            await self.server.shutdown(0 if self._force else self.config.shutdown_timeout_s)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.executor is not None:
            await loop.run_in_executor(None, self.executor.shutdown, True)
        if self.manager is not None:
            await loop.run_in_executor(None, self.manager.shutdown)
        stats = self.server.stats.as_dict() if self.server is not None else {}
        log.info("broker_stopped", **stats, sendfile=sendfile_stats.as_dict())


# ---- the process ------------------------------------------------------------------------------

def configure_logging(fmt: str, level: str, stream=None) -> None:
    """structlog to `stream` (stderr): console key=value on a terminal, JSON lines otherwise."""
    import logging

    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if stream.isatty() else "json"
    processors: list = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=stream.isatty())]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )


def run_broker(config: BrokerConfig, *, ready: Callable[[str], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT; `ready` gets "HOST:PORT" once listening."""
    import uvloop

    configure_logging(config.log_format, config.log_level)
    for name in config.ignored_env:
        log.warning("unknown_environment_setting", variable=name)

    async def main() -> int:
        app = BrokerApp(config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, app.request_shutdown)  # a signal during startup waits for it
        await app.start()
        assert app.address is not None
        if ready is not None:
            ready(format_address(*app.address))
        await app.run_until_shutdown()
        return 0

    return uvloop.run(main())
