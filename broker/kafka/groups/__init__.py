"""Consumer groups on the Kafka listener: Kafka's classic group protocol and the
consumer group protocol of KIP-848 (consumer_coordinator.py, consumer_handlers.py).

`coordinators(...)` makes the broker's classic GroupCoordinator and its KIP-848
ConsumerGroupCoordinator (KafkaApis is given both: `apis.groups`,
`apis.consumer_groups`); `register(apis, coordinator, consumer)` registers the
group APIs over them and closes them when the broker begins its shutdown, so
parked JoinGroup and SyncGroup requests are answered at once. The composition
(broker/compose.py) calls both.

APIs and versions (what kio has schemas for, from Kafka 4's lower bounds: KIP-896):
    FindCoordinator 10  v0-6   this broker for every group (v4+ batches of keys);
                               transaction and share keys: COORDINATOR_NOT_AVAILABLE
    JoinGroup       11  v2-9   v4+: MEMBER_ID_REQUIRED first, as Kafka
    SyncGroup       14  v0-5
    Heartbeat       12  v0-4
    LeaveGroup      13  v0-5   v3+: several members, by member or group instance id
    OffsetCommit     8  v2-10  v10 by topic id; v6+ leader epoch stored in the value
    OffsetFetch      9  v1-10  v8+ several groups, v10 by topic id; v5+ the committed epoch
    ListGroups      16  v0-5   states (v4+) and types (v5+) filters
    DescribeGroups  15  v0-6   authorized operations when asked (broker/kafka/authorized.py)
    DeleteGroups    42  v0-2   only groups without members; tombstones their offsets
    OffsetDelete    47  v0     refused for groups with members, except topics a
                               "consumer" group is not subscribed to (as Kafka)

    ConsumerGroupHeartbeat 68 v0-1  KIP-848 (consumer_coordinator.py); online conversion of
                                    groups between the protocols: consumer_classic.py
    ConsumerGroupDescribe  69 v0-1

The classic state machine and its decisions: coordinator.py (the requests) over members.py
(joins), rebalance.py (join and sync phases, generations) and timers.py (sessions, deadlines);
a group's data (states, members, results, error codes): group.py; what the admin APIs read of
classic groups: listing.py.
The wire side: handlers.py.
Committed offsets are broker.state.group_offsets.GroupOffsets (Kafka's layout in
`__consumer_offsets`), shared with the native COMMIT_OFFSET / FETCH_OFFSET.
Settings: group.min.session.timeout.ms, group.max.session.timeout.ms,
group.initial.rebalance.delay.ms, group.max.size (broker/config/broker_config.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from broker.config.broker_config import BrokerConfig
from broker.config.group_configs import GroupConfigs
from broker.state.group_offsets import GroupOffsets
from broker.state.topic_registry import TopicRegistry

from .consumer_coordinator import ConsumerGroupCoordinator
from .consumer_handlers import ConsumerGroupHandlers
from .coordinator import GroupCoordinator
from .handlers import GroupHandlers


def coordinators(config: BrokerConfig, loop: asyncio.AbstractEventLoop, registry: TopicRegistry,
                 offsets: GroupOffsets, group_configs: GroupConfigs | None,
                 blocking: Callable[..., Awaitable[Any]]) -> tuple[GroupCoordinator, ConsumerGroupCoordinator]:
    """The classic coordinator and the consumer-protocol one (which converts groups
    between the protocols, so it is given the classic one, and writes its groups'
    records to `__consumer_offsets` through `blocking`, the executor)."""
    coordinator = GroupCoordinator.from_config(config, loop=loop)
    consumer = ConsumerGroupCoordinator(
        config, loop, lambda: _partition_counts(registry), lambda group: _group_settings(config, group_configs, group),
        classic_groups=coordinator, records=offsets.group_records, topic_id=registry.topic_id,
        topic_name=lambda topic_id: getattr(registry.by_id(topic_id), "name", None),
        write_records=lambda group_id, rows: blocking(offsets.write_records, group_id, rows))
    return coordinator, consumer


def register(apis, coordinator: GroupCoordinator, consumer: ConsumerGroupCoordinator, shares: Any = None) -> None:
    handlers = GroupHandlers(apis, coordinator, consumer, shares)
    handlers.register_all()
    ConsumerGroupHandlers(apis, consumer).register_all()
    apis.on_shutdown(coordinator.close)
    apis.on_shutdown(consumer.close)


def _partition_counts(registry: TopicRegistry) -> dict[str, int]:
    counts = {}
    for name in registry.names():
        topic = registry.get(name)
        if topic is not None:
            counts[name] = topic.partitions
    return counts


def _group_settings(config: BrokerConfig, group_configs: GroupConfigs | None, group: str) -> dict[str, int]:
    if group_configs is not None:
        return group_configs.effective(group)
    return {"consumer.session.timeout.ms": config["group.consumer.session.timeout.ms"],
            "consumer.heartbeat.interval.ms": config["group.consumer.heartbeat.interval.ms"]}


__all__ = ["ConsumerGroupCoordinator", "GroupCoordinator", "GroupHandlers", "coordinators", "register"]
