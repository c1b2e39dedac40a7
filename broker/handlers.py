"""The native protocol's request handlers: parse, call the partition service, encode.

Contract:
- `Handlers.handle(frame)` takes one frame (type + body, as FrameReader yields
  it) and returns the reply as a list of parts, in order: `bytes`, or a
  `FileSlice` of a segment file that the server sends with sendfile. The server
  releases every slice once sent (or when the connection dies). `handle` never
  raises (except CancelledError): a malformed request answers its ProtocolError
  code, a storage error its code (`PartitionService.error_code`), anything
  unexpected UNKNOWN_SERVER_ERROR (-1) with a `request_failed` error log; the
  connection always survives.
- Every partition-level policy (finding logs, inline versus executor appends and
  the slow-disk back-off, on-loop reads, long polls, error codes) is the
  partition service's (broker/partitions.py), shared with the Kafka listener.
  Blocking work (timestamp lookups, topic changes, commits) runs in the executor
  through it; answers from memory (log end, log start, metadata, committed
  offsets) run inline.
- The server's fast path (`FastPath`, broker/connection.py): `handle_now(frame)`
  is `handle` for what needs no waiting (a PRODUCE appended inline, a FETCH with
  data or nothing to wait for), called straight from the socket callback when
  the connection is idle; `run_key` / `begin` stream pipelined PRODUCEs that go
  to the executor into the partition's appender, so consecutive PRODUCEs to one
  partition cost one executor hop.
- Long-poll FETCH: at the log end with maxWaitMs > 0 the request waits for an
  append to the partition (`PartitionService.wait_for_append`), for the timeout,
  or for shutdown; then it answers what is there (possibly an empty set).
  MULTIFETCH never waits.
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
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from kafka_format.errors import InvalidRequestError, StrataError, UnknownTopicOrPartitionError
from kafka_format.topic_names import validate_topic_name
from protocol import (
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicRequest,
    DescribeConfigRequest,
    DescribeConfigResponse,
    EmptyResponse,
    ErrorCode,
    FetchOffsetRequest,
    FetchOffsetResponse,
    FetchRequest,
    MetadataRequest,
    MetadataResponse,
    MultiFetchRequest,
    MultiProduceRequest,
    MultiProduceResponse,
    OffsetsRequest,
    OffsetsResponse,
    PartitionMetadata,
    ProduceRequest,
    ProduceResult,
    ProtocolError,
    RequestType,
    TopicMetadata,
    encode_response,
    error_response,
    fetch_response_header,
    multifetch_response_parts,
    parse_produce,
    parse_request,
    produce_response,
)
from protocol.requests import PRODUCE_FIXED, PRODUCE_HEAD
from storage.file_records import FileSlice
from storage.log import AppendResult, Log

from .connection import FastPath, Reply
from .group_offsets import GroupOffsets
from .listeners import peer_of
from .log_limiter import BadRequestLog
from .partitions import INLINE_APPEND_MAX_BYTES, PartitionService, release_all

INT32_MAX = 2**31 - 1
HEADER_SIZE = 6  # size:int32 | error:int16, in front of every MessageSetSend

log = structlog.get_logger("strata.handlers")


def produce_answer(result: AppendResult | None, code: int, error: StrataError | None) -> Reply:
    """A PRODUCE's reply from its append's outcome (runs where the append ran); the
    native PRODUCE answers no record errors, only the code."""
    if result is None:
        return [error_response(code)]
    return [produce_response(result.first_offset, result.log_append_time)]


def produce_result(result: AppendResult | None, code: int, error: StrataError | None) -> ProduceResult:
    """A MULTIPRODUCE item's result from its append's outcome."""
    if result is None:
        return ProduceResult(code)
    return ProduceResult(ErrorCode.NONE, result.first_offset, result.log_append_time)


class Handlers(FastPath):
    """The native protocol's RequestHandlers (broker/connection.py), with its fast path."""

    def __init__(self, partitions: PartitionService, bad_requests: BadRequestLog):
        self.partitions = partitions
        self.config = partitions.config
        self.registry = partitions.registry
        self.loop = partitions.loop
        # Bad requests of both listeners, logged rate-limited (broker/log_limiter.py).
        self.bad_requests = bad_requests
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

    @property
    def offsets(self) -> GroupOffsets:
        return self.partitions.offsets

    # ---- entry point (broker.connection.RequestHandlers) ----------------------------------------

    async def handle(self, frame, conn=None) -> Reply:
        try:
            request = parse_request(frame)
        except ProtocolError as e:
            self.bad_requests.record(peer_of(conn), "bad_request", error=str(e), peer=peer_of(conn))
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
        self.partitions.begin_shutdown()

    # ---- the fast path (broker.connection.FastPath) ---------------------------------------------

    def handle_now(self, frame, conn=None) -> Reply | None:
        """The reply to `frame` if it can be made right now, on the loop, without
        waiting for anything: a PRODUCE whose append runs inline (the partition
        service's policy), a FETCH with data to send or nothing to wait for. None,
        with nothing done, for anything else, which then goes through `handle`.
        Answers exactly as `handle` would."""
        if frame[0]:  # the int16 type, big-endian: every type so far has a zero high byte
            return None
        if frame[1] == RequestType.FETCH:
            return self._fetch_now(frame)
        if frame[1] != RequestType.PRODUCE:
            return None
        partitions = self.partitions
        partition_log = None
        try:
            topic, partition, message_set = parse_produce(frame)
            partition_log = partitions.open_log(topic, partition, produce=True)
            result = partitions.try_append_inline(partition_log, message_set)  # type: ignore[arg-type]
            if result is None:
                return None
        except ProtocolError as e:
            self.bad_requests.record(peer_of(conn), "bad_request", error=str(e), peer=peer_of(conn))
            return [error_response(e.code)]
        except Exception as e:
            return [error_response(partitions.error_code(e, partition_log))]
        return [produce_response(result.first_offset, result.log_append_time)]

    def run_key(self, frame) -> tuple[bytes, int] | None:
        """A PRODUCE whose append goes to the executor is keyed by its partition, so
        consecutive queued PRODUCEs to one partition share one executor hop (`begin`).
        Anything else: None."""
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
        if self.partitions.inline_size(set_size):
            partition_log = self.partitions.manager.get_log(topic.decode("utf-8", "replace"), partition)
            # Not keyed when inline: the connection starts it after every earlier reply.
            if partition_log is None or self.partitions.appends_inline(partition_log, set_size,
                                                                       ordered_by_caller=True):
                return None  # inline (or an error `handle` answers)
        return topic, partition

    def begin(self, frame, conn=None) -> asyncio.Future:
        """Start a keyed PRODUCE now and return the future of its reply. Parsing and
        checks happen here, on the loop; the append goes to the partition's appender,
        behind every append begun before it. The future never fails: errors are
        answered as `handle` answers them."""
        try:
            topic, partition, message_set = parse_produce(frame)  # run_key saw a PRODUCE type
            partition_log = self.partitions.open_log(topic, partition, produce=True)
        except Exception as e:
            future = self.loop.create_future()
            if isinstance(e, (ProtocolError, StrataError)):
                future.set_result([error_response(e.code)])
            else:
                log.exception("request_failed", request="ProduceRequest")
                future.set_result([error_response(ErrorCode.UNKNOWN_SERVER_ERROR)])
            return future
        return self.partitions.append_later(partition_log, message_set, produce_answer)  # type: ignore[arg-type]

    # ---- PRODUCE / MULTIPRODUCE -----------------------------------------------------------------

    async def produce(self, req: ProduceRequest) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition, produce=True)
        return await self.partitions.append(partition_log, req.message_set, produce_answer)

    async def multiproduce(self, req: MultiProduceRequest) -> Reply:
        partitions = self.partitions
        started: list[Any] = []
        for item in req.items:
            try:
                partition_log = await partitions.partition_log(item.topic, item.partition, produce=True)
            except StrataError as e:
                started.append(ProduceResult(e.code))
                continue
            started.append(partitions.start_append(partition_log, item.message_set, produce_result))
        results = tuple([await item if isinstance(item, asyncio.Future) else item for item in started])
        return [encode_response(MultiProduceResponse(ErrorCode.NONE, results))]

    # ---- FETCH / MULTIFETCH ---------------------------------------------------------------------

    async def fetch(self, req: FetchRequest) -> Reply:
        if req.max_bytes < 0:
            raise InvalidRequestError(f"maxBytes {req.max_bytes} is negative")
        partitions = self.partitions
        tp = (req.topic, req.partition)
        partition_log = await partitions.partition_log(req.topic, req.partition)
        deadline = None
        while True:
            # Take the event before looking at the log end: an append that moves the
            # end after this point sets this very event.
            event = partitions.watch(tp) if req.max_wait_ms > 0 else None
            if req.offset == partition_log.log_end_offset:
                if event is None or partitions.shutting_down:
                    return [fetch_response_header(ErrorCode.NONE, 0)]
                if deadline is None:
                    deadline = self.loop.time() + req.max_wait_ms / 1000
                if not await partitions.wait_for_append([event], deadline - self.loop.time()):
                    return [fetch_response_header(ErrorCode.NONE, 0)]
                if partitions.manager.get_log(*tp) is not partition_log:
                    raise UnknownTopicOrPartitionError(f"{req.topic}-{req.partition} was deleted")
                continue
            return self._fetch_answer(partition_log, req)

    def _fetch_answer(self, partition_log: Log, req: FetchRequest) -> Reply:
        """A FETCH's answer from what the log holds now (no waiting)."""
        max_bytes = min(req.max_bytes, self.config.fetch_max_bytes, INT32_MAX - 2)
        try:
            found = self.partitions.read(partition_log, req.offset, max_bytes)
        except StrataError as e:
            return [error_response(self.partitions.error_code(e, partition_log))]
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
            partition_log = self.partitions.open_log(req.topic, req.partition)
        except StrataError as e:
            return [error_response(e.code)]
        if partition_log is None or (req.offset == partition_log.log_end_offset and req.max_wait_ms > 0
                                     and not self.partitions.shutting_down):
            return None  # an internal log to create, or a long poll: the task waits
        return self._fetch_answer(partition_log, req)

    async def multifetch(self, req: MultiFetchRequest) -> Reply:
        partitions = self.partitions
        targets: list[Log | int] = []
        for item in req.items:
            if item.max_bytes < 0:
                targets.append(ErrorCode.INVALID_REQUEST)
                continue
            try:
                targets.append(await partitions.partition_log(item.topic, item.partition))
            except StrataError as e:
                targets.append(e.code)
        # The whole answer must fit an int32 size (and fetch.max.bytes).
        budget = min(self.config.fetch_max_bytes, INT32_MAX - 2 - HEADER_SIZE * len(req.items))
        results: list[tuple[int, FileSlice | None]] = []
        try:
            for item, target in zip(req.items, targets, strict=True):
                if not isinstance(target, Log):
                    results.append((target, None))
                    continue
                try:
                    found = partitions.read(target, item.offset, min(item.max_bytes, budget))
                except Exception as e:
                    results.append((partitions.error_code(e, target), None))
                    continue
                budget -= found.length
                results.append((ErrorCode.NONE, found))
        except BaseException:
            release_all([s for _, s in results if s is not None])
            raise
        top, headers = multifetch_response_parts([(error, s.length if s else 0) for error, s in results])
        parts: Reply = [top]
        for header, (_, answer) in zip(headers, results, strict=True):
            parts.append(header)
            if answer is not None:
                if answer.length:
                    parts.append(answer)
                else:
                    answer.release()
        return parts

    # ---- OFFSETS ----------------------------------------------------------------------------

    async def offsets_request(self, req: OffsetsRequest) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition)
        if req.time < OffsetsRequest.EARLIEST:
            raise InvalidRequestError(f"time {req.time} is neither -1, -2 nor a timestamp")
        if req.max_number <= 0:
            offsets: tuple[int, ...] = ()
        elif req.time == OffsetsRequest.LATEST:
            offsets = (partition_log.log_end_offset,)
        elif req.time == OffsetsRequest.EARLIEST:
            offsets = (partition_log.log_start_offset,)
        else:
            found = await self.partitions.blocking(partition_log.offset_for_timestamp, req.time)
            offsets = () if found is None else (found.offset,)
        return [encode_response(OffsetsResponse(ErrorCode.NONE, offsets))]

    # ---- topics -------------------------------------------------------------------------------

    async def create_topic(self, req: CreateTopicRequest) -> Reply:
        await self.partitions.blocking(self.registry.create, req.topic, req.partitions, req.configs)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def delete_topic(self, req: DeleteTopicRequest) -> Reply:
        await self.partitions.remove_topic(req.topic)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

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
                partition_log = self.partitions.manager.get_log(name, partition)
                start, end = ((0, 0) if partition_log is None
                              else (partition_log.log_start_offset, partition_log.log_end_offset))
                partitions.append(PartitionMetadata(partition, start, end))
            topics.append(TopicMetadata(name, ErrorCode.NONE, partitions))
        return [encode_response(MetadataResponse(ErrorCode.NONE, topics))]

    async def describe_config(self, req: DescribeConfigRequest) -> Reply:
        configs = self.registry.describe(req.topic)
        return [encode_response(DescribeConfigResponse(ErrorCode.NONE, sorted(configs.items())))]

    async def alter_config(self, req: AlterConfigRequest) -> Reply:
        await self.partitions.blocking(self.registry.alter, req.topic, req.configs)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def delete_records(self, req: DeleteRecordsRequest) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition)
        start = await self.partitions.delete_records_before(partition_log, req.offset)
        return [encode_response(DeleteRecordsResponse(ErrorCode.NONE, start))]

    # ---- committed offsets --------------------------------------------------------------------

    async def commit_offset(self, req: CommitOffsetRequest) -> Reply:
        await self.partitions.blocking(self.offsets.commit, req.group, req.topic, req.partition, req.offset,
                             req.metadata)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def fetch_offset(self, req: FetchOffsetRequest) -> Reply:
        validate_topic_name(req.topic)
        found = self.offsets.fetch(req.group, req.topic, req.partition)
        if found is None:
            return [encode_response(FetchOffsetResponse(ErrorCode.NONE, -1, None))]
        return [encode_response(FetchOffsetResponse(ErrorCode.NONE, found.offset, found.metadata))]
