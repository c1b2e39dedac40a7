"""The Kafka listener's request handling: a dispatch table api_key -> async handler.

Contract (the interface for API modules is in broker/kafka/__init__.py):
- `KafkaApis(partitions, bad_requests, advertised=...)` serves the broker's
  `PartitionService` (broker/core/service.py: logs, appends, reads, long polls and
  error codes, shared with the native listener; config, LogManager,
  TopicRegistry, GroupOffsets, executor) and builds its table: the core handlers
  (broker/kafka/handlers.py), then each importable module of EXTENSION_MODULES
  through its `register(apis)`. API keys are `ApiKey` members.
- It is what `broker.server.BrokerServer` serves (its `RequestHandlers`): `handle`
  takes one frame (`header | body`, size stripped) and returns the framed reply
  parts, None for no reply (acks=0), or raises CloseConnection.
- Unsupported requests, as Kafka's SocketServer/KafkaApis: ApiVersions of a version
  the broker does not know gets a v0 response with UNSUPPORTED_VERSION and the
  supported list (KIP-511: header v0, so any client can read it); any other
  unknown api_key or version, or a request that does not decode, closes the
  connection without an answer (Kafka throws InvalidRequestException while
  parsing and closes the channel). Decoding checks the bytes against the schema
  first (request_check.py: null arrays where the schema forbids null, counts
  larger than the frame). Each is logged through the broker's BadRequestLog
  (rate-limited per connection and reason, broker-wide cap).
- `guards[api_key]`, optional, runs before the handler (not for `now` handlers,
  which check their own): a response that refuses the whole request
  (broker/kafka/acls.py: the authorization of group and cluster APIs) or None.
- Requests on one connection are handled one at a time, in order (the server's
  connection task), so responses go out in request order even when some (acks=0
  produce) have none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import structlog
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from kafka_format.errors import StrataError
from protocol import ProtocolError

from ..connection import CloseConnection, FastPath
from ..core import PartitionLog, PartitionService
from ..dynamic_broker_configs import DynamicBrokerConfigs
from ..group_configs import GroupConfigs
from ..handler_clock import HandlerClock
from ..listeners import ConnectionContext
from ..log_limiter import BadRequestLog
from . import codec, request_check

log = structlog.get_logger("strata.kafka")


class ApiKey(IntEnum):
    """Kafka's API keys (org.apache.kafka.common.protocol.ApiKeys) that Strata serves."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    DESCRIBE_TOPIC_PARTITIONS = 75


API_VERSIONS = ApiKey.API_VERSIONS
# What a connection on a SASL listener may send before it has authenticated (Kafka's
# SaslServerAuthenticator); anything else closes the connection.
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
NODE_ID = 0
# Modules whose `register(apis)` adds handlers (consumer groups, DescribeCluster, admin APIs).
EXTENSION_MODULES: tuple[str, ...] = (
    "broker.kafka.groups",
    "broker.kafka.transactions",
    "broker.kafka.cluster",
    "broker.kafka.partitions",
    "broker.kafka.log_dirs",
    "broker.kafka.producers",
    "broker.kafka.leader_epochs",
    "broker.kafka.replicas",
    "broker.kafka.topic_partitions",
    "broker.kafka.telemetry",
    "broker.kafka.sasl",
    "broker.kafka.client_quotas",
    "broker.kafka.acls",
)

Handler = Callable[[Any, "RequestContext"], Awaitable[Any]]
HandlerNow = Callable[[Any, "RequestContext"], Any]


class _Decline:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DECLINE"


# What a `now` handler returns when the request needs waiting (the executor, a long
# poll): it has done nothing, and the request goes to the async handler.
DECLINE = _Decline()


@dataclass(frozen=True, slots=True)
class ApiEntry:
    api_key: int
    handler: Handler
    min_version: int
    max_version: int
    request_classes: dict[int, type]
    response_classes: dict[int, type]
    handler_now: HandlerNow | None = None


@dataclass(slots=True)
class RequestContext:
    header: Any  # kio RequestHeader (v1 or v2)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: Any
    apis: KafkaApis
    response_class: type = field(repr=False)
    connection: ConnectionContext  # listener, security protocol, client certificate
    # request_percentage quotas (broker/handler_clock.py): the handler's time on the loop,
    # None while no such quota is set; `charged` once a handler (Produce, Fetch) charged it.
    clock: HandlerClock | None = None
    charged: bool = False

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) Metadata and FindCoordinator answer: the advertised address of
        the listener the client connected to, as Kafka does."""
        listener = self.connection.listener
        return listener.advertised if listener is not None else self.apis.advertised


class KafkaApis(FastPath):
    def __init__(self, partitions: PartitionService, bad_requests: BadRequestLog, *,
                 advertised: tuple[str, int] | None = None,
                 extensions: tuple[str, ...] = EXTENSION_MODULES):
        from .handlers import CoreHandlers  # the core APIs; they use this module's types

        self.partitions = partitions  # what both protocols share (broker/core/service.py)
        self.bad_requests = bad_requests
        self.config = partitions.config
        self.manager = partitions.manager
        self.registry = partitions.registry
        self.offsets = partitions.offsets
        self.waiters = partitions.waiters
        self.executor = partitions.executor
        self.loop = partitions.loop
        self.node_id = NODE_ID
        self.advertised: tuple[str, int] = advertised or ("localhost", 9092)
        self.group_configs: GroupConfigs | None = None  # set by the app once the data dir is locked
        self.broker_configs: DynamicBrokerConfigs | None = None  # likewise
        self.authenticator: Any = None  # broker.security.sasl.SaslAuthenticator, set by the app
        self._table: dict[int, ApiEntry] = {}
        # api_key -> guard(request, ctx): the response that refuses the request (an
        # authorization failure of the whole request), or None to handle it.
        self.guards: dict[int, Callable[[Any, RequestContext], Any]] = {}
        self._shutdown_callbacks: list[Callable[[], Any]] = []
        # The last request `handle_now` decoded and declined: (frame, header, request),
        # so `handle` does not decode the same frame again.
        self._declined: tuple[Any, Any, Any] | None = None
        self.shutting_down = False
        self.core = CoreHandlers(self)
        self.core.register_all()
        for name in extensions:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name != name:
                    raise
                continue
            register = getattr(module, "register", None)
            if register is None:
                log.warning("kafka_extension_without_register", module=name)
                continue
            register(self)

    # ---- the table ------------------------------------------------------------------------------

    def register(self, api_key: int, handler: Handler, min_version: int, max_version: int, *,
                 now: HandlerNow | None = None) -> None:
        """Serve `api_key` versions min..max with `handler` (replaces an earlier entry).
        `now`, optional: the same answer made synchronously on the loop, or DECLINE
        having done nothing (the connection's fast path, `handle_now`)."""
        if not 0 <= min_version <= max_version:
            raise ValueError(f"bad version range {min_version}..{max_version} for api {api_key}")
        requests, responses = {}, {}
        for version in range(min_version, max_version + 1):
            try:
                requests[version] = load_request_schema(api_key, version)
                responses[version] = load_response_schema(api_key, version)
            except (UnknownEntity, KeyError, LookupError) as e:
                raise ValueError(f"kio has no schema for api {api_key} v{version}: {e}") from None
            request_check.plan(requests[version])  # a schema it cannot check fails here, not later
        self._table[api_key] = ApiEntry(api_key, handler, min_version, max_version, requests, responses, now)

    def supported(self) -> list[tuple[int, int, int]]:
        """(api_key, min, max) of every registered API, ApiVersions included."""
        return sorted((e.api_key, e.min_version, e.max_version) for e in self._table.values())

    def on_shutdown(self, callback: Callable[[], Any]) -> None:
        self._shutdown_callbacks.append(callback)

    # ---- shared helpers -----------------------------------------------------------------------

    async def blocking(self, fn: Callable, *args, cleanup: Callable[[Any], None] | None = None):
        """Run blocking storage work in the executor (PartitionService.blocking)."""
        return await self.partitions.blocking(fn, *args, cleanup=cleanup)

    async def log_for(self, topic: str, partition: int, *, produce: bool = False) -> PartitionLog:
        """The live Log of a partition or the StrataError to answer."""
        return await self.partitions.partition_log(topic, partition, produce=produce)

    # ---- RequestHandlers (broker.server) --------------------------------------------------------

    def bad_frame_reply(self, error: ProtocolError) -> None:
        return None  # too short for a header: close, as Kafka

    def fatal_reply(self, error: ProtocolError) -> list[bytes]:
        return []  # over socket.request.max.bytes: Kafka closes without an answer

    def begin_shutdown(self) -> None:
        self.shutting_down = True
        self.partitions.begin_shutdown()
        for callback in self._shutdown_callbacks:
            try:
                result = callback()
                if inspect.isawaitable(result):
                    asyncio.ensure_future(result, loop=self.loop)
            except Exception:
                log.exception("shutdown_callback_failed")

    async def handle(self, frame, conn: ConnectionContext):
        peer = conn.peer
        try:
            api_key, api_version, correlation_id = codec.peek_header(frame)
        except codec.MalformedRequest as e:
            self.bad_requests.record(peer, "kafka_bad_request", error=str(e), peer=peer)
            raise CloseConnection() from None
        if not conn.authenticated and api_key not in BEFORE_AUTHENTICATION:
            self._refuse_unauthenticated(conn, api_key)
        entry = self._table.get(api_key)
        if entry is None or not entry.min_version <= api_version <= entry.max_version:
            if api_key == API_VERSIONS:
                return [self.core.unsupported_api_versions(correlation_id)]
            self.bad_requests.record(peer, "kafka_unsupported_request", api_key=api_key,
                                     api_version=api_version, peer=peer)
            raise CloseConnection()
        request_class = entry.request_classes[api_version]
        declined, self._declined = self._declined, None
        if declined is not None and declined[0] is frame:
            header, request = declined[1], declined[2]
        else:
            try:
                header, request = codec.decode_request(frame, request_class)
            except codec.MalformedRequest as e:
                self.bad_requests.record(peer, "kafka_bad_request", api_key=api_key,
                                         api_version=api_version, error=str(e), peer=peer)
                raise CloseConnection() from None
        response_class = entry.response_classes[api_version]
        ctx = RequestContext(header, api_key, api_version, correlation_id, header.client_id, conn.peer,
                             self, response_class, conn)
        if self.partitions.request_quotas:
            ctx.clock = HandlerClock()
        try:
            guard = self.guards.get(api_key)
            refused = guard(request, ctx) if guard is not None else None
            if refused is not None:
                response = refused
            elif ctx.clock is not None:
                response = await ctx.clock.timed(entry.handler(request, ctx))
            else:
                response = await entry.handler(request, ctx)
        except asyncio.CancelledError:
            raise
        except CloseConnection:
            raise
        except StrataError as e:
            response = codec.error_response(response_class, e.code)
        except Exception:
            log.exception("kafka_request_failed", api_key=api_key, api_version=api_version)
            response = codec.error_response(response_class, ErrorCode.unknown_server_error)
        if ctx.clock is not None and not ctx.charged:
            response = self._charge_request_time(ctx, response)
        if response is None or isinstance(response, list):
            return response  # no answer (acks=0), or already framed (Fetch)
        return [codec.encode_response(correlation_id, response)]

    def _charge_request_time(self, ctx: RequestContext, response: Any) -> Any:
        """request_percentage quotas: charge the handler's time to the client (the
        partition service's quota policy); a throttle goes into the answer's
        `throttle_time_ms` (when its version has one) and mutes the connection after
        the reply, as Kafka's sendResponseMaybeThrottle."""
        clock = ctx.clock
        assert clock is not None
        ctx.charged = True
        throttle = self.partitions.throttle(ctx.connection, "request", ctx.client_id, clock.elapsed())
        if throttle and response is not None and not isinstance(response, list) \
                and codec.has_field(type(response), "throttle_time"):
            # The larger of this and a throttle the handler answered (controller mutations).
            throttle_time = max(datetime.timedelta(milliseconds=throttle), response.throttle_time)
            response = dataclasses.replace(response, throttle_time=throttle_time)
        return response

    def _refuse_unauthenticated(self, conn: ConnectionContext, api_key: int) -> None:
        """The SASL gate: a request other than ApiVersions/SaslHandshake/SaslAuthenticate
        before authentication (or after the session expired) closes the connection."""
        sasl = conn.sasl
        message = (f"api {api_key} after the SASL session expired (connections.max.reauth.ms) without "
                   "re-authentication" if sasl.expired else
                   f"Unexpected Kafka request of type {api_key} during SASL handshake")
        sasl.authenticator.failed(conn, None, message)
        raise CloseConnection()

    # ---- FastPath (broker.connection) -----------------------------------------------------------

    def handle_now(self, frame, conn: ConnectionContext):
        """The reply to `frame` made right now on the loop, by its API's `now` handler
        (Produce appended inline, Fetch with nothing to wait for), or None, with
        nothing done, for `handle` to answer (a request it cannot decode included:
        `handle` logs it and closes). Answers exactly as `handle` would."""
        if not conn.authenticated:
            return None  # `handle`: the SASL gate
        try:
            api_key, api_version, correlation_id = codec.peek_header(frame)
        except codec.MalformedRequest:
            return None
        entry = self._table.get(api_key)
        if entry is None or entry.handler_now is None or not entry.min_version <= api_version <= entry.max_version:
            return None
        try:
            header, request = codec.decode_request(frame, entry.request_classes[api_version])
        except codec.MalformedRequest:
            return None
        response_class = entry.response_classes[api_version]
        ctx = RequestContext(header, api_key, api_version, correlation_id, header.client_id, conn.peer,
                             self, response_class, conn)
        clock = ctx.clock = HandlerClock() if self.partitions.request_quotas else None
        if clock is not None:
            clock.start()
        try:
            response = entry.handler_now(request, ctx)
        except StrataError as e:
            response = codec.error_response(response_class, e.code)
        except Exception:
            log.exception("kafka_request_failed", api_key=api_key, api_version=api_version)
            response = codec.error_response(response_class, ErrorCode.unknown_server_error)
        if response is DECLINE:
            self._declined = (frame, header, request)
            return None
        if clock is not None:
            clock.stop()
            if not ctx.charged:
                response = self._charge_request_time(ctx, response)
        if isinstance(response, list):
            return response  # already framed (Fetch)
        return [codec.encode_response(correlation_id, response)]

    def run_key(self, frame) -> None:
        return None  # no Kafka request is begun before its turn

    def begin(self, frame, conn: ConnectionContext) -> asyncio.Future:
        raise NotImplementedError("KafkaApis keys no frames (run_key is always None)")


__all__ = ["API_VERSIONS", "ApiKey", "DECLINE", "EXTENSION_MODULES", "KafkaApis", "NODE_ID", "RequestContext"]
