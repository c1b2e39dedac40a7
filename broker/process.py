"""The broker process for `strata serve`: logging, the first line, the app on uvloop
until SIGTERM/SIGINT.

`run_broker(config, ready=..., kafka_ready=..., admin_ready=...)` configures logging
(log.format: text on a terminal, JSON lines otherwise, unless set), logs
`strata_starting` first (version, listeners, data directory), runs `BrokerApp`
(broker/app.py) on uvloop, prints the ready lines (native, then Kafka, then admin),
handles SIGTERM/SIGINT and returns the exit code (0 after a graceful shutdown).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import Callable

import structlog

from broker.app import BrokerApp
from broker.config.broker_config import BrokerConfig
from broker.net.heap import keep_freed_memory
from broker.net.listeners import NATIVE, Listener
from broker.net.server import format_address

log = structlog.get_logger("strata.app")


def configure_logging(fmt: str, level: str, stream=None) -> None:
    """structlog to `stream` (stderr): `fmt` text (human-readable key=value; "console"
    is the same), json (one object a line), or auto: text on a terminal, JSON otherwise."""
    import logging

    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "text" if stream.isatty() else "json"
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


def strata_version() -> str:
    """The installed distribution's version ("unknown" when run from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strata")
    except PackageNotFoundError:
        return "unknown"


def log_starting(config: BrokerConfig) -> None:
    """The first line of every start: version, the listeners as configured, the data directory."""
    listeners = [f"{spec.protocol} {spec.name}://{format_address(spec.host, spec.port)}"
                 for spec in sorted(config.listeners, key=lambda spec: spec.protocol != NATIVE)]
    if config.admin_port >= 0:
        listeners.append(f"http://{format_address(config.host, config.admin_port)}")
    log.info("strata_starting", version=strata_version(), listeners=listeners, data_dir=config.data_dir,
             pid=os.getpid())


def run_broker(config: BrokerConfig, *, ready: Callable[[str], None] | None = None,
               kafka_ready: Callable[[str], None] | None = None,
               listener_ready: Callable[[Listener], None] | None = None,
               admin_ready: Callable[[str], None] | None = None) -> int:
    """Run until SIGTERM/SIGINT; `ready` gets "HOST:PORT" of the first native
    listener once listening, then `kafka_ready` the first Kafka listener's
    "HOST:PORT" (when there is one), then `admin_ready` the admin port's (when it
    is on), then `listener_ready` every other listener (bound): each listener is
    announced once."""
    import uvloop

    configure_logging(config.log_format, config.log_level)
    log_starting(config)
    keep_freed_memory()  # request-sized buffers are reused, not page-faulted in anew (broker/net/heap.py)
    for name in config.ignored_env:
        log.warning("unknown_environment_setting", variable=name)
    for key, origin, reason in config.ignored:
        log.info("config_ignored", key=key, source=origin, reason=reason)
    for key, origin in config.unknown:
        log.warning("unknown_setting_ignored", key=key, source=origin,
                    hint="not a setting Strata knows; strata serve --strict refuses it")

    async def main() -> int:
        app = BrokerApp(config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, app.request_shutdown)  # a signal during startup waits for it
        await app.start()
        # What startup built (modules, configuration, every log's segments and
        # indexes) lives until shutdown: frozen out of the cyclic GC's reach, the
        # collections that request handling triggers walk only what came after.
        gc.collect()
        gc.freeze()
        assert app.address is not None
        if ready is not None:
            ready(format_address(*app.address))
        if kafka_ready is not None and app.kafka_address is not None:
            kafka_ready(format_address(*app.kafka_address))
        if admin_ready is not None and app.admin_address is not None:
            admin_ready(format_address(*app.admin_address))
        if listener_ready is not None:
            # The first native and first Kafka listener are announced by the lines above.
            announced = [server for server, told in ((app.server, ready), (app.kafka_server, kafka_ready))
                         if server is not None and told is not None]
            for server, listener in zip(app.servers, app.listeners, strict=True):
                if not any(server is first for first in announced):
                    listener_ready(listener)
        await app.run_until_shutdown()
        return 0

    return uvloop.run(main())
