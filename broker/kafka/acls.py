"""ACLs on the Kafka listener: CreateAcls (30), DescribeAcls (29), DeleteAcls (31)
(versions 1-3), what `kafka-acls` and the AdminClients send, over the broker's one
authorizer (broker/security/authorizer.py); `allowed(ctx, ...)`, the check
every Kafka handler makes for its request's connection, is allowed.py. The checks
of whole requests (classic group APIs, cluster APIs, KIP-848's heartbeat, the
transaction APIs' WRITE on their transactional id) are guards (`KafkaApis.guard`)
registered here; the per-topic, per-group and per-id ones are in the handlers.

As Kafka: DescribeAcls needs DESCRIBE on the cluster (else the response's
CLUSTER_AUTHORIZATION_FAILED), CreateAcls and DeleteAcls ALTER on the cluster
(else every result CLUSTER_AUTHORIZATION_FAILED); with authorization off they
answer SECURITY_DISABLED (54). A binding that is not valid (an ANY or MATCH
pattern, an unknown operation, a principal without its type) is answered
INVALID_REQUEST with the reason, and nothing of its request is created.
"""

from __future__ import annotations

from typing import Any

from kafka_format.errors import StrataError

from ..security.authorizer import Acl, AclFilter, Authorizer, Op, Resource
from .allowed import allowed, allowed_cluster
from .codec import error_response, has_field, make, nested
from .request_types import ApiKey

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
CONSUMER_GROUP_HEARTBEAT = 68
SECURITY_DISABLED = 54
INVALID_REQUEST = 42
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
CLUSTER_DENIED = "Cluster authorization failed."


def _filter(item: Any, *, resource: str = "resource_type_filter", name: str = "resource_name_filter",
            pattern: str = "pattern_type_filter", principal: str = "principal_filter",
            host: str = "host_filter") -> AclFilter:
    return AclFilter(getattr(item, resource), getattr(item, name), getattr(item, pattern, 3),
                     getattr(item, principal), getattr(item, host), item.operation, item.permission_type)


class AclHandlers:
    def __init__(self, apis):
        self.apis = apis

    @property
    def authorizer(self) -> Authorizer:
        return self.apis.partitions.authorizer

    async def describe_acls(self, req, ctx):
        R = ctx.response_class
        if not self.authorizer.enabled:
            return make(R, throttle_time=0, error_code=SECURITY_DISABLED,
                        error_message="no authorizer is configured on the broker", resources=())
        if not allowed_cluster(ctx, Op.DESCRIBE):
            return make(R, throttle_time=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                        error_message=None, resources=())
        ResourceR = nested(R, "resources")
        AclR = nested(ResourceR, "acls")
        grouped: dict[tuple[int, str, int], list[Acl]] = {}
        for acl in self.authorizer.describe(_filter(req)):
            grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
        resources = tuple(
            make(ResourceR, resource_type=rtype, resource_name=name, pattern_type=pattern,
                 acls=tuple(make(AclR, principal=a.principal, host=a.host, operation=a.operation,
                                 permission_type=a.permission) for a in acls))
            for (rtype, name, pattern), acls in grouped.items())
        return make(R, throttle_time=0, error_code=0, error_message=None, resources=resources)

    async def create_acls(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "results")

        def every(code: int, message: str | None = None):
            return make(R, throttle_time=0, results=tuple(make(ResultR, error_code=code, error_message=message)
                                                          for _ in req.creations))
        if not self.authorizer.enabled:
            return every(SECURITY_DISABLED, "no authorizer is configured on the broker")
        if not allowed_cluster(ctx, Op.ALTER):
            return every(CLUSTER_AUTHORIZATION_FAILED)
        results: list[tuple[int, str | None]] = []
        valid = []
        for c in req.creations:
            acl = Acl(c.resource_type, c.resource_name, getattr(c, "resource_pattern_type", 3), c.principal,
                      c.host, c.operation, c.permission_type)
            try:
                acl.check()
            except StrataError as e:
                results.append((e.code, str(e)))
                continue
            valid.append(acl)
            results.append((0, None))
        if valid:
            try:
                await self.apis.blocking(self.authorizer.create, valid)
            except StrataError as e:  # the ACL file could not be written: none was created
                results = [(code, message) if code else (e.code, str(e)) for code, message in results]
        return make(R, throttle_time=0, results=tuple(make(ResultR, error_code=code, error_message=message)
                                                      for code, message in results))

    async def delete_acls(self, req, ctx):
        R = ctx.response_class
        FilterR = nested(R, "filter_results")
        MatchR = nested(FilterR, "matching_acls")
        if not self.authorizer.enabled or not allowed_cluster(ctx, Op.ALTER):
            code = SECURITY_DISABLED if not self.authorizer.enabled else CLUSTER_AUTHORIZATION_FAILED
            return make(R, throttle_time=0, filter_results=tuple(
                make(FilterR, error_code=code, error_message=None, matching_acls=()) for _ in req.filters))
        try:
            removed = await self.apis.blocking(self.authorizer.delete, [_filter(f) for f in req.filters])
        except StrataError as e:  # the ACL file could not be written: none was deleted
            return make(R, throttle_time=0, filter_results=tuple(
                make(FilterR, error_code=e.code, error_message=str(e), matching_acls=()) for _ in req.filters))
        return make(R, throttle_time=0, filter_results=tuple(
            make(FilterR, error_code=0, error_message=None, matching_acls=tuple(
                make(MatchR, error_code=0, error_message=None, resource_type=a.resource_type,
                     resource_name=a.name, pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                     operation=a.operation, permission_type=a.permission) for a in acls))
            for acls in removed))


# ---- whole-request checks (KafkaApis.guard) ---------------------------------------------------


def _group_guard(operation: Op):
    """The classic group APIs: the operation on the request's group, else the
    response's GROUP_AUTHORIZATION_FAILED."""
    def guard(req, ctx):
        if allowed(ctx, operation, Resource.GROUP, req.group_id):
            return None
        return error_response(ctx.response_class, GROUP_AUTHORIZATION_FAILED)
    return guard


def _cluster_guard(operation: Op):
    def guard(req, ctx):
        return None if allowed_cluster(ctx, operation) else error_response(ctx.response_class,
                                                                            CLUSTER_AUTHORIZATION_FAILED)
    return guard


def _offset_commit_guard(req, ctx):
    """OffsetCommit without READ on the group: every partition GROUP_AUTHORIZATION_FAILED."""
    if allowed(ctx, Op.READ, Resource.GROUP, req.group_id):
        return None
    TopicR = nested(ctx.response_class, "topics")
    PartR = nested(TopicR, "partitions")
    return make(ctx.response_class, throttle_time=0, topics=tuple(
        make(TopicR, name=getattr(t, "name", None), topic_id=getattr(t, "topic_id", None), partitions=tuple(
            make(PartR, partition_index=p.partition_index, error_code=GROUP_AUTHORIZATION_FAILED)
            for p in t.partitions)) for t in req.topics))


def _offset_fetch_guard(req, ctx):
    """OffsetFetch of one group (v1-7) without DESCRIBE on it: GROUP_AUTHORIZATION_FAILED
    (v1, without a top-level error: on every partition asked). v8+ checks each group
    in the handler."""
    R = ctx.response_class
    if has_field(R, "groups") or allowed(ctx, Op.DESCRIBE, Resource.GROUP, req.group_id):
        return None
    if has_field(R, "error_code"):
        return make(R, throttle_time=0, error_code=GROUP_AUTHORIZATION_FAILED, topics=())
    TopicR = nested(R, "topics")
    PartR = nested(TopicR, "partitions")
    return make(R, topics=tuple(make(TopicR, name=t.name, partitions=tuple(
        make(PartR, partition_index=p, committed_offset=-1, metadata="", error_code=GROUP_AUTHORIZATION_FAILED)
        for p in t.partition_indexes)) for t in req.topics or ()))


def _consumer_heartbeat_guard(req, ctx):
    """ConsumerGroupHeartbeat (KIP-848): READ on the group, DESCRIBE on every subscribed topic."""
    R = ctx.response_class
    if not allowed(ctx, Op.READ, Resource.GROUP, req.group_id):
        code = GROUP_AUTHORIZATION_FAILED
    elif any(not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name) for name in req.subscribed_topic_names or ()):
        code = TOPIC_AUTHORIZATION_FAILED
    else:
        return None
    return make(R, throttle_time=0, error_code=code, error_message=None, member_id=None, member_epoch=-1,
                heartbeat_interval=0, assignment=None)


def _elect_leaders_guard(req, ctx):
    """ElectLeaders needs ALTER on the cluster: else the top-level error and each
    partition asked CLUSTER_AUTHORIZATION_FAILED (Kafka's ElectLeadersRequest.getErrorResponse)."""
    if allowed_cluster(ctx, Op.ALTER):
        return None
    ResultR = nested(ctx.response_class, "replica_election_results")
    PartR = nested(ResultR, "partition_result")
    return make(ctx.response_class, throttle_time=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                replica_election_results=tuple(
                    make(ResultR, topic=t.topic, partition_result=tuple(
                        make(PartR, partition_id=p, error_code=CLUSTER_AUTHORIZATION_FAILED,
                             error_message=CLUSTER_DENIED) for p in t.partitions))
                    for t in req.topic_partitions or ()))


def _alter_reassignments_guard(req, ctx):
    """AlterPartitionReassignments needs ALTER on the cluster: else the top-level error and
    each partition asked CLUSTER_AUTHORIZATION_FAILED (AlterPartitionReassignmentsRequest's)."""
    if allowed_cluster(ctx, Op.ALTER):
        return None
    TopicR = nested(ctx.response_class, "responses")
    PartR = nested(TopicR, "partitions")
    return make(ctx.response_class, throttle_time=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                error_message=CLUSTER_DENIED, responses=tuple(
                    make(TopicR, name=t.name, partitions=tuple(
                        make(PartR, partition_index=p.partition_index, error_code=CLUSTER_AUTHORIZATION_FAILED,
                             error_message=CLUSTER_DENIED) for p in t.partitions))
                    for t in req.topics))


def _alter_client_quotas_guard(req, ctx):
    """AlterClientQuotas needs ALTER_CONFIGS on the cluster: else every entry
    CLUSTER_AUTHORIZATION_FAILED, as Kafka."""
    if allowed_cluster(ctx, Op.ALTER_CONFIGS):
        return None
    EntryR = nested(ctx.response_class, "entries")
    EntityR = nested(EntryR, "entity")
    return make(ctx.response_class, throttle_time=0, entries=tuple(
        make(EntryR, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=None, entity=tuple(
            make(EntityR, entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity))
        for entry in req.entries))


# ---- the transaction APIs (KafkaApis: WRITE on the transactional id first) ---------------------


def _may_write_txn(ctx, transactional_id: str) -> bool:
    return allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id)


def _init_producer_id_guard(req, ctx):
    """InitProducerId with a transactional id: WRITE on it. Without one the core
    handler checks IDEMPOTENT_WRITE on the cluster or WRITE on some topic."""
    if req.transactional_id is None or _may_write_txn(ctx, req.transactional_id):
        return None
    return make(ctx.response_class, throttle_time=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                producer_id=-1, producer_epoch=-1)


def _txn_id_guard(req, ctx):
    """AddOffsetsToTxn, EndTxn: WRITE on the transactional id (AddOffsetsToTxn's READ
    on the group is its handler's, after this one, as Kafka orders them)."""
    if _may_write_txn(ctx, req.transactional_id):
        return None
    return make(ctx.response_class, throttle_time=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                producer_id=-1, producer_epoch=-1)


def _add_partitions_to_txn_guard(req, ctx):
    """AddPartitionsToTxn v0-3 (clients): without WRITE on the transactional id every
    partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED; WRITE on each topic is the
    handler's. v4+ (the brokers' batch form): CLUSTER_ACTION on the cluster, else the
    top-level error CLUSTER_AUTHORIZATION_FAILED, as KafkaApis."""
    if ctx.api_version >= 4:
        if allowed_cluster(ctx, Op.CLUSTER_ACTION):
            return None
        return make(ctx.response_class, throttle_time=0, error_code=CLUSTER_AUTHORIZATION_FAILED,
                    results_by_transaction=())
    if _may_write_txn(ctx, req.v3_and_below_transactional_id):
        return None
    TopicR = nested(ctx.response_class, "results_by_topic_v3_and_below")
    PartR = nested(TopicR, "results_by_partition")
    by_topic: dict[str, dict[int, None]] = {}
    for topic in req.v3_and_below_topics:
        by_topic.setdefault(topic.name, {}).update(dict.fromkeys(topic.partitions))
    return make(ctx.response_class, throttle_time=0, results_by_topic_v3_and_below=tuple(
        make(TopicR, name=name, results_by_partition=tuple(
            make(PartR, partition_index=p, partition_error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            for p in partitions)) for name, partitions in by_topic.items()))


def _txn_offset_commit_guard(req, ctx):
    """TxnOffsetCommit: WRITE on the transactional id, then READ on the group; the
    first that fails is every partition's error. READ on each topic is the handler's."""
    if not _may_write_txn(ctx, req.transactional_id):
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(ctx, Op.READ, Resource.GROUP, req.group_id):
        code = GROUP_AUTHORIZATION_FAILED
    else:
        return None
    TopicR = nested(ctx.response_class, "topics")
    PartR = nested(TopicR, "partitions")
    return make(ctx.response_class, throttle_time=0, topics=tuple(
        make(TopicR, name=t.name, partitions=tuple(make(PartR, partition_index=p.partition_index, error_code=code)
                                                   for p in t.partitions)) for t in req.topics))


GUARDS = {
    ApiKey.JOIN_GROUP: _group_guard(Op.READ),
    ApiKey.SYNC_GROUP: _group_guard(Op.READ),
    ApiKey.HEARTBEAT: _group_guard(Op.READ),
    ApiKey.LEAVE_GROUP: _group_guard(Op.READ),
    ApiKey.OFFSET_COMMIT: _offset_commit_guard,
    ApiKey.OFFSET_FETCH: _offset_fetch_guard,
    CONSUMER_GROUP_HEARTBEAT: _consumer_heartbeat_guard,
    ApiKey.DESCRIBE_LOG_DIRS: _cluster_guard(Op.DESCRIBE),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster_guard(Op.DESCRIBE),
    ApiKey.ELECT_LEADERS: _elect_leaders_guard,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_reassignments_guard,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster_guard(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: _alter_client_quotas_guard,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id_guard,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn_guard,
    ApiKey.ADD_OFFSETS_TO_TXN: _txn_id_guard,
    ApiKey.END_TXN: _txn_id_guard,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit_guard,
}


def register(apis) -> None:
    for api_key, guard in GUARDS.items():
        apis.guard(api_key, guard)
    handlers = AclHandlers(apis)
    apis.register(ApiKey.DESCRIBE_ACLS, handlers.describe_acls, 1, 3)
    apis.register(ApiKey.CREATE_ACLS, handlers.create_acls, 1, 3)
    apis.register(ApiKey.DELETE_ACLS, handlers.delete_acls, 1, 3)


__all__ = ["AclHandlers", "register"]
