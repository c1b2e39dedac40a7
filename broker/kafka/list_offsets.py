"""ListOffsets: the offsets of a timestamp, and the special timestamps.

Contract: -1 latest (the last stable offset for READ_COMMITTED), -2 earliest,
-3 the largest timestamp, -4 earliest local (= earliest), -5 latest tiered
(nothing is tiered: -1), else the first record at or after the timestamp; a topic
the connection may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka_format.errors import StrataError

from ..core import READ_COMMITTED, OffsetQuery
from ..security.authorizer import Op
from .codec import make
from .core_api import CoreApiBase, error_code_of


class ListOffsetsApi(CoreApiBase):
    """ListOffsets."""

    async def list_offsets(self, req, ctx):
        read_committed = getattr(req, "isolation_level", 0) == READ_COMMITTED

        async def answer(part, target, PartR):
            code, timestamp, offset = target.error, -1, -1
            if not code:
                try:
                    query = OffsetQuery.of(part.timestamp, read_committed=read_committed)
                    found = await self.partitions.list_offset(target.log, query)
                    if found is not None:
                        timestamp, offset = found
                except StrataError as e:
                    code = error_code_of(e)
            return make(PartR, partition_index=part.partition_index, error_code=code,
                        timestamp=timestamp, offset=offset, leader_epoch=0 if offset >= 0 else -1)

        return make(ctx.response_class, throttle_time=0,
                    topics=await self._each_partition(ctx, req.topics, answer, Op.DESCRIBE))

