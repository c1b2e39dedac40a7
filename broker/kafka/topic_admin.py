"""Topic admin: CreateTopics, DeleteTopics, DeleteRecords.

Contract: one broker, so a topic's replication factor is 1 (or -1, the default)
and a replica assignment names only this broker; creating needs CREATE on the
cluster or the topic, deleting DELETE on the topic, DeleteRecords DELETE on the
topic. Creation and deletion go through the topic registry and the partition
service, in the executor; validate_only changes nothing.

controller_mutation_rate (KIP-599, the partition service's quota policy): each
topic's partitions count once it passes every check (a validate-only creation
too, as Kafka's controller counts it). From CreateTopics v6 / DeleteTopics v5 a
topic met with the client's token bucket below zero is refused with
THROTTLING_QUOTA_EXCEEDED and the others go ahead; older versions are accepted
(Kafka's permissive quota). Either way the answer carries the throttle time and
the connection is muted for it after the reply.
"""

from __future__ import annotations

from kafka_format.errors import InvalidRequestError, StrataError
from storage.config import LogConfig

from ..core.authorization import may_create_topic
from ..security.authorizer import Op, Resource, TopicAuthorizationError
from .allowed import allowed
from .codec import has_field, make, nested
from .configs import topic_config_source
from .core_api import CoreApiBase, E, error_code_of

# The first versions that can answer THROTTLING_QUOTA_EXCEEDED (Kafka's strictSinceVersion).
STRICT_CREATE_TOPICS = 6
STRICT_DELETE_TOPICS = 5


class TopicAdminApi(CoreApiBase):
    """CreateTopics, DeleteTopics, DeleteRecords."""

    async def create_topics(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        ConfigR = nested(TopicR, "configs") if has_field(TopicR, "configs") else None
        names = [t.name for t in req.topics]
        quota = self.partitions.mutation_quota(ctx.connection, ctx.client_id,
                                               strict=ctx.api_version >= STRICT_CREATE_TOPICS)
        results = []
        for topic in req.topics:
            message: str | None = None
            code: int = E.none
            created = None
            try:
                if names.count(topic.name) > 1:
                    raise InvalidRequestError(f"topic {topic.name!r} appears more than once in the request")
                if not may_create_topic(self.partitions.authorizer, ctx.connection, topic.name):
                    raise TopicAuthorizationError(f"not authorized to create topic {topic.name!r}")
                partitions = self._partitions_to_create(topic)
                configs = tuple((c.name, c.value) for c in topic.configs)
                created = await self.apis.blocking(self._create, topic.name, partitions, configs,
                                                   req.validate_only, quota.record)
            except StrataError as e:
                code, message = error_code_of(e), str(e)
            if code:
                results.append(make(TopicR, name=topic.name, topic_id=None, error_code=code,
                                    error_message=message, num_partitions=-1, replication_factor=-1,
                                    configs=None))
                continue
            assert created is not None
            configs_out = None
            if ConfigR is not None:
                configs_out = tuple(
                    make(ConfigR, name=k, value=v, read_only=False,
                         config_source=topic_config_source(self.apis.broker_configs, self.config, created, k),
                         is_sensitive=False)
                    for k, v in created.log_config.to_props().items())
            results.append(make(TopicR, name=topic.name, topic_id=created.topic_id or None,
                                error_code=E.none, error_message=None, num_partitions=created.partitions,
                                replication_factor=1, configs=configs_out))
        return make(R, throttle_time=self.partitions.mutation_throttle(ctx.connection, quota),
                    topics=tuple(results))

    def _partitions_to_create(self, topic) -> int:
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise InvalidRequestError("both numPartitions or replicationFactor and "
                                          "replicasAssignments were set")
            for a in topic.assignments:
                if tuple(a.broker_ids) != (self.apis.node_id,):
                    raise _InvalidReplicaAssignment(
                        f"partition {a.partition_index}: the only broker is {self.apis.node_id}")
            indexes = sorted(a.partition_index for a in topic.assignments)
            if indexes != list(range(len(indexes))):
                raise _InvalidReplicaAssignment("partitions must be numbered 0..n-1")
            return len(indexes)
        if topic.replication_factor not in (-1, 1):
            raise _InvalidReplicationFactor(
                f"replication factor {topic.replication_factor} is larger than the 1 available broker"
                if topic.replication_factor > 1 else
                "replication factor must be larger than 0, or -1 to use the default")
        return topic.num_partitions

    def _create(self, name: str, partitions: int, configs, validate_only: bool, admit):
        """Executor side; returns the Topic (what it would be with validate_only)."""
        if validate_only:
            self.registry.create(name, partitions, configs, validate_only=True, admit=admit)
            from broker.state.topic_registry import Topic
            overrides = dict(configs)
            return Topic(name, self.registry.num_partitions if partitions == -1 else partitions,
                         overrides, False, LogConfig.from_props(overrides, self.registry.defaults))
        return self.registry.create(name, partitions, configs, admit=admit)

    async def delete_topics(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "responses")
        if has_field(type(req), "topics"):
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(name, None) for name in req.topic_names]
        quota = self.partitions.mutation_quota(ctx.connection, ctx.client_id,
                                               strict=ctx.api_version >= STRICT_DELETE_TOPICS)
        results = []
        for name, topic_id in wanted:
            code: int = E.none
            message: str | None = None
            if name is None:
                known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
                if known is None:
                    results.append(make(ResultR, name=None, topic_id=topic_id, error_code=E.unknown_topic_id,
                                        error_message="unknown topic id"))
                    continue
                name = known.name
            known = self.registry.get(name)
            if not allowed(ctx, Op.DELETE, Resource.TOPIC, name):
                results.append(make(ResultR, name=name, topic_id=topic_id, error_code=E.topic_authorization_failed,
                                    error_message=None))
                continue
            try:
                await self.partitions.remove_topic(name, quota)
            except StrataError as e:
                code, message = error_code_of(e), str(e)
            results.append(make(ResultR, name=name,
                                topic_id=(known.topic_id if known is not None and known.topic_id else None),
                                error_code=code, error_message=message))
        return make(R, throttle_time=self.partitions.mutation_throttle(ctx.connection, quota),
                    responses=tuple(results))

    async def delete_records(self, req, ctx):
        async def answer(part, target, PartR):
            low, code = -1, target.error
            if not code:
                try:
                    low = await self.partitions.delete_records_before(target.log, part.offset)
                except StrataError as e:
                    code = self.partitions.error_code(e, target.log)
            return make(PartR, partition_index=part.partition_index, low_watermark=low, error_code=code)

        return make(ctx.response_class, throttle_time=0,
                    topics=await self._each_partition(ctx, req.topics, answer, Op.DELETE))


class _InvalidReplicationFactor(StrataError):
    code = 38


class _InvalidReplicaAssignment(StrataError):
    code = 39
