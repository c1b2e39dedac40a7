"""ListOffsets: the offsets of a timestamp, and the special timestamps.

Contract: -1 latest (the last stable offset for READ_COMMITTED), -2 earliest,
-3 the largest timestamp, -4 earliest local (= earliest), -5 latest tiered
(nothing is tiered: -1), else the first record at or after the timestamp; a topic
the connection may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka_format.errors import StrataError
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from storage.max_timestamp import max_timestamp_offset

from ..core import READ_COMMITTED
from ..security.authorizer import Op
from .codec import make
from .core_api import CoreApiBase, error_code_of

# ListOffsets special timestamps (Kafka's ListOffsetsRequest)
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class ListOffsetsApi(CoreApiBase):
    """ListOffsets."""

    async def list_offsets(self, req, ctx):
        isolation_level = getattr(req, "isolation_level", 0)

        async def answer(part, target, PartR):
            code, timestamp, offset = target.error, -1, -1
            if not code:
                try:
                    timestamp, offset = await self._offset_for(target.log, part.timestamp, isolation_level)
                except StrataError as e:
                    code = error_code_of(e)
            return make(PartR, partition_index=part.partition_index, error_code=code,
                        timestamp=timestamp, offset=offset, leader_epoch=0 if offset >= 0 else -1)

        return make(ctx.response_class, throttle_time=0,
                    topics=await self._each_partition(ctx, req.topics, answer, Op.DESCRIBE))

    async def _offset_for(self, partition_log: Log, timestamp: int, isolation_level: int) -> tuple[int, int]:
        """(timestamp, offset) for a ListOffsets timestamp: -1 latest (the last stable
        offset for READ_COMMITTED), -2 earliest, -3 the largest timestamp, -4 earliest
        local (= earliest), -5 latest tiered (nothing is tiered: -1), else the first
        record at or after the timestamp."""
        if timestamp == LATEST_TIMESTAMP:
            if isolation_level == READ_COMMITTED:
                return -1, self.partitions.last_stable_offset(partition_log)
            return -1, partition_log.log_end_offset
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return -1, partition_log.log_start_offset
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1
        if timestamp == MAX_TIMESTAMP:
            found = await self.apis.blocking(max_timestamp_offset, partition_log)
            return (-1, -1) if found is None else (found.timestamp, found.offset)
        found = await self.apis.blocking(partition_log.offset_for_timestamp, timestamp)
        return (-1, -1) if found is None else (found.timestamp, found.offset)
