"""The partition service: the one surface where both protocols' requests meet
the logs (the role of Kafka's ReplicaManager). The native handlers
(broker/native/) and the Kafka APIs (broker/kafka/) parse a request, call this
service and encode its answer.

The service composes the core's parts, one job each, and exposes their methods
as its own (bound once, so a call costs what a direct call costs):
- appends (broker/core/appends.py): the one append policy, inline or executor;
- reads and waiting (reads.py, waiting.py): the isolated read, the one long poll;
- quotas (charges.py): the one charge rule, asked through the service's
  `throttle`, `fetch_budget` and `mutation_throttle`;
- errors (errors.py): the code and words answered for what a request met.
It does itself what needs several of them or the registry: finding a partition's
log, offset lookups (`list_offset`, by the log's `fetch_offset_by_timestamp`),
topic deletion and the log start's move.

Finding a partition's log: `open_log` (on the loop; None only for an internal
topic's partition whose log is not created yet) and `partition_log` (awaits that
creation in the executor). An unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION; appending to an internal topic
INVALID_TOPIC_EXCEPTION ("cannot append to internal topic", as Kafka's
ReplicaManager). Topic auto-creation (`auto_create_topic`, blocking) is what both
protocols' Metadata does with auto.create.topics.enable; a produce never creates a topic.
Blocking work (`blocking`) runs in the executor; a cancelled caller (the
connection died) never cancels the work, which may be an append.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Literal, TypeVar, cast, overload

import structlog

from broker.admin.metrics import BrokerMetrics
from broker.config.broker_config import BrokerConfig
from broker.core.quotas import ClientQuotas, MutationQuota
from broker.net.listeners import ConnectionContext
from broker.state import internal_topics
from broker.state.group_offsets import GroupOffsets
from broker.state.topic_registry import Topic, TopicRegistry
from kafka_format.errors import (
    InvalidTopicError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka_format.topic_names import validate_topic_name
from storage.log import Log
from storage.manager import LogManager
from storage.producer_state import ProducerStateEntry

from ..security.authorizer import Authorizer
from . import charges
from .appends import Appends
from .errors import error_code, error_reason
from .reads import MemorySlice, Reads
from .tiering import Tiering
from .types import (
    READ_COMMITTED,
    IsolatedRead,
    OffsetKind,
    OffsetQuery,
    PartitionLog,
    TimestampOffset,
    TopicPartition,
)
from .waiting import AppendWatcher, LongPoll, PartitionWaiters, wait_for_append

T = TypeVar("T")
VALID_NAMES_CACHED = 4096  # `_valid_names` starts over past this many

log = structlog.get_logger("strata.partitions")


class PartitionService:
    """Partitions' logs for both protocols: find, append, read, wait, charge, map errors."""

    def __init__(self, config: BrokerConfig, manager: LogManager, registry: TopicRegistry,
                 executor: Executor, loop: asyncio.AbstractEventLoop, metrics: BrokerMetrics | None = None,
                 *, authorizer: Authorizer | None = None, quotas: ClientQuotas | None = None,
                 tiering: Tiering | None = None):
        self.config = config
        # Tiered storage (tiering.py), None without remote.log.storage.system.enable.
        self.tiering = tiering
        self.metrics = metrics
        self.manager = manager
        self.registry = registry
        self.executor = executor
        self.loop = loop
        self.waiters = PartitionWaiters()
        # ACLs, checked by both protocols' handlers (broker/security/authorizer.py)
        self.authorizer = authorizer or Authorizer.from_config(config.values)
        self.shutting_down = False
        self._valid_names: set[str] = set()  # names validate_topic_name accepted (a regex match each)

        self.quotas = quotas  # client quotas (broker/core/quotas.py); None while the broker runs without them

        self.appends = appends = Appends(loop, executor, self.waiters, metrics, self.error_code, self.blocking)
        self.append_stats = appends.stats
        self.appends_inline = appends.appends_inline
        self.try_append_inline = appends.try_append_inline
        self.append_inline = appends.append_inline
        self.append_later = appends.append_later
        self.start_append = appends.start_append
        self.append = appends.append
        self.append_txn_marker = appends.append_txn_marker

        self.reads = reads = Reads(metrics)
        self.read = reads.read
        self.read_isolated = reads.read_isolated
        self.read_spec = reads.read_spec
        self.fetch_isolation = reads.fetch_isolation  # the isolation half of a read made by `read`

        # The partition's open log now, or None (no such log, or an internal topic's not
        # created yet); no validation, no error: a cheap lookup for keying requests.
        self.live_log: Callable[[str, int], PartitionLog | None] = manager.get_log
        self.long_poll = LongPoll(loop, self.waiters, manager.get_log)
        self.watch = self.long_poll.watch
        self.poll = self.long_poll.poll
        self.wait_for_append = wait_for_append

        # Committed offsets: records of the internal topic's partitions, shared by both protocols.
        self.offsets = GroupOffsets(registry, self.internal_log,
                                    metadata_max_bytes=config.offset_metadata_max_bytes,
                                    on_append=self.notify_threadsafe)

    # ---- client quotas (the charge rule: charges.py) -------------------------------------------

    @property
    def request_quotas(self) -> bool:
        """Whether any `request_percentage` quota is set: only then do the listeners
        time their handlers (Kafka records request time only while quotas are on)."""
        quotas = self.quotas
        return quotas is not None and quotas.request_quotas

    def throttle(self, connection: ConnectionContext, kind: str, client_id: str | None,
                 amount: float, handler_seconds: float = 0.0) -> int:
        """Charge one request to the client's quotas (charges.throttle); the throttle
        time in ms, 0 without quotas. A throttled request's connection mutes itself
        that long once the reply is out (KIP-219)."""
        quotas = self.quotas
        if quotas is None:
            return 0
        return charges.throttle(quotas, connection, kind, client_id, amount, handler_seconds)

    def mutation_quota(self, connection: ConnectionContext, client_id: str | None, *,
                       strict: bool) -> MutationQuota:
        """The controller_mutation_rate quota of one CreateTopics / CreatePartitions /
        DeleteTopics (native CREATE_TOPIC / DELETE_TOPIC) request: its `record` counts
        each topic's partitions as the topic changes (strict: refusing the topic with
        ThrottlingQuotaExceededError over the quota); `mutation_throttle` then gives
        the request's throttle time."""
        return MutationQuota(self.quotas, connection.principal, client_id, strict)

    def mutation_throttle(self, connection: ConnectionContext, quota: MutationQuota) -> int:
        """The throttle time (ms) of a request whose mutations `quota` counted (charges.mutation_throttle)."""
        return charges.mutation_throttle(self.quotas, connection, quota)

    def ip_connection_quota(self, ip: str) -> float | None:
        """The `connection_creation_rate` quota of an IP (broker/net/connection_rates.py), None for none."""
        quotas = self.quotas
        return quotas.ip_quota(ip) if quotas is not None else None

    def fetch_budget(self, connection: ConnectionContext, client_id: str | None, budget: int) -> int:
        """A fetch's byte budget under the client's consumer quota (charges.fetch_budget)."""
        quotas = self.quotas
        if quotas is None or not quotas.active:
            return budget
        return charges.fetch_budget(quotas, connection, client_id, budget)

    # ---- the executor --------------------------------------------------------------------------

    async def blocking(self, fn: Callable[..., T], *args: Any,
                       cleanup: Callable[[Any], None] | None = None) -> T:
        """Run `fn(*args)` in the executor. If the caller is cancelled, the work still
        completes (it may be an append) and `cleanup` gets its result."""
        future = self.loop.run_in_executor(self.executor, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if cleanup is not None:
                future.add_done_callback(
                    lambda f: cleanup(f.result()) if not f.cancelled() and f.exception() is None else None)
            raise

    # ---- finding a partition's log -------------------------------------------------------------

    @overload
    def open_log(self, topic: str, partition: int, *, produce: Literal[True]) -> PartitionLog: ...

    @overload
    def open_log(self, topic: str, partition: int, *, produce: bool = False) -> PartitionLog | None: ...

    def open_log(self, topic: str, partition: int, *, produce: bool = False) -> PartitionLog | None:
        """The live log of a partition, on the loop; None for an internal topic's
        log not created yet (never for a produce, which internal topics refuse
        first). Raises the StrataError to answer."""
        if topic not in self._valid_names:
            validate_topic_name(topic)
            if len(self._valid_names) >= VALID_NAMES_CACHED:
                self._valid_names.clear()
            self._valid_names.add(topic)
        known = self.registry.get(topic)
        if known is None or not 0 <= partition < known.partitions:
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")
        if produce and known.internal:
            raise InvalidTopicError(f"cannot append to internal topic {topic}")
        partition_log = self.manager.get_log(topic, partition)
        if partition_log is None and not known.internal:
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")
        return partition_log

    async def partition_log(self, topic: str, partition: int, *, produce: bool = False) -> PartitionLog:
        """`open_log`, creating an internal topic's log on first use (in the executor)."""
        found = self.open_log(topic, partition, produce=produce)
        if found is None:
            return await self.blocking(self.internal_log, topic, partition)
        return found

    def all_logs(self) -> list[PartitionLog]:
        """Every partition log open on the broker, internal topics' included."""
        return list(self.manager.logs())

    def log_sizes(self) -> list[tuple[str, int, int]]:
        """(topic, partition, bytes) of every partition log: the sum of its segments' sizes."""
        return [(found.topic, found.partition, found.size_in_bytes) for found in self.manager.logs()]

    def remote_log_sizes(self) -> tuple[str, list[tuple[str, int, int]]] | None:
        """(the remote store's URL, (topic, partition, bytes in the store) of every
        tiered partition), None without tiered storage (tiering.py)."""
        tiering = self.tiering
        if tiering is None:
            return None
        return tiering.store_url, tiering.remote_log_sizes()

    @property
    def data_dir(self) -> str:
        """The one log directory (the data directory)."""
        return self.manager.data_dir

    def internal_log(self, topic: str, partition: int) -> Log:
        """The log of an internal topic's partition, created on first use (blocking)."""
        return self.manager.get_or_create_log(topic, partition, self.registry.log_config(topic))

    def auto_create_topic(self, topic: str, quota: MutationQuota | None = None) -> None:
        """Create `topic` with the broker's defaults (auto.create.topics.enable;
        blocking). A topic another request created meanwhile is fine. `quota` (a
        permissive one, as Kafka's Metadata passes) counts its partitions against
        controller_mutation_rate; the Metadata answer is not throttled for it."""
        with contextlib.suppress(TopicAlreadyExistsError):  # another connection won the race
            self.registry.create(topic, -1, (), admit=quota.record if quota is not None else None)

    # ---- errors (errors.py) ---------------------------------------------------------------------

    def error_answer(self, error: BaseException,
                     partition_log: PartitionLog | None = None) -> tuple[int, str | None]:
        """`error_code` and `error_reason` of `error`: the code and the words to answer."""
        code = self.error_code(error, partition_log)
        return code, error_reason(code, error)

    def error_code(self, error: BaseException, partition_log: PartitionLog | None = None) -> int:
        """The Kafka code to answer for `error`, met while serving `partition_log`
        (broker/core/errors.py)."""
        return error_code(error, partition_log, self.manager.get_log)

    # ---- offsets --------------------------------------------------------------------------------

    async def list_offset(self, partition_log: PartitionLog, query: OffsetQuery) -> TimestampOffset | None:
        """The (timestamp, offset) an offset query names (the log's
        `fetch_offset_by_timestamp`, Kafka's UnifiedLog.fetchOffsetByTimestamp):
        the log ends from memory, on the loop; a lookup (a timestamp, the largest
        timestamp) in the executor. None: no record answers it."""
        kind = query.kind
        tiering = self.tiering
        if tiering is not None and isinstance(partition_log, Log) and tiering.is_tiered(partition_log):
            return await self._tiered_offset(tiering, partition_log, query)
        if kind is OffsetKind.TIMESTAMP or kind is OffsetKind.MAX_TIMESTAMP:
            return await self.blocking(partition_log.fetch_offset_by_timestamp, query.wire_timestamp,
                                       query.read_committed)
        return partition_log.fetch_offset_by_timestamp(query.wire_timestamp, query.read_committed)

    async def _tiered_offset(self, tiering: Tiering, partition_log: Log,
                             query: OffsetQuery) -> TimestampOffset | None:
        """A tiered partition's offset query (Kafka's fetchOffsetByTimestamp with
        remote storage): EARLIEST the log start including remote data,
        EARLIEST_LOCAL the local log start, LATEST_TIERED the highest copied
        offset, a timestamp searched in the remote segments first, then locally."""
        kind = query.kind
        if kind is OffsetKind.EARLIEST:
            return TimestampOffset(-1, await self.blocking(tiering.log_start_offset_of, partition_log))
        if kind is OffsetKind.EARLIEST_LOCAL:
            return TimestampOffset(-1, partition_log.log_start_offset)
        if kind is OffsetKind.LATEST_TIERED:
            return TimestampOffset(-1, await self.blocking(tiering.highest_copied_offset, partition_log))
        if kind is OffsetKind.TIMESTAMP:
            found = await self.blocking(tiering.offset_for_timestamp, partition_log, query.timestamp)
            if found is not None:
                return TimestampOffset(found[0], found[1])
        if kind is OffsetKind.TIMESTAMP or kind is OffsetKind.MAX_TIMESTAMP:
            return await self.blocking(partition_log.fetch_offset_by_timestamp, query.wire_timestamp,
                                       query.read_committed)
        return partition_log.fetch_offset_by_timestamp(query.wire_timestamp, query.read_committed)

    # ---- tiered storage (tiering.py) -----------------------------------------------------------

    def reads_remotely(self, partition_log: PartitionLog | None, offset: int) -> bool:
        """Whether a fetch at `offset` is served from the remote store (below the local
        log start of a tiered partition, within its remote data); in memory, on the loop."""
        tiering = self.tiering
        return (tiering is not None and partition_log is not None and offset < partition_log.log_start_offset
                and isinstance(partition_log, Log) and tiering.serves_remotely(partition_log, offset))

    async def read_remote(self, partition_log: PartitionLog, offset: int, max_bytes: int, isolation_level: int, *,
                          min_one_message: bool = False) -> IsolatedRead:
        """The isolated read of `offset` from the remote store, in the executor: the
        records of its remote segment from the batch holding `offset`, up to
        `max_bytes` (the first batch whole with `min_one_message`) and at most to the
        segment's end, as a MemorySlice; the high watermark and last stable offset of
        the log. Copied segments are below the last stable offset when copied, so
        READ_COMMITTED reads them whole and lists the aborted transactions of the
        range read (the remote transaction indexes, then the local ones).
        Raises StrataError (RemoteStorageError, KAFKA_STORAGE_ERROR, for a missing or
        corrupt object)."""
        tiering = self.tiering
        assert tiering is not None and isinstance(partition_log, Log)
        counters = self.metrics.topic(partition_log.topic) if self.metrics is not None else None
        committed = isolation_level == READ_COMMITTED
        try:
            if committed:
                data, aborted = await self.blocking(tiering.read_committed, partition_log, offset, max_bytes,
                                                    min_one_message)
            else:
                data = await self.blocking(tiering.read, partition_log, offset, max_bytes, min_one_message)
        except Exception:
            if counters is not None:
                counters.read_failed()
            raise
        if counters is not None:
            counters.read(len(data))
        return IsolatedRead(MemorySlice(data), partition_log.log_end_offset, partition_log.last_stable_offset,
                            aborted if committed else None)

    def log_start_offset(self, partition_log: PartitionLog) -> int:
        """The partition's log start as fetch answers give it: including remote data."""
        tiering = self.tiering
        if tiering is None or not isinstance(partition_log, Log):
            return partition_log.log_start_offset
        return tiering.log_start_offset(partition_log)

    # ---- transactions and producers -------------------------------------------------------------

    @staticmethod
    def in_transaction(partition_log: PartitionLog, producer_id: int) -> bool:
        """Whether the producer has a transaction open on the partition."""
        return producer_id in partition_log.producer_state.ongoing

    @staticmethod
    def active_producers(partition_log: PartitionLog) -> list[tuple[int, ProducerStateEntry]]:
        """The partition's producers by id, each with its state (DescribeProducers)."""
        return sorted(list(partition_log.producer_state.producers.items()))

    # ---- waiting for data (waiting.py) ----------------------------------------------------------

    def subscribe_appends(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        """Tell `watcher` of every append to `tp` (and of its deletion, and of
        shutdown) until `unsubscribe_appends`: one subscription for good instead of
        an event per read (a fetch session's partitions)."""
        self.waiters.subscribe(tp, watcher)

    def unsubscribe_appends(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        self.waiters.unsubscribe(tp, watcher)

    def notify_threadsafe(self, topic: str, partition: int) -> None:
        """Wake the long polls of a partition from any thread (after an append)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            self.loop.call_soon_threadsafe(self.waiters.notify, (topic, partition))

    def begin_shutdown(self) -> None:
        """Answer every long poll now and make new ones answer at once."""
        self.shutting_down = True
        self.long_poll.begin_shutdown()

    # ---- partition-level changes of both protocols ----------------------------------------------

    async def remove_topic(self, name: str, quota: MutationQuota | None = None) -> Topic:
        """Delete a topic: registry and logs, wake its long polls (they answer
        "unknown" now), tombstone its committed offsets (`offsets`, the shared
        GroupOffsets). `quota` counts its partitions once the topic is found
        deletable (controller_mutation_rate). Raises StrataError."""
        admit = quota.record if quota is not None else None
        deleted = await self.blocking(lambda: self.registry.delete(name, admit=admit))
        if self.metrics is not None:
            self.metrics.forget_topic(deleted.name)
        for partition in range(deleted.partitions):
            self.waiters.notify((deleted.name, partition))
        try:
            await self.blocking(self.offsets.delete_topic_offsets, deleted.name)
        except Exception:
            log.exception("offsets_cleanup_failed", topic=deleted.name)
        if self.tiering is not None:  # its remote data, in the background (the store may be slow)
            self.loop.run_in_executor(self.executor, self.tiering.delete_topic, deleted.name, deleted.topic_id,
                                      deleted.partitions)
        return deleted

    async def delete_records_before(self, partition_log: PartitionLog, offset: int) -> int:
        """Move the log start to `offset` (-1: the log end; never back); returns the
        log start offset. Raises OffsetOutOfRangeError, and InvalidTopicError for an
        internal topic (broker/state/internal_topics.py)."""
        internal_topics.check_delete_records(partition_log.topic)
        end, start = partition_log.log_end_offset, self.log_start_offset(partition_log)
        target = end if offset == -1 else offset
        if target < 0 or target > end:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range [{start}, {end}]")
        tiering = self.tiering
        if tiering is not None and isinstance(partition_log, Log) and tiering.is_tiered(partition_log):
            return await self.blocking(self._delete_tiered_records, tiering, partition_log, target)
        if target > start:
            start = await self.blocking(self._delete_records, partition_log, target)
        return start

    def _delete_tiered_records(self, tiering: Tiering, partition_log: Log, offset: int) -> int:
        """Executor side, a tiered partition: the local log start moves as for any
        log when `offset` is above it; the log start including remote data moves to
        `offset` (tiering.py `delete_records`, durable before it takes effect)."""
        if offset > partition_log.log_start_offset:
            self._delete_records(partition_log, offset)
        return tiering.delete_records(partition_log, offset)

    def _delete_records(self, partition_log: PartitionLog, offset: int) -> int:
        """Executor side: checkpoint the new log start, then move it in memory
        (LogManager.set_log_start_offset: a failed write changes nothing, an
        acknowledged deletion survives a crash); then whole segments below the new
        start go at once, by retention's path (`.deleted`, files after file.delete.delay.ms)."""
        try:
            start = self.manager.set_log_start_offset(cast(Log, partition_log), offset)
        except OSError as e:
            raise self.manager.io_errors.failed(e, operation="delete records checkpoint",
                                                log_name=partition_log.name) from None
        try:
            partition_log.delete_segments_below_log_start()
        except Exception:  # the start is durable; the next retention pass tries again
            log.exception("delete_records_segments_failed", topic=partition_log.topic,
                          partition=partition_log.partition)
        return start
