"""Request handlers: one coroutine per request type, parsed request in, reply out.

Contract:
- `Handlers.handle(frame)` takes one frame (type + body, as FrameDecoder yields
  it) and returns the reply as a list of parts, in order: `bytes`, or a
  `FileSlice` of a segment file that the server sends with sendfile. The server
  releases every slice once sent (or when the connection dies). `handle` never
  raises (except CancelledError): a malformed request answers its ProtocolError
  code, a storage error its `code`, anything unexpected UNKNOWN_SERVER_ERROR (-1)
  with a `request_failed` error log; the connection always survives.
- Blocking storage work (appends that fsync, reads that look up indexes,
  timestamp lookups, topic changes, commits) runs in the executor, so the event
  loop does not wait for a disk. Answers from memory (log end, log start, metadata,
  committed offsets) run inline, and so do appends with no fsync due: a copy into
  the page cache, a few microseconds up to INLINE_APPEND_MAX_BYTES (64 KiB) and
  ~0.1-0.3 ms up to LARGE_INLINE_APPEND_MAX_BYTES (1 MiB), cheaper in all than
  the hand-off to a thread and back (measured on a 2-core VM: 0.31-0.35 ms of
  broker CPU per MiB produced inline, 0.47-0.55 through the executor). If an
  inline append ever takes over SLOW_INLINE_APPEND_S (20 ms: writeback
  throttling, a page cache that waits for the disk), appends over 64 KiB go to the
  executor for INLINE_BACKOFF_S (10 s), so the loop waits for a slow disk at most
  once per back-off; `append_stats` counts where appends ran.
- `handle_now(frame)` is `handle` for what needs no waiting (a PRODUCE appended
  inline): the server calls it straight from the socket callback when the
  connection is idle, with no task switch (see broker/server.py).
- PRODUCE appends that go to the executor (an fsync due by flush.messages, over
  1 MiB, or during a back-off) go through the partition's `Appender`: one
  executor job at a time per partition runs every append queued for it, in
  order, and resolves each reply's future as its append finishes. The server
  streams pipelined PRODUCEs into it (`run_key` / `begin`, see broker/server.py),
  so consecutive PRODUCEs to one partition cost one executor hop and the append
  thread does not wait for the loop between them.
- Long-poll FETCH: at the log end with maxWaitMs > 0 the request waits for the
  partition's `PartitionWaiters` event, which every successful append sets
  (from the executor thread via call_soon_threadsafe, so a cancelled request
  never swallows a wake-up), or for the timeout, or for shutdown; then it
  answers what is there (possibly an empty set). MULTIFETCH never waits.
- A cancelled handler (the connection died) never leaks a FileSlice: results
  that arrive after the cancellation are released.

Decisions where the spec is silent (Kafka's behaviour unless noted):
- PRODUCE to `__consumer_offsets`: INVALID_TOPIC_EXCEPTION ("cannot append to
  internal topic", ReplicaManager). FETCH from it is allowed.
- FETCH/MULTIFETCH: negative maxBytes is INVALID_REQUEST (Strata); negative
  maxWaitMs means no wait (Kafka: maxWait <= 0 answers at once). A FETCH answer
  is capped at fetch.max.bytes, a MULTIFETCH answer in total (items are served
  in order from the remaining budget; an item past it gets an empty set).
- OFFSETS: a time below -2 (Kafka's newer special timestamps) is INVALID_REQUEST;
  at most one offset is returned, so maxNumber >= 1 means "that offset".
- METADATA with count 0 lists every topic except the internal `__consumer_offsets`
  (the native wire has no is_internal flag, and "all topics" feeds tools that
  consume everything); asking for it by name lists it, all partitions included
  (a partition not yet created reports 0/0).
- DELETE_RECORDS moves the log start offset (never back; -1 = the log end) and
  checkpoints it before answering; an offset past the log end (or below -1) is
  OFFSET_OUT_OF_RANGE. Whole segments below the new start are deleted right
  away (Kafka waits for the next retention pass), by retention's path.
- COMMIT_OFFSET: the topic and partition must exist (UNKNOWN_TOPIC_OR_PARTITION);
  an empty group is Kafka's INVALID_GROUP_ID (24) and metadata over
  offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE (12): codes outside the
  spec's table, taken from Kafka. FETCH_OFFSET of anything never committed
  answers -1/null with NONE, as Kafka's OffsetFetch does.
- DELETE_TOPIC of `__consumer_offsets`: INVALID_REQUEST (internal topics cannot
  be deleted); committed offsets of a deleted topic are tombstoned.
- PRODUCE and MULTIPRODUCE to an unknown topic answer UNKNOWN_TOPIC_OR_PARTITION:
  as in Kafka, a produce never creates a topic (auto.create.topics.enable acts on
  the Kafka listener's Metadata requests only; the native protocol has CREATE_TOPIC).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Union

import structlog

from protocol import (AlterConfigRequest, CommitOffsetRequest, CreateTopicRequest,
                      DeleteRecordsRequest, DeleteRecordsResponse, DeleteTopicRequest,
                      DescribeConfigRequest, DescribeConfigResponse, EmptyResponse, ErrorCode,
                      FetchOffsetRequest, FetchOffsetResponse, FetchRequest, MetadataRequest,
                      MetadataResponse, MultiFetchRequest, MultiProduceRequest,
                      MultiProduceResponse, OffsetsRequest, OffsetsResponse, PartitionMetadata,
                      ProduceRequest, ProduceResult, ProtocolError, RequestType,
                      TopicMetadata, encode_response, error_response, fetch_response_header,
                      multifetch_response_parts, parse_produce, parse_request, produce_response)
from protocol.requests import PRODUCE_FIXED, PRODUCE_HEAD
from storage.errors import (InvalidRequestError, InvalidTopicError, KafkaStorageError,
                            OffsetOutOfRangeError, StrataError, TopicAlreadyExistsError,
                            UnknownTopicOrPartitionError)
from storage.file_records import FileSlice
from storage.log import Log
from storage.manager import LogManager
from storage.names import validate_topic_name

from . import internal_topics
from .config import BrokerConfig
from .group_offsets import GroupOffsets
from .log_limiter import BadRequestLog
from .topics import TopicRegistry

Part = Union[bytes, FileSlice]
Reply = list[Part]
TopicPartition = tuple[str, int]

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
INLINE_APPEND_MAX_BYTES = 64 * 1024  # appends up to this size always run on the loop (no fsync due)
# ... and up to this size too, unless one was slow lately: a message set this large costs the
# loop ~0.1-0.3 ms, less in all than the hand-off to a thread and back (cross-core cache
# misses, GIL and futex hand-offs; figures in broker/SERVER.md), and the socket's bytes are
# still in this core's cache.
LARGE_INLINE_APPEND_MAX_BYTES = 1 << 20
SLOW_INLINE_APPEND_S = 0.02  # an inline append slower than this: the page cache is pushing back
INLINE_BACKOFF_S = 10.0  # ... so large appends go to the executor for this long
HEADER_SIZE = 6  # size:int32 | error:int16, in front of every MessageSetSend
APPENDS_PER_JOB = 16  # an Appender's job yields its executor thread after this many
VALID_NAMES_CACHED = 4096  # `_valid_names` starts over past this many

log = structlog.get_logger("strata.handlers")


@dataclass
class AppendStats:
    """Where native PRODUCE/MULTIPRODUCE appends ran (counted on the loop thread): on
    the loop (`inline`) or in the executor; `backoffs`: slow inline appends that sent
    large appends to the executor for INLINE_BACKOFF_S."""

    inline: int = 0
    executor: int = 0
    backoffs: int = 0


class PartitionWaiters:
    """One asyncio.Event per partition that a long-poll FETCH is waiting on.

    `notify` sets the event and forgets it (the next waiter gets a fresh one), so
    an event is only ever set once; loop thread only."""

    def __init__(self) -> None:
        self._events: dict[TopicPartition, asyncio.Event] = {}

    def event(self, tp: TopicPartition) -> asyncio.Event:
        event = self._events.get(tp)
        if event is None:
            event = self._events[tp] = asyncio.Event()
        return event

    def notify(self, tp: TopicPartition) -> None:
        event = self._events.pop(tp, None)
        if event is not None:
            event.set()

    def wanted(self, tp: TopicPartition) -> bool:
        """Whether a long poll waits on `tp` (any thread: one dict lookup)."""
        return tp in self._events

    def notify_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    def __len__(self) -> int:
        return len(self._events)


class Appender:
    """The appends of one partition, in the order submitted, by one executor job at
    a time: while appends are queued a job runs them one after another, so a stream
    of PRODUCEs (pipelined on a connection, or from several) costs one executor hop,
    not one each, and each append sees the effects of the ones before it.

    `submit` (loop thread) queues the message set with the future of its reply and
    starts a job when none runs. The job (executor thread) appends, builds the reply
    (or the error reply, as `Handlers.handle` would) and resolves the future through
    call_soon_threadsafe as each append finishes, so replies go out while later
    appends run. After APPENDS_PER_JOB appends a job that still has work queues a
    fresh job behind the executor's other work, so hot partitions never starve
    other blocking requests of threads. An append's effects survive a cancelled
    future (the connection died)."""

    __slots__ = ("handlers", "log", "_items", "_lock", "_running")

    def __init__(self, handlers: "Handlers", one: Log):
        self.handlers = handlers
        self.log = one
        self._items: deque[tuple[Any, asyncio.Future]] = deque()
        self._lock = threading.Lock()
        self._running = False

    def idle(self) -> bool:
        with self._lock:
            return not self._running and not self._items

    def submit(self, data, future: asyncio.Future) -> None:
        with self._lock:
            self._items.append((data, future))
            if self._running:
                return
            self._running = True
        try:
            self.handlers.executor.submit(self._run)
        except RuntimeError:  # the executor is shut down: the broker is stopping
            with self._lock:
                items, self._items, self._running = list(self._items), deque(), False
            for _, waiting in items:
                if not waiting.done():
                    waiting.set_result([error_response(ErrorCode.KAFKA_STORAGE_ERROR)])

    def _run(self) -> None:
        handlers, one, loop = self.handlers, self.log, self.handlers.loop
        tp = (one.topic, one.partition)
        done = 0
        while True:
            with self._lock:
                if not self._items:
                    self._running = False
                    break
                if done >= APPENDS_PER_JOB:
                    try:
                        handlers.executor.submit(self._run)  # still running: the next job goes on
                        return
                    except RuntimeError:
                        pass  # shutting down: finish here
                data, future = self._items.popleft()
            done += 1
            try:
                result = one.append(data, in_place=True)  # the frame is ours to patch
                reply = [produce_response(result.first_offset, result.log_append_time)]
            except StrataError as e:
                reply = [error_response(handlers._error_code(e, one))]
            except Exception:
                log.exception("request_failed", request="ProduceRequest")
                reply = [error_response(ErrorCode.UNKNOWN_SERVER_ERROR)]
            del data
            try:
                loop.call_soon_threadsafe(_resolve, future, reply)
                if handlers.waiters.wanted(tp):
                    loop.call_soon_threadsafe(handlers.waiters.notify, tp)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more
        try:
            loop.call_soon_threadsafe(handlers._appender_idle, self)
        except RuntimeError:
            pass


def _resolve(future: asyncio.Future, reply: Reply) -> None:
    if not future.done():  # cancelled: the connection died; the append stands
        future.set_result(reply)


def _release_all(result: Any) -> None:
    if isinstance(result, FileSlice):
        result.release()
    elif isinstance(result, (list, tuple)):
        for item in result:
            _release_all(item)


class Handlers:
    def __init__(self, config: BrokerConfig, manager: LogManager, registry: TopicRegistry,
                 executor: Executor, loop: asyncio.AbstractEventLoop):
        self.config = config
        self.manager = manager
        self.registry = registry
        self.executor = executor
        self.loop = loop
        self.waiters = PartitionWaiters()
        self._appenders: dict[Log, Appender] = {}  # logs with appends queued or running
        self._valid_names: set[str] = set()  # names validate_topic_name accepted (a regex match each)
        self._inline_backoff_until = 0.0  # loop.time() before which large appends use the executor
        self.append_stats = AppendStats()
        self.shutting_down = False
        # Bad requests of both listeners, logged rate-limited (broker/log_limiter.py).
        self.bad_requests = BadRequestLog(log, loop=loop)
        self.offsets = GroupOffsets(registry, self._internal_log,
                                    metadata_max_bytes=config.offset_metadata_max_bytes,
                                    on_append=self._notify_threadsafe)
        self._dispatch: dict[type, Callable[[Any], Awaitable[Reply]]] = {
            ProduceRequest: self.produce,
            FetchRequest: self.fetch,
            MultiFetchRequest: self.multifetch,
            MultiProduceRequest: self.multiproduce,
            OffsetsRequest: self.offsets_request,
            CreateTopicRequest: self.create_topic,
            DeleteTopicRequest: self.delete_topic,
            MetadataRequest: self.metadata,
            DescribeConfigRequest: self.describe_config,
            AlterConfigRequest: self.alter_config,
            DeleteRecordsRequest: self.delete_records,
            CommitOffsetRequest: self.commit_offset,
            FetchOffsetRequest: self.fetch_offset,
        }

    # ---- entry point --------------------------------------------------------------------------

    async def handle(self, frame, peer=None) -> Reply:
        try:
            request = parse_request(frame)
        except ProtocolError as e:
            self.bad_requests.record(peer, "bad_request", error=str(e), peer=peer)
            return [error_response(e.code)]
        try:
            return await self._dispatch[type(request)](request)
        except StrataError as e:
            return [error_response(e.code)]
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request_failed", request=type(request).__name__)
            return [error_response(ErrorCode.UNKNOWN_SERVER_ERROR)]

    def bad_frame_reply(self, error: ProtocolError) -> Reply:
        return [error_response(error.code)]  # a frame too short for a type: answer, read on

    def fatal_reply(self, error: ProtocolError) -> Reply:
        return [error_response(error.code)]  # a frame over the limit: answer, then close

    def begin_shutdown(self) -> None:
        """Answer every long-poll FETCH now and make new ones answer at once."""
        self.shutting_down = True
        self.waiters.notify_all()

    # ---- helpers -----------------------------------------------------------------------------

    async def _blocking(self, fn: Callable, *args, cleanup: Callable[[Any], None] | None = None):
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

    def _notify_threadsafe(self, topic: str, partition: int) -> None:
        try:
            self.loop.call_soon_threadsafe(self.waiters.notify, (topic, partition))
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def _append(self, one: Log, data) -> Any:
        """Executor side of an append: write, then wake long-poll fetches. A fetch
        takes its event before it reads the log end, so when no event is there yet
        the fetch will see this append's end: no wake-up needed."""
        result = one.append(data, in_place=True)  # the frame is ours to patch
        if self.waiters.wanted((one.topic, one.partition)):
            self._notify_threadsafe(one.topic, one.partition)
        return result

    def _append_inline(self, one: Log, data) -> Any:
        """`_append` on the loop thread: wake long polls directly. An append that took
        longer than SLOW_INLINE_APPEND_S (writeback throttling, a disk behind a full
        page cache) sends large appends back to the executor for INLINE_BACKOFF_S, so
        the loop waits for a slow disk once per back-off at most."""
        self.append_stats.inline += 1
        start = time.perf_counter()
        result = one.append(data, in_place=True)
        took = time.perf_counter() - start
        if took > SLOW_INLINE_APPEND_S:
            if self.loop.time() >= self._inline_backoff_until:
                self.append_stats.backoffs += 1
                log.warning("inline_append_slow", topic=one.topic, partition=one.partition,
                            bytes=len(data), took_ms=round(took * 1000, 1), backoff_s=INLINE_BACKOFF_S)
            self._inline_backoff_until = self.loop.time() + INLINE_BACKOFF_S
        self.waiters.notify((one.topic, one.partition))
        return result

    def _internal_log(self, topic: str, partition: int) -> Log:
        """The log of an internal topic's partition, created on first use (blocking)."""
        return self.manager.get_or_create_log(topic, partition, self.registry.log_config(topic))

    def _auto_create(self, topic: str) -> None:
        try:
            self.registry.create(topic, -1, ())
        except TopicAlreadyExistsError:
            pass  # another connection won the race

    async def _log(self, topic: str, partition: int, *, produce: bool = False) -> Log:
        """The live log of a partition, or the per-request error."""
        one = self._open_log(topic, partition, produce=produce)
        if one is None:  # an internal topic's log, created on first use
            one = await self._blocking(self._internal_log, topic, partition)
        return one

    def _open_log(self, topic: str, partition: int, *, produce: bool = False) -> Log | None:
        """`_log` without the await: None for an internal topic's log not created yet
        (never for a PRODUCE, which internal topics refuse first)."""
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
        one = self.manager.get_log(topic, partition)
        if one is None and not known.internal:
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")
        return one

    def _error_code(self, e: StrataError, one: Log | None) -> int:
        """A log closed under a request by DELETE_TOPIC reads as an unknown partition."""
        if isinstance(e, KafkaStorageError) and one is not None and \
                self.manager.get_log(one.topic, one.partition) is not one:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return e.code

    # ---- PRODUCE / MULTIPRODUCE ---------------------------------------------------------------

    def _cheap_append(self, one: Log, data) -> bool:
        """An append with no fsync due is a copy into the page cache: up to
        INLINE_APPEND_MAX_BYTES a few microseconds, up to LARGE_INLINE_APPEND_MAX_BYTES
        a fraction of a millisecond; either way cheaper on the loop than the hand-off
        to the executor and back (see LARGE_INLINE_APPEND_MAX_BYTES)."""
        return one.config.flush_messages == LONG_MAX and self._inline_size(len(data))

    def _inline_size(self, size: int) -> bool:
        """Whether a message set of `size` bytes is appended on the loop (no fsync due)."""
        return size <= INLINE_APPEND_MAX_BYTES or (
            size <= LARGE_INLINE_APPEND_MAX_BYTES and self.loop.time() >= self._inline_backoff_until)

    async def produce(self, req: ProduceRequest) -> Reply:
        one = await self._log(req.topic, req.partition, produce=True)
        try:
            if not self._cheap_append(one, req.message_set):
                future = self.loop.create_future()
                self.append_stats.executor += 1
                self._appender(one).submit(req.message_set, future)
                return await future
            result = self._append_inline(one, req.message_set)
        except StrataError as e:
            return [error_response(self._error_code(e, one))]
        return [produce_response(result.first_offset, result.log_append_time)]

    def handle_now(self, frame, peer=None) -> Reply | None:
        """For the server (RequestHandlers): the reply to `frame` if it can be made
        right now, on the loop, without waiting for anything: a PRODUCE whose append
        runs inline (`_cheap_append`), a FETCH with data to send or nothing to wait
        for. None, with nothing done, for anything else, which then goes through
        `handle`. Answers exactly as `handle` would."""
        if frame[0]:  # the int16 type, big-endian: every type so far has a zero high byte
            return None
        if frame[1] == RequestType.FETCH:
            return self._fetch_now(frame)
        if frame[1] != RequestType.PRODUCE:
            return None
        one = None
        try:
            topic, partition, message_set = parse_produce(frame)
            one = self._open_log(topic, partition, produce=True)
            if not self._cheap_append(one, message_set):  # type: ignore[arg-type]
                return None
            result = self._append_inline(one, message_set)
        except ProtocolError as e:
            self.bad_requests.record(peer, "bad_request", error=str(e), peer=peer)
            return [error_response(e.code)]
        except StrataError as e:
            return [error_response(self._error_code(e, one) if one is not None else e.code)]
        except Exception:
            log.exception("request_failed", request="ProduceRequest")
            return [error_response(ErrorCode.UNKNOWN_SERVER_ERROR)]
        return [produce_response(result.first_offset, result.log_append_time)]

    def run_key(self, frame) -> tuple[bytes, int] | None:
        """For the server's runs (RequestHandlers): a PRODUCE whose append goes to the
        executor is keyed by its partition, so consecutive queued PRODUCEs to one
        partition share one executor hop (`begin`). Anything else: None."""
        size = len(frame)
        if size <= INLINE_APPEND_MAX_BYTES:
            return None
        type_, topic_len = PRODUCE_HEAD.unpack_from(frame)
        if type_ != RequestType.PRODUCE or topic_len < 0:
            return None
        at = PRODUCE_HEAD.size + topic_len
        if at + PRODUCE_FIXED.size > size:
            return None  # malformed: `handle` answers it alone
        topic = bytes(frame[PRODUCE_HEAD.size:at])
        partition, set_size = PRODUCE_FIXED.unpack_from(frame, at)
        if self._inline_size(set_size):
            # Inline (`_cheap_append`) unless the log wants an fsync.
            one = self.manager.get_log(topic.decode("utf-8", "replace"), partition)
            if one is None or one.config.flush_messages == LONG_MAX:
                return None
        return topic, partition

    def begin(self, frame, peer=None) -> asyncio.Future:
        """For the server (RequestHandlers): start a keyed PRODUCE now and return the
        future of its reply. Parsing and checks happen here, on the loop; the append
        goes to the partition's appender, behind every append begun before it. The
        future never fails: errors are answered as `handle` answers them."""
        future = self.loop.create_future()
        try:
            topic, partition, message_set = parse_produce(frame)  # run_key saw a PRODUCE type
            one = self._open_log(topic, partition, produce=True)
        except (ProtocolError, StrataError) as e:
            future.set_result([error_response(e.code)])
            return future
        except Exception:
            log.exception("request_failed", request="ProduceRequest")
            future.set_result([error_response(ErrorCode.UNKNOWN_SERVER_ERROR)])
            return future
        self.append_stats.executor += 1
        self._appender(one).submit(message_set, future)
        return future

    def _appender(self, one: Log) -> "Appender":
        appender = self._appenders.get(one)
        if appender is None:
            appender = self._appenders[one] = Appender(self, one)
        return appender

    def _appender_idle(self, appender: "Appender") -> None:
        """Loop thread: forget an appender with nothing to do (submits happen on this
        thread too, so none can slip in between the check and the removal)."""
        if appender.idle() and self._appenders.get(appender.log) is appender:
            del self._appenders[appender.log]

    async def multiproduce(self, req: MultiProduceRequest) -> Reply:
        targets: list[Log | int] = []
        for item in req.items:
            try:
                targets.append(await self._log(item.topic, item.partition, produce=True))
            except StrataError as e:
                targets.append(e.code)

        def append_all() -> list[ProduceResult]:
            results = []
            for item, target in zip(req.items, targets):
                if not isinstance(target, Log):
                    results.append(ProduceResult(target))
                    continue
                try:
                    done = self._append(target, item.message_set)
                    results.append(ProduceResult(ErrorCode.NONE, done.first_offset, done.log_append_time))
                except StrataError as e:
                    results.append(ProduceResult(self._error_code(e, target)))
                except Exception:
                    log.exception("append_failed", topic=item.topic, partition=item.partition)
                    results.append(ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR))
            return results

        self.append_stats.executor += len(req.items)
        results = await self._blocking(append_all)
        return [encode_response(MultiProduceResponse(ErrorCode.NONE, results))]

    # ---- FETCH / MULTIFETCH -------------------------------------------------------------------

    async def fetch(self, req: FetchRequest) -> Reply:
        if req.max_bytes < 0:
            raise InvalidRequestError(f"maxBytes {req.max_bytes} is negative")
        tp = (req.topic, req.partition)
        one = await self._log(req.topic, req.partition)
        deadline = None
        while True:
            # Take the event before looking at the log end: an append that moves the
            # end after this point sets this very event.
            event = self.waiters.event(tp) if req.max_wait_ms > 0 else None
            if req.offset == one.log_end_offset:
                if event is None or self.shutting_down:
                    return [fetch_response_header(ErrorCode.NONE, 0)]
                if deadline is None:
                    deadline = self.loop.time() + req.max_wait_ms / 1000
                remaining = deadline - self.loop.time()
                if remaining <= 0:
                    return [fetch_response_header(ErrorCode.NONE, 0)]
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except asyncio.TimeoutError:
                    return [fetch_response_header(ErrorCode.NONE, 0)]
                if self.manager.get_log(*tp) is not one:
                    raise UnknownTopicOrPartitionError(f"{req.topic}-{req.partition} was deleted")
                continue
            return self._fetch_answer(one, req)

    def _fetch_answer(self, one: Log, req: FetchRequest) -> Reply:
        """A FETCH's answer from what the log holds now (no waiting)."""
        max_bytes = min(req.max_bytes, self.config.fetch_max_bytes, INT32_MAX - 2)
        try:
            # On the loop: an index search and a few header reads from the page
            # cache, the same kind of work as the sendfile that follows.
            found = one.read(req.offset, max_bytes)
        except StrataError as e:
            return [error_response(self._error_code(e, one))]
        if found.length == 0:
            found.release()
            return [fetch_response_header(ErrorCode.NONE, 0)]
        return [fetch_response_header(ErrorCode.NONE, found.length), found]

    def _fetch_now(self, frame) -> Reply | None:
        """handle_now for a FETCH: the answer when nothing needs waiting for (data
        there, no long poll to start, the partition's log open); else None."""
        try:
            req = parse_request(frame)
        except ProtocolError:
            return None  # `handle` answers it
        if not isinstance(req, FetchRequest) or req.max_bytes < 0:
            return None
        try:
            one = self._open_log(req.topic, req.partition)
        except StrataError as e:
            return [error_response(e.code)]
        if one is None or (req.offset == one.log_end_offset and req.max_wait_ms > 0 and not self.shutting_down):
            return None  # an internal log to create, or a long poll: the task waits
        return self._fetch_answer(one, req)

    async def multifetch(self, req: MultiFetchRequest) -> Reply:
        targets: list[Log | int] = []
        for item in req.items:
            if item.max_bytes < 0:
                targets.append(ErrorCode.INVALID_REQUEST)
                continue
            try:
                targets.append(await self._log(item.topic, item.partition))
            except StrataError as e:
                targets.append(e.code)
        # The whole answer must fit an int32 size (and fetch.max.bytes).
        budget = min(self.config.fetch_max_bytes, INT32_MAX - 2 - HEADER_SIZE * len(req.items))

        def read_all() -> list[tuple[int, FileSlice | None]]:
            nonlocal budget
            results: list[tuple[int, FileSlice | None]] = []
            try:
                for item, target in zip(req.items, targets):
                    if not isinstance(target, Log):
                        results.append((target, None))
                        continue
                    try:
                        found = target.read(item.offset, min(item.max_bytes, budget))
                    except StrataError as e:
                        results.append((self._error_code(e, target), None))
                        continue
                    except Exception:
                        log.exception("read_failed", topic=item.topic, partition=item.partition)
                        results.append((ErrorCode.UNKNOWN_SERVER_ERROR, None))
                        continue
                    budget -= found.length
                    results.append((ErrorCode.NONE, found))
            except BaseException:
                _release_all([s for _, s in results if s is not None])
                raise
            return results

        results = read_all()  # on the loop, as FETCH reads
        top, headers = multifetch_response_parts([(error, s.length if s else 0) for error, s in results])
        parts: Reply = [top]
        for header, (_, found) in zip(headers, results):
            parts.append(header)
            if found is not None:
                if found.length:
                    parts.append(found)
                else:
                    found.release()
        return parts

    # ---- OFFSETS ----------------------------------------------------------------------------

    async def offsets_request(self, req: OffsetsRequest) -> Reply:
        one = await self._log(req.topic, req.partition)
        if req.time < OffsetsRequest.EARLIEST:
            raise InvalidRequestError(f"time {req.time} is neither -1, -2 nor a timestamp")
        if req.max_number <= 0:
            offsets: tuple[int, ...] = ()
        elif req.time == OffsetsRequest.LATEST:
            offsets = (one.log_end_offset,)
        elif req.time == OffsetsRequest.EARLIEST:
            offsets = (one.log_start_offset,)
        else:
            found = await self._blocking(one.offset_for_timestamp, req.time)
            offsets = () if found is None else (found.offset,)
        return [encode_response(OffsetsResponse(ErrorCode.NONE, offsets))]

    # ---- topics -------------------------------------------------------------------------------

    async def create_topic(self, req: CreateTopicRequest) -> Reply:
        await self._blocking(self.registry.create, req.topic, req.partitions, req.configs)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def delete_topic(self, req: DeleteTopicRequest) -> Reply:
        await self.remove_topic(req.topic)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def remove_topic(self, name: str):
        """Delete a topic (both protocols): registry and logs, wake its long polls,
        tombstone its committed offsets. Raises StrataError."""
        deleted = await self._blocking(self.registry.delete, name)
        for partition in range(deleted.partitions):
            self.waiters.notify((deleted.name, partition))  # long polls answer "unknown" now
        try:
            await self._blocking(self.offsets.delete_topic_offsets, deleted.name)
        except Exception:
            log.exception("offsets_cleanup_failed", topic=deleted.name)
        return deleted

    async def metadata(self, req: MetadataRequest) -> Reply:
        names = req.topics or self.registry.names()
        topics = []
        for name in names:
            try:
                validate_topic_name(name)
            except StrataError as e:
                topics.append(TopicMetadata(name, e.code))
                continue
            known = self.registry.get(name)
            if known is None:
                topics.append(TopicMetadata(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions = []
            for partition in range(known.partitions):
                one = self.manager.get_log(name, partition)
                start, end = (0, 0) if one is None else (one.log_start_offset, one.log_end_offset)
                partitions.append(PartitionMetadata(partition, start, end))
            topics.append(TopicMetadata(name, ErrorCode.NONE, partitions))
        return [encode_response(MetadataResponse(ErrorCode.NONE, topics))]

    async def describe_config(self, req: DescribeConfigRequest) -> Reply:
        configs = self.registry.describe(req.topic)
        return [encode_response(DescribeConfigResponse(ErrorCode.NONE, sorted(configs.items())))]

    async def alter_config(self, req: AlterConfigRequest) -> Reply:
        await self._blocking(self.registry.alter, req.topic, req.configs)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def delete_records(self, req: DeleteRecordsRequest) -> Reply:
        one = await self._log(req.topic, req.partition)
        start = await self.delete_records_before(one, req.offset)
        return [encode_response(DeleteRecordsResponse(ErrorCode.NONE, start))]

    async def delete_records_before(self, one: Log, offset: int) -> int:
        """Move the log start to `offset` (-1: the log end; never back) for both
        protocols; returns the log start offset. Raises OffsetOutOfRangeError, and
        InvalidTopicError for an internal topic (broker/internal_topics.py)."""
        internal_topics.check_delete_records(one.topic)
        end, start = one.log_end_offset, one.log_start_offset
        target = end if offset == DeleteRecordsRequest.LOG_END else offset
        if target < 0 or target > end:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range [{start}, {end}]")
        if target > start:
            start = await self._blocking(self._delete_records, one, target)
        return start

    def _delete_records(self, one: Log, offset: int) -> int:
        """Executor side: checkpoint the new log start, then move it in memory
        (LogManager.set_log_start_offset: a failed write changes nothing, an
        acknowledged deletion survives a crash); then whole segments below the new
        start go at once, by retention's path (`.deleted`, files after file.delete.delay.ms)."""
        try:
            start = self.manager.set_log_start_offset(one, offset)
        except OSError as e:
            raise self.manager.io_errors.failed(e, operation="delete records checkpoint",
                                                log_name=one.name) from None
        try:
            one.delete_segments_below_log_start()
        except Exception:  # the start is durable; the next retention pass tries again
            log.exception("delete_records_segments_failed", topic=one.topic, partition=one.partition)
        return start

    # ---- committed offsets --------------------------------------------------------------------

    async def commit_offset(self, req: CommitOffsetRequest) -> Reply:
        await self._blocking(self.offsets.commit, req.group, req.topic, req.partition, req.offset,
                             req.metadata)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def fetch_offset(self, req: FetchOffsetRequest) -> Reply:
        validate_topic_name(req.topic)
        found = self.offsets.fetch(req.group, req.topic, req.partition)
        if found is None:
            return [encode_response(FetchOffsetResponse(ErrorCode.NONE, -1, None))]
        return [encode_response(FetchOffsetResponse(ErrorCode.NONE, found.offset, found.metadata))]
