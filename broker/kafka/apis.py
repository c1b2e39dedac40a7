"""The Kafka listener's request handling: a dispatch table api_key -> async handler.

Contract (the interface for API modules is in broker/kafka/__init__.py):
- `KafkaApis(partitions, bad_requests, ...)` serves the broker's
  `PartitionService` (broker/core/service.py: logs, appends, reads, long polls and
  error codes, shared with the native listener; config, LogManager,
  TopicRegistry, GroupOffsets, executor) with the Kafka listener's state it is
  given (KafkaState, group and dynamic broker configs, the SASL authenticator,
  the group coordinators). Its table starts empty: the composition
  (broker/compose.py) calls each API module's `register(apis, ...)` in order.
  API keys are `ApiKey` members (broker/kafka/request_types.py).
- It is what `broker.net.server.BrokerServer` serves (its `RequestHandlers`): `handle`
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
- `guard(api_key, guard)`, optional, runs before the handler (not for `now` handlers,
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
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import structlog
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from broker.config.dynamic_broker_configs import DynamicBrokerConfigs
from broker.config.group_configs import GroupConfigs
from broker.net.bad_request_log import BadRequestLog
from broker.net.handler_clock import HandlerClock
from broker.net.listeners import ConnectionContext
from broker.net.request_handlers import CloseConnection, FastPath
from broker.security.sasl import SaslGate
from kafka_format.errors import StrataError
from protocol import HandshakeRequest, ProtocolError
from protocol import parse_request as parse_native_request

from ..core import PartitionLog, PartitionService
from . import codec, request_check
from .api_versions import unsupported_api_versions
from .request_types import API_VERSIONS, BEFORE_AUTHENTICATION, DECLINE, NODE_ID, Handler, HandlerNow, RequestContext
from .state import KafkaState

log = structlog.get_logger("strata.kafka")

def is_native_handshake(frame) -> bool:
    """Whether `frame` is a native-protocol HANDSHAKE (NATIVE-PROTOCOL.md), exactly."""
    try:
        return isinstance(parse_native_request(frame, 1), HandshakeRequest)
    except ProtocolError:
        return False


# The SASL gate (broker/security/sasl.py) with Kafka's admitted requests and its words
# (SaslServerAuthenticator): a refused request closes the connection unanswered.
SASL_GATE = SaslGate(
    BEFORE_AUTHENTICATION,
    unauthenticated=lambda api_key: f"Unexpected Kafka request of type {api_key} during SASL handshake",
    expired=lambda api_key: (f"api {api_key} after the SASL session expired (connections.max.reauth.ms) "
                             "without re-authentication"))


@dataclass(frozen=True, slots=True)
class ApiEntry:
    api_key: int
    handler: Handler
    min_version: int
    max_version: int
    request_classes: dict[int, type]
    response_classes: dict[int, type]
    handler_now: HandlerNow | None = None


class KafkaApis(FastPath):
    def __init__(self, partitions: PartitionService, bad_requests: BadRequestLog, *,
                 advertised: tuple[str, int] | None = None, native_bound: str = "",
                 state: KafkaState | None = None,
                 group_configs: GroupConfigs | None = None, broker_configs: DynamicBrokerConfigs | None = None,
                 authenticator: Any = None, groups: Any = None, consumer_groups: Any = None):
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
        # (host, port) answered to a connection without a listener (a listener answers its own)
        self.advertised: tuple[str, int] = advertised or ("localhost", 9092)
        self.native_bound = native_bound  # the native listeners as bound (NAME://HOST:PORT,...)
        self.state = state  # the cluster id and producer id blocks (broker/kafka/state.py)
        self.group_configs = group_configs  # per-group settings (broker/config/group_configs.py)
        self.broker_configs = broker_configs  # AlterConfigs of the broker (broker/config/dynamic_broker_configs.py)
        self.authenticator = authenticator  # broker.security.sasl.SaslAuthenticator: the SCRAM credentials
        self.groups = groups  # broker/kafka/groups: the classic GroupCoordinator
        self.consumer_groups = consumer_groups  # and KIP-848's ConsumerGroupCoordinator
        self._table: dict[int, ApiEntry] = {}
        # api_key -> guard(request, ctx): the response that refuses the request (an
        # authorization failure of the whole request), or None to handle it.
        self.guards: dict[int, Callable[[Any, RequestContext], Any]] = {}
        self._shutdown_callbacks: list[Callable[[], Any]] = []
        # The last request `handle_now` decoded and declined: (frame, header, request),
        # so `handle` does not decode the same frame again.
        self._declined: tuple[Any, Any, Any] | None = None
        self.shutting_down = False

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

    def guard(self, api_key: int, guard: Callable[[Any, RequestContext], Any]) -> None:
        """Run `guard(request, ctx)` before `api_key`'s handler: the response that refuses
        the whole request (its authorization), or None to handle it."""
        self.guards[api_key] = guard

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

    # ---- RequestHandlers (broker.net.request_handlers) --------------------------------------------------------

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
        if not conn.authenticated and SASL_GATE.refusal(conn, api_key) is not None:
            raise CloseConnection()
        entry = self._table.get(api_key)
        if entry is None or not entry.min_version <= api_version <= entry.max_version:
            if api_key == API_VERSIONS:
                return [unsupported_api_versions(self.supported(), correlation_id)]
            self._bad_request(frame, peer, "kafka_unsupported_request", api_key=api_key, api_version=api_version)
        declined, self._declined = self._declined, None
        if declined is not None and declined[0] is frame:
            header, request = declined[1], declined[2]
        else:
            try:
                header, request = codec.decode_request(frame, entry.request_classes[api_version])
            except codec.MalformedRequest as e:
                self._bad_request(frame, peer, "kafka_bad_request", api_key=api_key, api_version=api_version,
                                  error=str(e))
        ctx = self._context(entry, header, api_version, correlation_id, conn)
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
        except Exception as e:
            response = self._failed(ctx, e)
        return self._reply(ctx, response)

    # ---- the envelope both `handle` and `handle_now` use ------------------------------------------

    def _context(self, entry: ApiEntry, header: Any, api_version: int, correlation_id: int,
                 conn: ConnectionContext) -> RequestContext:
        """The handler's RequestContext, with a clock while a request_percentage quota is set."""
        ctx = RequestContext(header, entry.api_key, api_version, correlation_id, header.client_id, conn.peer,
                             self, entry.response_classes[api_version], conn)
        if self.partitions.request_quotas:
            ctx.clock = HandlerClock()
        return ctx

    def _failed(self, ctx: RequestContext, error: Exception) -> Any:
        """The answer to a handler's exception (called in its `except`): a StrataError's
        code, anything else logged and UNKNOWN_SERVER_ERROR, in the response's top-level
        error fields."""
        if isinstance(error, StrataError):
            return codec.error_response(ctx.response_class, error.code)
        log.exception("kafka_request_failed", api_key=ctx.api_key, api_version=ctx.api_version)
        return codec.error_response(ctx.response_class, ErrorCode.unknown_server_error)

    def _reply(self, ctx: RequestContext, response: Any) -> list | None:
        """The handler's response charged to the request quotas and framed: None for no
        answer (acks=0); a list is already framed (Fetch)."""
        if ctx.clock is not None and not ctx.charged:
            response = self._charge_request_time(ctx, response)
        if response is None or isinstance(response, list):
            return response
        return [codec.encode_response(ctx.correlation_id, response)]

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

    def _bad_request(self, frame, peer, event: str, **fields) -> NoReturn:
        """Close the connection of a request this listener cannot serve: logged as a bad
        request (rate-limited), except a native-protocol HANDSHAKE, which is how the command
        line asks a listener which protocol it speaks (broker/cli/addresses.py)."""
        if is_native_handshake(frame):
            log.info("kafka_listener_native_handshake", peer=peer)
        else:
            self.bad_requests.record(peer, event, **fields, peer=peer)
        raise CloseConnection()

    # ---- FastPath (broker.net.request_handlers) -----------------------------------------------------------

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
        ctx = self._context(entry, header, api_version, correlation_id, conn)
        clock = ctx.clock
        if clock is not None:
            clock.start()
        try:
            response = entry.handler_now(request, ctx)
        except Exception as e:
            response = self._failed(ctx, e)
        if response is DECLINE:
            self._declined = (frame, header, request)
            return None
        if clock is not None:
            clock.stop()
        return self._reply(ctx, response)

    def run_key(self, frame) -> None:
        return None  # no Kafka request is begun before its turn

    def begin(self, frame, conn: ConnectionContext) -> asyncio.Future:
        raise NotImplementedError("KafkaApis keys no frames (run_key is always None)")


__all__ = ["ApiEntry", "KafkaApis"]
