"""DescribeProducers (API 61, version 0): each partition's active producers,
from the partition's producer state (storage/producer_state.py), as Kafka's
UnifiedLog.activeProducers answers: producer id, epoch, last sequence, last
timestamp, coordinator epoch (-1 until a marker) and the first offset of the
producer's open transaction (-1: none).

Errors, as KafkaApis.handleDescribeProducersRequest, in its order: a bad topic
name INVALID_TOPIC_EXCEPTION, no READ on the topic TOPIC_AUTHORIZATION_FAILED, an
unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION (error_message null: Kafka
leaves generic messages out).
"""

from __future__ import annotations

from kafka_format.errors import StrataError, UnknownTopicOrPartitionError
from kafka_format.topic_names import validate_topic_name

from ..security.authorizer import Op, Resource, TopicAuthorizationError
from .allowed import allowed
from .codec import make, nested
from .request_types import ApiKey


class ProducerHandlers:
    def __init__(self, apis):
        self.apis = apis

    async def describe_producers(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        StateR = nested(PartR, "active_producers")
        topics = []
        for topic in req.topics:
            topic_error = 0
            try:
                validate_topic_name(topic.name)
                if not allowed(ctx, Op.READ, Resource.TOPIC, topic.name):
                    raise TopicAuthorizationError("Topic authorization failed.")
                if self.apis.registry.get(topic.name) is None:
                    raise UnknownTopicOrPartitionError()
            except StrataError as e:
                topic_error = e.code
            parts = []
            for index in topic.partition_indexes:
                code, states = topic_error, ()
                if not code:
                    try:
                        partition_log = await self.apis.log_for(topic.name, index)
                        states = tuple(
                            make(StateR, producer_id=pid, producer_epoch=entry.epoch,
                                 last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                                 coordinator_epoch=entry.coordinator_epoch,
                                 current_txn_start_offset=entry.current_txn_first_offset)
                            for pid, entry in self.apis.partitions.active_producers(partition_log))
                    except StrataError as e:
                        code = e.code
                parts.append(make(PartR, partition_index=index, error_code=code, error_message=None,
                                  active_producers=states))
            topics.append(make(TopicR, name=topic.name, partitions=tuple(parts)))
        return make(R, throttle_time=0, topics=tuple(topics))


def register(apis) -> None:
    apis.register(ApiKey.DESCRIBE_PRODUCERS, ProducerHandlers(apis).describe_producers, 0, 0)
