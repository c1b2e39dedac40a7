"""The composition root: the broker's object graph, built in order, each object given
what it needs when it is made.

`build(...)` runs once the listening ports are bound, the state files read and the data
directory open (BrokerApp.start, broker/app.py, keeps that order and the life cycle):
the partition service both protocols share, the SASL authenticator, the listeners, the
native handlers, the Kafka side (`build_kafka`), and one BrokerServer per listener.
`build_kafka` makes the Kafka listener's coordinators and KafkaApis, then calls every
Kafka API module's `register` in order (a later module's key replaces an earlier one's:
the transaction handlers' InitProducerId replaces the core's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import structlog

from broker.admin.metrics import BrokerMetrics, camel_name
from broker.config.broker_config import BrokerConfig
from broker.config.dynamic_broker_configs import DynamicBrokerConfigs
from broker.config.group_configs import GroupConfigs
from broker.core.quotas import ClientQuotas
from broker.kafka import create_partitions
from broker.net.bad_request_log import BadRequestLog
from broker.net.connection_limits import ConnectionLimits
from broker.net.connection_rates import ConnectionRates
from broker.net.listeners import KAFKA, ConnectionContext, Listener, ListenerSpec
from broker.net.request_handlers import PerConnection, RequestHandlers
from broker.net.request_memory import RequestMemory
from broker.net.server import BoundPort, BrokerServer
from broker.state.topic_registry import TopicRegistry
from protocol import RequestType
from storage.manager import LogManager
from storage.remote.config import RemoteLogConfig

from .core import PartitionService
from .core.tiering import Tiering
from .kafka import (
    acls,
    client_quotas,
    cluster,
    groups,
    leader_epochs,
    log_dirs,
    producers,
    replicas,
    sasl,
    share_groups,
    telemetry,
    topic_partitions,
    transactions,
)
from .kafka import handlers as core_handlers
from .kafka.apis import KafkaApis
from .kafka.producer_ids import ProducerIdAllocator
from .kafka.request_types import ApiKey
from .kafka.state import KafkaState
from .kafka.transactions import TransactionCoordinator
from .native import Handlers
from .security.authorizer import Authorizer
from .security.credentials import ScramCredentialStore
from .security.sasl import SaslAuthenticator


@dataclass(frozen=True)
class ListenerSetup:
    """A configured listener checked before anything starts: its TLS contexts
    (broker.net.tls.ServerTls), SASL settings and SSL principal mapper."""

    spec: ListenerSpec
    tls: Any = None
    sasl: Any = None
    principal_mapper: Any = None


@dataclass(frozen=True)
class StateFiles:
    """The state files as read before the data directory is locked (the Kafka ones only
    with a Kafka listener); `kafka_state` is created once it is locked, when missing."""

    broker_configs: DynamicBrokerConfigs
    registry: TopicRegistry
    credentials: ScramCredentialStore
    quotas: ClientQuotas
    authorizer: Authorizer
    group_configs: GroupConfigs | None = None
    kafka_state: KafkaState | None = None


@dataclass(frozen=True)
class Broker:
    """What `build` made."""

    partitions: PartitionService
    bad_requests: BadRequestLog
    authenticator: SaslAuthenticator
    listeners: list[Listener]
    handlers: Handlers  # the native protocol's
    kafka: KafkaApis | None  # None without a Kafka listener
    transactions: TransactionCoordinator | None
    servers: list[BrokerServer]  # one per listener, in `listeners`' order
    memory: RequestMemory
    tiering: Tiering | None = None  # with remote.log.storage.system.enable


def remote_log_config(config: BrokerConfig) -> RemoteLogConfig:
    """The broker's remote.log.* and rsm.config.* settings (storage/remote/config.py).
    Raises InvalidConfigError."""
    return RemoteLogConfig.from_props(config.values)


def open_tiering(config: BrokerConfig, manager: LogManager, registry: TopicRegistry) -> Tiering | None:
    """Tiered storage (broker/core/tiering.py), blocking: the remote log metadata and
    the remote store client, after the data directory is open; None when
    remote.log.storage.system.enable is false. The LogManager leaves the metadata's
    directory alone (`reserved_dirs`, set before its startup) and skips the
    retention of tiered topics, which the Tiering's pass runs."""
    remote = remote_log_config(config)
    if not remote.system_enable:
        return None
    tiering = Tiering.open(remote, config.data_dir, manager, registry.topic_id)
    manager.retention_elsewhere = tiering.retention_elsewhere
    registry.remote_storage_disabled = lambda topic: tiering.delete_topic(topic.name, topic.topic_id,
                                                                          topic.partitions)
    return tiering


def build(config: BrokerConfig, loop: asyncio.AbstractEventLoop, executor: Executor,
          metrics: BrokerMetrics | None, manager: LogManager, state: StateFiles,
          ports: list[tuple[ListenerSetup, BoundPort]], tiering: Tiering | None = None) -> Broker:
    partitions = PartitionService(config, manager, state.registry, executor, loop, metrics=metrics,
                                  authorizer=state.authorizer, quotas=state.quotas, tiering=tiering)
    # Bad requests of both listeners, logged rate-limited (broker/net/bad_request_log.py).
    bad_requests = BadRequestLog(structlog.get_logger("strata.handlers"), loop=loop)
    # SASL, broker-wide: the SCRAM credentials, the failure delay and the failed-login
    # log; each SASL_* listener points at it.
    authenticator = SaslAuthenticator(loop, bad_requests, config["connection.failed.authentication.delay.ms"],
                                      store=state.credentials)
    listeners = [Listener(setup.spec, setup.tls, address=port.address, sasl=setup.sasl,
                          authenticator=authenticator if setup.sasl is not None else None,
                          principal_mapper=setup.principal_mapper) for setup, port in ports]
    handlers = Handlers(partitions, bad_requests, listeners)
    kafka = txn = None
    kafka_closed: Callable[[ConnectionContext], None] | None = None
    kafka_listeners = [listener for listener in listeners if listener.spec.protocol == KAFKA]
    if kafka_listeners:
        assert state.kafka_state is not None
        # The native listeners as bound, in native.advertised.listeners' form: what DescribeConfigs
        # says of that key when it is not set, so a client that reached the Kafka listener finds
        # a native listener that took any free port (broker/cli/addresses.py).
        native_bound = ",".join(f"{listener.name}://{':'.join(map(str, listener.described))}"
                                for listener in listeners if listener.spec.protocol != KAFKA)
        kafka, txn, kafka_closed = build_kafka(partitions, bad_requests, advertised=kafka_listeners[0].advertised,
                                 native_bound=native_bound, state=state.kafka_state, group_configs=state.group_configs,
                                 broker_configs=state.broker_configs, authenticator=authenticator)
    # One memory pool, one set of connection limits and one bad-request log for
    # both listeners (Kafka's queued.max.request.bytes and ConnectionQuotas are
    # broker-wide).
    memory = RequestMemory(config.queued_max_request_bytes)
    connection_limits = ConnectionLimits(config.max_connections, config.max_connections_per_ip,
                                         config.max_connections_per_ip_overrides)
    connection_rates = ConnectionRates(
        partitions.ip_connection_quota, config.values["max.connection.creation.rate"],
        config.listener_connection_rates([listener.name for listener in listeners]),
        window_samples=config.values["quota.window.num"],
        window_seconds=config.values["quota.window.size.seconds"])
    native_stats = kafka_stats = None
    if metrics is not None:
        native_stats = metrics.requests_for("native", {t.value: camel_name(t.name) for t in RequestType})
        kafka_stats = metrics.requests_for("kafka", {k.value: camel_name(k.name) for k in ApiKey})

    def server_for(listener: Listener, port: BoundPort) -> BrokerServer:
        api: RequestHandlers | PerConnection = handlers
        stats = native_stats
        closed = None
        if kafka is not None and listener.spec.protocol == KAFKA:
            api, stats, closed = kafka, kafka_stats, kafka_closed
        return BrokerServer(api, listener=listener, port=port, request_stats=stats,
                            max_frame_bytes=config.socket_request_max_bytes,
                            max_queued_requests=config.max_queued_requests,
                            write_buffer_high=config.write_buffer_high, bad_requests=bad_requests,
                            memory=memory, limits=connection_limits, rates=connection_rates,
                            idle_ms=config.connections_max_idle_ms, on_connection_closed=closed)

    servers = [server_for(listener, port) for listener, (_, port) in zip(listeners, ports, strict=True)]
    return Broker(partitions, bad_requests, authenticator, listeners, handlers, kafka, txn, servers, memory,
                  tiering)


def build_kafka(partitions: PartitionService, bad_requests: BadRequestLog, *, advertised: tuple[str, int],
                native_bound: str, state: KafkaState, group_configs: GroupConfigs | None,
                broker_configs: DynamicBrokerConfigs | None,
                authenticator: SaslAuthenticator | None
                ) -> tuple[KafkaApis, TransactionCoordinator, Callable[[ConnectionContext], None]]:
    """The Kafka listener's request handling: its coordinators, KafkaApis and every API
    module's handlers, registered in order; and what the listener's server calls when a
    connection closes (its share sessions end)."""
    classic_groups, consumer_groups = groups.coordinators(partitions.config, partitions.loop, partitions.registry,
                                                          partitions.offsets, group_configs, partitions.blocking)
    apis = KafkaApis(partitions, bad_requests, advertised=advertised, native_bound=native_bound, state=state,
                     group_configs=group_configs,
                     broker_configs=broker_configs, authenticator=authenticator, groups=classic_groups,
                     consumer_groups=consumer_groups)
    producer_ids = ProducerIdAllocator(state, partitions.blocking)
    coordinator = TransactionCoordinator(apis, producer_ids.next_producer_id)
    core = core_handlers.register(apis, producer_ids=producer_ids, transactions=coordinator)
    # Share groups (KIP-932): the share-state store and SharePartitionManager live in
    # ShareGroups; the groups APIs list, describe and delete share groups through it.
    shares = share_groups.ShareGroups(apis)
    if partitions.metrics is not None:
        partitions.metrics.attach(shares=shares)  # the share-group metrics (broker/metrics.py)
    groups.register(apis, classic_groups, consumer_groups, shares)
    transactions.register(apis, coordinator, init_producer_id=core.init_producer_id)
    cluster.register(apis)
    create_partitions.register(apis)
    log_dirs.register(apis)
    producers.register(apis)
    leader_epochs.register(apis)
    replicas.register(apis)
    topic_partitions.register(apis)
    telemetry.register(apis)
    sasl.register(apis)
    client_quotas.register(apis)
    acls.register(apis)
    share_groups.register(apis, shares)
    return apis, coordinator, shares.connection_closed


__all__ = ["Broker", "ListenerSetup", "StateFiles", "build", "build_kafka", "open_tiering", "remote_log_config"]
