"""CreatePartitions (API 37, versions 0-3): grow topics as Kafka 4's controller does.

Per topic, in Kafka's order (ReplicationControlManager.createPartitions):
- a name given more than once: INVALID_REQUEST "Duplicate topic name." (answered once);
- unknown topic (or one being deleted): UNKNOWN_TOPIC_OR_PARTITION;
- a count equal to or below the current one: INVALID_PARTITIONS, Kafka's messages;
- assignments (optional, one per new partition): a number other than the increase,
  an empty replica list, a broker other than this one (node 0), a broker listed twice
  or more than one replica (the topic's replication factor is 1):
  INVALID_REPLICA_ASSIGNMENT, Kafka's messages;
- `__consumer_offsets`: INVALID_REQUEST (Kafka allows it but it moves groups to other
  partitions and so loses their offsets; Strata keeps the count fixed);
- validate_only checks all of that and changes nothing;
- controller_mutation_rate (KIP-599): the new partitions count once the topic passes
  every check (validate_only too, as Kafka's controller); from v3 a topic met with
  the client's token bucket below zero is THROTTLING_QUOTA_EXCEEDED and the others
  grow; v0-2 are accepted (Kafka's permissive quota). The answer carries the
  throttle time and the connection is muted for it after the reply.
The growth itself is TopicRegistry.add_partitions (registry written first, the new
partition logs created, nothing left behind on failure). Clients see the new
partitions in their next Metadata; consumers of a classic group then rejoin and the
leader's assignment covers them, and keyed records map by the new count.
"""

from __future__ import annotations

from broker.core.quotas import MutationQuota
from broker.kafka.allowed import allowed
from broker.kafka.codec import make, nested
from broker.kafka.request_types import ApiKey
from broker.security.authorizer import Op, Resource, TopicAuthorizationError
from kafka_format.errors import InvalidRequestError, StrataError

INVALID_REPLICA_ASSIGNMENT = 39
STRICT_SINCE_VERSION = 3  # the first version that can answer THROTTLING_QUOTA_EXCEEDED


class InvalidReplicaAssignmentError(StrataError):
    code = INVALID_REPLICA_ASSIGNMENT


class PartitionHandlers:
    def __init__(self, apis):
        self.apis = apis
        self.registry = apis.registry

    async def create_partitions(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "results")
        names = [t.name for t in req.topics]
        quota = self.apis.partitions.mutation_quota(ctx.connection, ctx.client_id,
                                                    strict=ctx.api_version >= STRICT_SINCE_VERSION)
        answered: set[str] = set()
        results = []
        for topic in req.topics:
            if topic.name in answered:
                continue
            answered.add(topic.name)
            code, message = 0, None
            try:
                if names.count(topic.name) > 1:
                    raise InvalidRequestError("Duplicate topic name.")
                if not allowed(ctx, Op.ALTER, Resource.TOPIC, topic.name):
                    raise TopicAuthorizationError("Topic authorization failed.")
                await self.apis.blocking(self._grow, topic, req.validate_only, quota)
            except StrataError as e:
                code, message = e.code, str(e)
            results.append(make(ResultR, name=topic.name, error_code=code, error_message=message))
        return make(R, throttle_time=self.apis.partitions.mutation_throttle(ctx.connection, quota),
                    results=tuple(results))

    def _grow(self, topic, validate_only: bool, quota: MutationQuota) -> None:
        """Executor side: grow the topic, its assignments checked against it, then the
        new partitions counted by the mutation quota."""
        def check(known) -> None:
            if topic.assignments is not None:
                self._check_assignments(topic, known)
            quota.record(topic.count - known.partitions)

        self.registry.add_partitions(topic.name, topic.count, validate_only=validate_only, check=check)

    def _check_assignments(self, topic, known) -> None:
        additional = topic.count - known.partitions
        if len(topic.assignments) != additional:
            raise InvalidReplicaAssignmentError(
                f"Attempted to add {additional} additional partition(s), but only "
                f"{len(topic.assignments)} assignment(s) were specified.")
        node = self.apis.node_id
        for assignment in topic.assignments:
            replicas = sorted(assignment.broker_ids)
            if not replicas:
                raise InvalidReplicaAssignmentError(
                    "The manual partition assignment includes an empty replica list.")
            previous = None
            for broker in replicas:
                if broker != node:
                    raise InvalidReplicaAssignmentError(
                        f"The manual partition assignment includes broker {broker}, but no such "
                        f"broker is registered.")
                if broker == previous:
                    raise InvalidReplicaAssignmentError(
                        f"The manual partition assignment includes the broker {broker} more than once.")
                previous = broker
            if len(replicas) != 1:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes a partition with {len(replicas)} "
                    f"replica(s), but this is not consistent with previous partitions, which have "
                    f"1 replica(s).")


def register(apis) -> None:
    apis.register(ApiKey.CREATE_PARTITIONS, PartitionHandlers(apis).create_partitions, 0, 3)
