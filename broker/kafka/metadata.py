"""Metadata: this broker (node 0, the advertised host:port) leads every partition,
is the only replica and the controller.

Contract: listing all topics includes `__consumer_offsets` with is_internal (as
Kafka), leaving out the topics the connection may not DESCRIBE. Auto-creation
(v4+: allow_auto_topic_creation; v0-3: always asked) needs
auto.create.topics.enable and CREATE on the cluster or the topic; the topic is
created synchronously and listed at once (Kafka answers LEADER_NOT_AVAILABLE
until its controller has created it).
"""

from __future__ import annotations

from typing import Any

from kafka_format.errors import InvalidRequestError, StrataError
from kafka_format.topic_names import validate_topic_name

from ..core.authorization import may_create_topic
from ..security.authorizer import Op, Resource
from . import codec
from .allowed import allowed
from .authorized import CLUSTER_NAME, ResourceType
from .authorized import requested as authorized_field
from .codec import make, nested
from .core_api import CoreApiBase, E, error_code_of


class MetadataApi(CoreApiBase):
    """Metadata."""

    async def metadata(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        host, port = ctx.advertised
        node = self.apis.node_id
        brokers = (make(nested(R, "brokers"), node_id=node, host=host, port=port,
                        rack=self.config["broker.rack"]),)
        allow_auto = getattr(req, "allow_auto_topic_creation", True) and self.config.auto_create_topics
        requested = req.topics
        if requested is None or (ctx.api_version == 0 and not requested):
            # Every topic the connection may DESCRIBE; the others are left out.
            wanted: list[tuple[str | None, Any]] = [(n, None) for n in self.registry.names(include_internal=True)
                                                    if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, n)]
        else:
            wanted = [(getattr(t, "name", None), getattr(t, "topic_id", None)) for t in requested]
            if ctx.api_version < 12 and any(name is None for name, _ in wanted):
                # As Kafka: v10-11 carry topic ids but their responses cannot name an
                # unknown one (the response's name is not nullable before v12).
                raise InvalidRequestError(f"topic name can not be null for version {ctx.api_version}")
        topics = []
        for name, topic_id in wanted:
            if name is None:
                known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
                if known is None:
                    topics.append(make(TopicR, error_code=E.unknown_topic_id, name=None,
                                       topic_id=topic_id, partitions=()))
                    continue
                name = known.name
            if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                topics.append(make(TopicR, error_code=E.topic_authorization_failed, name=name,
                                   topic_id=topic_id or codec.ZERO_UUID, partitions=()))
                continue
            try:
                validate_topic_name(name)
            except StrataError as e:
                topics.append(make(TopicR, error_code=error_code_of(e), name=name, topic_id=codec.ZERO_UUID,
                                   partitions=()))
                continue
            known = self.registry.get(name)
            if known is None and allow_auto and not may_create_topic(self.partitions.authorizer, ctx.connection,
                                                                      name):
                topics.append(make(TopicR, error_code=E.topic_authorization_failed, name=name,
                                   topic_id=codec.ZERO_UUID, partitions=()))
                continue
            if known is None and allow_auto:
                try:
                    quota = self.partitions.mutation_quota(ctx.connection, ctx.client_id, strict=False)
                    await self.apis.blocking(self.partitions.auto_create_topic, name, quota)
                except StrataError as e:
                    topics.append(make(TopicR, error_code=error_code_of(e), name=name,
                                       topic_id=codec.ZERO_UUID, partitions=()))
                    continue
                known = self.registry.get(name)
            if known is None:
                topics.append(make(TopicR, error_code=E.unknown_topic_or_partition, name=name,
                                   topic_id=codec.ZERO_UUID, partitions=()))
                continue
            partitions = tuple(make(PartR, error_code=E.none, partition_index=p, leader_id=node,
                                    leader_epoch=0, replica_nodes=(node,), isr_nodes=(node,),
                                    offline_replicas=())
                               for p in range(known.partitions))
            topics.append(make(TopicR, error_code=E.none, name=name, topic_id=known.topic_id or None,
                               is_internal=known.internal, partitions=partitions,
                               topic_authorized_operations=authorized_field(
                                   getattr(req, "include_topic_authorized_operations", False),
                                   ResourceType.TOPIC, name, ctx)))
        cluster_id = self.state.cluster_id if self.state is not None else None
        return make(R, throttle_time=0, brokers=brokers, cluster_id=cluster_id, controller_id=node,
                    topics=tuple(topics), error_code=E.none,
                    cluster_authorized_operations=authorized_field(
                        getattr(req, "include_cluster_authorized_operations", False),
                        ResourceType.CLUSTER, CLUSTER_NAME, ctx))
