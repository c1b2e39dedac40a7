"""Appends of both protocols: the one append policy (`Appends`), the executor
appends of a partition in order (`Appender`), and where appends ran (`AppendStats`).

The policy, written once here: an append with no fsync due (flush.messages
unset) and no earlier append of its partition still queued runs inline on the
loop: a copy into the page cache, a few microseconds up to
INLINE_APPEND_MAX_BYTES (64 KiB) and a fraction of a millisecond up to
LARGE_INLINE_APPEND_MAX_BYTES (1 MiB), cheaper in all than the hand-off to a
thread and back (the frame read by another core, GIL and futex hand-offs); the
price is that a 1 MiB append holds the loop for that time. If an inline append takes over
SLOW_INLINE_APPEND_S (20 ms: writeback throttling, a page cache that waits for
the disk), appends over 64 KiB go to the executor for INLINE_BACKOFF_S (10 s), so
the loop waits for a slow disk at most once per back-off. Every other append (an
fsync due by flush.messages, over 1 MiB, during a back-off, or behind a queued
one) goes to the partition's `Appender`: one executor job at a time per partition
runs the appends queued for it in order. So an append never overtakes an earlier
one of its partition. Transaction markers (`append_txn_marker`) follow the same
policy. Every append wakes the partition's long polls and counts its topic's
messages and bytes in (broker/admin/metrics.py), or a failed produce.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from broker.admin.metrics import BrokerMetrics
from kafka_format.errors import StrataError
from protocol import ErrorCode
from storage.log import AppendResult

from .errors import strata_error
from .types import AppendOutcome, PartitionLog
from .waiting import PartitionWaiters

T = TypeVar("T")
# What an append's future resolves to: `answer(result, error_code, error)` of the
# caller, run where the append finished (the loop, or the executor thread); `error`
# is the StrataError met (None on success or for another exception), for callers
# that answer more than its code (a Kafka Produce's record errors and message).
Answer = Callable[[AppendResult | None, int, StrataError | None], T]

LONG_MAX = 2**63 - 1
INLINE_APPEND_MAX_BYTES = 64 * 1024  # appends up to this size always run on the loop (no fsync due)
TXN_MARKER_BYTES = 78  # a COMMIT/ABORT control batch: 61-byte header + one 17-byte control record
# ... and up to this size too, unless one was slow lately: a message set this large costs the
# loop less than the hand-off to a thread and back, and the socket's bytes are still in this
# core's cache.
LARGE_INLINE_APPEND_MAX_BYTES = 1 << 20
SLOW_INLINE_APPEND_S = 0.02  # an inline append slower than this: the page cache is pushing back
INLINE_BACKOFF_S = 10.0  # ... so large appends go to the executor for this long
APPENDS_PER_JOB = 16  # an Appender's job yields its executor thread after this many

log = structlog.get_logger("strata.partitions")


@dataclass
class AppendStats:
    """Where appends of both protocols ran (counted on the loop thread): on the loop
    (`inline`) or in the executor; `backoffs`: slow inline appends that sent large
    appends to the executor for INLINE_BACKOFF_S."""

    inline: int = 0
    executor: int = 0
    backoffs: int = 0


def append_outcome(result: AppendResult | None, code: int, error: StrataError | None) -> AppendOutcome:
    """The plain `Answer`: the AppendOutcome (result, error code, error)."""
    return AppendOutcome(result, code, error)


def _resolve(future: asyncio.Future, reply: Any) -> None:
    if not future.done():  # cancelled: the connection died; the append stands
        future.set_result(reply)


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

    __slots__ = ("appends", "partition_log", "_items", "_lock", "_running")

    def __init__(self, appends: Appends, partition_log: PartitionLog):
        self.appends = appends
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
            self.appends.executor.submit(self._run)
        except RuntimeError:  # the executor is shut down: the broker is stopping
            with self._lock:
                items, self._items, self._running = list(self._items), deque(), False
            for _, waiting, answer_later in items:
                if not waiting.done():
                    waiting.set_result(answer_later(None, ErrorCode.KAFKA_STORAGE_ERROR, None))

    def _run(self) -> None:
        appends, partition_log, loop = self.appends, self.partition_log, self.appends.loop
        tp = (partition_log.topic, partition_log.partition)
        done = 0
        while True:
            with self._lock:
                if not self._items:
                    self._running = False
                    break
                if done >= APPENDS_PER_JOB:
                    try:
                        appends.executor.submit(self._run)  # still running: the next job goes on
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
                reply = answer(None, appends.error_code(e, partition_log), strata_error(e))
            del data
            try:
                if appends.metrics is not None:  # counted on the loop, as every other append
                    loop.call_soon_threadsafe(appends.count_append, tp[0], result, size)
                loop.call_soon_threadsafe(_resolve, future, reply)
                if appends.waiters.wanted(tp):
                    loop.call_soon_threadsafe(appends.waiters.notify, tp)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(appends.appender_idle, self)


class Appends:
    """The append policy of both protocols (the module's doc): inline on the loop
    or queued on the partition's Appender."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor, waiters: PartitionWaiters,
                 metrics: BrokerMetrics | None, error_code: Callable[[BaseException, Any], int],
                 blocking: Callable[..., Awaitable[Any]]):
        self.loop = loop
        self.executor = executor
        self.waiters = waiters
        self.metrics = metrics
        self.error_code = error_code  # (error, log) -> the Kafka code to answer
        self.blocking = blocking  # the executor, for work a cancelled caller never cancels
        self.stats = AppendStats()
        self._appenders: dict[PartitionLog, Appender] = {}  # logs with executor appends queued or running
        self._inline_backoff_until = 0.0  # loop.time() before which large appends use the executor

    def appends_inline(self, partition_log: PartitionLog, size: int, *, ordered_by_caller: bool = False) -> bool:
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

    def try_append_inline(self, partition_log: PartitionLog, data: Any) -> AppendResult | None:
        """Append `data` on the loop if the policy allows (`appends_inline`), waking
        long polls; None, with nothing done, when it belongs in the executor
        (`append_later`). Raises StrataError."""
        if not self.appends_inline(partition_log, len(data)):
            return None
        return self.append_inline(partition_log, data)

    def append_inline(self, partition_log: PartitionLog, data: Any) -> AppendResult:
        """Append on the loop, the policy already consulted (`appends_inline`; a
        request that checked every partition first appends them all here). Wakes
        long polls; a slow append starts the back-off. Raises StrataError."""
        self.stats.inline += 1
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
                self.stats.backoffs += 1
                log.warning("inline_append_slow", topic=partition_log.topic, partition=partition_log.partition,
                            bytes=len(data), took_ms=round(took * 1000, 1), backoff_s=INLINE_BACKOFF_S)
            self._inline_backoff_until = self.loop.time() + INLINE_BACKOFF_S
        self.waiters.notify((partition_log.topic, partition_log.partition))
        return result

    def append_later(self, partition_log: PartitionLog, data: Any, answer: Answer[T]) -> asyncio.Future[T]:
        """Queue `data` on the partition's appender (the executor), behind every
        append queued before it; the future (never failing) resolves to
        `answer(result, error_code, error)`, called on the executor thread."""
        future: asyncio.Future[T] = self.loop.create_future()
        self.stats.executor += 1
        appender = self._appenders.get(partition_log)
        if appender is None:
            appender = self._appenders[partition_log] = Appender(self, partition_log)
        appender.submit(data, future, answer)
        return future

    def start_append(self, partition_log: PartitionLog, data: Any, answer: Answer[T]) -> asyncio.Future[T] | T:
        """The one append policy: the answer at once when the append ran inline (or
        failed), else the future of it from the executor (`append_later`)."""
        try:
            result = self.try_append_inline(partition_log, data)
        except Exception as e:
            return answer(None, self.error_code(e, partition_log), strata_error(e))
        if result is None:
            return self.append_later(partition_log, data, answer)
        return answer(result, ErrorCode.NONE, None)

    async def append(self, partition_log: PartitionLog, data: Any, answer: Answer[T]) -> T:
        """`start_append`, awaited."""
        started = self.start_append(partition_log, data, answer)
        if isinstance(started, asyncio.Future):
            return await started
        return started

    async def append_txn_marker(self, partition_log: PartitionLog, producer_id: int, producer_epoch: int,
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
