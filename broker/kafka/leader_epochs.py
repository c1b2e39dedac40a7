"""OffsetForLeaderEpoch (API 23, versions 2-4): the leader epoch history of a broker
that has led every partition since offset 0 in epoch 0 (every appended batch is
stamped with partition leader epoch 0, and Metadata answers leader epoch 0).

Kafka's answer (Partition.lastOffsetForLeaderEpoch over LeaderEpochFileCache
.endOffsetFor) with the history {epoch 0 starts at the log start offset}:
- current_leader_epoch -1: not checked; below 0 FENCED_LEADER_EPOCH; above 0
  UNKNOWN_LEADER_EPOCH (then leader_epoch and end_offset are -1);
- leader_epoch 0: (0, log end offset), so a consumer that read epoch-0 batches finds
  no truncation; -1 (undefined) and any epoch above 0: (-1, -1); below -1: (that
  epoch, the log start offset), the start of the first epoch above it.
- unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION. replica_id is not
  checked (this broker is every partition's leader).
"""

from __future__ import annotations

from kafka_format.errors import StrataError

from ..security.authorizer import Op, Resource, TopicAuthorizationError
from .allowed import allowed, allowed_cluster
from .codec import make, nested
from .request_types import ApiKey

LEADER_EPOCH = 0
UNDEFINED = -1
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


def end_offset_for(requested: int, log_start: int, log_end: int) -> tuple[int, int]:
    """(epoch, end offset) for a requested epoch: Kafka's LeaderEpochFileCache.endOffsetFor."""
    if requested == UNDEFINED or requested > LEADER_EPOCH:
        return UNDEFINED, UNDEFINED
    if requested == LEADER_EPOCH:
        return LEADER_EPOCH, log_end
    return requested, log_start


class LeaderEpochHandlers:
    def __init__(self, apis):
        self.apis = apis

    async def offset_for_leader_epoch(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        topics = []
        # Kafka: CLUSTER_ACTION on the cluster (the replicas' right) covers every topic;
        # else DESCRIBE on each (KIP-320's consumers).
        every = allowed_cluster(ctx, Op.CLUSTER_ACTION)
        for topic in req.topics:
            parts = []
            permitted = every or allowed(ctx, Op.DESCRIBE, Resource.TOPIC, topic.topic)
            for part in topic.partitions:
                code, epoch, end = 0, UNDEFINED, UNDEFINED
                current = part.current_leader_epoch
                try:
                    if not permitted:
                        raise TopicAuthorizationError("Topic authorization failed.")
                    partition_log = await self.apis.log_for(topic.topic, part.partition)
                except StrataError as e:
                    code = e.code
                else:
                    if current != UNDEFINED and current < LEADER_EPOCH:
                        code = FENCED_LEADER_EPOCH
                    elif current > LEADER_EPOCH:
                        code = UNKNOWN_LEADER_EPOCH
                    else:
                        epoch, end = end_offset_for(part.leader_epoch, partition_log.log_start_offset,
                                                    partition_log.log_end_offset)
                parts.append(make(PartR, error_code=code, partition=part.partition, leader_epoch=epoch,
                                  end_offset=end))
            topics.append(make(TopicR, topic=topic.topic, partitions=tuple(parts)))
        return make(R, throttle_time=0, topics=tuple(topics))


def register(apis) -> None:
    apis.register(ApiKey.OFFSET_FOR_LEADER_EPOCH, LeaderEpochHandlers(apis).offset_for_leader_epoch, 2, 4)
