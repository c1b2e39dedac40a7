"""The broker's life cycle: start storage and the server, run, shut down in order.

Contract:
- `BrokerApp(config).start()` raises the soft RLIMIT_NOFILE to the hard limit and
  sizes the open-file budget (log.max.open.files, storage/open_files.py), logging
  both (`open_files_limit`), reads the state files (topic registry, SCRAM users,
  client quotas, ACLs, group configs, Kafka state: a damaged one fails the start
  before the logs are touched), opens the data directory (LogManager.startup: lock,
  recovery), reconciles the registry with the directories,
  registers `__consumer_offsets`, rebuilds committed offsets from it, then listens:
  every listener of both protocols (broker/net/listeners.py: `native.listeners`,
  `listeners`, or the host.name/port/kafka.port shorthands), all over the same
  LogManager, TopicRegistry, GroupOffsets and PartitionWaiters; SSL listeners
  with their TLS contexts (broker/net/tls.py), whose keystore and truststore files
  are checked every ssl.reload.interval.ms and reloaded when they change.
  Unless admin.port is -1, the HTTP admin port (broker/admin/http_port.py) listens
  first, before recovery, so /health/live answers and /health/ready says 503 until
  recovery is done and the listeners serve (`ready`); its /metrics renders the
  one `BrokerMetrics` (broker/admin/metrics.py) that the partition service and every
  listener's connections count on. With admin.port -1 nothing is counted.
  The order: the listeners' TLS contexts, the bound ports (broker/net/server.py
  `BoundPort`: a busy port fails before any storage work), the admin port, the
  state files read (`StateFiles`), the data directory opened, then the object
  graph, built in one place by broker/compose.py with each object given its
  state, then the committed offsets and transaction state loaded and the ports
  served. BrokerApp keeps the life cycle; compose.py the wiring.
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
  log.flush.offset.checkpoint.interval.ms, the retention pass
  (LogManager.delete_old_segments) every log.retention.check.interval.ms and the
  removal of deleted segments' files (LogManager.delete_due_files) every second.
  All run in the executor; a failure is logged and the task carries on. Shutdown
  cancels them and then waits for the executor, so a pass in progress finishes
  before the logs close.
- The log cleaner (log.cleaner.enable) runs from startup on its own thread,
  cleaning while a compacted log qualifies and sleeping log.cleaner.backoff.ms
  otherwise; shutdown stops a clean at its next read (the cleaned group is
  discarded) before the logs close.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from broker.admin.http_port import AdminServer
from broker.admin.metrics import BrokerMetrics, CountingExecutor, MetricSources
from broker.config.broker_config import BrokerConfig
from broker.config.dynamic_broker_configs import DynamicBrokerConfigs
from broker.config.group_configs import GroupConfigs
from broker.config.keys import default_props, is_secret
from broker.core.quotas import ClientQuotas
from broker.net.bad_request_log import BadRequestLog
from broker.net.listeners import KAFKA, NATIVE, Listener
from broker.net.server import BoundPort, BrokerServer, HandshakeFailures, ServerStats, format_address, sendfile_stats
from broker.net.tls import ServerTls
from broker.state.topic_registry import Topic, TopicRegistry
from kafka_format.errors import StrataError
from storage.log_cleaner import CleanerConfig, LogCleaner
from storage.manager import LogManager
from storage.open_files import OPEN_FILES, raise_nofile_limit

from . import compose
from .compose import ListenerSetup, StateFiles
from .core import PartitionService
from .core.tiering import RESERVED_DIRS, Tiering
from .kafka.apis import KafkaApis
from .kafka.request_types import NODE_ID
from .kafka.state import KafkaState
from .native import Handlers
from .security.authorizer import Authorizer
from .security.credentials import ScramCredentialStore
from .security.principal import SslPrincipalMapper
from .security.sasl import SaslAuthenticator, listener_sasl

log = structlog.get_logger("strata.app")


class StartupError(Exception):
    """An expected startup failure; the message is one line for the user."""


class BrokerApp:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.manager: LogManager | None = None
        self.registry: TopicRegistry | None = None
        self.partitions: PartitionService | None = None
        self.handlers: Handlers | None = None
        self.server: BrokerServer | None = None
        self.kafka_server: BrokerServer | None = None  # the first Kafka listener
        self.servers: list[BrokerServer] = []  # every listener, Kafka's first (broker/net/listeners.py)
        self.listeners: list[Listener] = []
        self.kafka: KafkaApis | None = None
        self.authenticator: SaslAuthenticator | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.address: tuple[str, int] | None = None
        self.kafka_address: tuple[str, int] | None = None
        self.metrics: BrokerMetrics | None = None
        self.admin: AdminServer | None = None
        self.admin_address: tuple[str, int] | None = None
        self.ready = False  # recovery done and the listeners serving (/health/ready)
        self._stop = asyncio.Event()
        self._force = False
        self._tasks: list[asyncio.Task] = []
        self.tiering: Tiering | None = None  # tiered storage (broker/core/tiering.py)
        self.cleaner: LogCleaner | None = None
        self._cleaner_executor: ThreadPoolExecutor | None = None
        self._metric_sources: MetricSources | None = None  # what /metrics reads, once built
        self._stopped = False

    # ---- start ------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        config = self.config
        loop = asyncio.get_running_loop()
        # Bad requests of every listener, logged rate-limited (broker/net/bad_request_log.py);
        # the TLS listeners log their failed handshakes to it.
        bad_requests = BadRequestLog(structlog.get_logger("strata.handlers"), loop=loop)
        # TLS contexts first: a bad keystore fails before any work.
        setups = _listener_setups(config, bad_requests)
        open_files = _set_open_files_limit(config.max_open_files)
        if config.admin_port >= 0:
            self.metrics = BrokerMetrics(self._built)
        metrics = self.metrics
        # With metrics, the I/O threads count their jobs (broker/admin/metrics.py).
        executor_class = CountingExecutor if config.admin_port >= 0 else ThreadPoolExecutor
        self.executor = executor_class(config.num_io_threads, thread_name_prefix="strata-io")

        def blocking(fn, *args):
            return loop.run_in_executor(self.executor, fn, *args)

        kafka = any(spec.protocol == KAFKA for spec in config.listeners)
        ports: list[tuple[ListenerSetup, BoundPort]] = []
        servers: list[BrokerServer] = []
        manager: LogManager | None = None
        opened = False
        try:
            # The ports first: a busy port fails at once, before any recovery work.
            for setup in setups:
                ports.append((setup, await _bind_port(setup)))
            if config.admin_port >= 0:
                # Serving at once: /health/live answers, /health/ready says 503 during recovery.
                self.admin = AdminServer(metrics, lambda: self.ready, self._ready_detail)
                self.admin_address = await _bind(self.admin, config.host, config.admin_port)
            try:
                # The state files first (reads only): a damaged one fails the start at
                # once, before the logs are locked and recovered. Files they lack are
                # created once the directory is locked.
                state = await _read_state_files(config, blocking, kafka=kafka,
                                                remote_storage_disabled=self._remote_storage_disabled)
                registry = state.registry
                remote_config = compose.remote_log_config(config)  # a bad rsm.config.* fails before recovery
                # With tiered storage the manager leaves the remote log metadata's directory
                # alone and the retention of tiered topics to the Tiering's pass.
                tiered = remote_config.system_enable
                manager = LogManager(config.data_dir, config_for=registry.log_config,
                                     recovery_threads=config.num_recovery_threads_per_data_dir,
                                     cleaner=_cleaner_config(config),
                                     reserved_dirs=RESERVED_DIRS if tiered else frozenset(),
                                     retention_elsewhere=Tiering.is_tiered if tiered else None)
                await blocking(manager.startup, registry.owns)
                opened = True
                _log_open_files_limit(*open_files)  # after the lock: a busy data dir stays one line
                await blocking(registry.reconcile, manager)
                await blocking(registry.ensure_internal_topic, config.offsets_topic_num_partitions)
                if kafka and state.kafka_state is None:
                    state = dataclasses.replace(state, kafka_state=await blocking(KafkaState.create,
                                                                                  config.data_dir))
                self.tiering = await blocking(compose.open_tiering, config, manager, registry)
                broker = compose.build(config, loop, self.executor, metrics, manager, state, ports, self.tiering,
                                       bad_requests=bad_requests)
                servers = broker.servers
                await blocking(broker.partitions.offsets.load, manager.logs())
                if broker.transactions is not None:
                    await broker.transactions.start()
            except StrataError as e:
                raise StartupError(str(e)) from None
            except OSError as e:
                raise StartupError(f"cannot use data directory {config.data_dir}: {os_error_text(e)}"
                                   f"{ownership_hint(config.data_dir, e)}") from None
            self.partitions, self.handlers, self.kafka = broker.partitions, broker.handlers, broker.kafka
            self.authenticator = broker.authenticator
            self.listeners, self.servers = broker.listeners, servers
            by_protocol = {protocol: [s for s, listener in zip(servers, self.listeners, strict=True)
                                      if listener.spec.protocol == protocol] for protocol in (KAFKA, NATIVE)}
            self.server = by_protocol[NATIVE][0]  # config always has a native listener
            self.kafka_server = by_protocol[KAFKA][0] if by_protocol[KAFKA] else None
            self.address = self.server.address
            if self.kafka_server is not None:
                self.kafka_address = self.kafka_server.address
            # The one transition of what /metrics reads: from nothing to the built broker.
            self._metric_sources = MetricSources(
                manager=manager, offsets=broker.partitions.offsets,
                servers={(listener.spec.protocol, listener.name): server
                         for server, listener in zip(servers, self.listeners, strict=True)},
                memory=broker.memory, executor=self.executor, quotas=broker.partitions.quotas,
                tiering=self.tiering, shares=broker.shares)
            for server in servers:
                await server.start_serving()
        except BaseException:
            for _, port in ports:
                port.close()
            if self.admin is not None:
                self.admin.close()
            if self.tiering is not None:
                await blocking(self.tiering.close)
                self.tiering = None
            if manager is not None and opened:
                await blocking(manager.shutdown)
            self.executor.shutdown(wait=True)
            raise
        self.manager, self.registry, self.cleaner = manager, registry, manager.cleaner
        self._tasks = [
            loop.create_task(self._every("flush", config.flush_interval_ms, manager.flush_due)),
            loop.create_task(self._every("checkpoint", config.checkpoint_interval_ms,
                                         manager.periodic_checkpoint)),
            loop.create_task(self._every("retention", config.retention_check_interval_ms,
                                         manager.delete_old_segments)),
            # Deleted segments' files go file.delete.delay.ms later: checked every second
            # (or faster, with a faster retention check).
            loop.create_task(self._every("delete-files", min(config.retention_check_interval_ms, 1000),
                                         manager.delete_due_files)),
        ]
        if self.tiering is not None:
            # Copying, local and remote retention of tiered partitions (broker/core/tiering.py).
            self._tasks.append(loop.create_task(self._every("tiering", self.tiering.config.task_interval_ms,
                                                            self.tiering.run_pass)))
        if manager.cleaner is not None:  # log.cleaner.enable
            self._tasks.append(loop.create_task(self._clean_logs(manager.cleaner)))
        if any(listener.tls is not None for listener in self.listeners):
            self._tasks.append(loop.create_task(self._reload_certificates()))
        self.ready = True
        log.info("broker_started", address=format_address(*self.address),
                 kafka_address=format_address(*self.kafka_address) if self.kafka_address else None,
                 admin_address=format_address(*self.admin_address) if self.admin_address else None,
                 advertised=format_address(*self.kafka.advertised) if self.kafka else None,
                 listeners=[_describe(listener) for listener in self.listeners],
                 data_dir=config.data_dir,
                 topics=len(registry.names()), settings=_loggable(config.explicit()))
        return self.address

    def _remote_storage_disabled(self, topic: Topic) -> None:
        """A topic's remote.storage.enable turned off (with remote.log.delete.on.disable;
        blocking, from the topic registry): tiered storage deletes its remote data."""
        if self.tiering is not None:
            self.tiering.delete_topic(topic.name, topic.topic_id, topic.partitions)

    def _built(self) -> MetricSources | None:
        """The built broker for the metrics (broker/admin/metrics.py); None until `start` built it."""
        return self._metric_sources

    def _ready_detail(self) -> list[str]:
        """/health/ready's detail: tiered storage's copy lag and the store's state."""
        tiering = self.tiering
        if tiering is None:
            return []
        totals = tiering.totals()
        line = (f"tiered_storage partitions={totals.partitions} copy_lag_segments={totals.copy_lag_segments} "
                f"copy_lag_bytes={totals.copy_lag_bytes} remote_size_bytes={totals.remote_size_bytes} "
                f"local_size_bytes={totals.local_size_bytes} failing_partitions={totals.failing_partitions}")
        if totals.last_error:
            line += f" last_error={totals.last_error!r}"
        return [line]

    async def _every(self, name: str, interval_ms: int, work: Callable[[], object]) -> None:
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

    async def _reload_certificates(self) -> None:
        """Every ssl.reload.interval.ms: a TLS listener whose keystore or truststore
        file changed loads it again, for new connections (broker/net/tls.py)."""
        loop = asyncio.get_running_loop()
        interval = self.config.values["ssl.reload.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            for listener in self.listeners:
                if listener.tls is not None:
                    try:
                        await loop.run_in_executor(self.executor, listener.tls.reload_if_changed)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("periodic_task_failed", task="tls-reload", listener=listener.name)

    async def _clean_logs(self, cleaner: LogCleaner) -> None:
        """The log cleaner (storage/log_cleaner.py) on its own thread, so a long clean
        never holds one of the request threads: it cleans while a log qualifies, then
        sleeps log.cleaner.backoff.ms. Shutdown stops it between two reads."""
        loop = asyncio.get_running_loop()
        config = self.config
        self._cleaner_executor = ThreadPoolExecutor(1, thread_name_prefix="strata-cleaner")
        while True:
            try:
                cleaned = await loop.run_in_executor(self._cleaner_executor, cleaner.clean_once)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic_task_failed", task="cleaner")
                cleaned = False
            if not cleaned:
                await asyncio.sleep(config.cleaner_backoff_ms / 1000)

    # ---- stop -------------------------------------------------------------------------------

    def request_shutdown(self) -> None:
        if self._stop.is_set():
            self._force = True
            log.warning("shutdown_forced")
            for server in self.servers:
                for conn in list(server.connections):
                    conn.abort()
            return
        log.info("shutdown_requested")
        self.ready = False
        self._stop.set()

    async def run_until_shutdown(self) -> None:
        await self._stop.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        loop = asyncio.get_running_loop()
        timeout = 0 if self._force else self.config.shutdown_timeout_s
        self.ready = False
        await asyncio.gather(*(server.shutdown(timeout) for server in self.servers))
        if self.admin is not None:
            self.admin.close()
        if self.cleaner is not None:
            self.cleaner.shutdown()  # a clean in progress stops at its next read
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._cleaner_executor is not None:
            await loop.run_in_executor(None, self._cleaner_executor.shutdown, True)
        if self.executor is not None:
            await loop.run_in_executor(None, self.executor.shutdown, True)
        if self.tiering is not None:
            await loop.run_in_executor(None, self.tiering.close)
        if self.manager is not None:
            await loop.run_in_executor(None, self.manager.shutdown)
        if self.handlers is not None:
            self.handlers.bad_requests.close()  # counts not yet reported
        stats = self.server.stats.as_dict() if self.server is not None else {}
        kafka_stats = self.kafka_server.stats.as_dict() if self.kafka_server is not None else None
        appends = dataclasses.asdict(self.partitions.append_stats) if self.partitions is not None else None
        log.info("broker_stopped", **stats, kafka=kafka_stats, sendfile=sendfile_stats.as_dict(),
                 appends=appends)


def _cleaner_config(config: BrokerConfig) -> CleanerConfig | None:
    """The LogManager's cleaner settings; None with log.cleaner.enable false (no cleaner)."""
    if not config.cleaner_enable:
        return None
    return CleanerConfig(dedupe_buffer_size=config.cleaner_dedupe_buffer_size,
                         io_buffer_size=config.cleaner_io_buffer_size)


def _listener_setups(config: BrokerConfig, bad_requests: BadRequestLog) -> list[ListenerSetup]:
    """The configured listeners, each SSL one with its TLS context built (a bad
    keystore, truststore or TLS setting fails the start with a one-line message)
    and reporting failed handshakes to its listener's stats and `bad_requests`."""
    from broker.net.tls import settings_for
    from kafka_format.errors import InvalidConfigError

    out = []
    for spec in config.listeners:
        tls = mapper = None
        where = f"{spec.protocol} listener {spec.name}"
        stats = ServerStats()
        try:
            if spec.tls:
                tls = ServerTls(settings_for(config.values, spec.name), where,
                                on_handshake_failure=HandshakeFailures(spec.name, stats, bad_requests))
                rules = (config.values.get(f"listener.name.{spec.name.lower()}.ssl.principal.mapping.rules")
                         or config["ssl.principal.mapping.rules"])
                mapper = SslPrincipalMapper(rules)
            sasl = listener_sasl(config.values, spec.name, spec.security_protocol)
        except (InvalidConfigError, ValueError) as e:
            raise StartupError(f"invalid configuration: {e} ({where})") from None
        out.append(ListenerSetup(spec, tls, sasl=sasl, principal_mapper=mapper, stats=stats))
    return out


async def _read_state_files(config: BrokerConfig, blocking: Callable[..., Awaitable[Any]], *,
                            kafka: bool, remote_storage_disabled: Callable[[Topic], None]) -> StateFiles:
    """The state files, read only (the data directory is not locked yet): dynamic broker
    configs, the topic registry (`remote_storage_disabled`: its call when a topic stops
    being tiered), SCRAM credentials, client quotas, ACLs and, with a Kafka listener,
    group configs and the Kafka listener state."""
    broker_configs = await blocking(DynamicBrokerConfigs.open, config.data_dir, NODE_ID,
                                    config.log_props(), default_props())
    registry = TopicRegistry(config.data_dir, broker_configs.log_defaults(), num_partitions=config.num_partitions,
                             remote_storage_system_enable=config["remote.log.storage.system.enable"],
                             remote_storage_disabled=remote_storage_disabled)
    await blocking(registry.load)
    credentials = await blocking(ScramCredentialStore.open, config.data_dir)
    quotas = await blocking(lambda: ClientQuotas.open(
        config.data_dir, window_samples=config.values["quota.window.num"],
        window_seconds=config.values["quota.window.size.seconds"],
        mutation_window_samples=config.values["controller.quota.window.num"],
        mutation_window_seconds=config.values["controller.quota.window.size.seconds"]))
    authorizer = Authorizer.from_config(config.values)
    await blocking(authorizer.load, config.data_dir)
    group_configs = kafka_state = None
    if kafka:
        group_configs = await blocking(GroupConfigs.open, config.data_dir, config.values)
        kafka_state = await blocking(KafkaState.read, config.data_dir)
    return StateFiles(broker_configs, registry, credentials, quotas, authorizer, group_configs, kafka_state)


def _describe(listener: Listener) -> dict[str, str]:
    address = listener.address
    return {"name": listener.name, "protocol": listener.spec.protocol,
            "security_protocol": listener.security_protocol,
            "address": format_address(*address) if address else ""}


def _loggable(settings: dict[str, str]) -> dict[str, str]:
    """The explicit settings for the startup log, passwords and inline keys hidden."""
    return {k: "[hidden]" if is_secret(k) else v for k, v in settings.items()}


async def _bind(server: AdminServer, host: str, port: int) -> tuple[str, int]:
    try:
        return await server.bind(host, port)
    except OSError as e:
        raise _cannot_listen(host, port, e) from None


async def _bind_port(setup: ListenerSetup) -> BoundPort:
    host, port = setup.spec.host, setup.spec.port
    try:
        return await BoundPort.bind(host, port, setup.tls)
    except OSError as e:
        raise _cannot_listen(host, port, e) from None


def _cannot_listen(host: str, port: int, error: OSError) -> StartupError:
    reason = os.strerror(error.errno) if error.errno else str(error)
    return StartupError(f"cannot listen on {format_address(host, port)}: {reason}")


# ---- the process's limits and errors ----------------------------------------------------

def _set_open_files_limit(max_open_files: int) -> tuple[int, int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit and size the open-file budget
    (log.max.open.files; 0 = half the soft limit). Returns (soft before, soft, hard)."""
    limits = raise_nofile_limit()
    OPEN_FILES.set_limit(max_open_files)
    return limits


def _log_open_files_limit(soft_before: int, soft: int, hard: int) -> None:
    log.info("open_files_limit", soft=soft, hard=hard, soft_before=soft_before,
             max_open_files=OPEN_FILES.limit)
    if OPEN_FILES.limit >= soft:
        log.warning("max_open_files_above_limit", max_open_files=OPEN_FILES.limit, soft=soft,
                    hint="log.max.open.files leaves no descriptors for connections; opens may fail with EMFILE")


def os_error_text(error: OSError) -> str:
    """The error's words and the file it concerns; a directory where the broker keeps
    a file (which no write can replace) says what to do."""
    text = error.strerror or str(error)
    if error.filename is not None:
        text = f"{error.filename}: {text}"
    if isinstance(error, IsADirectoryError):
        text += " (the broker keeps a file there: move the directory away)"
    return text


def ownership_hint(data_dir: str, error: OSError) -> str:
    """For a permission error: who the broker runs as and who owns the directory (a
    bind-mounted directory keeps its host owner)."""
    if not isinstance(error, PermissionError):
        return ""
    try:
        owner = os.stat(data_dir)
    except OSError:
        return f" (the broker runs as uid {os.geteuid()})"
    return (f" (the broker runs as uid {os.geteuid()}; the directory is owned by uid "
            f"{owner.st_uid}, gid {owner.st_gid}, mode {owner.st_mode & 0o7777:o})")
