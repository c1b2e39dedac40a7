"""ConsumerGroupHeartbeat (API 68, v0-1) and ConsumerGroupDescribe (API 69, v0-1):
kio requests in, kio responses out, over ConsumerGroupCoordinator.

A regex subscription (v1's subscribed_topic_regex) is assigned only the matching
topics the heartbeat's principal may DESCRIBE (`_may_describe`, Kafka 4's
filterTopicDescribeAuthorizedTopics); subscribed topic names it may not describe
are refused whole (TOPIC_AUTHORIZATION_FAILED, the guard in ../acls.py).

Partitions travel by topic id on the wire and by topic name in the coordinator;
owned partitions of topics that no longer exist are dropped. In v1 the client
names itself (librdkafka 2.x and the Java client send v1); a v0 join with an empty
member id gets one from the broker (a random Kafka Uuid string), as in Kafka.

Group records: a heartbeat is answered once the records it changed are in
`__consumer_offsets` (`flush`, one writer at a time so the log keeps the order of
the changes); a failed write answers NOT_COORDINATOR (clients look the
coordinator up and heartbeat again, and the records are written with the next
change). Changes made by timers and deletions are flushed by a task.
"""

from __future__ import annotations

import base64
import functools
import os
import uuid
from collections.abc import Callable, Iterable

import structlog

from kafka_format.errors import StrataError

from ...security.authorizer import Op, Resource
from ..allowed import allowed
from ..authorized import ResourceType, requested
from ..codec import make, nested
from .assignors import Partition
from .consumer_coordinator import GROUP_ID_NOT_FOUND, ConsumerGroupCoordinator
from .consumer_group import DEAD
from .consumer_heartbeat import HeartbeatRequest
from .handlers import client_host, coordinator_error_code, millis

GROUP_AUTHORIZATION_FAILED = 30
TOPIC_AUTHORIZATION_FAILED = 29
TOPICS_HIDDEN = "The described group uses topics that the client is not authorized to describe."

log = structlog.get_logger("strata.kafka.consumer_groups")

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
INVALID_GROUP_ID = 24


class ConsumerGroupHandlers:
    def __init__(self, apis, coordinator: ConsumerGroupCoordinator):
        self.apis = apis
        self.coordinator = coordinator

    async def flush(self) -> None:
        """Write the records of every changed group (raises StrataError when a write fails)."""
        await self.coordinator.write()

    def register_all(self) -> None:
        self.apis.register(CONSUMER_GROUP_HEARTBEAT, self.heartbeat, 0, 1)
        self.apis.register(CONSUMER_GROUP_DESCRIBE, self.describe, 0, 1)

    # ---- topic ids -----------------------------------------------------------------------------

    def _names(self, topic_partitions) -> set[Partition] | None:
        if topic_partitions is None:
            return None
        owned: set[Partition] = set()
        for tp in topic_partitions:
            known = self.apis.registry.by_id(str(tp.topic_id)) if tp.topic_id is not None else None
            if known is not None:
                owned.update((known.name, int(p)) for p in tp.partitions)
        return owned

    def _by_topic(self, partitions: Iterable[Partition]) -> list[tuple[str, uuid.UUID, tuple[int, ...]]]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        out = []
        for topic in sorted(by_topic):
            topic_id = self.apis.registry.topic_id(topic)
            if topic_id:
                out.append((topic, uuid.UUID(topic_id), tuple(sorted(by_topic[topic]))))
        return out

    # ---- ConsumerGroupHeartbeat ----------------------------------------------------------------

    async def heartbeat(self, req, ctx):
        R = ctx.response_class
        names = req.subscribed_topic_names
        member_id = req.member_id
        if ctx.api_version == 0 and not member_id and req.member_epoch == 0:
            member_id = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        result = self.coordinator.heartbeat(HeartbeatRequest(
            group_id=req.group_id, member_id=member_id, member_epoch=req.member_epoch,
            instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=millis(req.rebalance_timeout),
            subscribed_names=tuple(names) if names is not None else None,
            subscribed_regex=getattr(req, "subscribed_topic_regex", None), server_assignor=req.server_assignor,
            owned=self._names(req.topic_partitions), client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer), may_describe=self._may_describe(ctx)))
        try:
            await self.flush()
        except StrataError as e:
            return make(R, throttle_time=0, error_code=coordinator_error_code(e), error_message=str(e),
                        member_id=None, member_epoch=-1, heartbeat_interval=0, assignment=None)
        assignment = None
        if result.assignment is not None:
            AssignmentR = nested(R, "assignment")
            TopicR = nested(AssignmentR, "topic_partitions")
            assignment = make(AssignmentR, topic_partitions=tuple(
                make(TopicR, topic_id=topic_id, partitions=parts)
                for _, topic_id, parts in self._by_topic(result.assignment)))
        return make(R, throttle_time=0, error_code=result.error, error_message=result.message,
                    member_id=result.member_id, member_epoch=result.member_epoch,
                    heartbeat_interval=result.heartbeat_interval_ms, assignment=assignment)

    def _may_describe(self, ctx) -> Callable[[str], bool] | None:
        """Whether the heartbeat's connection may DESCRIBE a topic: a regex subscription
        gets only those of its matches (Kafka's filterTopicDescribeAuthorizedTopics);
        None without authorization. The ACLs are consulted at each use, so a change
        applies at the member's next heartbeat."""
        authorizer = self.apis.partitions.authorizer
        if not authorizer.enabled:
            return None
        return functools.partial(authorizer.authorize, ctx.connection, Op.DESCRIBE, Resource.TOPIC)

    # ---- ConsumerGroupDescribe -----------------------------------------------------------------

    async def describe(self, req, ctx):
        R = ctx.response_class
        GroupR = nested(R, "groups")
        MemberR = nested(GroupR, "members")
        AssignmentR = nested(MemberR, "assignment")
        TopicR = nested(AssignmentR, "topic_partitions")

        def assignment(partitions):
            return make(AssignmentR, topic_partitions=tuple(
                make(TopicR, topic_id=topic_id, topic_name=name, partitions=parts)
                for name, topic_id, parts in self._by_topic(partitions)))

        out = []
        for group_id in req.group_ids:
            if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
                out.append(make(GroupR, error_code=GROUP_AUTHORIZATION_FAILED, error_message=None, group_id=group_id,
                                group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                                authorized_operations=requested(False, ResourceType.GROUP, group_id)))
                continue
            group = self.coordinator.groups.get(group_id)
            if group is None:
                kind = "consumer" if not group_id or not self._is_classic(group_id) else None
                message = (f"Group {group_id} not found." if kind else f"Group {group_id} is not a consumer group.")
                out.append(make(GroupR, error_code=INVALID_GROUP_ID if not group_id else GROUP_ID_NOT_FOUND,
                                error_message=message, group_id=group_id, group_state=DEAD, group_epoch=-1,
                                assignment_epoch=-1, assignor_name="", members=(),
                                authorized_operations=requested(False, ResourceType.GROUP, group_id)))
                continue
            members = tuple(
                make(MemberR, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                     member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                     subscribed_topic_names=m.subscribed_names, subscribed_topic_regex=m.subscribed_regex,
                     assignment=assignment(m.assigned), target_assignment=assignment(group.target.get(m.member_id, ())),
                     member_type=0 if m.classic is not None else 1)  # KIP-1099: 0 classic, 1 consumer
                for m in group.members.values())
            # Kafka (KAFKA-18813): a group whose assignments name a topic the caller may not
            # DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED, without its description.
            topics = {t.topic_name for m in members for a in (m.assignment, m.target_assignment)
                      for t in a.topic_partitions}
            if any(not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name) for name in topics):
                out.append(make(GroupR, error_code=TOPIC_AUTHORIZATION_FAILED, error_message=TOPICS_HIDDEN,
                                group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1,
                                assignor_name="", members=(),
                                authorized_operations=requested(False, ResourceType.GROUP, group_id)))
                continue
            out.append(make(GroupR, error_code=0, error_message=None, group_id=group_id, group_state=group.state,
                            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                            assignor_name=group.assignor_name or self.coordinator.assignor_names[0], members=members,
                            authorized_operations=requested(req.include_authorized_operations, ResourceType.GROUP,
                                                            group_id, ctx)))
        return make(R, throttle_time=0, groups=tuple(out))

    def _is_classic(self, group_id: str) -> bool:
        classic = self.coordinator.classic
        if classic is not None:
            group = classic.groups.get(group_id)
            if group is not None and group.state != DEAD:
                return True
        return group_id in self.apis.offsets.groups()


__all__ = ["ConsumerGroupHandlers"]
