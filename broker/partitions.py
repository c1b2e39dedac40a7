"""The partition service: the one place where both protocols' requests meet the logs
(the role of Kafka's ReplicaManager).

The native handlers (broker/native/) and the Kafka APIs (broker/kafka/) parse
a request, call this service and encode its answer; every policy below holds for
both listeners because it is written once, here.

- Finding a partition's log: `open_log` (on the loop; None only for an internal
  topic's partition whose log is not created yet) and `partition_log` (awaits that
  creation in the executor). An unknown topic or partition is
  UNKNOWN_TOPIC_OR_PARTITION; appending to an internal topic INVALID_TOPIC_EXCEPTION
  ("cannot append to internal topic", as Kafka's ReplicaManager). Topic
  auto-creation (`auto_create_topic`, blocking) is what both protocols' Metadata
  does with auto.create.topics.enable (the native one from version 2, when the
  request allows it); a produce never creates a topic.
- Authorization: `authorizer` (broker/security/authorizer.py) holds the ACLs;
  both protocols' handlers ask it before they act (`authorize(context, ...)`).
- Appending, one policy (`append`, `try_append_inline`, `append_later`): an append
  with no fsync due (flush.messages unset) and no earlier append of its partition
  still queued runs inline on the loop: a copy into the page cache, a few
  microseconds up to INLINE_APPEND_MAX_BYTES (64 KiB) and a fraction of a
  millisecond up to LARGE_INLINE_APPEND_MAX_BYTES (1 MiB), cheaper in all than the
  hand-off to a thread and back (figures in broker/SERVER.md). If an inline append
  takes over SLOW_INLINE_APPEND_S (20 ms: writeback throttling, a page cache that
  waits for the disk), appends over 64 KiB go to the executor for
  INLINE_BACKOFF_S (10 s), so the loop waits for a slow disk at most once per
  back-off. Every other append (an fsync due by flush.messages, over 1 MiB, during
  a back-off, or behind a queued one) goes to the partition's `Appender`: one
  executor job at a time per partition runs the appends queued for it in order.
  So an append never overtakes an earlier one of its partition. `append_stats`
  counts where appends ran.
- Reading: `read` runs on the loop (an index search and a few header reads from
  the page cache, the same kind of work as the sendfile that follows); the
  FileSlice it returns is sent with sendfile by the connection. Isolation, for
  both protocols: `read_isolated` with READ_COMMITTED reads up to the last stable
  offset (`last_stable_offset`: the first offset of the oldest open transaction,
  else the log end) and answers the aborted transactions of the range read
  (`aborted_transactions`, from the `.txnindex` files); READ_UNCOMMITTED reads to
  the log end with no list. Both answer the last stable offset. The same in two
  steps: `read(..., isolation_level=)` then `fetch_isolation(...)` (the native
  FETCH version 2).
- Transaction markers: `append_txn_marker` writes a COMMIT or ABORT control batch
  for a producer's transaction (the coordinator's WriteTxnMarkers, in-process), in
  the executor, and wakes the partition's long polls.
- Waiting for data: `watch(tp)` gives the partition's `PartitionWaiters` event,
  which every successful append sets (from the executor thread via
  call_soon_threadsafe, so a cancelled request never swallows a wake-up); a long
  poll takes its events before it looks at the log ends, then `wait_for_append`.
  `begin_shutdown` answers every long poll at once.
- Partition-level changes both protocols make: topic deletion (`remove_topic`,
  which also tombstones the topic's committed offsets in `offsets`, the shared
  GroupOffsets) and the log start's move (`delete_records_before`).
- Errors: `error_code` maps what a request met to the Kafka code both protocols
  answer: a StrataError's own code (storage/io_errors.py turns OSErrors into
  them), except that a log closed under the request by a topic deletion reads as
  UNKNOWN_TOPIC_OR_PARTITION; anything else is UNKNOWN_SERVER_ERROR, logged.
  `error_reason(code, error)` gives the words answered with that code (the
  native protocol's version-2 `message`; the Kafka listener's `error_message` is
  the same `str(error)`): the StrataError's own message, which names the key,
  value and limit (`retention.ms: 'abc' is not a valid long`); `error_answer`
  is both at once.
- Transactions' read view (`fetch_isolation`): the last stable offset and the
  aborted transactions of a fetched range, for both protocols' Fetch. Without
  transactions the last stable offset is the high watermark (the log end on one
  node) and nothing is aborted; the transaction work fills this one function.
- Blocking work (`blocking`) runs in the executor; a cancelled caller (the
  connection died) never cancels the work, which may be an append.
- Metrics (broker/metrics.py, when the admin port is on): every append counts its
  topic's messages and bytes in, or a failed produce; every read its bytes out, or
  a failed fetch, on the topic's counters (bound once per topic), for both protocols.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar, overload

import structlog

from kafka_format.errors import (
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    StrataError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka_format.topic_names import validate_topic_name
from protocol import ErrorCode
from storage.file_records import FileSlice
from storage.log import AppendResult, Log
from storage.manager import LogManager
from storage.txn_index import AbortedTxn

from . import internal_topics
from .config import BrokerConfig
from .group_offsets import GroupOffsets
from .listeners import ConnectionContext
from .metrics import BrokerMetrics
from .quotas import MUTATION, ClientQuotas, MutationQuota
from .security.authorizer import Authorizer
from .topics import Topic, TopicRegistry

TopicPartition = tuple[str, int]
T = TypeVar("T")
# What an append's future resolves to: `answer(result, error_code, error)` of the
# caller, run where the append finished (the loop, or the executor thread); `error`
# is the StrataError met (None on success or for another exception), for callers
# that answer more than its code (a Kafka Produce's record errors and message).
Answer = Callable[[AppendResult | None, int, StrataError | None], T]

LONG_MAX = 2**63 - 1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # Kafka's IsolationLevel ids (Fetch, ListOffsets, native FETCH v2)
INLINE_APPEND_MAX_BYTES = 64 * 1024  # appends up to this size always run on the loop (no fsync due)
TXN_MARKER_BYTES = 78  # a COMMIT/ABORT control batch: 61-byte header + one 17-byte control record
# ... and up to this size too, unless one was slow lately: a message set this large costs the
# loop less than the hand-off to a thread and back (cross-core cache misses, GIL and futex
# hand-offs; figures in broker/SERVER.md), and the socket's bytes are still in this core's cache.
LARGE_INLINE_APPEND_MAX_BYTES = 1 << 20
SLOW_INLINE_APPEND_S = 0.02  # an inline append slower than this: the page cache is pushing back
INLINE_BACKOFF_S = 10.0  # ... so large appends go to the executor for this long
APPENDS_PER_JOB = 16  # an Appender's job yields its executor thread after this many
VALID_NAMES_CACHED = 4096  # `_valid_names` starts over past this many

log = structlog.get_logger("strata.partitions")


@dataclass(frozen=True)
class FetchIsolation:
    """What a Fetch at an isolation level sees of a partition: reads stop at
    `last_stable_offset` under read_committed, and `aborted` lists (producerId,
    firstOffset) of the aborted transactions whose data the range holds."""

    last_stable_offset: int
    aborted: tuple[tuple[int, int], ...] = ()


def error_reason(code: int, error: BaseException | None) -> str | None:
    """The words answered with `code` for `error`: the StrataError's message when
    the code is its own; None otherwise (an unexpected error's details stay in the
    broker's log, as Kafka leaves UNKNOWN_SERVER_ERROR unexplained)."""
    if isinstance(error, StrataError) and error.code == code:
        return str(error) or None
    return None


class IsolatedRead(NamedTuple):
    """A fetch's read of one partition at an isolation level."""

    records: FileSlice
    high_watermark: int  # the log end (one replica)
    last_stable_offset: int
    aborted: tuple[tuple[int, int], ...] | None  # READ_COMMITTED: (producer id, first offset) of the range read


@dataclass
class AppendStats:
    """Where appends of both protocols ran (counted on the loop thread): on the loop
    (`inline`) or in the executor; `backoffs`: slow inline appends that sent large
    appends to the executor for INLINE_BACKOFF_S."""

    inline: int = 0
    executor: int = 0
    backoffs: int = 0


class AppendWatcher(Protocol):
    """What `PartitionWaiters.subscribe` tells of every append to a partition (a fetch session)."""

    def appended(self, tp: TopicPartition) -> None: ...


class PartitionWaiters:
    """One asyncio.Event per partition that a long poll is waiting on, and the
    watchers subscribed to partitions for good.

    `notify` sets the event and forgets it (the next waiter gets a fresh one), so
    an event is only ever set once; it also tells every watcher of the partition
    (`AppendWatcher.appended`), which stays subscribed until `unsubscribe`. Loop
    thread only, but `wanted`."""

    def __init__(self) -> None:
        self._events: dict[TopicPartition, asyncio.Event] = {}
        self._watchers: dict[TopicPartition, set[AppendWatcher]] = {}

    def event(self, tp: TopicPartition) -> asyncio.Event:
        event = self._events.get(tp)
        if event is None:
            event = self._events[tp] = asyncio.Event()
        return event

    def subscribe(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        self._watchers.setdefault(tp, set()).add(watcher)

    def unsubscribe(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        watchers = self._watchers.get(tp)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[tp]

    def notify(self, tp: TopicPartition) -> None:
        # Every append calls this: with nobody waiting anywhere, `tp` is not even hashed.
        if self._events:
            event = self._events.pop(tp, None)
            if event is not None:
                event.set()
        if self._watchers:
            watchers = self._watchers.get(tp)
            if watchers:
                for watcher in watchers:
                    watcher.appended(tp)

    def wanted(self, tp: TopicPartition) -> bool:
        """Whether a long poll or a watcher waits on `tp` (any thread: dict lookups)."""
        return tp in self._events or tp in self._watchers

    def notify_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()
        for tp, watchers in list(self._watchers.items()):
            for watcher in list(watchers):
                watcher.appended(tp)

    def __len__(self) -> int:
        return len(self._events)


class Appender(Generic[T]):
    """The executor appends of one partition, in the order submitted, by one executor
    job at a time: while appends are queued a job runs them one after another, so a
    stream of appends (pipelined PRODUCEs on a connection, or from several) costs one
    executor hop, not one each, and each append sees the effects of the ones before it.

    `submit` (loop thread) queues the data with the future of its answer and starts a
    job when none runs. The job (executor thread) appends, calls the submitter's
    `answer(result, error_code, error)` and resolves the future with what it returns through
    call_soon_threadsafe as each append finishes, so answers go out while later
    appends run. After APPENDS_PER_JOB appends a job that still has work queues a
    fresh job behind the executor's other work, so hot partitions never starve other
    blocking requests of threads. An append's effects survive a cancelled future
    (the connection died)."""

    __slots__ = ("service", "partition_log", "_items", "_lock", "_running")

    def __init__(self, service: PartitionService, partition_log: Log):
        self.service = service
        self.partition_log = partition_log
        self._items: deque[tuple[Any, asyncio.Future, Answer]] = deque()
        self._lock = threading.Lock()
        self._running = False

    def idle(self) -> bool:
        with self._lock:
            return not self._running and not self._items

    def submit(self, data: Any, future: asyncio.Future, answer: Answer) -> None:
        with self._lock:
            self._items.append((data, future, answer))
            if self._running:
                return
            self._running = True
        try:
            self.service.executor.submit(self._run)
        except RuntimeError:  # the executor is shut down: the broker is stopping
            with self._lock:
                items, self._items, self._running = list(self._items), deque(), False
            for _, waiting, answer_later in items:
                if not waiting.done():
                    waiting.set_result(answer_later(None, ErrorCode.KAFKA_STORAGE_ERROR, None))

    def _run(self) -> None:
        service, partition_log, loop = self.service, self.partition_log, self.service.loop
        tp = (partition_log.topic, partition_log.partition)
        done = 0
        while True:
            with self._lock:
                if not self._items:
                    self._running = False
                    break
                if done >= APPENDS_PER_JOB:
                    try:
                        service.executor.submit(self._run)  # still running: the next job goes on
                        return
                    except RuntimeError:
                        pass  # shutting down: finish here
                data, future, answer = self._items.popleft()
            done += 1
            size = len(data)
            result = None
            try:
                result = partition_log.append(data, in_place=True)  # the frame is ours to patch
                reply = answer(result, ErrorCode.NONE, None)
            except Exception as e:
                reply = answer(None, service.error_code(e, partition_log), strata_error(e))
            del data
            try:
                if service.metrics is not None:  # counted on the loop, as every other append
                    loop.call_soon_threadsafe(service.count_append, tp[0], result, size)
                loop.call_soon_threadsafe(_resolve, future, reply)
                if service.waiters.wanted(tp):
                    loop.call_soon_threadsafe(service.waiters.notify, tp)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(service.appender_idle, self)


def _resolve(future: asyncio.Future, reply: Any) -> None:
    if not future.done():  # cancelled: the connection died; the append stands
        future.set_result(reply)


def append_outcome(result: AppendResult | None, code: int,
                   error: StrataError | None) -> tuple[AppendResult | None, int, StrataError | None]:
    """The plain `Answer`: (result, error code, error)."""
    return result, code, error


def strata_error(error: BaseException) -> StrataError | None:
    """`error` when it is a StrataError (its details may be answered), else None."""
    return error if isinstance(error, StrataError) else None


# A read of up to this size goes into a reply as bytes (one pread, the slice
# released) rather than as a FileSlice for sendfile: a slice costs a send of the
# bytes before it and a sendfile call, which for a small read costs more than the
# copy, and a reply of small reads (a fetch session's partitions at a low rate)
# goes out in one write. The Kafka Fetch applies it; the native FETCH and
# MULTIFETCH hand every read to the connection's writer as a slice, which sends it
# by sendfile or, on TLS, copies it through the transport.
INLINE_READ_BYTES = 16 * 1024


def reply_records(found: FileSlice) -> bytes | FileSlice:
    """A read as a reply part: the bytes of a small read (the slice released), else
    the slice itself, for sendfile (the reply takes it over)."""
    if found.length > INLINE_READ_BYTES:
        return found
    try:
        return found.read()
    finally:
        found.release()


def release_all(result: Any) -> None:
    """Release every FileSlice in `result` (a slice, or lists/tuples of them)."""
    if isinstance(result, FileSlice):
        result.release()
    elif isinstance(result, (list, tuple)):
        for item in result:
            release_all(item)


class PartitionService:
    """Partitions' logs for both protocols: find, append, read, wait, map errors."""

    def __init__(self, config: BrokerConfig, manager: LogManager, registry: TopicRegistry,
                 executor: Executor, loop: asyncio.AbstractEventLoop, metrics: BrokerMetrics | None = None, *,
                 authorizer: Authorizer | None = None, quotas: ClientQuotas | None = None):
        self.config = config
        self.metrics = metrics
        self.manager = manager
        self.registry = registry
        self.executor = executor
        self.loop = loop
        self.waiters = PartitionWaiters()
        # ACLs, checked by both protocols' handlers (broker/security/authorizer.py)
        self.authorizer = authorizer or Authorizer.from_config(config.values)
        self.append_stats = AppendStats()
        self.shutting_down = False
        self._appenders: dict[Log, Appender] = {}  # logs with executor appends queued or running
        self._valid_names: set[str] = set()  # names validate_topic_name accepted (a regex match each)
        self._inline_backoff_until = 0.0  # loop.time() before which large appends use the executor
        # Committed offsets: records of the internal topic's partitions, shared by both protocols.
        self.offsets = GroupOffsets(registry, self.internal_log,
                                    metadata_max_bytes=config.offset_metadata_max_bytes,
                                    on_append=self.notify_threadsafe)
        # Client quotas (broker/quotas.py); None: no quota is ever set.
        self.quotas = quotas

    # ---- client quotas -------------------------------------------------------------------------

    @property
    def request_quotas(self) -> bool:
        """Whether any `request_percentage` quota is set: only then do the listeners
        time their handlers (Kafka records request time only while quotas are on)."""
        quotas = self.quotas
        return quotas is not None and quotas.request_quotas

    def throttle(self, connection: ConnectionContext, kind: str, client_id: str | None,
                 amount: float, handler_seconds: float = 0.0) -> int:
        """The quota policy both protocols call: once per produce or fetch request
        (`kind` produce or fetch, `amount` its bytes) with the time its handler ran,
        once per other request (`kind` request, `amount` its handler's seconds).
        Records them against the client's quotas and returns the throttle time in
        ms (0: none), the larger of the byte-rate and the request-time throttle, as
        Kafka's KafkaApis. A throttled fetch is answered empty (KIP-219): its bytes
        are taken back (Kafka's unrecordQuotaSensor). A throttled request's
        connection (its ConnectionContext) is told to mute itself that long once
        the reply is out (broker/connection.py)."""
        quotas = self.quotas
        if quotas is None:
            return 0
        principal = connection.principal
        throttle = quotas.throttle_ms(kind, principal, client_id, amount)
        if kind != "request" and quotas.request_quotas:
            throttle = max(throttle, quotas.throttle_ms("request", principal, client_id, handler_seconds))
        if throttle and kind == "fetch":
            quotas.unrecord(kind, principal, client_id, amount)
        if throttle:
            connection.throttle_ms = max(connection.throttle_ms, throttle)
        return throttle

    def mutation_quota(self, connection: ConnectionContext, client_id: str | None, *,
                       strict: bool) -> MutationQuota:
        """The controller_mutation_rate quota of one CreateTopics / CreatePartitions /
        DeleteTopics (native CREATE_TOPIC / DELETE_TOPIC) request: its `record` counts
        each topic's partitions as the topic changes (strict: refusing the topic with
        ThrottlingQuotaExceededError over the quota); `mutation_throttle` then gives
        the request's throttle time."""
        return MutationQuota(self.quotas, connection.principal, client_id, strict)

    def mutation_throttle(self, connection: ConnectionContext, quota: MutationQuota) -> int:
        """The throttle time (ms) to answer a request whose mutations `quota` counted;
        the connection mutes itself that long once the reply is out (KIP-219), as for
        the other quotas, whatever the request's version (Kafka's
        sendResponseMaybeThrottleWithControllerQuota)."""
        throttle = quota.throttle_ms()
        if throttle and self.quotas is not None:
            self.quotas.count_throttle(MUTATION, throttle)
            connection.throttle_ms = max(connection.throttle_ms, throttle)
        return throttle

    def ip_connection_quota(self, ip: str) -> float | None:
        """The `connection_creation_rate` quota of an IP (broker/connection_rates.py), None for none."""
        quotas = self.quotas
        return quotas.ip_quota(ip) if quotas is not None else None

    def fetch_budget(self, connection: ConnectionContext, client_id: str | None, budget: int) -> int:
        """A fetch's byte budget under the client's consumer quota: at most what the
        quota window allows (Kafka's getMaxValueInQuotaWindow)."""
        quotas = self.quotas
        if quotas is None or not quotas.active:
            return budget
        limit = quotas.max_fetch_bytes(connection.principal, client_id)
        return budget if limit is None else min(budget, limit)

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
    def open_log(self, topic: str, partition: int, *, produce: Literal[True]) -> Log: ...

    @overload
    def open_log(self, topic: str, partition: int, *, produce: bool = False) -> Log | None: ...

    def open_log(self, topic: str, partition: int, *, produce: bool = False) -> Log | None:
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

    async def partition_log(self, topic: str, partition: int, *, produce: bool = False) -> Log:
        """`open_log`, creating an internal topic's log on first use (in the executor)."""
        partition_log = self.open_log(topic, partition, produce=produce)
        if partition_log is None:
            partition_log = await self.blocking(self.internal_log, topic, partition)
        return partition_log

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

    # ---- errors ---------------------------------------------------------------------------------

    def error_answer(self, error: BaseException, partition_log: Log | None = None) -> tuple[int, str | None]:
        """`error_code` and `error_reason` of `error`: the code and the words to answer."""
        code = self.error_code(error, partition_log)
        return code, error_reason(code, error)

    def error_code(self, error: BaseException, partition_log: Log | None = None) -> int:
        """The Kafka code to answer for `error`, met while serving `partition_log`.
        A log closed under the request by a topic deletion reads as an unknown
        partition; an error that is no StrataError is logged and answers
        UNKNOWN_SERVER_ERROR."""
        if not isinstance(error, StrataError):
            log.error("partition_request_failed", error=repr(error),
                      topic=getattr(partition_log, "topic", None),
                      partition=getattr(partition_log, "partition", None), exc_info=error)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        if isinstance(error, KafkaStorageError) and partition_log is not None and \
                self.manager.get_log(partition_log.topic, partition_log.partition) is not partition_log:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return error.code

    # ---- appending ------------------------------------------------------------------------------

    def appends_inline(self, partition_log: Log, size: int, *, ordered_by_caller: bool = False) -> bool:
        """The policy: an append of `size` bytes runs on the loop when no fsync is due,
        it is at most INLINE_APPEND_MAX_BYTES, or at most LARGE_INLINE_APPEND_MAX_BYTES
        outside a slow-disk back-off, and no earlier append of the partition is still
        queued in the executor (it would be overtaken). `ordered_by_caller`: the
        caller starts the append only once the earlier ones it cares about are done
        (a connection's pipelined PRODUCEs), so queued appends do not count; a
        stream that went to the executor during a back-off then comes back to the
        loop as soon as the back-off ends."""
        if size > INLINE_APPEND_MAX_BYTES and (size > LARGE_INLINE_APPEND_MAX_BYTES
                                               or self.loop.time() < self._inline_backoff_until):
            return False
        return partition_log.config.flush_messages == LONG_MAX and (
            ordered_by_caller or partition_log not in self._appenders)

    def try_append_inline(self, partition_log: Log, data: Any) -> AppendResult | None:
        """Append `data` on the loop if the policy allows (`appends_inline`), waking
        long polls; None, with nothing done, when it belongs in the executor
        (`append_later`). Raises StrataError. An append slower than
        SLOW_INLINE_APPEND_S sends large appends to the executor for INLINE_BACKOFF_S."""
        if not self.appends_inline(partition_log, len(data)):
            return None
        return self.append_inline(partition_log, data)

    def append_inline(self, partition_log: Log, data: Any) -> AppendResult:
        """Append on the loop, the policy already consulted (`appends_inline`; a
        request that checked every partition first appends them all here). Wakes
        long polls; a slow append starts the back-off. Raises StrataError."""
        self.append_stats.inline += 1
        metrics = self.metrics
        start = time.perf_counter()
        try:
            result = partition_log.append(data, in_place=True)  # the frame is ours to patch
        except Exception:
            if metrics is not None:
                metrics.append_failed(partition_log.topic)
            raise
        took = time.perf_counter() - start
        if metrics is not None:
            metrics.appended(partition_log.topic, result.record_count, len(data))
        if took > SLOW_INLINE_APPEND_S:
            if self.loop.time() >= self._inline_backoff_until:
                self.append_stats.backoffs += 1
                log.warning("inline_append_slow", topic=partition_log.topic, partition=partition_log.partition,
                            bytes=len(data), took_ms=round(took * 1000, 1), backoff_s=INLINE_BACKOFF_S)
            self._inline_backoff_until = self.loop.time() + INLINE_BACKOFF_S
        self.waiters.notify((partition_log.topic, partition_log.partition))
        return result

    def append_later(self, partition_log: Log, data: Any, answer: Answer[T]) -> asyncio.Future[T]:
        """Queue `data` on the partition's appender (the executor), behind every
        append queued before it; the future (never failing) resolves to
        `answer(result, error_code, error)`, called on the executor thread."""
        future: asyncio.Future[T] = self.loop.create_future()
        self.append_stats.executor += 1
        appender = self._appenders.get(partition_log)
        if appender is None:
            appender = self._appenders[partition_log] = Appender(self, partition_log)
        appender.submit(data, future, answer)
        return future

    def start_append(self, partition_log: Log, data: Any, answer: Answer[T]) -> asyncio.Future[T] | T:
        """The one append policy: the answer at once when the append ran inline (or
        failed), else the future of it from the executor (`append_later`)."""
        try:
            result = self.try_append_inline(partition_log, data)
        except Exception as e:
            return answer(None, self.error_code(e, partition_log), strata_error(e))
        if result is None:
            return self.append_later(partition_log, data, answer)
        return answer(result, ErrorCode.NONE, None)

    async def append(self, partition_log: Log, data: Any, answer: Answer[T]) -> T:
        """`start_append`, awaited."""
        started = self.start_append(partition_log, data, answer)
        if isinstance(started, asyncio.Future):
            return await started
        return started

    def count_append(self, topic: str, result: AppendResult | None, size: int) -> None:
        """Loop thread: count an executor append in the topic's metrics (None: it failed)."""
        metrics = self.metrics
        if metrics is not None:
            if result is None:
                metrics.append_failed(topic)
            else:
                metrics.appended(topic, result.record_count, size)

    def appender_idle(self, appender: Appender) -> None:
        """Loop thread: forget an appender with nothing to do (submits happen on this
        thread too, so none can slip in between the check and the removal)."""
        if appender.idle() and self._appenders.get(appender.partition_log) is appender:
            del self._appenders[appender.partition_log]

    def notify_threadsafe(self, topic: str, partition: int) -> None:
        """Wake the long polls of a partition from any thread (after an append)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            self.loop.call_soon_threadsafe(self.waiters.notify, (topic, partition))

    # ---- reading --------------------------------------------------------------------------------

    def read(self, partition_log: Log, offset: int, max_bytes: int, *,
             min_one_message: bool = False, isolation_level: int = READ_UNCOMMITTED) -> FileSlice:
        """Up to `max_bytes` of whole batches from `offset`, on the loop (the caller
        releases the slice, or the connection does once sent); READ_COMMITTED stops at
        the last stable offset. Raises StrataError."""
        max_offset = partition_log.last_stable_offset if isolation_level == READ_COMMITTED else None
        if self.metrics is None:
            return partition_log.read(offset, max_bytes, min_one_message, max_offset=max_offset)
        counters = self.metrics.topic(partition_log.topic)
        try:
            found = partition_log.read(offset, max_bytes, min_one_message, max_offset=max_offset)
        except Exception:
            counters.read_failed()
            raise
        counters.read(found.length)
        return found

    def fetch_isolation(self, partition_log: Log, isolation_level: int, fetch_offset: int,
                        found: FileSlice | None) -> FetchIsolation:
        """The last stable offset of `partition_log` and, under READ_COMMITTED, the
        aborted transactions with data in `found` (read from `fetch_offset` by `read`
        at that level; None when nothing was read), as (producer id, first offset)."""
        lso = partition_log.last_stable_offset
        if isolation_level != READ_COMMITTED or found is None or not found.length:
            return FetchIsolation(lso)
        upper = partition_log.fetch_upper_bound(fetch_offset, found, lso)
        return FetchIsolation(lso, tuple((a.producer_id, a.first_offset)
                                         for a in partition_log.aborted_transactions(fetch_offset, upper)))

    def last_stable_offset(self, partition_log: Log) -> int:
        """The partition's last stable offset: the first offset of its oldest open
        transaction, else the log end (the high watermark, on one node)."""
        return partition_log.last_stable_offset

    def aborted_transactions(self, partition_log: Log, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap offsets [start, end) (Kafka's
        collectAbortedTransactions), each with its producer id and first offset."""
        return partition_log.aborted_transactions(start, end)

    def read_isolated(self, partition_log: Log, offset: int, max_bytes: int, isolation_level: int, *,
                      min_one_message: bool = False) -> IsolatedRead:
        """`read` and `fetch_isolation` in one, on the loop. Raises StrataError."""
        found = self.read(partition_log, offset, max_bytes, min_one_message=min_one_message,
                          isolation_level=isolation_level)
        try:
            isolation = self.fetch_isolation(partition_log, isolation_level, offset, found)
        except BaseException:
            found.release()
            raise
        end = partition_log.log_end_offset  # after the LSO: never below it
        aborted = isolation.aborted if isolation_level == READ_COMMITTED else None
        return IsolatedRead(found, end, isolation.last_stable_offset, aborted)

    # ---- transaction markers --------------------------------------------------------------------

    async def append_txn_marker(self, partition_log: Log, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int, commit: bool) -> AppendResult:
        """Write a COMMIT (`commit`) or ABORT marker closing the producer's transaction
        on the partition (storage: Log.append_txn_marker), on the loop when the append
        policy allows it (`appends_inline`: a marker is one small batch), else in the
        executor; wakes the partition's long polls. Raises StrataError (a stale
        producer or coordinator epoch: InvalidProducerEpochError,
        TransactionCoordinatorFencedError)."""
        if self.appends_inline(partition_log, TXN_MARKER_BYTES):
            result = partition_log.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        else:
            result = await self.blocking(partition_log.append_txn_marker, producer_id, producer_epoch,
                                         coordinator_epoch, commit)
        self.waiters.notify((partition_log.topic, partition_log.partition))
        return result

    # ---- waiting for data -----------------------------------------------------------------------

    def watch(self, tp: TopicPartition) -> asyncio.Event:
        """The event the next append to `tp` sets. Take it before looking at the log
        end: an append that moves the end after that sets this very event."""
        return self.waiters.event(tp)

    def subscribe_appends(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        """Tell `watcher` of every append to `tp` (and of its deletion, and of
        shutdown) until `unsubscribe_appends`: one subscription for good instead of
        an event per read (a fetch session's partitions)."""
        self.waiters.subscribe(tp, watcher)

    def unsubscribe_appends(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        self.waiters.unsubscribe(tp, watcher)

    async def wait_for_append(self, events: list[asyncio.Event], timeout: float) -> bool:
        """Wait until one of `events` is set (an append, a deleted topic, shutdown) or
        `timeout` seconds pass; False on timeout."""
        unique = list({id(e): e for e in events}.values())
        if not unique or timeout <= 0:
            return False
        if len(unique) == 1:
            try:
                await asyncio.wait_for(unique[0].wait(), timeout)
            except TimeoutError:
                return False
            return True
        waits = [asyncio.ensure_future(e.wait()) for e in unique]
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return bool(done)

    def begin_shutdown(self) -> None:
        """Answer every long poll now and make new ones answer at once."""
        self.shutting_down = True
        self.waiters.notify_all()

    # ---- partition-level changes of both protocols ----------------------------------------------

    async def remove_topic(self, name: str, quota: MutationQuota | None = None) -> Topic:
        """Delete a topic: registry and logs, wake its long polls (they answer
        "unknown" now), tombstone its committed offsets. `quota` counts its
        partitions once the topic is found deletable (controller_mutation_rate).
        Raises StrataError."""
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
        return deleted

    async def delete_records_before(self, partition_log: Log, offset: int) -> int:
        """Move the log start to `offset` (-1: the log end; never back); returns the
        log start offset. Raises OffsetOutOfRangeError, and InvalidTopicError for an
        internal topic (broker/internal_topics.py)."""
        internal_topics.check_delete_records(partition_log.topic)
        end, start = partition_log.log_end_offset, partition_log.log_start_offset
        target = end if offset == -1 else offset
        if target < 0 or target > end:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range [{start}, {end}]")
        if target > start:
            start = await self.blocking(self._delete_records, partition_log, target)
        return start

    def _delete_records(self, partition_log: Log, offset: int) -> int:
        """Executor side: checkpoint the new log start, then move it in memory
        (LogManager.set_log_start_offset: a failed write changes nothing, an
        acknowledged deletion survives a crash); then whole segments below the new
        start go at once, by retention's path (`.deleted`, files after file.delete.delay.ms)."""
        try:
            start = self.manager.set_log_start_offset(partition_log, offset)
        except OSError as e:
            raise self.manager.io_errors.failed(e, operation="delete records checkpoint",
                                                log_name=partition_log.name) from None
        try:
            partition_log.delete_segments_below_log_start()
        except Exception:  # the start is durable; the next retention pass tries again
            log.exception("delete_records_segments_failed", topic=partition_log.topic,
                          partition=partition_log.partition)
        return start


__all__ = ["APPENDS_PER_JOB", "AppendStats", "Appender", "INLINE_APPEND_MAX_BYTES", "INLINE_BACKOFF_S",
           "FetchIsolation", "LARGE_INLINE_APPEND_MAX_BYTES", "READ_COMMITTED", "READ_UNCOMMITTED", "IsolatedRead",
           "PartitionService", "PartitionWaiters", "SLOW_INLINE_APPEND_S", "append_outcome", "error_reason",
           "release_all", "strata_error"]
