"""The Kafka admin requests the `groups`, `log-dirs` and `configs` subcommands send.

Contract: `KafkaAdmin(address, security)` sends each request as one kio-encoded Kafka request
to the broker's Kafka listener at "HOST:PORT" (kafka_call.py) and returns plain
Python values. Committed offsets are one map, `__consumer_offsets`, for groups of
both protocols (native COMMIT_OFFSET and Kafka's OffsetCommit), so ListGroups,
OffsetFetch, OffsetCommit and DeleteGroups cover native groups as well.
DescribeGroups describes classic groups only (a KIP-848 consumer-protocol group is
"Dead" to it), so `describe_group` asks ConsumerGroupDescribe about a group
DescribeGroups calls Dead, as Kafka's admin client asks both. A request
or partition error is a CliError naming the error code (and the broker's message
when it sends one); `delete_groups` returns its per-group errors instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i64

from . import CliError
from .kafka_call import kafka_call

LATEST, EARLIEST = -1, -2  # ListOffsets timestamps
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # DescribeConfigs resource types
SET_OP, DELETE_OP = 0, 1  # IncrementalAlterConfigs operations
NO_EPOCH = -1
CONSUMER_PROTOCOL = "consumer"
DEAD = "Dead"
CONFIG_SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                  4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                  8: "GROUP_CONFIG"}

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: str  # Kafka's ConfigSource name


@dataclass(frozen=True)
class TopicConfig:
    name: str
    value: str | None
    source: str  # Kafka's ConfigSource name: DYNAMIC_TOPIC_CONFIG for a topic's override
    synonyms: tuple[Synonym, ...] = ()  # every layer that sets it, the one in effect first (when asked for)


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str | None  # Kafka's text form of the id (Uuid.toString); None for the zero id
    partitions: tuple[PartitionInfo, ...]


def kafka_uuid(value) -> str | None:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64 without padding; None for zero."""
    import base64

    if value is None or not value.int:
        return None
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


@dataclass(frozen=True)
class Group:
    group_id: str
    state: str
    protocol_type: str
    members: tuple[Member, ...]


def _name(code: ErrorCode) -> str:
    return code.name.upper()


def _check(code: ErrorCode, what: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        raise CliError(f"{what}: {_name(code)}" + (f": {message}" if message else ""))


def consumer_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a ConsumerProtocolAssignment (version:int16, then v0's
    fields, which every version starts with); () when it does not parse."""
    from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment

    if len(data) < 2:
        return ()
    try:
        assignment, _ = entity_reader(ConsumerProtocolAssignment)(data, 2)
    except (ValueError, struct.error, UnicodeDecodeError, IndexError):
        return ()
    return tuple((t.topic, p) for t in assignment.assigned_partitions for p in t.partitions)


class KafkaAdmin:
    def __init__(self, address: str, security: dict[str, str] | None = None, timeout: float = 30.0):
        self.address = address
        self.security = security  # --command-config's settings (TLS, SASL)
        self.timeout = timeout  # seconds to wait for each answer

    def call(self, request):
        return kafka_call(self.address, request, self.timeout, security=self.security)

    # ---- groups ------------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, sorted by id."""
        from kio.schema.list_groups.v4.request import ListGroupsRequest

        response = self.call(ListGroupsRequest(states_filter=()))
        _check(response.error_code, "list groups")
        return sorted((g.group_id, g.protocol_type, g.group_state) for g in response.groups)

    def describe_group(self, group_id: str) -> Group:
        """The group, classic or consumer-protocol; state "Dead" when it is neither."""
        from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

        response = self.call(DescribeGroupsRequest(groups=(GroupId(group_id),), include_authorized_operations=False))
        (described,) = response.groups
        _check(described.error_code, f"describe group {group_id!r}")
        if described.group_state == DEAD and not described.members:
            found = self.describe_consumer_group(group_id)
            if found is not None:
                return found
        consumer = described.protocol_type == CONSUMER_PROTOCOL
        members = tuple(Member(m.member_id, m.client_id, m.client_host,
                               consumer_assignment(m.member_assignment) if consumer else ())
                        for m in described.members)
        return Group(group_id, described.group_state, described.protocol_type, members)

    def describe_consumer_group(self, group_id: str) -> Group | None:
        """A consumer-protocol group (KIP-848) through ConsumerGroupDescribe; None when
        the group is not one (GROUP_ID_NOT_FOUND)."""
        from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest

        response = self.call(ConsumerGroupDescribeRequest(group_ids=(GroupId(group_id),),
                                                          include_authorized_operations=False))
        (described,) = response.groups
        if described.error_code == ErrorCode.group_id_not_found:
            return None
        _check(described.error_code, f"describe group {group_id!r}", described.error_message)
        members = tuple(Member(m.member_id, m.client_id, m.client_host,
                               tuple((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions))
                        for m in described.members)
        return Group(group_id, described.group_state, CONSUMER_PROTOCOL, members)

    def committed(self, group_id: str) -> dict[TopicPartition, int]:
        """Every offset the group has committed, whichever protocol committed it."""
        from kio.schema.offset_fetch.v7.request import OffsetFetchRequest

        response = self.call(OffsetFetchRequest(group_id=GroupId(group_id), topics=None, require_stable=False))
        _check(response.error_code, f"fetch the offsets of group {group_id!r}")
        out = {}
        for topic in response.topics:
            for p in topic.partitions:
                _check(p.error_code, f"fetch the offset of {topic.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[(topic.name, p.partition_index)] = p.committed_offset
        return out

    def commit(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit as an admin (no member, generation -1): the broker takes it only
        while the group has no active members."""
        from kio.schema.offset_commit.v8 import request as oc

        by_topic: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(oc.OffsetCommitRequestPartition(
                partition_index=i32(partition), committed_offset=i64(offset), committed_leader_epoch=i32(NO_EPOCH),
                committed_metadata=""))
        request = oc.OffsetCommitRequest(
            group_id=GroupId(group_id), generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
            topics=tuple(oc.OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps))
                         for t, ps in by_topic.items()))
        response = self.call(request)
        for topic in response.topics:
            for p in topic.partitions:
                _check(p.error_code, f"commit the offset of {topic.name}-{p.partition_index} for group {group_id!r}")

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

        response = self.call(DeleteGroupsRequest(groups_names=tuple(GroupId(g) for g in group_ids)))
        return {r.group_id: r.error_code for r in response.results}

    # ---- topics and offsets ------------------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

        response = self.call(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
                                             allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        (found,) = response.topics
        _check(found.error_code, f"topic {topic!r}")
        return len(found.partitions)

    def describe_topics(self, topics: list[str]) -> dict[str, TopicInfo]:
        """Kafka's Metadata of the named topics: id, and each partition's leader, replicas
        and in-sync replicas; a topic Kafka's Metadata does not know is left out."""
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

        response = self.call(MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        return {t.name: TopicInfo(t.name, kafka_uuid(t.topic_id), tuple(sorted(
                    (PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
                     for p in t.partitions), key=lambda p: p.partition)))
                for t in response.topics if t.error_code == ErrorCode.none and t.name is not None}

    def list_offsets(self, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """Kafka's ListOffsets for each partition: LATEST (the log end), EARLIEST (the log
        start) or a timestamp in ms (the first offset at or after it, -1 when none)."""
        from kio.schema.list_offsets.v7 import request as lo

        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = lo.ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
            lo.ListOffsetsTopic(name=TopicName(topic), partitions=tuple(
                lo.ListOffsetsPartition(partition_index=i32(p), current_leader_epoch=i32(NO_EPOCH),
                                        timestamp=i64(timestamp))
                for p in ps))
            for topic, ps in by_topic.items()))
        out = {}
        for topic in self.call(request).topics:
            for p in topic.partitions:
                _check(p.error_code, f"list the offsets of {topic.name}-{p.partition_index}")
                out[(topic.name, p.partition_index)] = p.offset
        return out

    # ---- log dirs and configs ----------------------------------------------------------------

    def describe_log_dirs(self, topics: list[str] | None):
        """The broker's DescribeLogDirs results (kio objects): every partition, or those of `topics`."""
        from kio.schema.describe_log_dirs.v4 import request as dl

        wanted = None
        if topics is not None:
            wanted = tuple(dl.DescribableLogDirTopic(topic=TopicName(t),
                                                     partitions=tuple(i32(p) for p in range(self.partition_count(t))))
                           for t in topics)
        response = self.call(dl.DescribeLogDirsRequest(topics=wanted))
        _check(response.error_code, "describe log dirs")
        return response.results

    def _describe_configs(self, resource_type: int, names: list[str], what: str, synonyms: bool = False,
                          keys: tuple[str, ...] | None = None) -> dict[str, list[TopicConfig]]:
        from kio.schema.describe_configs.v4 import request as dc

        request = dc.DescribeConfigsRequest(
            resources=tuple(dc.DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name,
                                                       configuration_keys=keys) for name in names),
            include_synonyms=synonyms, include_documentation=False)
        out = {}
        for result in self.call(request).results:
            _check(result.error_code, f"describe the configs of {what} {result.resource_name!r}",
                   result.error_message)
            out[result.resource_name] = sorted(
                (TopicConfig(c.name, c.value, CONFIG_SOURCES.get(c.config_source, "UNKNOWN"),
                             tuple(Synonym(s.name, s.value, CONFIG_SOURCES.get(s.source, "UNKNOWN"))
                                   for s in c.synonyms))
                 for c in result.configs),
                key=lambda c: c.name)
        return out

    def broker_configs(self, name: str) -> list[TopicConfig]:
        """Every config of broker `name` ("" = the cluster-wide defaults) with its source
        and synonyms, sorted by name."""
        return self._describe_configs(BROKER_RESOURCE, [name], "broker", synonyms=True)[name]

    def broker_config_values(self, name: str, keys: tuple[str, ...]) -> dict[str, str | None]:
        """{key: value} of those of `keys` broker `name` describes."""
        return {c.name: c.value for c in self._describe_configs(BROKER_RESOURCE, [name], "broker", keys=keys)[name]}

    def alter_broker_configs(self, name: str, set_values: dict[str, str], deletes: list[str]) -> None:
        """IncrementalAlterConfigs of broker `name` ("" = the cluster-wide defaults): SET
        each of `set_values`, DELETE each of `deletes`; the broker applies all or none."""
        from kio.schema.incremental_alter_configs.v1 import request as iac

        ops = [iac.AlterableConfig(name=k, config_operation=i8(SET_OP), value=v) for k, v in set_values.items()]
        ops += [iac.AlterableConfig(name=k, config_operation=i8(DELETE_OP), value=None) for k in deletes]
        request = iac.IncrementalAlterConfigsRequest(
            resources=(iac.AlterConfigsResource(resource_type=i8(BROKER_RESOURCE), resource_name=name,
                                                configs=tuple(ops)),),
            validate_only=False)
        for result in self.call(request).responses:
            what = "the default configs of brokers" if name == "" else f"the configs of broker {name}"
            _check(result.error_code, f"alter {what}", result.error_message)

    def topic_configs(self, topics: list[str]) -> dict[str, list[TopicConfig]]:
        """{topic: every setting with its source, sorted by name}."""
        return self._describe_configs(TOPIC_RESOURCE, topics, "topic")
