"""The share-group offsets APIs (KIP-932) on the Kafka listener, at Kafka 4.2's versions:
DescribeShareGroupOffsets (90, v0-1), AlterShareGroupOffsets (91, v0) and
DeleteShareGroupOffsets (92, v0), over the state `ShareGroups` (share_groups.py) keeps.
Alter and delete need a share group without members, as Kafka's; authorization is
DESCRIBE (describe) or READ/DELETE on the group and READ/DESCRIBE on each topic.
"""

from __future__ import annotations

import uuid

from kafka_format.errors import StrataError

from ..security.authorizer import Op, Resource
from ..share.errors import (
    GROUP_AUTHORIZATION_FAILED,
    GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP,
    ShareError,
)
from ..share.session import TopicIdPartition
from .allowed import allowed
from .codec import make, nested

TOPIC_AUTHORIZATION_FAILED = 29
UNKNOWN_SERVER_ERROR = -1


class ShareGroupOffsets:
    """DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets."""

    def __init__(self, shares) -> None:
        self.shares = shares  # share_groups.ShareGroups: groups, state store, manager

    # ---- DescribeShareGroupOffsets ---------------------------------------------------------

    async def describe_offsets(self, req, ctx):
        R = ctx.response_class
        G = nested(R, "groups")
        T = nested(G, "topics")
        P = nested(T, "partitions")
        await self.shares.ready()
        out = []
        for group in req.groups:
            if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group.group_id):
                out.append(make(G, group_id=group.group_id, topics=(), error_code=GROUP_AUTHORIZATION_FAILED,
                                error_message="Group authorization failed."))
                continue
            if group.topics is None:
                wanted: dict[str, list[int]] = {}
                for key in self.shares.store.keys(group.group_id):
                    name = self.shares.topic_name(key.topic_id)
                    if name is not None:
                        wanted.setdefault(name, []).append(key.partition)
            else:
                wanted = {t.topic_name: list(t.partitions) for t in group.topics}
            topics = []
            for name, parts in sorted(wanted.items()):
                info = self.shares.topic_info(name)
                rows = []
                for index in sorted(parts):
                    if info is None or not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                        code = 3 if info is None else TOPIC_AUTHORIZATION_FAILED
                        rows.append(make(P, partition_index=index, start_offset=-1, leader_epoch=-1, lag=-1,
                                         error_code=code, error_message=None))
                        continue
                    try:
                        stored, lag = await self.shares.apis.blocking(self.shares.manager.summary, group.group_id,
                                                               TopicIdPartition(info.topic_id, index))
                    except (ShareError, StrataError, OSError) as e:
                        code = e.code if isinstance(e, ShareError) else getattr(e, "code", UNKNOWN_SERVER_ERROR)
                        rows.append(make(P, partition_index=index, start_offset=-1, leader_epoch=-1, lag=-1,
                                         error_code=int(code), error_message=str(e)))
                        continue
                    rows.append(make(P, partition_index=index,
                                     start_offset=-1 if stored is None else stored.start_offset,
                                     leader_epoch=-1 if stored is None else stored.leader_epoch, lag=lag,
                                     error_code=0, error_message=None))
                topics.append(make(T, topic_name=name, topic_id=info.topic_id if info else uuid.UUID(int=0),
                                   partitions=tuple(rows)))
            out.append(make(G, group_id=group.group_id, topics=tuple(topics), error_code=0, error_message=None))
        return make(R, throttle_time=0, groups=tuple(out))

    # ---- AlterShareGroupOffsets / DeleteShareGroupOffsets --------------------------------

    def _offsets_refusal(self, ctx, group_id: str, operation: int) -> ShareError | None:
        """Kafka's checks of both: READ on the group, a share group, and no members."""
        if not allowed(ctx, operation, Resource.GROUP, group_id):
            return ShareError(GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
        group = self.shares.groups.get(group_id)
        if group is not None and not group.deleted and group.members:
            return ShareError(NON_EMPTY_GROUP, f"share group {group_id} has members")
        return None

    async def alter_offsets(self, req, ctx):
        R = ctx.response_class
        T = nested(R, "responses")
        P = nested(T, "partitions")
        await self.shares.ready()
        refused = self._offsets_refusal(ctx, req.group_id, Op.READ)
        if refused is not None:
            return make(R, throttle_time=0, error_code=refused.code, error_message=refused.message, responses=())
        out = []
        for topic in req.topics:
            info = self.shares.topic_info(topic.topic_name)
            rows = []
            for part in topic.partitions:
                code, message = 0, None
                if info is None:
                    code = 3
                elif not allowed(ctx, Op.READ, Resource.TOPIC, topic.topic_name):
                    code = TOPIC_AUTHORIZATION_FAILED
                elif not 0 <= part.partition_index < info.partitions:
                    code = 3
                else:
                    try:
                        await self.shares.apis.blocking(self.shares.manager.alter_start_offset, req.group_id,
                                                 TopicIdPartition(info.topic_id, part.partition_index),
                                                 part.start_offset)
                    except ShareError as e:
                        code, message = e.code, e.message
                    except StrataError as e:
                        code, message = int(e.code), str(e)
                rows.append(make(P, partition_index=part.partition_index, error_code=code, error_message=message))
            out.append(make(T, topic_name=topic.topic_name, topic_id=info.topic_id if info else uuid.UUID(int=0),
                            partitions=tuple(rows)))
        self.shares.group(req.group_id)
        return make(R, throttle_time=0, error_code=0, error_message=None, responses=tuple(out))

    async def delete_offsets(self, req, ctx):
        R = ctx.response_class
        T = nested(R, "responses")
        await self.shares.ready()
        refused = self._offsets_refusal(ctx, req.group_id, Op.DELETE)
        if refused is not None:
            return make(R, throttle_time=0, error_code=refused.code, error_message=refused.message, responses=())
        if req.group_id not in self.shares.share_group_ids():
            return make(R, throttle_time=0, error_code=GROUP_ID_NOT_FOUND,
                        error_message=f"Group {req.group_id} not found.", responses=())
        out = []
        for topic in req.topics:
            info = self.shares.topic_info(topic.topic_name)
            code, message = 0, None
            if info is None:
                code = 3
            elif not allowed(ctx, Op.READ, Resource.TOPIC, topic.topic_name):
                code = TOPIC_AUTHORIZATION_FAILED
            else:
                for key in self.shares.store.keys(req.group_id):
                    if key.topic_id == info.topic_id:
                        await self.shares.apis.blocking(self.shares.manager.delete_state, req.group_id,
                                                 TopicIdPartition(key.topic_id, key.partition))
            out.append(make(T, topic_name=topic.topic_name, topic_id=info.topic_id if info else uuid.UUID(int=0),
                            error_code=code, error_message=message))
        return make(R, throttle_time=0, error_code=0, error_message=None, responses=tuple(out))


__all__ = ["ShareGroupOffsets"]
