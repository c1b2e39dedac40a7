"""Topic administration and offset queries: `AsyncAdmin` and the blocking `Admin`.

Contract:
- One method per admin request of the native protocol; each raises
  StrataClientError with the broker's code when the broker refuses
  (`e.code`, `e.name`), BrokerUnreachable when it cannot be reached.
- Reads (metadata, configs, offsets, committed offsets) are retried on
  transport failures; writes (create, delete, alter, delete_records, commit)
  are not, since a write that reached the broker before the connection broke
  would be applied twice (create would then fail with TOPIC_ALREADY_EXISTS).
- `metadata()` returns the broker's answer as it is (`TopicMetadata`, each with
  its own error code); `describe_topic()` raises for a topic that is missing.
  With `auto_create=True` (the producer's and the Spark sink's default, as
  Kafka's clients) METADATA asks the broker to create missing named topics
  (native version 2's allowAutoTopicCreation); a topic still missing then raises
  an error that names it and says the broker does not create topics on use.
- `last_stable_offset()` answers a partition's last stable offset (what
  "latest" is under read_committed) through a FETCH version 2.
- `describe_listeners()` answers where the broker's listeners of both protocols
  are (DESCRIBE_LISTENERS, a project extension): `ListenerInfo`s, host "" standing
  for the host this client reached the broker at.
- `Admin` has the same methods, blocking, run on the shared client loop thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from protocol import (
    AclBinding,
    AclBindingFilter,
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateAclsRequest,
    CreateTopicRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    DescribeAclsRequest,
    DescribeConfigRequest,
    DescribeListenersRequest,
    ErrorCode,
    FetchOffsetRequest,
    FetchRequest,
    ListenerInfo,
    MetadataRequest,
    OffsetsRequest,
    PartitionMetadata,
    TopicMetadata,
)
from protocol.requests import IsolationLevel

from .errors import StrataClientError, raise_for
from .loop_thread import LoopThread
from .session import BrokerSession

__all__ = ["AsyncAdmin", "Admin", "TopicMetadata", "PartitionMetadata", "EARLIEST", "LATEST"]

EARLIEST = OffsetsRequest.EARLIEST  # -2: the log start offset
LATEST = OffsetsRequest.LATEST  # -1: the log end offset
# How long the producer and consumer trust a topic's partition count before they read
# METADATA again (Kafka's metadata.max.age.ms), so partitions a topic grew are picked up.
DEFAULT_METADATA_MAX_AGE_MS = 300_000


ANY_ACL = AclBindingFilter()  # matches every ACL

class AsyncAdmin:
    def __init__(self, bootstrap: str | None = None, *, session: BrokerSession | None = None,
                 **session_options):
        """Connect to `bootstrap`, or (for the producer and consumer) share `session`."""
        if session is None:
            if bootstrap is None:
                raise ValueError("AsyncAdmin needs a bootstrap address or a session")
            session = BrokerSession(bootstrap, **session_options)
        self._session = session

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        self._session.close()

    async def _read(self, request, context: str):
        return await self._session.retrying(lambda: self._session.call(request, context))

    # ---- topics ----------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = 1,
                           configs: Mapping[str, str | None] | None = None) -> None:
        request = CreateTopicRequest(name, partitions, tuple((configs or {}).items()))
        await self._session.call(request, f"create topic {name!r}")

    async def delete_topic(self, name: str) -> None:
        await self._session.call(DeleteTopicRequest(name), f"delete topic {name!r}")

    async def metadata(self, topics: Iterable[str] = (), auto_create: bool = False) -> list[TopicMetadata]:
        """Every topic (no names given) or the named ones, each with its error code;
        `auto_create` asks the broker to create the missing named ones."""
        response = await self._read(MetadataRequest(tuple(topics), auto_create), "metadata")
        return list(response.topics)

    async def list_topics(self) -> list[str]:
        return sorted(t.topic for t in await self.metadata())

    async def describe_topic(self, name: str, auto_create: bool = False) -> TopicMetadata:
        for topic in await self.metadata([name], auto_create):
            if topic.topic == name:
                if auto_create and topic.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise StrataClientError(
                        f"topic {name!r} does not exist and the broker does not create topics on use "
                        "(auto.create.topics.enable is false): create it first", topic.error)
                raise_for(topic.error, f"topic {name!r}")
                return topic
        # The broker did not list it at all: the same answer as an unknown topic.
        raise StrataClientError(f"topic {name!r}: unknown topic or partition",
                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    async def partition_count(self, name: str, auto_create: bool = False) -> int:
        return len((await self.describe_topic(name, auto_create)).partitions)

    # ---- configs ---------------------------------------------------------------

    async def describe_config(self, topic: str) -> dict[str, str | None]:
        response = await self._read(DescribeConfigRequest(topic), f"describe config of {topic!r}")
        return dict(response.configs)

    async def alter_config(self, topic: str, configs: Mapping[str, str | None]) -> None:
        """Set each key; a value of None puts the key back to its default."""
        await self._session.call(AlterConfigRequest(topic, tuple(configs.items())),
                                 f"alter config of {topic!r}")

    # ---- ACLs (the broker's authorizer; project extensions of version 2) ----------

    async def describe_acls(self, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        response = await self._read(DescribeAclsRequest(*acl_filter), "describe ACLs")
        return list(response.acls)

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        await self._session.call(CreateAclsRequest(tuple(acls)), "create ACLs")

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove the bindings each filter matches; returns them per filter."""
        response = await self._session.call(DeleteAclsRequest(tuple(filters)), "delete ACLs")
        return [list(d.acls) for d in response.deleted]

    # ---- listeners (a project extension) ---------------------------------------------

    async def describe_listeners(self) -> list[ListenerInfo]:
        """Every listener of the broker, both protocols, Kafka's first."""
        response = await self._read(DescribeListenersRequest(), "describe listeners")
        return list(response.listeners)

    # ---- offsets ---------------------------------------------------------------

    async def delete_records(self, topic: str, partition: int, offset: int = -1) -> int:
        """Move the log start offset up to `offset` (-1: the log end); returns the new one."""
        response = await self._session.call(DeleteRecordsRequest(topic, partition, offset),
                                            f"delete records of {topic}-{partition}")
        return response.log_start_offset

    async def offsets(self, topic: str, partition: int, time: int = LATEST,
                      max_number: int = 1) -> list[int]:
        """OFFSETS: time -1 latest, -2 earliest, else the first offset at or after `time` ms."""
        response = await self._read(OffsetsRequest(topic, partition, time, max_number),
                                    f"offsets of {topic}-{partition}")
        return list(response.offsets)

    async def last_stable_offset(self, topic: str, partition: int, log_end: int | None = None) -> int:
        """The partition's last stable offset (the first offset of its oldest open
        transaction, else the log end; `log_end` when it is known already): a
        read_committed FETCH of no bytes at the log end answers it, since OFFSETS
        has no isolation level. Needs native protocol version 2."""
        if log_end is None:
            log_end = (await self.offsets(topic, partition, LATEST))[0]
        request = FetchRequest(topic, partition, log_end, 0, 0, IsolationLevel.READ_COMMITTED)
        where = f"last stable offset of {topic}-{partition}"
        response = await self._session.retrying(lambda: self._session.request_v2(request, where))
        raise_for(response.error, where, response.message)
        return min(response.last_stable_offset, log_end)

    async def committed(self, group: str, topic: str,
                        partition: int) -> tuple[int, str | None] | None:
        """(offset, metadata) the group committed, or None when it committed nothing."""
        response = await self._read(FetchOffsetRequest(group, topic, partition),
                                    f"committed offset of group {group!r} for {topic}-{partition}")
        return None if response.offset < 0 else (response.offset, response.metadata)

    async def commit(self, group: str, topic: str, partition: int, offset: int,
                     metadata: str | None = None) -> None:
        await self._session.call(CommitOffsetRequest(group, topic, partition, offset, metadata),
                                 f"commit offset of group {group!r} for {topic}-{partition}")


class Admin:
    """The blocking face of AsyncAdmin: same methods, same errors."""

    def __init__(self, bootstrap: str, **session_options):
        self._loop = LoopThread.shared()
        self._admin = AsyncAdmin(bootstrap, **session_options)

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._loop.run(self._admin.close())

    def create_topic(self, name: str, partitions: int = 1,
                     configs: Mapping[str, str | None] | None = None) -> None:
        self._loop.run(self._admin.create_topic(name, partitions, configs))

    def delete_topic(self, name: str) -> None:
        self._loop.run(self._admin.delete_topic(name))

    def metadata(self, topics: Iterable[str] = (), auto_create: bool = False) -> list[TopicMetadata]:
        return self._loop.run(self._admin.metadata(tuple(topics), auto_create))

    def list_topics(self) -> list[str]:
        return self._loop.run(self._admin.list_topics())

    def describe_topic(self, name: str, auto_create: bool = False) -> TopicMetadata:
        return self._loop.run(self._admin.describe_topic(name, auto_create))

    def partition_count(self, name: str, auto_create: bool = False) -> int:
        return self._loop.run(self._admin.partition_count(name, auto_create))

    def describe_config(self, topic: str) -> dict[str, str | None]:
        return self._loop.run(self._admin.describe_config(topic))

    def alter_config(self, topic: str, configs: Mapping[str, str | None]) -> None:
        self._loop.run(self._admin.alter_config(topic, configs))

    def describe_acls(self, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        return self._loop.run(self._admin.describe_acls(acl_filter))

    def create_acls(self, acls: Iterable[AclBinding]) -> None:
        self._loop.run(self._admin.create_acls(acls))

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        return self._loop.run(self._admin.delete_acls(filters))

    def describe_listeners(self) -> list[ListenerInfo]:
        return self._loop.run(self._admin.describe_listeners())

    def delete_records(self, topic: str, partition: int, offset: int = -1) -> int:
        return self._loop.run(self._admin.delete_records(topic, partition, offset))

    def offsets(self, topic: str, partition: int, time: int = LATEST,
                max_number: int = 1) -> list[int]:
        return self._loop.run(self._admin.offsets(topic, partition, time, max_number))

    def last_stable_offset(self, topic: str, partition: int, log_end: int | None = None) -> int:
        return self._loop.run(self._admin.last_stable_offset(topic, partition, log_end))

    def committed(self, group: str, topic: str, partition: int) -> tuple[int, str | None] | None:
        return self._loop.run(self._admin.committed(group, topic, partition))

    def commit(self, group: str, topic: str, partition: int, offset: int,
               metadata: str | None = None) -> None:
        self._loop.run(self._admin.commit(group, topic, partition, offset, metadata))
