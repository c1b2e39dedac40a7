"""ElectLeaders (API 43, versions 0-2), AlterPartitionReassignments (API 45, versions
0-1) and ListPartitionReassignments (API 46, version 0), answered as Kafka 4's
controller (ReplicationControlManager) answers them for a cluster of one broker,
node 0, the only replica and leader of every partition:

- ElectLeaders: every existing partition already has its preferred (and a live)
  leader: ELECTION_NOT_NEEDED (message null). Unknown topic or partition:
  UNKNOWN_TOPIC_OR_PARTITION with Kafka's message. topic_partitions null (all
  partitions): every topic is answered with no partitions, since Kafka leaves out
  the partitions that need no election. An election type other than 0 (preferred)
  or 1 (unclean): INVALID_REQUEST for the whole request.
- AlterPartitionReassignments: replicas [0] is the current assignment, so nothing
  changes (NONE); an empty list, an unknown broker or a broker listed twice is
  INVALID_REPLICA_ASSIGNMENT (Kafka's validateManualPartitionAssignment messages);
  replicas null (cancel) is NO_REASSIGNMENT_IN_PROGRESS; unknown topic or partition
  UNKNOWN_TOPIC_OR_PARTITION with Kafka's messages.
- ListPartitionReassignments: no reassignment is ever in progress: no topics.
"""

from __future__ import annotations

from kafka_format.errors import InvalidRequestError

from .codec import make, nested
from .request_types import ApiKey

PREFERRED, UNCLEAN = 0, 1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REPLICA_ASSIGNMENT = 39
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85


class ReplicaHandlers:
    def __init__(self, apis):
        self.apis = apis
        self.registry = apis.registry

    def _partition_error(self, topic: str, partition: int, *, reassign: bool) -> tuple[int, str | None]:
        """(UNKNOWN_TOPIC_OR_PARTITION, Kafka's message) or (0, None) for an existing partition."""
        count = self.registry.partitions(topic)
        if count is None:
            return UNKNOWN_TOPIC_OR_PARTITION, (f"Unable to find a topic named {topic}." if reassign
                                                else f"No such topic as {topic}")
        if not 0 <= partition < count:
            return UNKNOWN_TOPIC_OR_PARTITION, (f"Unable to find partition {topic}:{partition}." if reassign
                                                else f"No such partition as {topic}-{partition}")
        return 0, None

    async def elect_leaders(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "replica_election_results")
        PartR = nested(ResultR, "partition_result")
        election = getattr(req, "election_type", PREFERRED)
        if election not in (PREFERRED, UNCLEAN):
            raise InvalidRequestError(f"Unknown election type {election}")
        results = []
        if req.topic_partitions is None:
            for name in self.registry.names(include_internal=True):
                results.append(make(ResultR, topic=name, partition_result=()))
        else:
            for topic in req.topic_partitions:
                parts = []
                for partition in topic.partitions:
                    code, message = self._partition_error(topic.topic, partition, reassign=False)
                    parts.append(make(PartR, partition_id=partition, error_code=code or ELECTION_NOT_NEEDED,
                                      error_message=message))
                results.append(make(ResultR, topic=topic.topic, partition_result=tuple(parts)))
        return make(R, throttle_time=0, error_code=0, replica_election_results=tuple(results))

    async def alter_partition_reassignments(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "responses")
        PartR = nested(TopicR, "partitions")
        topics = []
        for topic in req.topics:
            parts = []
            for part in topic.partitions:
                code, message = self._partition_error(topic.name, part.partition_index, reassign=True)
                if not code:
                    code, message = self._check_replicas(part.replicas)
                parts.append(make(PartR, partition_index=part.partition_index, error_code=code,
                                  error_message=message))
            topics.append(make(TopicR, name=topic.name, partitions=tuple(parts)))
        return make(R, throttle_time=0, error_code=0, error_message=None, responses=tuple(topics),
                    allow_replication_factor_change=getattr(req, "allow_replication_factor_change", True))

    def _check_replicas(self, replicas) -> tuple[int, str | None]:
        if replicas is None:
            return NO_REASSIGNMENT_IN_PROGRESS, None
        if not replicas:
            return INVALID_REPLICA_ASSIGNMENT, ("The manual partition assignment includes an empty "
                                                "replica list.")
        previous = None
        for broker in sorted(replicas):
            if broker != self.apis.node_id:
                return INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes broker "
                                                    f"{broker}, but no such broker is registered.")
            if broker == previous:
                return INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes the broker "
                                                    f"{broker} more than once.")
            previous = broker
        return 0, None

    async def list_partition_reassignments(self, req, ctx):
        return make(ctx.response_class, throttle_time=0, error_code=0, error_message=None, topics=())


def register(apis) -> None:
    handlers = ReplicaHandlers(apis)
    apis.register(ApiKey.ELECT_LEADERS, handlers.elect_leaders, 0, 2)
    apis.register(ApiKey.ALTER_PARTITION_REASSIGNMENTS, handlers.alter_partition_reassignments, 0, 1)
    apis.register(ApiKey.LIST_PARTITION_REASSIGNMENTS, handlers.list_partition_reassignments, 0, 0)
