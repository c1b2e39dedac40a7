"""Topics: CREATE_TOPIC, DELETE_TOPIC, DELETE_RECORDS and METADATA.

Contract: topic changes and record deletion run in the executor through the
partition service (the topic registry, broker/state/topic_registry.py; `remove_topic`,
`delete_records_before`); METADATA answers from memory, except creating the
missing topics it names (`PartitionService.auto_create_topic`, the Kafka
Metadata's path). With ACLs on, METADATA filters and refuses topic by topic,
for the session's connection.

Decisions where the spec is silent (Kafka's behaviour unless noted):
- METADATA with count 0 lists every topic except the internal `__consumer_offsets`
  (the native wire has no is_internal flag, and "all topics" feeds tools that
  consume everything); asking for it by name lists it, all partitions included
  (a partition not yet created reports 0/0).
- METADATA from version 2 with allowAutoTopicCreation creates missing named
  topics when auto.create.topics.enable is on. Its per-topic errors carry no
  words (the wire has no field for them); a failed auto-creation answers its
  code there.
- DELETE_RECORDS moves the log start offset (never back; -1 = the log end) and
  checkpoints it before answering; an offset past the log end (or below -1) is
  OFFSET_OUT_OF_RANGE. Whole segments below the new start are deleted right
  away (Kafka waits for the next retention pass), by retention's path.
- DELETE_TOPIC of `__consumer_offsets`: INVALID_REQUEST (internal topics cannot
  be deleted); committed offsets of a deleted topic are tombstoned.
"""

from __future__ import annotations

from broker.net.request_handlers import Reply
from kafka_format.errors import StrataError
from kafka_format.topic_names import validate_topic_name
from protocol import (
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicRequest,
    EmptyResponse,
    ErrorCode,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
    encode_response,
)

from ..core.authorization import may_create_topic
from ..security.authorizer import Op, Resource
from .base import NativeApiBase
from .session_state import NativeSession


class TopicsApi(NativeApiBase):
    """CREATE_TOPIC, DELETE_TOPIC, DELETE_RECORDS, METADATA."""

    async def create_topic(self, req: CreateTopicRequest, session: NativeSession) -> Reply:
        """controller_mutation_rate counts the partitions (permissive, as Kafka's quota
        for old request versions: the wire has no code for a refusal); over the quota
        the connection is muted after the answer (NATIVE.md rule 30)."""
        quota = self.partitions.mutation_quota(session.context, session.client_id, strict=False)
        try:
            await self.partitions.blocking(lambda: self.registry.create(req.topic, req.partitions, req.configs,
                                                                        admit=quota.record))
        finally:
            self.partitions.mutation_throttle(session.context, quota)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def delete_topic(self, req: DeleteTopicRequest, session: NativeSession) -> Reply:
        """As CREATE_TOPIC: the deleted partitions count against controller_mutation_rate."""
        quota = self.partitions.mutation_quota(session.context, session.client_id, strict=False)
        try:
            await self.partitions.remove_topic(req.topic, quota)
        finally:
            self.partitions.mutation_throttle(session.context, quota)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def metadata(self, req: MetadataRequest, session: NativeSession) -> Reply:
        """With ACLs: listing every topic lists those the connection may DESCRIBE; a
        named one it may not is TOPIC_AUTHORIZATION_FAILED; auto-creation needs CREATE
        on the cluster or the topic (as Kafka's Metadata)."""
        conn = session.context
        checked = self.authorizer.enabled
        names = req.topics or [n for n in self.registry.names()
                               if not checked or self._may(conn, Op.DESCRIBE, Resource.TOPIC, n)]
        auto_create = bool(req.topics) and req.allow_auto_topic_creation and self.config.auto_create_topics
        topics = []
        for name in names:
            if checked and not self._may(conn, Op.DESCRIBE, Resource.TOPIC, name):
                topics.append(TopicMetadata(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                validate_topic_name(name)
            except StrataError as e:
                topics.append(TopicMetadata(name, e.code))
                continue
            known = self.registry.get(name)
            if known is None and auto_create and checked and not may_create_topic(self.authorizer, conn, name):
                topics.append(TopicMetadata(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if known is None and auto_create:
                try:
                    quota = self.partitions.mutation_quota(conn, session.client_id, strict=False)
                    await self.partitions.blocking(self.partitions.auto_create_topic, name, quota)
                except StrataError as e:
                    topics.append(TopicMetadata(name, e.code))
                    continue
                known = self.registry.get(name)
            if known is None:
                topics.append(TopicMetadata(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions = []
            for partition in range(known.partitions):
                partition_log = self.partitions.live_log(name, partition)
                start, end = ((0, 0) if partition_log is None
                              else (partition_log.log_start_offset, partition_log.log_end_offset))
                partitions.append(PartitionMetadata(partition, start, end))
            topics.append(TopicMetadata(name, ErrorCode.NONE, tuple(partitions)))
        return [encode_response(MetadataResponse(ErrorCode.NONE, tuple(topics)))]


    async def delete_records(self, req: DeleteRecordsRequest, session: NativeSession) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition)
        start = await self.partitions.delete_records_before(partition_log, req.offset)
        return [encode_response(DeleteRecordsResponse(ErrorCode.NONE, start))]
