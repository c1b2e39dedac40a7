"""The consumer-group APIs of the Kafka listener: kio requests in, kio responses out.

One coroutine per API serves every registered version (codec.make drops the fields a
version lacks). The group state machine is broker/kafka/groups/coordinator.py;
committed offsets are the shared GroupOffsets (the native COMMIT_OFFSET /
FETCH_OFFSET read and write the same map and `__consumer_offsets` records).
"""

from __future__ import annotations

import datetime
import struct
import typing
import uuid
from functools import cache
from typing import Any

from kafka_format.errors import StrataError

from ...security.authorizer import Op, Resource
from ..allowed import allowed
from ..authorized import OMITTED, ResourceType, requested
from ..codec import has_field, make, nested
from ..request_types import ApiKey
from .consumer_coordinator import ClassicJoinRequest, ConsumerGroupCoordinator
from .coordinator import GroupCoordinator
from .group import GROUP_ID_NOT_FOUND, INVALID_GROUP_ID, NON_EMPTY_GROUP, NONE, JoinResult, SyncResult

TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 29, 30, 53

# FindCoordinator key types
GROUP_KEY, TRANSACTION_KEY, SHARE_KEY = 0, 1, 2
SHARE_TYPE = "share"  # ListGroups' protocol type and group type of a share group
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_SESSION_TIMEOUT = 26
KAFKA_STORAGE_ERROR = 56
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
GROUP_SUBSCRIBED_TO_TOPIC = 86
NO_EPOCH = -1
CONSUMER_PROTOCOL = "consumer"


def millis(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


@cache
def _nullable(cls: type, name: str) -> bool:
    hint = typing.get_type_hints(cls).get(name)
    return hint is not None and type(None) in typing.get_args(hint)


def _opt(cls: type, name: str, value: str | None) -> str | None:
    """`value`, or "" where this version's field cannot be null."""
    if value is None and not _nullable(cls, name):
        return ""
    return value


def coordinator_error_code(e: StrataError) -> int:
    """What a group request answers for a failed write of the offsets log, as
    Kafka's coordinator does (CoordinatorOperationExceptionHelper): a disk error
    is NOT_COORDINATOR, which clients retry after looking the coordinator up."""
    return NOT_COORDINATOR if e.code == KAFKA_STORAGE_ERROR else e.code


def client_host(peer: Any) -> str:
    """Kafka's form of the client address: "/127.0.0.1"."""
    if isinstance(peer, (tuple, list)) and peer:
        return f"/{peer[0]}"
    return f"/{peer}" if peer else ""


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (every version starts with v0's
    version:int16, topics:[string]); None when it does not parse."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            topics.add(metadata[pos:pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


class GroupHandlers:
    def __init__(self, apis, coordinator: GroupCoordinator, consumer: ConsumerGroupCoordinator | None = None,
                 shares: Any = None):
        self.apis = apis
        self.coordinator = coordinator
        self.consumer = consumer  # the consumer-protocol groups (KIP-848), which share group ids
        # The share groups (broker/kafka/share_groups.py ShareGroups): listed, described as
        # share groups and deleted here, as Kafka's group coordinator does.
        self.shares = shares

    def _is_share_group(self, group_id: str) -> bool:
        return self.shares is not None and group_id in self.shares.share_group_ids()

    def _consumer_for(self, group_id: str) -> ConsumerGroupCoordinator | None:
        """The consumer-protocol coordinator when `group_id` is one of its groups."""
        if self.consumer is not None and self.consumer.is_consumer_group(group_id):
            return self.consumer
        return None

    def register_all(self) -> None:
        r = self.apis.register
        r(ApiKey.FIND_COORDINATOR, self.find_coordinator, 0, 6)
        r(ApiKey.JOIN_GROUP, self.join_group, 2, 9)  # Kafka 4 dropped v0-1 (KIP-896)
        r(ApiKey.SYNC_GROUP, self.sync_group, 0, 5)
        r(ApiKey.HEARTBEAT, self.heartbeat, 0, 4)
        r(ApiKey.LEAVE_GROUP, self.leave_group, 0, 5)
        r(ApiKey.OFFSET_COMMIT, self.offset_commit, 2, 10)
        r(ApiKey.OFFSET_FETCH, self.offset_fetch, 1, 10)
        r(ApiKey.LIST_GROUPS, self.list_groups, 0, 5)
        r(ApiKey.DESCRIBE_GROUPS, self.describe_groups, 0, 6)
        r(ApiKey.DELETE_GROUPS, self.delete_groups, 0, 2)
        r(ApiKey.OFFSET_DELETE, self.offset_delete, 0, 0)

    # ---- FindCoordinator ---------------------------------------------------------------------

    def _coordinator_for(self, key_type: int, ctx, key: str) -> tuple[int, str | None, int, str, int]:
        """(error, message, node id, host, port) for a key of `key_type`; as Kafka, a
        group needs DESCRIBE on it, a transactional id DESCRIBE on it."""
        if key_type == GROUP_KEY and not allowed(ctx, Op.DESCRIBE, Resource.GROUP, key):
            return GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
        if key_type == TRANSACTION_KEY and not allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, key):
            return TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
        if key_type in (GROUP_KEY, TRANSACTION_KEY):  # the transaction coordinator: broker/kafka/transactions
            host, port = ctx.advertised
            return NONE, None, self.apis.node_id, host, port
        if key_type == SHARE_KEY and self.shares is not None:  # the share coordinator: this node
            if not _share_partition_key(key):
                return INVALID_REQUEST, f"share coordinator key {key!r} is not groupId:topicId:partition", -1, "", -1
            host, port = ctx.advertised
            return NONE, None, self.apis.node_id, host, port
        if key_type == SHARE_KEY:
            return COORDINATOR_NOT_AVAILABLE, "Strata has no share group coordinator", -1, "", -1
        return INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1, "", -1

    async def find_coordinator(self, req, ctx):
        R = ctx.response_class
        key_type = getattr(req, "key_type", GROUP_KEY)
        if has_field(R, "coordinators"):  # v4+: a batch of keys
            CoordR = nested(R, "coordinators")
            out = []
            for key in req.coordinator_keys:
                error, message, node, host, port = self._coordinator_for(key_type, ctx, key)
                out.append(make(CoordR, key=key, node_id=node, host=host, port=port, error_code=error,
                                error_message=message))
            return make(R, throttle_time=0, coordinators=tuple(out))
        error, message, node, host, port = self._coordinator_for(key_type, ctx, req.key)
        return make(R, throttle_time=0, error_code=error, error_message=message, node_id=node, host=host,
                    port=port)

    # ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------

    async def _consumer_written(self) -> int:
        """Write what a classic request changed in a consumer group (NONE, or the error
        that answers the request when the write fails)."""
        assert self.consumer is not None
        try:
            await self.consumer.write()
        except StrataError as e:
            return coordinator_error_code(e)
        return NONE

    async def join_group(self, req, ctx):
        R = ctx.response_class
        MemberR = nested(R, "members")
        rebalance = millis(req.rebalance_timeout) if has_field(type(req), "rebalance_timeout") else -1
        session = millis(req.session_timeout)
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        instance_id = getattr(req, "group_instance_id", None)
        result: JoinResult | None = None
        if self.consumer is not None and req.group_id and self.consumer.has_members(req.group_id):
            # a classic member of a consumer group (Kafka 4's online migration)
            if not self.coordinator.min_session_timeout_ms <= session <= self.coordinator.max_session_timeout_ms:
                result = JoinResult(INVALID_SESSION_TIMEOUT, req.member_id)
            else:
                result = self.consumer.classic_join(ClassicJoinRequest(
                    req.group_id, req.member_id, instance_id, req.protocol_type, protocols, session,
                    rebalance if rebalance >= 0 else session, ctx.client_id or "", client_host(ctx.peer),
                    require_known_member_id=ctx.api_version >= 4))
                error = await self._consumer_written()
                if error:
                    result = JoinResult(error, req.member_id)
        elif self.consumer is not None and req.group_id:
            taken = self.consumer.take_for_classic(req.group_id)
            if taken:
                result = JoinResult(taken, req.member_id)
        if result is None:
            result = await self.coordinator.join(
                req.group_id, req.member_id, protocol_type=req.protocol_type, protocols=protocols,
                session_timeout_ms=session, rebalance_timeout_ms=rebalance, group_instance_id=instance_id,
                client_id=ctx.client_id or "", client_host=client_host(ctx.peer),
                require_known_member_id=ctx.api_version >= 4, supports_skip_assignment=ctx.api_version >= 9,
                reason=getattr(req, "reason", None))
        members = tuple(make(MemberR, member_id=mid, group_instance_id=iid, metadata=data)
                        for mid, iid, data in result.members)
        return make(R, throttle_time=0, error_code=result.error, generation_id=result.generation_id,
                    protocol_type=result.protocol_type,
                    protocol_name=_opt(R, "protocol_name", result.protocol_name), leader=result.leader,
                    skip_assignment=result.skip_assignment, member_id=result.member_id, members=members)

    async def sync_group(self, req, ctx):
        R = ctx.response_class
        instance_id = getattr(req, "group_instance_id", None)
        protocol_type, protocol_name = getattr(req, "protocol_type", None), getattr(req, "protocol_name", None)
        result: SyncResult
        if (consumer := self._consumer_for(req.group_id)) is not None:
            result = consumer.classic_sync(req.group_id, req.generation_id, req.member_id, instance_id,
                                           protocol_type, protocol_name)
        else:
            result = await self.coordinator.sync(
                req.group_id, req.generation_id, req.member_id, group_instance_id=instance_id,
                protocol_type=protocol_type, protocol_name=protocol_name,
                assignments=[(a.member_id, bytes(a.assignment)) for a in req.assignments])
        return make(R, throttle_time=0, error_code=result.error, protocol_type=result.protocol_type,
                    protocol_name=result.protocol_name, assignment=result.assignment)

    async def heartbeat(self, req, ctx):
        instance_id = getattr(req, "group_instance_id", None)
        if (consumer := self._consumer_for(req.group_id)) is not None:
            error = consumer.classic_heartbeat(req.group_id, req.generation_id, req.member_id, instance_id)
        else:
            error = self.coordinator.heartbeat(req.group_id, req.generation_id, req.member_id, instance_id)
        return make(ctx.response_class, throttle_time=0, error_code=error)

    async def leave_group(self, req, ctx):
        R = ctx.response_class
        if has_field(type(req), "members"):  # v3+
            leaving = [(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in req.members]
        else:
            leaving = [(req.member_id, None, None)]
        if (consumer := self._consumer_for(req.group_id)) is not None:
            results = consumer.classic_leave(req.group_id, leaving)
            error = await self._consumer_written()
        else:
            error, results = self.coordinator.leave(req.group_id, leaving)
        if not has_field(R, "members"):  # v0-2: the one member's error is the response's
            if error == NONE and results:
                error = results[0][2]
            return make(R, throttle_time=0, error_code=error)
        MemberR = nested(R, "members")
        return make(R, throttle_time=0, error_code=error,
                    members=tuple(make(MemberR, member_id=mid, group_instance_id=iid, error_code=code)
                                  for mid, iid, code in results))

    # ---- OffsetCommit ------------------------------------------------------------------------

    def _topic_name(self, topic, by_id: bool) -> tuple[str | None, int]:
        """(name, 0) of a request topic (by name, or by id in v10+), or (None, error)."""
        if not by_id:
            return topic.name, NONE
        known = self.apis.registry.by_id(str(topic.topic_id)) if topic.topic_id is not None else None
        if known is None:
            return None, UNKNOWN_TOPIC_ID
        return known.name, NONE

    async def offset_commit(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        by_id = ctx.api_version >= 10
        if (consumer := self._consumer_for(req.group_id)) is not None:
            group_error = consumer.validate_offset_commit(
                req.group_id, getattr(req, "member_id", ""), getattr(req, "generation_id_or_member_epoch", -1),
                ctx.api_version)
        else:
            group_error = self.coordinator.validate_offset_commit(
                req.group_id, getattr(req, "member_id", ""), getattr(req, "group_instance_id", None),
                getattr(req, "generation_id_or_member_epoch", -1), api_version=ctx.api_version)
        codes: list[list[int]] = []
        entries: list[tuple[str, int, int, str | None, int]] = []
        where: list[tuple[int, int]] = []  # (topic index, partition index) of each entry
        for ti, topic in enumerate(req.topics):
            name, topic_error = self._topic_name(topic, by_id)
            if not topic_error and not allowed(ctx, Op.READ, Resource.TOPIC, name or ""):
                topic_error = TOPIC_AUTHORIZATION_FAILED
            row = []
            for pi, part in enumerate(topic.partitions):
                code = group_error or topic_error
                if not code and name is not None:  # no error: the topic has a name
                    entries.append((name, part.partition_index, part.committed_offset, part.committed_metadata,
                                    getattr(part, "committed_leader_epoch", NO_EPOCH)))
                    where.append((ti, pi))
                row.append(code)
            codes.append(row)
        if entries:
            try:
                errors = await self.apis.blocking(self.apis.offsets.commit_many, req.group_id, entries)
            except StrataError as e:
                errors = [e] * len(entries)
            for (ti, pi), error in zip(where, errors, strict=False):
                codes[ti][pi] = coordinator_error_code(error) if error is not None else NONE
        topics = []
        for topic, row in zip(req.topics, codes, strict=True):
            parts = tuple(make(PartR, partition_index=p.partition_index, error_code=code)
                          for p, code in zip(topic.partitions, row, strict=True))
            topics.append(make(TopicR, name=getattr(topic, "name", None), topic_id=getattr(topic, "topic_id", None),
                               partitions=parts))
        return make(R, throttle_time=0, topics=tuple(topics))

    # ---- OffsetFetch -------------------------------------------------------------------------

    def _fetch_topics(self, group_id: str, topics, TopicR: type, by_id: bool, ctx) -> tuple:
        """The response topics of one group: those asked (None = every committed one
        the connection may DESCRIBE; an asked one it may not: TOPIC_AUTHORIZATION_FAILED)."""
        PartR = nested(TopicR, "partitions")
        offsets = self.apis.offsets
        registry = self.apis.registry

        def part(name: str | None, partition: int, error: int = NONE):
            found = offsets.fetch(group_id, name, partition) if name is not None and not error else None
            if found is None:
                return make(PartR, partition_index=partition, committed_offset=-1, committed_leader_epoch=NO_EPOCH,
                            metadata="", error_code=error)
            return make(PartR, partition_index=partition, committed_offset=found.offset,
                        committed_leader_epoch=found.leader_epoch, metadata=found.metadata or "", error_code=NONE)

        out = []
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for (topic, partition) in sorted(offsets.committed_for(group_id)):
                by_topic.setdefault(topic, []).append(partition)
            for name, partitions in by_topic.items():
                if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                    continue
                topic_id = None
                if by_id:
                    known = registry.get(name)
                    if known is None or not known.topic_id:
                        continue
                    topic_id = known.topic_id
                out.append(make(TopicR, name=name, topic_id=topic_id,
                                partitions=tuple(part(name, p) for p in partitions)))
            return tuple(out)
        for topic in topics:
            asked, error = self._topic_name(topic, by_id)
            if not error and not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, asked or ""):
                error = TOPIC_AUTHORIZATION_FAILED
            out.append(make(TopicR, name=getattr(topic, "name", None), topic_id=getattr(topic, "topic_id", None),
                            partitions=tuple(part(asked, p, error) for p in topic.partition_indexes)))
        return tuple(out)

    async def offset_fetch(self, req, ctx):
        R = ctx.response_class
        if has_field(R, "groups"):  # v8+: several groups
            GroupR = nested(R, "groups")
            TopicR = nested(GroupR, "topics")
            groups = []
            by_id = ctx.api_version >= 10
            for g in req.groups:
                if not g.group_id:
                    groups.append(make(GroupR, group_id=g.group_id, error_code=INVALID_GROUP_ID, topics=()))
                    continue
                if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, g.group_id):
                    groups.append(make(GroupR, group_id=g.group_id, error_code=GROUP_AUTHORIZATION_FAILED,
                                       topics=()))
                    continue
                if (consumer := self._consumer_for(g.group_id)) is not None:
                    error = consumer.validate_offset_fetch(g.group_id, getattr(g, "member_id", None),
                                                                getattr(g, "member_epoch", -1))
                    if error:
                        groups.append(make(GroupR, group_id=g.group_id, error_code=error, topics=()))
                        continue
                groups.append(make(GroupR, group_id=g.group_id, error_code=NONE,
                                   topics=self._fetch_topics(g.group_id, g.topics, TopicR, by_id, ctx)))
            return make(R, throttle_time=0, groups=tuple(groups))
        TopicR = nested(R, "topics")
        if not req.group_id:
            if has_field(R, "error_code"):
                return make(R, throttle_time=0, error_code=INVALID_GROUP_ID, topics=())
            PartR = nested(TopicR, "partitions")  # v1: no top-level error; every partition carries it
            return make(R, topics=tuple(
                make(TopicR, name=t.name, partitions=tuple(
                    make(PartR, partition_index=p, committed_offset=-1, metadata="", error_code=INVALID_GROUP_ID)
                    for p in t.partition_indexes)) for t in req.topics or ()))
        return make(R, throttle_time=0, error_code=NONE,
                    topics=self._fetch_topics(req.group_id, req.topics, TopicR, False, ctx))

    # ---- ListGroups / DescribeGroups / DeleteGroups / OffsetDelete ------------------------------

    async def list_groups(self, req, ctx):
        R = ctx.response_class
        GroupR = nested(R, "groups")
        states = getattr(req, "states_filter", ())
        types = getattr(req, "types_filter", ())
        rows = self.coordinator.list_groups(self.apis.offsets.groups(), states, types)
        if self.consumer is not None:
            rows = _with_consumer_groups(rows, self.consumer.list_groups(), states, types)
        if self.shares is not None:
            rows = _with_share_groups(rows, self.shares.list_groups(), states, types)
        # As Kafka: DESCRIBE on the cluster lists every group, else those the connection may DESCRIBE.
        if not allowed(ctx, Op.DESCRIBE, Resource.CLUSTER, "kafka-cluster"):
            rows = [row for row in rows if allowed(ctx, Op.DESCRIBE, Resource.GROUP, row[0])]
        return make(R, throttle_time=0, error_code=NONE,
                    groups=tuple(make(GroupR, group_id=gid, protocol_type=ptype, group_state=state,
                                      group_type=gtype) for gid, ptype, state, gtype in rows))

    async def describe_groups(self, req, ctx):
        R = ctx.response_class
        GroupR = nested(R, "groups")
        MemberR = nested(GroupR, "members")
        with_ops = getattr(req, "include_authorized_operations", False)
        offsets_groups = self.apis.offsets.groups()
        out = []
        for group_id in req.groups:
            if not group_id:
                out.append(make(GroupR, error_code=INVALID_GROUP_ID, error_message="group id must not be empty",
                                group_id=group_id, group_state="", protocol_type="", protocol_data="",
                                members=(), authorized_operations=OMITTED))
                continue
            if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
                out.append(make(GroupR, error_code=GROUP_AUTHORIZATION_FAILED, error_message=None,
                                group_id=group_id, group_state="", protocol_type="", protocol_data="",
                                members=(), authorized_operations=OMITTED))
                continue
            if self._consumer_for(group_id) is not None or self._is_share_group(group_id):
                # as Kafka 4: DescribeGroups describes classic groups only
                out.append(make(GroupR, error_code=GROUP_ID_NOT_FOUND if ctx.api_version >= 6 else NONE,
                                error_message=f"Group {group_id} is not a classic group."
                                if ctx.api_version >= 6 else None,
                                group_id=group_id, group_state="Dead", protocol_type="", protocol_data="",
                                members=(),
                                authorized_operations=requested(with_ops, ResourceType.GROUP, group_id, ctx)))
                continue
            d = self.coordinator.describe(group_id, group_id in offsets_groups)
            error, message = d.error, None
            if error == GROUP_ID_NOT_FOUND:
                if ctx.api_version >= 6:
                    message = f"Group {group_id} not found."
                else:
                    error = NONE  # older versions: a "Dead" group without members
            members = tuple(make(MemberR, member_id=m.member_id, group_instance_id=m.group_instance_id,
                                 client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                                 member_assignment=m.assignment) for m in d.members)
            out.append(make(GroupR, error_code=error, error_message=message, group_id=group_id,
                            group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol_data,
                            members=members,
                            authorized_operations=requested(with_ops, ResourceType.GROUP, group_id, ctx)))
        return make(R, throttle_time=0, groups=tuple(out))

    async def delete_groups(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "results")
        results = []
        for group_id in req.groups_names:
            if not group_id:
                results.append(make(ResultR, group_id=group_id, error_code=INVALID_GROUP_ID))
                continue
            if not allowed(ctx, Op.DELETE, Resource.GROUP, group_id):
                results.append(make(ResultR, group_id=group_id, error_code=GROUP_AUTHORIZATION_FAILED))
                continue
            has_offsets = group_id in self.apis.offsets.groups()
            consumer = self._consumer_for(group_id)
            if consumer is None and self._is_share_group(group_id):
                try:
                    error = await self.apis.blocking(self.shares.delete_group, group_id)
                except StrataError as e:
                    error = coordinator_error_code(e)
                results.append(make(ResultR, group_id=group_id, error_code=error))
                continue
            if consumer is not None:
                error = consumer.validate_delete(group_id)
            else:
                error = self.coordinator.validate_delete(group_id, has_offsets)
            if error == NONE:
                try:
                    if has_offsets:
                        await self.apis.blocking(self.apis.offsets.delete_group_offsets, group_id, None)
                    if consumer is not None:
                        consumer.delete(group_id)
                    else:
                        self.coordinator.delete(group_id)
                except StrataError as e:
                    error = coordinator_error_code(e)
            results.append(make(ResultR, group_id=group_id, error_code=error))
        return make(R, throttle_time=0, results=tuple(results))

    async def offset_delete(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        group_id = req.group_id
        offsets = self.apis.offsets
        group = self.coordinator.groups.get(group_id)
        has_offsets = group_id in offsets.groups()
        if not group_id:
            return make(R, error_code=INVALID_GROUP_ID, throttle_time=0, topics=())
        if not allowed(ctx, Op.DELETE, Resource.GROUP, group_id):
            return make(R, error_code=GROUP_AUTHORIZATION_FAILED, throttle_time=0, topics=())
        if group is not None and group.state == "Dead" and not has_offsets:
            return make(R, error_code=GROUP_ID_NOT_FOUND, throttle_time=0, topics=())
        subscribed: set[str] = set()
        if (consumer := self._consumer_for(group_id)) is not None:
            subscribed = consumer.subscribed_topic_names(group_id)
            group = None
        elif group is None and not has_offsets:
            return make(R, error_code=GROUP_ID_NOT_FOUND, throttle_time=0, topics=())
        if group is not None and self.coordinator.is_active(group_id):
            if group.protocol_type != CONSUMER_PROTOCOL:
                return make(R, error_code=NON_EMPTY_GROUP, throttle_time=0, topics=())
            for m in group.members.values():
                topics = subscribed_topics(m.metadata(group.protocol_name))
                if topics is None:  # cannot tell what it consumes: refuse, as for other groups
                    return make(R, error_code=NON_EMPTY_GROUP, throttle_time=0, topics=())
                subscribed |= topics
        doomed: list[tuple[str, int]] = []
        codes: list[list[int]] = []
        for topic in req.topics:
            known = self.apis.registry.get(topic.name)
            readable = allowed(ctx, Op.READ, Resource.TOPIC, topic.name)  # Kafka: READ on each topic
            row = []
            for p in topic.partitions:
                if not readable:
                    row.append(TOPIC_AUTHORIZATION_FAILED)
                elif known is None or not 0 <= p.partition_index < known.partitions:
                    row.append(UNKNOWN_TOPIC_OR_PARTITION)
                elif topic.name in subscribed:
                    row.append(GROUP_SUBSCRIBED_TO_TOPIC)
                else:
                    row.append(NONE)
                    doomed.append((topic.name, p.partition_index))
            codes.append(row)
        if doomed:
            try:
                await self.apis.blocking(offsets.delete_group_offsets, group_id, doomed)
            except StrataError as e:
                return make(R, error_code=coordinator_error_code(e), throttle_time=0, topics=())
        topics_out = tuple(
            make(TopicR, name=topic.name,
                 partitions=tuple(make(PartR, partition_index=p.partition_index, error_code=code)
                                  for p, code in zip(topic.partitions, row, strict=True)))
            for topic, row in zip(req.topics, codes, strict=True))
        return make(R, error_code=NONE, throttle_time=0, topics=topics_out)


def _with_consumer_groups(rows: list[tuple[str, str, str, str]], consumer_rows: list[tuple[str, str]],
                          states, types) -> list[tuple[str, str, str, str]]:
    """ListGroups rows of both kinds: (group id, protocol type, state, type); a consumer
    group's committed offsets do not list it again as a classic group."""
    wanted_states = {s.lower() for s in states}
    wanted_types = {t.lower() for t in types}
    consumer_ids = {gid for gid, _ in consumer_rows}
    found = {row[0]: row for row in rows if row[0] not in consumer_ids}
    if not wanted_types or CONSUMER_PROTOCOL in wanted_types:
        for gid, state in consumer_rows:
            if not wanted_states or state.lower() in wanted_states:
                found[gid] = (gid, CONSUMER_PROTOCOL, state, CONSUMER_PROTOCOL)
    return [row for _, row in sorted(found.items())]


def _share_partition_key(key: str) -> bool:
    """Whether `key` has the form of Kafka's SharePartitionKey: groupId:topicId:partition."""
    parts = key.split(":")
    if len(parts) < 3 or not ":".join(parts[:-2]):
        return False
    try:
        uuid.UUID(parts[-2])
        return int(parts[-1]) >= 0
    except ValueError:
        return False


def _with_share_groups(rows: list[tuple[str, str, str, str]], share_rows: list[tuple[str, str]],
                       states, types) -> list[tuple[str, str, str, str]]:
    """ListGroups rows with the share groups: protocol type and type "share"."""
    wanted_states = {s.lower() for s in states}
    wanted_types = {t.lower() for t in types}
    share_ids = {gid for gid, _ in share_rows}
    found = {row[0]: row for row in rows if row[0] not in share_ids}
    if not wanted_types or SHARE_TYPE in wanted_types:
        for gid, state in share_rows:
            if not wanted_states or state.lower() in wanted_states:
                found[gid] = (gid, SHARE_TYPE, state, SHARE_TYPE)
    return [row for _, row in sorted(found.items())]


__all__ = ["GroupHandlers", "client_host", "millis", "subscribed_topics"]
