"""The composition root: the broker's object graph, built in order, each object given
what it needs when it is made.

`build(...)` runs once the listening ports are bound, the state files read and the data
directory open (BrokerApp.start, broker/app.py, keeps that order and the life cycle):
the partition service both protocols share, the SASL authenticator, the listeners, the
native handlers, the Kafka side (`build_kafka`), and one BrokerServer per listener.
The broker's BadRequestLog and each listener's ServerStats are made before it, with the
listeners' TLS contexts, which report failed handshakes to them (`_listener_setups`,
broker/app.py). Nothing here sets an attribute on an object after making it.
`build_kafka` makes the Kafka listener's coordinators and KafkaApis, then calls every
Kafka API module's `register` in order (a later module's key replaces an earlier one's:
the transaction handlers' InitProducerId replaces the core's).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from broker.admin.metrics import BrokerMetrics, camel_name
from broker.config.broker_config import BrokerConfig
from broker.config.dynamic_broker_configs import DynamicBrokerConfigs
from broker.config.group_configs import GroupConfigs
from broker.core.quotas import ClientQuotas
from broker.kafka import create_partitions
from broker.net.bad_request_log import BadRequestLog
from broker.net.connection_limits import ConnectionLimits
from broker.net.connection_rates import ConnectionRates
from broker.net.listeners import KAFKA, Listener, ListenerSpec
from broker.net.request_handlers import PerConnection, RequestHandlers
from broker.net.request_memory import RequestMemory
from broker.net.server import BoundPort, BrokerServer, ServerStats
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
    (broker.net.tls.ServerTls), SASL settings and SSL principal mapper, and the
    counters its BrokerServer keeps (made first: its TLS counts failed handshakes)."""

    spec: ListenerSpec
    tls: Any = None
    sasl: Any = None
    principal_mapper: Any = None
    stats: ServerStats = field(default_factory=ServerStats)


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
    shares: share_groups.ShareGroups | None = None  # with a Kafka listener (its share-group metrics)


def remote_log_config(config: BrokerConfig) -> RemoteLogConfig:
    """The broker's remote.log.* and rsm.config.* settings (storage/remote/config.py).
    Raises InvalidConfigError."""
    return RemoteLogConfig.from_props(config.values)


def open_tiering(config: BrokerConfig, manager: LogManager, registry: TopicRegistry) -> Tiering | None:
    """Tiered storage (broker/core/tiering.py), blocking: the remote log metadata and
    the remote store client, after the data directory is open; None when
    remote.log.storage.system.enable is false. The LogManager, made with tiered
    storage in mind (broker/app.py: `reserved_dirs`, `retention_elsewhere`), leaves
    the metadata's directory alone and the retention of tiered topics to the
    Tiering's pass."""
    remote = remote_log_config(config)
    if not remote.system_enable:
        return None
    return Tiering.open(remote, config.data_dir, manager, registry.topic_id)


def build(config: BrokerConfig, loop: asyncio.AbstractEventLoop, executor: Executor,
          metrics: BrokerMetrics | None, manager: LogManager, state: StateFiles,
          ports: list[tuple[ListenerSetup, BoundPort]], tiering: Tiering | None = None, *,
          bad_requests: BadRequestLog) -> Broker:
    """`bad_requests`: the bad requests of every listener, logged rate-limited
    (broker/net/bad_request_log.py); made first, as the TLS listeners log failed
    handshakes to it."""
    partitions = PartitionService(config, manager, state.registry, executor, loop, metrics=metrics,
                                  authorizer=state.authorizer, quotas=state.quotas, tiering=tiering)
    # SASL, broker-wide: the SCRAM credentials, the failure delay and the failed-login
    # log; each SASL_* listener points at it.
    authenticator = SaslAuthenticator(loop, bad_requests, config["connection.failed.authentication.delay.ms"],
                                      store=state.credentials)
    listeners = [Listener(setup.spec, setup.tls, address=port.address, sasl=setup.sasl,
                          authenticator=authenticator if setup.sasl is not None else None,
                          principal_mapper=setup.principal_mapper) for setup, port in ports]
    handlers = Handlers(partitions, bad_requests, listeners)
    kafka = txn = shares = None
    kafka_listeners = [listener for listener in listeners if listener.spec.protocol == KAFKA]
    if kafka_listeners:
        assert state.kafka_state is not None
        # The native listeners as bound, in native.advertised.listeners' form: what DescribeConfigs
        # says of that key when it is not set, so a client that reached the Kafka listener finds
        # a native listener that took any free port (broker/cli/addresses.py).
        native_bound = ",".join(f"{listener.name}://{':'.join(map(str, listener.described))}"
                                for listener in listeners if listener.spec.protocol != KAFKA)
        kafka, txn, shares = build_kafka(partitions, bad_requests, advertised=kafka_listeners[0].advertised,
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

    def server_for(listener: Listener, setup: ListenerSetup, port: BoundPort) -> BrokerServer:
        api: RequestHandlers | PerConnection = handlers
        stats = native_stats
        closed = None
        if kafka is not None and listener.spec.protocol == KAFKA:
            api, stats = kafka, kafka_stats
            closed = shares.connection_closed if shares is not None else None
        return BrokerServer(api, listener=listener, port=port, request_stats=stats,
                            max_frame_bytes=config.socket_request_max_bytes,
                            max_queued_requests=config.max_queued_requests,
                            write_buffer_high=config.write_buffer_high, bad_requests=bad_requests,
                            memory=memory, limits=connection_limits, rates=connection_rates,
                            idle_ms=config.connections_max_idle_ms, stats=setup.stats,
                            on_connection_closed=closed)

    servers = [server_for(listener, setup, port) for listener, (setup, port) in zip(listeners, ports, strict=True)]
    return Broker(partitions, bad_requests, authenticator, listeners, handlers, kafka, txn, servers, memory,
                  tiering, shares)


def build_kafka(partitions: PartitionService, bad_requests: BadRequestLog, *, advertised: tuple[str, int],
                native_bound: str, state: KafkaState, group_configs: GroupConfigs | None,
                broker_configs: DynamicBrokerConfigs | None,
                authenticator: SaslAuthenticator | None
                ) -> tuple[KafkaApis, TransactionCoordinator, share_groups.ShareGroups]:
    """The Kafka listener's request handling: its coordinators, KafkaApis and every API
    module's handlers, registered in order; with the share groups (their metrics, and
    `connection_closed`, which the listener's servers call when a connection closes)."""
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
    return apis, coordinator, shares


__all__ = ["Broker", "ListenerSetup", "StateFiles", "build", "build_kafka", "open_tiering", "remote_log_config"]
