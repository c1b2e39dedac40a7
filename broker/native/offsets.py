"""OFFSETS (a partition's offsets by time), COMMIT_OFFSET and FETCH_OFFSET (a group's
committed offsets).

Contract: OFFSETS asks the core's offset lookup (`PartitionService.list_offset`,
the log's `fetch_offset_by_timestamp`: the log ends from memory, a timestamp in
the executor); commits go to the
executor, fetching a committed offset is answered from memory (GroupOffsets,
broker/state/group_offsets.py, shared with the Kafka listener's OffsetCommit/OffsetFetch).

Decisions where the spec is silent (Kafka's behaviour unless noted):
- OFFSETS: a time below -2 (Kafka's newer special timestamps) is INVALID_REQUEST;
  at most one offset is returned, so maxNumber >= 1 means "that offset".
- COMMIT_OFFSET: the topic and partition must exist (UNKNOWN_TOPIC_OR_PARTITION);
  an empty group is Kafka's INVALID_GROUP_ID (24) and metadata over
  offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE (12): codes outside the
  spec's table, taken from Kafka. FETCH_OFFSET of anything never committed
  answers -1/null with NONE, as Kafka's OffsetFetch does.
"""

from __future__ import annotations

from broker.net.request_handlers import Reply
from kafka_format.errors import InvalidRequestError
from kafka_format.topic_names import validate_topic_name
from protocol import (
    CommitOffsetRequest,
    EmptyResponse,
    ErrorCode,
    FetchOffsetRequest,
    FetchOffsetResponse,
    OffsetsRequest,
    OffsetsResponse,
    encode_response,
)

from ..core import OffsetQuery
from .base import NativeApiBase
from .session_state import NativeSession


class OffsetsApi(NativeApiBase):
    """OFFSETS, COMMIT_OFFSET, FETCH_OFFSET."""

    async def offsets_request(self, req: OffsetsRequest, session: NativeSession) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition)
        if req.time < OffsetsRequest.EARLIEST:
            raise InvalidRequestError(f"time {req.time} is neither -1, -2 nor a timestamp")
        if req.max_number <= 0:
            offsets: tuple[int, ...] = ()
        else:
            found = await self.partitions.list_offset(partition_log, OffsetQuery.of(req.time))
            offsets = () if found is None else (found.offset,)
        return [encode_response(OffsetsResponse(ErrorCode.NONE, offsets))]

    async def commit_offset(self, req: CommitOffsetRequest, session: NativeSession) -> Reply:
        await self.partitions.blocking(self.offsets.commit, req.group, req.topic, req.partition, req.offset,
                             req.metadata)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def fetch_offset(self, req: FetchOffsetRequest, session: NativeSession) -> Reply:
        validate_topic_name(req.topic)
        found = self.offsets.fetch(req.group, req.topic, req.partition)
        if found is None:
            return [encode_response(FetchOffsetResponse(ErrorCode.NONE, -1, None))]
        return [encode_response(FetchOffsetResponse(ErrorCode.NONE, found.offset, found.metadata))]
