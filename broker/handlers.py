"""The native protocol's request handlers: parse, call the partition service, encode.

Contract:
- Each connection serves its own `SessionHandlers` (`for_connection`,
  broker/native_session.py), which hands every frame to these shared handlers with
  the connection's `NativeSession`: the version in force (1 until a HANDSHAKE),
  which picks the request and response layouts and how errors are answered.
- `Handlers.handle(frame, conn, session)` takes one frame (type + body, as
  FrameReader yields it) and returns the reply as a list of parts, in order:
  `bytes`, or a `FileSlice` of a segment file that the server sends with sendfile.
  The server releases every slice once sent (or when the connection dies).
  `handle` never raises (except CancelledError): a malformed request answers its
  ProtocolError code, a storage error its code and reason
  (`PartitionService.error_answer`, the Kafka listener's words), anything
  unexpected UNKNOWN_SERVER_ERROR (-1) with a `request_failed` error log; the
  connection always survives. From version 2 on every error answer carries its
  reason (`session.error`).
- Version 2 (NATIVE-PROTOCOL.md): HANDSHAKE settles the version
  (`NativeSession.agree`) and lists the connection's listener's SASL mechanisms
  (`listener_sasl_mechanisms`); SASL_AUTHENTICATE runs one round of the
  connection's SaslSession (broker/security/sasl.py; the gate before success is
  SessionHandlers'); any failure answers SASL_AUTHENTICATION_FAILED with its
  reason after connection.failed.authentication.delay.ms and closes the
  connection. On a listener without SASL it answers ILLEGAL_SASL_STATE before a
  version-2 HANDSHAKE, else UNSUPPORTED_SASL_MECHANISM; METADATA
  with allowAutoTopicCreation creates missing named topics through the partition
  service's `auto_create_topic` (the Kafka Metadata's path) when
  auto.create.topics.enable is on; FETCH answers the high watermark, the last
  stable offset and the aborted list (`PartitionService.fetch_isolation`) before
  the message set.
- With ACLs on (`PartitionService.authorizer`, broker/security/authorizer.py),
  every request is checked for its connection before it runs, as its Kafka
  counterpart (`_authorize`; NATIVE.md "ACLs"), the fast paths included; the
  ACL types 129-131 manage the ACLs.
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
  Metadata requests: the Kafka listener's, and the native METADATA from version 2
  with allowAutoTopicCreation 1). METADATA's per-topic errors carry no words (the
  wire has no field for them); a failed auto-creation answers its code there.
- FETCH version 2: an isolationLevel other than 0 and 1 is INVALID_REQUEST (Kafka
  knows no other). A FETCH error's body is its message alone, as every error's.
  A read_committed FETCH at or past the last stable offset (below the log end)
  has nothing to read: it long-polls as one at the log end does, until a marker
  moves the LSO, as Kafka's delayed fetch waits for data up to its isolation's bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from kafka_format.errors import InvalidRequestError, StrataError, UnknownTopicOrPartitionError
from kafka_format.topic_names import validate_topic_name
from protocol import (
    AclBinding,
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateAclsRequest,
    CreateTopicRequest,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeletedAcls,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicRequest,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeConfigRequest,
    DescribeConfigResponse,
    EmptyResponse,
    ErrorCode,
    FetchOffsetRequest,
    FetchOffsetResponse,
    FetchRequest,
    HandshakeRequest,
    HandshakeResponse,
    IsolationLevel,
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
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    TopicMetadata,
    encode_response,
    fetch_response_header,
    fetch_v2_response_header,
    multifetch_response_parts,
    parse_produce,
    parse_request,
)
from protocol.requests import PRODUCE_FIXED, PRODUCE_HEAD
from storage.file_records import FileSlice
from storage.log import AppendResult, Log

from .connection import CloseAfterReply, CloseConnection, PerConnection, Reply
from .group_offsets import GroupOffsets
from .listeners import peer_of
from .log_limiter import BadRequestLog
from .native_session import (
    NativeSession,
    SessionHandlers,
    listener_sasl_mechanisms,
    produce_answer,
)
from .partitions import INLINE_APPEND_MAX_BYTES, PartitionService, release_all
from .security.authorizer import (
    CLUSTER_NAME,
    Acl,
    AclFilter,
    ClusterAuthorizationError,
    GroupAuthorizationError,
    Op,
    Resource,
    SecurityDisabledError,
    TopicAuthorizationError,
)
from .security.errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from .security.sasl import sasl_failure_delay

INT32_MAX = 2**31 - 1
HEADER_SIZE = 6  # size:int32 | error:int16, in front of every MessageSetSend

log = structlog.get_logger("strata.handlers")


def produce_result(result: AppendResult | None, code: int, error: StrataError | None) -> ProduceResult:
    """A MULTIPRODUCE item's result from its append's outcome."""
    if result is None:
        return ProduceResult(code)
    return ProduceResult(ErrorCode.NONE, result.first_offset, result.log_append_time)


class Handlers(PerConnection):
    """The native protocol's request handlers, shared by the connections of its
    listener; each connection serves a `SessionHandlers` view (`for_connection`)."""

    def __init__(self, partitions: PartitionService, bad_requests: BadRequestLog):
        self.partitions = partitions
        self.authorizer = partitions.authorizer  # ACLs (broker/security/authorizer.py)
        self.config = partitions.config
        self.registry = partitions.registry
        self.loop = partitions.loop
        # Bad requests of both listeners, logged rate-limited (broker/log_limiter.py).
        self.bad_requests = bad_requests
        self._dispatch: dict[type, Callable[[Any, NativeSession], Awaitable[Reply]]] = {
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
            HandshakeRequest: self.handshake,
            SaslAuthenticateRequest: self.sasl_authenticate,
            DescribeAclsRequest: self.describe_acls,
            CreateAclsRequest: self.create_acls,
            DeleteAclsRequest: self.delete_acls,
        }

    @property
    def offsets(self) -> GroupOffsets:
        return self.partitions.offsets

    # ---- entry point (SessionHandlers, per connection) -------------------------------------------

    def for_connection(self) -> SessionHandlers:
        return SessionHandlers(self)

    async def handle(self, frame, conn=None, session: NativeSession | None = None) -> Reply:
        session = session or NativeSession()
        session.context = conn
        try:
            request = parse_request(frame, session.version)
        except ProtocolError as e:
            self.bad_requests.record(peer_of(conn), "bad_request", error=str(e), peer=peer_of(conn))
            return session.error(e.code, e.message)
        try:
            if self.authorizer.enabled:
                denied = self._authorize(request, conn)
                if denied or isinstance(request, MetadataRequest):
                    return await self._dispatch_checked(request, session, conn, denied)
            return await self._dispatch[type(request)](request, session)
        except StrataError as e:
            return session.error(*self.partitions.error_answer(e))
        except (asyncio.CancelledError, CloseConnection):
            raise
        except Exception:
            log.exception("request_failed", request=type(request).__name__)
            return session.error(ErrorCode.UNKNOWN_SERVER_ERROR)

    # ---- authorization --------------------------------------------------------------------------

    def _may(self, conn, operation: Op, resource_type: Resource, name: str) -> bool:
        return self.authorizer.authorize(conn, operation, resource_type, name)

    def _authorize(self, request, conn) -> frozenset[int]:
        """The ACL check of a request, as the Kafka listener checks the matching Kafka
        request: raises the authorization error of a one-resource request; returns
        the indexes of a MULTIFETCH's or MULTIPRODUCE's items the connection may not
        READ / WRITE (each is answered TOPIC_AUTHORIZATION_FAILED)."""
        may = self._may
        if isinstance(request, MultiFetchRequest):
            return frozenset(i for i, fetched in enumerate(request.items)
                             if not may(conn, Op.READ, Resource.TOPIC, fetched.topic))
        if isinstance(request, MultiProduceRequest):
            return frozenset(i for i, produced in enumerate(request.items)
                             if not may(conn, Op.WRITE, Resource.TOPIC, produced.topic))
        if isinstance(request, CommitOffsetRequest | FetchOffsetRequest):
            operation = Op.READ if isinstance(request, CommitOffsetRequest) else Op.DESCRIBE
            if not may(conn, operation, Resource.GROUP, request.group):
                raise GroupAuthorizationError(f"not authorized to use group {request.group!r}")
            if not may(conn, operation, Resource.TOPIC, request.topic):
                raise TopicAuthorizationError(f"not authorized to access topic {request.topic!r}")
            return frozenset()
        if isinstance(request, DescribeAclsRequest | CreateAclsRequest | DeleteAclsRequest):
            operation = Op.DESCRIBE if isinstance(request, DescribeAclsRequest) else Op.ALTER
            if not may(conn, operation, Resource.CLUSTER, CLUSTER_NAME):
                raise ClusterAuthorizationError(f"not authorized to {operation.name} the cluster's ACLs")
            return frozenset()
        if isinstance(request, CreateTopicRequest):
            if not (may(conn, Op.CREATE, Resource.CLUSTER, CLUSTER_NAME)
                    or may(conn, Op.CREATE, Resource.TOPIC, request.topic)):
                raise TopicAuthorizationError(f"not authorized to create topic {request.topic!r}")
            return frozenset()
        needed = TOPIC_OPERATIONS.get(type(request))
        topic = getattr(request, "topic", "")
        if needed is not None and not may(conn, needed, Resource.TOPIC, topic):
            raise TopicAuthorizationError(f"not authorized to {needed.name} topic {topic!r}")
        return frozenset()

    async def _dispatch_checked(self, request, session: NativeSession, conn, denied: frozenset[int]) -> Reply:
        """The requests whose answer depends on the ACLs item by item."""
        if isinstance(request, MetadataRequest):
            return await self.metadata(request, session, conn)
        if isinstance(request, MultiFetchRequest):
            return await self.multifetch(request, session, denied)
        return await self.multiproduce(request, session, denied)

    def bad_frame_reply(self, error: ProtocolError) -> Reply:
        """A frame too short for a type, on a connection at version 1 (SessionHandlers
        answers for its own connection)."""
        return NativeSession().error(error.code, error.message)

    def fatal_reply(self, error: ProtocolError) -> Reply:
        return NativeSession().error(error.code, error.message)

    def begin_shutdown(self) -> None:
        """Answer every long-poll FETCH now and make new ones answer at once."""
        self.partitions.begin_shutdown()

    # ---- the fast path (broker.connection.FastPath) ---------------------------------------------

    def handle_now(self, frame, conn, session: NativeSession) -> Reply | None:
        """The reply to `frame` if it can be made right now, on the loop, without
        waiting for anything: a PRODUCE whose append runs inline (the partition
        service's policy), a FETCH with data to send or nothing to wait for. None,
        with nothing done, for anything else, which then goes through `handle`.
        Answers exactly as `handle` would."""
        if frame[0]:  # the int16 type, big-endian: every type so far has a zero high byte
            return None
        if frame[1] == RequestType.FETCH:
            return self._fetch_now(frame, conn, session)
        if frame[1] != RequestType.PRODUCE:
            return None
        partitions = self.partitions
        partition_log = None
        try:
            topic, partition, message_set = parse_produce(frame)
            if self.authorizer.enabled and not self._may(conn, Op.WRITE, Resource.TOPIC, topic):
                raise TopicAuthorizationError(f"not authorized to WRITE topic {topic!r}")
            partition_log = partitions.open_log(topic, partition, produce=True)
            result = partitions.try_append_inline(partition_log, message_set)  # type: ignore[arg-type]
            if result is None:
                return None
        except ProtocolError as e:
            self.bad_requests.record(peer_of(conn), "bad_request", error=str(e), peer=peer_of(conn))
            return session.error(e.code, e.message)
        except Exception as e:
            return session.error(*partitions.error_answer(e, partition_log))
        return session.produce_answer(result, ErrorCode.NONE, None)

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

    def begin(self, frame, conn, session: NativeSession) -> asyncio.Future:
        """Start a keyed PRODUCE now and return the future of its reply. Parsing and
        checks happen here, on the loop; the append goes to the partition's appender,
        behind every append begun before it. The future never fails: errors are
        answered as `handle` answers them."""
        try:
            topic, partition, message_set = parse_produce(frame)  # run_key saw a PRODUCE type
            if self.authorizer.enabled and not self._may(conn, Op.WRITE, Resource.TOPIC, topic):
                raise TopicAuthorizationError(f"not authorized to WRITE topic {topic!r}")
            partition_log = self.partitions.open_log(topic, partition, produce=True)
        except Exception as e:
            future = self.loop.create_future()
            if isinstance(e, ProtocolError):
                future.set_result(session.error(e.code, e.message))
            elif isinstance(e, StrataError):
                future.set_result(session.error(*self.partitions.error_answer(e)))
            else:
                log.exception("request_failed", request="ProduceRequest")
                future.set_result(session.error(ErrorCode.UNKNOWN_SERVER_ERROR))
            return future
        return self.partitions.append_later(partition_log, message_set,  # type: ignore[arg-type]
                                            session.produce_answer)

    # ---- PRODUCE / MULTIPRODUCE -----------------------------------------------------------------

    async def produce(self, req: ProduceRequest, session: NativeSession) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition, produce=True)
        return await self.partitions.append(partition_log, req.message_set, session.produce_answer)

    async def multiproduce(self, req: MultiProduceRequest, session: NativeSession,
                           denied: frozenset[int] = frozenset()) -> Reply:
        partitions = self.partitions
        started: list[Any] = []
        for index, item in enumerate(req.items):
            if index in denied:
                started.append(ProduceResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                partition_log = await partitions.partition_log(item.topic, item.partition, produce=True)
            except StrataError as e:
                started.append(ProduceResult(e.code))
                continue
            started.append(partitions.start_append(partition_log, item.message_set, produce_result))
        results = tuple([await item if isinstance(item, asyncio.Future) else item for item in started])
        return [encode_response(MultiProduceResponse(ErrorCode.NONE, results))]

    # ---- FETCH / MULTIFETCH ---------------------------------------------------------------------

    async def fetch(self, req: FetchRequest, session: NativeSession) -> Reply:
        check_fetch(req)
        partitions = self.partitions
        tp = (req.topic, req.partition)
        partition_log = await partitions.partition_log(req.topic, req.partition)
        deadline = None
        while True:
            # Take the event before looking at the log end: an append that moves the
            # end after this point sets this very event.
            event = partitions.watch(tp) if req.max_wait_ms > 0 else None
            if self._nothing_to_read(partition_log, req, session):
                if event is None or partitions.shutting_down:
                    return self._fetch_answer(partition_log, req, session)
                if deadline is None:
                    deadline = self.loop.time() + req.max_wait_ms / 1000
                if not await partitions.wait_for_append([event], deadline - self.loop.time()):
                    return self._fetch_answer(partition_log, req, session)
                if partitions.manager.get_log(*tp) is not partition_log:
                    raise UnknownTopicOrPartitionError(f"{req.topic}-{req.partition} was deleted")
                continue
            return self._fetch_answer(partition_log, req, session)

    @staticmethod
    def _nothing_to_read(partition_log: Log, req: FetchRequest, session: NativeSession) -> bool:
        """Whether a FETCH has nothing to read now: its offset is the log end, or under
        read_committed (version 2) at or past the last stable offset (up to the log end;
        a marker that moves the LSO wakes the long poll, as an append does)."""
        if req.offset == partition_log.log_end_offset:
            return True
        return (session.version >= 2 and req.isolation_level == IsolationLevel.READ_COMMITTED
                and partition_log.last_stable_offset <= req.offset < partition_log.log_end_offset)

    def _fetch_answer(self, partition_log: Log, req: FetchRequest, session: NativeSession) -> Reply:
        """A FETCH's answer from what the log holds now (no waiting): the message set,
        after the offsets and the aborted list from version 2 on."""
        v2 = session.version >= 2
        max_bytes = self.partitions.fetch_budget(session.context, session.client_id, min(
            req.max_bytes, self.config.fetch_max_bytes, INT32_MAX - 2 - (FETCH_V2_OFFSETS_BYTES if v2 else 0)))
        try:
            isolated = self.partitions.read_isolated(partition_log, req.offset, max_bytes,
                                                     req.isolation_level if v2 else IsolationLevel.READ_UNCOMMITTED)
        except StrataError as e:
            return session.error(*self.partitions.error_answer(e, partition_log))
        found = isolated.records
        length = found.length
        if self._fetch_throttled(session, length):
            length = 0  # over the consumer quota: answered empty (KIP-219)
        if not length:
            found.release()
        if v2:
            header = fetch_v2_response_header(isolated.high_watermark, isolated.last_stable_offset,
                                              partition_log.log_start_offset, isolated.aborted or (), length)
        else:
            header = fetch_response_header(ErrorCode.NONE, length)
        return [header, found] if length else [header]

    def _fetch_throttled(self, session: NativeSession, nbytes: int) -> bool:
        """Client quotas (the partition service's one policy): charge a FETCH's or
        MULTIFETCH's record bytes and handler time; True when over a quota, and
        then the answer holds no records (Kafka's throttled Fetch, KIP-219) and
        the connection is muted after it."""
        quotas = self.partitions.quotas
        if quotas is None or not quotas.active:
            return False
        session.charged = True
        clock = session.clock
        return self.partitions.throttle(session.context, "fetch", session.client_id, nbytes,
                                        clock.elapsed() if clock is not None else 0.0) > 0

    def _fetch_now(self, frame, conn, session: NativeSession) -> Reply | None:
        """handle_now for a FETCH: the answer when nothing needs waiting for (data
        there, no long poll to start, the partition's log open); else None."""
        try:
            req = parse_request(frame, session.version)
        except ProtocolError:
            return None  # `handle` answers it
        if not isinstance(req, FetchRequest) or req.max_bytes < 0 or req.isolation_level not in ISOLATION_LEVELS:
            return None
        if self.authorizer.enabled and not self._may(conn, Op.READ, Resource.TOPIC, req.topic):
            return None  # `handle` answers the refusal
        try:
            partition_log = self.partitions.open_log(req.topic, req.partition)
        except StrataError as e:
            return session.error(*self.partitions.error_answer(e))
        if partition_log is None or (self._nothing_to_read(partition_log, req, session) and req.max_wait_ms > 0
                                     and not self.partitions.shutting_down):
            return None  # an internal log to create, or a long poll: the task waits
        return self._fetch_answer(partition_log, req, session)

    async def multifetch(self, req: MultiFetchRequest, session: NativeSession,
                         denied: frozenset[int] = frozenset()) -> Reply:
        partitions = self.partitions
        targets: list[Log | int] = []
        for index, item in enumerate(req.items):
            if index in denied:
                targets.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            if item.max_bytes < 0:
                targets.append(ErrorCode.INVALID_REQUEST)
                continue
            try:
                targets.append(await partitions.partition_log(item.topic, item.partition))
            except StrataError as e:
                targets.append(e.code)
        # The whole answer must fit an int32 size (and fetch.max.bytes).
        budget = partitions.fetch_budget(session.context, session.client_id,
                                         min(self.config.fetch_max_bytes, INT32_MAX - 2 - HEADER_SIZE * len(req.items)))
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
        if self._fetch_throttled(session, sum(s.length for _, s in results if s is not None)):
            release_all([s for _, s in results if s is not None])  # over the consumer quota: no records
            results = [(error, None) for error, _ in results]
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

    async def offsets_request(self, req: OffsetsRequest, session: NativeSession) -> Reply:
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

    async def create_topic(self, req: CreateTopicRequest, session: NativeSession) -> Reply:
        await self.partitions.blocking(self.registry.create, req.topic, req.partitions, req.configs)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def delete_topic(self, req: DeleteTopicRequest, session: NativeSession) -> Reply:
        await self.partitions.remove_topic(req.topic)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def metadata(self, req: MetadataRequest, session: NativeSession, conn: Any = None) -> Reply:
        """With ACLs (`conn` given): listing every topic lists those the connection may
        DESCRIBE; a named one it may not is TOPIC_AUTHORIZATION_FAILED; auto-creation
        needs CREATE on the cluster or the topic (as Kafka's Metadata)."""
        checked = conn is not None and self.authorizer.enabled
        names = req.topics or [n for n in self.registry.names()
                               if not checked or self._may(conn, Op.DESCRIBE, Resource.TOPIC, n)]
        auto_create = bool(req.topics) and req.allow_auto_topic_creation and self.config.auto_create_topics
        topics = []
        for name in names:
            if checked and not self._may(conn, Op.DESCRIBE, Resource.TOPIC, name):
                topics.append(TopicMetadata(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                validate_topic_name(name)
            except StrataError as e:
                topics.append(TopicMetadata(name, e.code))
                continue
            known = self.registry.get(name)
            if known is None and auto_create and checked and not (
                    self._may(conn, Op.CREATE, Resource.CLUSTER, CLUSTER_NAME)
                    or self._may(conn, Op.CREATE, Resource.TOPIC, name)):
                topics.append(TopicMetadata(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if known is None and auto_create:
                try:
                    await self.partitions.blocking(self.partitions.auto_create_topic, name)
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

    async def describe_config(self, req: DescribeConfigRequest, session: NativeSession) -> Reply:
        configs = self.registry.describe(req.topic)
        return [encode_response(DescribeConfigResponse(ErrorCode.NONE, sorted(configs.items())))]

    async def alter_config(self, req: AlterConfigRequest, session: NativeSession) -> Reply:
        await self.partitions.blocking(self.registry.alter, req.topic, req.configs)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def delete_records(self, req: DeleteRecordsRequest, session: NativeSession) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition)
        start = await self.partitions.delete_records_before(partition_log, req.offset)
        return [encode_response(DeleteRecordsResponse(ErrorCode.NONE, start))]

    # ---- committed offsets --------------------------------------------------------------------

    async def commit_offset(self, req: CommitOffsetRequest, session: NativeSession) -> Reply:
        await self.partitions.blocking(self.offsets.commit, req.group, req.topic, req.partition, req.offset,
                             req.metadata)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]

    async def fetch_offset(self, req: FetchOffsetRequest, session: NativeSession) -> Reply:
        validate_topic_name(req.topic)
        found = self.offsets.fetch(req.group, req.topic, req.partition)
        if found is None:
            return [encode_response(FetchOffsetResponse(ErrorCode.NONE, -1, None))]
        return [encode_response(FetchOffsetResponse(ErrorCode.NONE, found.offset, found.metadata))]

    # ---- version 2: HANDSHAKE, SASL_AUTHENTICATE ------------------------------------------------

    async def handshake(self, req: HandshakeRequest, session: NativeSession) -> Reply:
        version = session.agree(req.version)
        session.client_id = req.client_id
        mechanisms = listener_sasl_mechanisms(session.context)
        return [encode_response(HandshakeResponse(ErrorCode.NONE, version, mechanisms))]

    async def sasl_authenticate(self, req: SaslAuthenticateRequest, session: NativeSession) -> Reply:
        context = session.context
        sasl = context.sasl if context is not None else None
        if sasl is None:  # a listener that requires no SASL
            if session.version < 2:
                raise IllegalSaslStateError("SASL_AUTHENTICATE before a HANDSHAKE of version 2")
            raise UnsupportedSaslMechanismError(
                f"SASL mechanism {req.mechanism!r} is not enabled on this listener (enabled: none)")
        try:
            if session.version < 2:
                raise SaslAuthenticationFailedError("SASL_AUTHENTICATE before a HANDSHAKE of version 2")
            reply, lifetime = sasl.authenticate(req.mechanism, bytes(req.auth_bytes))
        except StrataError as e:  # any failed authentication: SASL_AUTHENTICATION_FAILED, then close
            await sasl_failure_delay(sasl)
            raise CloseAfterReply(session.error(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e))) from None
        return [encode_response(SaslAuthenticateResponse(ErrorCode.NONE, reply, lifetime))]


    # ---- ACLs (project extensions, NATIVE.md) ----------------------------------------------------

    def _acls_enabled(self) -> None:
        if not self.authorizer.enabled:
            raise SecurityDisabledError("no authorizer is configured on the broker (authorizer.class.name)")

    async def describe_acls(self, req: DescribeAclsRequest, session: NativeSession) -> Reply:
        self._acls_enabled()
        found = self.authorizer.describe(AclFilter(*req.filter))
        acls = tuple(_binding(a) for a in found)
        return [encode_response(DescribeAclsResponse(ErrorCode.NONE, acls), session.version)]

    async def create_acls(self, req: CreateAclsRequest, session: NativeSession) -> Reply:
        self._acls_enabled()
        acls = [Acl(*binding) for binding in req.acls]
        for acl in acls:
            acl.check()  # one bad binding: INVALID_REQUEST naming it, nothing created
        await self.partitions.blocking(self.authorizer.create, acls)
        return [encode_response(EmptyResponse(ErrorCode.NONE), session.version)]

    async def delete_acls(self, req: DeleteAclsRequest, session: NativeSession) -> Reply:
        self._acls_enabled()
        removed = await self.partitions.blocking(self.authorizer.delete, [AclFilter(*f) for f in req.filters])
        return [encode_response(DeleteAclsResponse(ErrorCode.NONE, tuple(
            DeletedAcls(tuple(_binding(a) for a in acls)) for acls in removed)), session.version)]


def _binding(acl: Acl) -> AclBinding:
    return AclBinding(acl.resource_type, acl.name, acl.pattern_type, acl.principal, acl.host, acl.operation,
                      acl.permission)


ISOLATION_LEVELS = frozenset(int(level) for level in IsolationLevel)
# The topic operation each one-topic request needs (the Kafka request's).
TOPIC_OPERATIONS: dict[type, Op] = {
    ProduceRequest: Op.WRITE,
    FetchRequest: Op.READ,
    OffsetsRequest: Op.DESCRIBE,
    DeleteTopicRequest: Op.DELETE,
    DescribeConfigRequest: Op.DESCRIBE_CONFIGS,
    AlterConfigRequest: Op.ALTER_CONFIGS,
    DeleteRecordsRequest: Op.DELETE,
}
FETCH_V2_OFFSETS_BYTES = 28  # a version-2 FETCH answer's highWatermark, lastStableOffset, logStartOffset, abortedCount


def check_fetch(req: FetchRequest) -> None:
    """A FETCH's arguments the codec cannot judge. Raises InvalidRequestError."""
    if req.max_bytes < 0:
        raise InvalidRequestError(f"maxBytes {req.max_bytes} is negative")
    if req.isolation_level not in ISOLATION_LEVELS:
        raise InvalidRequestError(f"isolationLevel {req.isolation_level} is neither 0 (read_uncommitted) "
                                  "nor 1 (read_committed)")


__all__ = ["Handlers", "produce_answer"]
