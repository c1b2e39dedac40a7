"""DescribeTopicPartitions (API 75, version 0, KIP-966): topics and their partitions a
page at a time, as Kafka's DescribeTopicPartitionsRequestHandler and
KRaftMetadataCache answer it (Kafka 3.8+ tools and admin clients use it in place of
Metadata to describe topics).

- topics empty: every topic (internal ones included), unknown names never answered;
  listed topics: an unknown one is UNKNOWN_TOPIC_OR_PARTITION, a bad name
  INVALID_TOPIC_EXCEPTION. Topics go in name order, starting at the cursor's topic
  (a cursor naming a topic the list lacks, or a negative partition: INVALID_REQUEST
  for each requested topic, as Kafka's getErrorResponse).
- At most max(min(response_partition_limit, 2000), 1) partitions per answer (2000:
  Kafka's max.request.partition.size.limit default); when a topic's partitions run
  past it, next_cursor names the topic and the first partition left out; when the
  limit is used up exactly at a topic boundary, the next topic with partition 0.
- Partitions as Metadata's: node 0 leads (epoch 0) and is the only replica and ISR;
  eligible_leader_replicas and last_known_elr empty, no offline replicas. Topic
  authorized operations are always filled in (broker/kafka/authorized.py).
"""

from __future__ import annotations

from typing import Any

from kafka_format.errors import InvalidRequestError, StrataError
from kafka_format.topic_names import validate_topic_name

from ..security.authorizer import Op, Resource
from .allowed import allowed
from .authorized import OMITTED, ResourceType, authorized_operations
from .codec import make, nested
from .request_types import ApiKey

TOPIC_AUTHORIZATION_FAILED = 29

MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
UNKNOWN_TOPIC_OR_PARTITION = 3
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")  # Kafka's Topic.isInternal


class TopicPartitionHandlers:
    def __init__(self, apis):
        self.apis = apis
        self.registry = apis.registry

    async def describe_topic_partitions(self, req, ctx):
        try:
            return self._describe(req, ctx)
        except InvalidRequestError as e:
            # Kafka's getErrorResponse: each requested topic with the error, no partitions.
            TopicR = nested(ctx.response_class, "topics")
            return make(ctx.response_class, throttle_time=0, next_cursor=None, topics=tuple(
                make(TopicR, error_code=e.code, name=t.name, topic_id=None, is_internal=False, partitions=(),
                     topic_authorized_operations=_operations(t.name, ctx)) for t in req.topics))

    def _describe(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        CursorR = nested(R, "next_cursor")
        cursor = req.cursor
        start_topic = cursor.topic_name if cursor is not None else ""
        every_topic = not req.topics
        if every_topic:
            names = [n for n in self.registry.names(include_internal=True)
                     if n >= start_topic and allowed(ctx, Op.DESCRIBE, Resource.TOPIC, n)]
        else:
            names = sorted({t.name for t in req.topics if t.name >= start_topic})
            if cursor is not None and cursor.topic_name not in names:
                raise InvalidRequestError("DescribeTopicPartitionsRequest topic list should contain the "
                                          f"cursor topic: {cursor.topic_name}")
        if cursor is not None and cursor.partition_index < 0:
            raise InvalidRequestError(f"DescribeTopicPartitionsRequest cursor partition must be valid: "
                                      f"{cursor.topic_name}-{cursor.partition_index}")
        remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, req.response_partition_limit), 1)
        node = self.apis.node_id
        topics: list = []
        next_cursor: Any = None
        for name in names:
            if remaining == 0:
                next_cursor = make(CursorR, topic_name=name, partition_index=0)
                break
            known = self.registry.get(name)
            if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                topics.append(make(TopicR, error_code=TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=None,
                                   is_internal=False, partitions=(), topic_authorized_operations=OMITTED))
                continue
            if known is None:
                if not every_topic:
                    topics.append(make(TopicR, error_code=_missing_code(name), name=name, topic_id=None,
                                       is_internal=name in INTERNAL_TOPICS, partitions=(),
                                       topic_authorized_operations=_operations(name, ctx)))
                continue
            first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            upper = min(known.partitions, first + remaining)
            partitions = tuple(
                make(PartR, error_code=0, partition_index=p, leader_id=node, leader_epoch=0,
                     replica_nodes=(node,), isr_nodes=(node,), eligible_leader_replicas=(),
                     last_known_elr=(), offline_replicas=())
                for p in range(first, upper))
            topics.append(make(TopicR, error_code=0, name=name, topic_id=known.topic_id or None,
                               is_internal=known.internal, partitions=partitions,
                               topic_authorized_operations=_operations(name, ctx)))
            if upper < known.partitions:
                next_cursor = make(CursorR, topic_name=name, partition_index=upper)
                break
            remaining -= len(partitions)
        return make(R, throttle_time=0, topics=tuple(topics), next_cursor=next_cursor)


def _missing_code(name: str) -> int:
    try:
        validate_topic_name(name)
    except StrataError as e:
        return e.code
    return UNKNOWN_TOPIC_OR_PARTITION


def _operations(name: str, ctx) -> int:
    return authorized_operations(ResourceType.TOPIC, name, ctx)


def register(apis) -> None:
    apis.register(ApiKey.DESCRIBE_TOPIC_PARTITIONS, TopicPartitionHandlers(apis).describe_topic_partitions, 0, 0)
