"""What the core Kafka APIs share: `CoreApiBase`, the state every core API module
reads (config, topic registry, partition service, KafkaState), and `Target`, one
partition of a request resolved to its Log or an error code.

Contract: the per-API modules (api_versions.py, metadata.py, produce.py, fetch.py,
list_offsets.py, topic_admin.py, configs.py, producer_ids.py) subclass
`CoreApiBase`; handlers.py composes them into `CoreHandlers`, which apis.py
registers. Resolving a partition happens on the loop (`_target`), except creating
an internal topic's log on first use (`_create_log`, through the partition service).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kafka_format.errors import StrataError

from ..core import IsolatedRead, PartitionLog
from ..security.authorizer import Op, Resource
from .allowed import allowed
from .codec import make, nested
from .state import KafkaState

E = ErrorCode
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def error_code_of(e: StrataError) -> int:
    """The Kafka error code a StrataError answers with."""
    return e.code


class Target:
    """One partition of a Produce/Fetch/ListOffsets request, resolved."""

    __slots__ = ("index", "log", "error", "failure", "offset", "max_bytes", "records", "result", "to_create",
                 "isolated")

    def __init__(self, index: int, log: PartitionLog | None = None, error: int = 0):
        self.index = index
        self.log = log
        self.error = error
        self.failure: StrataError | None = None  # the error behind `error`, when it has details to answer
        self.offset = 0  # Fetch: where to read from
        self.max_bytes = 0  # Fetch: partition_max_bytes
        self.records: Any = None  # Produce: the records to append
        self.result: Any = None
        self.to_create: str | None = None  # an internal topic whose log is created on first use
        self.isolated: IsolatedRead | None = None  # Fetch: the read's offsets and aborted transactions


def release_reads(flat: list[Target]) -> None:
    """Release the FileSlices the targets' reads hold (a fetch that answers nothing of them)."""
    for t in flat:
        if t.result is not None and hasattr(t.result, "release"):
            t.result.release()
            t.result = None


class CoreApiBase:
    """The state and partition resolving the core API modules share."""

    def __init__(self, apis):
        self.apis = apis
        self.config = apis.config
        self.registry = apis.registry
        self.partitions = apis.partitions  # broker/core/service.py: shared with the native listener
        self.state: KafkaState | None = apis.state  # the cluster id, producer id blocks

    def _target(self, name: str | None, topic_id, partition: int, *, produce: bool = False) -> Target:
        """A partition by topic name, or by topic id (name None), on the loop: the Log
        or an error code. Neither (log None, no error): an internal topic's log not
        created yet, named in `target.to_create` for `_create_log`."""
        target = Target(partition)
        if name is None:
            known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
            if known is None:
                target.error = E.unknown_topic_id
                return target
            name = known.name
        try:
            target.log = self.partitions.open_log(name, partition, produce=produce)
        except StrataError as e:
            target.error = error_code_of(e)
        if target.log is None and not target.error:
            target.to_create = name
        return target

    def _topic_name(self, name: str | None, topic) -> str:
        """A request topic's name, looked up by its id when it has none ("" when unknown)."""
        if name is not None:
            return name
        topic_id = getattr(topic, "topic_id", None)
        known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
        return known.name if known is not None else ""

    async def _resolve(self, name: str | None, topic_id, partition: int, *, produce: bool = False) -> Target:
        """`_target`, creating an internal topic's log on first use."""
        target = self._target(name, topic_id, partition, produce=produce)
        if target.log is None and not target.error:
            await self._create_log(target)
        return target

    async def _create_log(self, target: Target) -> None:
        """The log `_target` left to create (an internal topic's partition)."""
        assert target.to_create is not None
        try:
            target.log = await self.partitions.partition_log(target.to_create, target.index)
        except StrataError as e:
            target.error = error_code_of(e)
        target.to_create = None

    async def _each_partition(self, ctx, topics, answer, operation: Op) -> tuple:
        """The per-topic, per-partition answers of a request addressed by topic name
        (ListOffsets, DeleteRecords): `answer(part, target, PartitionResponse)`; a
        topic the connection may not perform `operation` on is TOPIC_AUTHORIZATION_FAILED."""
        TopicR = nested(ctx.response_class, "topics")
        PartR = nested(TopicR, "partitions")
        out = []
        for topic in topics:
            parts = []
            permitted = allowed(ctx, operation, Resource.TOPIC, topic.name)
            for part in topic.partitions:
                if not permitted:
                    parts.append(await answer(part, Target(part.partition_index,
                                                           error=E.topic_authorization_failed), PartR))
                    continue
                target = await self._resolve(topic.name, None, part.partition_index)
                parts.append(await answer(part, target, PartR))
            out.append(make(TopicR, name=topic.name, partitions=tuple(parts)))
        return tuple(out)

    def _throttle(self, ctx, kind: str, nbytes: int) -> int:
        """Client quotas (broker/core/quotas.py, through the partition service's one
        policy): the throttle time of this Produce (`nbytes`: its record bytes) or
        Fetch (the record bytes it would answer), byte rate and request time
        together; the connection mutes itself that long after the reply."""
        clock = ctx.clock
        if clock is not None:
            ctx.charged = True
        quotas = self.partitions.quotas
        if quotas is None or not quotas.active:
            return 0
        return self.partitions.throttle(ctx.connection, kind, ctx.client_id, nbytes,
                                        clock.elapsed() if clock is not None else 0.0)

    @staticmethod
    def _produce_bytes(plan: list[tuple[Any, list[Target]]]) -> int:
        total = 0
        for _, targets in plan:
            for t in targets:
                if t.records is not None:
                    total += len(t.records)
        return total

    @staticmethod
    def _fetch_bytes(plan: list[tuple[Any, list[Target]]]) -> int:
        total = 0
        for _, targets in plan:
            for t in targets:
                if t.result is not None:
                    total += t.result.length
        return total
