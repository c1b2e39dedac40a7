"""One native connection's request handling: `SessionHandlers`, the handlers it serves.

Contract:
- `SessionHandlers` is the RequestHandlers (and FastPath) one connection serves
  (`Handlers.for_connection`, broker/net/connection.py's PerConnection): it keeps the
  connection's `NativeSession` (session_state.py), counts the connection's
  requests in it and hands each to the shared `Handlers` with the session. The
  first request of a connection always goes through `handle` (never the fast
  path), so a HANDSHAKE is always seen as the first.
- SASL: on a SASL listener, until the connection's SaslSession succeeds
  (`context.authenticated`), `SessionHandlers` answers only HANDSHAKE and
  SASL_AUTHENTICATE: any other request is answered SASL_AUTHENTICATION_FAILED
  with its reason and the connection is closed (NATIVE-PROTOCOL.md "Version
  2"); the fast path and early begins are off while it is unauthenticated.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from broker.net.handler_clock import HandlerClock
from broker.net.listeners import ConnectionContext
from broker.net.request_handlers import CloseAfterReply, FastPath, Frame, Reply
from protocol import ErrorCode, ProtocolError, RequestType, error_response, parse_produce, parse_request

from ..core import INLINE_APPEND_MAX_BYTES
from ..security.sasl import SaslGate, sasl_failure_delay
from .session_state import NativeSession

PRODUCE, FETCH = int(RequestType.PRODUCE), int(RequestType.FETCH)  # the fast path's types (frame[1])

# Requests a connection on a SASL listener may send before it has authenticated.
BEFORE_AUTHENTICATION = frozenset({RequestType.HANDSHAKE, RequestType.SASL_AUTHENTICATE})
# The SASL gate (broker/security/sasl.py) with the native protocol's words: a refused
# request is answered SASL_AUTHENTICATION_FAILED with them, then the connection closes.
SASL_GATE = SaslGate(
    BEFORE_AUTHENTICATION,
    unauthenticated=lambda _type: ("this listener requires SASL authentication: send HANDSHAKE and "
                                   "SASL_AUTHENTICATE first"),
    expired=lambda _type: ("the SASL session expired (connections.max.reauth.ms) and the client did not "
                           "re-authenticate"))


def produce_record_bytes(frame: Frame, version: int) -> int:
    """The record bytes of a PRODUCE or MULTIPRODUCE frame: its message sets' bytes,
    what the produce quota charges (broker/core/charges.py); 0 for a frame that
    does not parse (it appends nothing)."""
    try:
        if frame[1] == PRODUCE:
            return len(parse_produce(frame)[2])
        request = parse_request(frame, version)
    except ProtocolError:
        return 0
    return sum(len(item.message_set) for item in getattr(request, "items", ()))


class SharedHandlers(Protocol):
    """What a connection's SessionHandlers hands its frames to: the listener's shared
    `Handlers` (broker/native/handlers.py)."""

    partitions: Any  # broker/core/service.py's PartitionService
    loop: asyncio.AbstractEventLoop

    async def handle(self, frame: Frame, session: NativeSession) -> Reply: ...

    def produce_now(self, frame: Frame, session: NativeSession) -> Reply | None: ...

    def fetch_now(self, frame: Frame, session: NativeSession) -> Reply | None: ...

    def run_key(self, frame: Frame) -> Any: ...

    def begin(self, frame: Frame, session: NativeSession) -> asyncio.Future: ...

    def begin_shutdown(self) -> None: ...


class SessionHandlers(FastPath):
    """The handlers one native connection serves: its session, the shared Handlers."""

    def __init__(self, shared: SharedHandlers, context: ConnectionContext):
        self.shared = shared
        self.partitions = shared.partitions
        self.session = NativeSession(context)
        self.loop: asyncio.AbstractEventLoop = shared.loop
        # The fast path's handlers (`handle_now`), bound once per connection.
        self._produce_now = shared.produce_now
        self._fetch_now = shared.fetch_now

    async def handle(self, frame: Frame, conn: ConnectionContext) -> Reply:
        session = self.session
        session.seen += 1
        if not conn.authenticated:
            await self.refuse_unauthenticated(frame, conn)
        quotas = self.partitions.quotas
        if quotas is None or not quotas.active:  # no client quota set: nothing to time or count
            session.clock = None
            return await self.shared.handle(frame, session)
        clock = self._clock()
        if clock is None:
            reply = await self.shared.handle(frame, session)
        else:
            reply = await clock.timed(self.shared.handle(frame, session))
        self._count_quota(frame, conn)
        return reply

    async def refuse_unauthenticated(self, frame: Frame, conn: ConnectionContext) -> None:
        """The SASL gate: returns for a HANDSHAKE or SASL_AUTHENTICATE, else raises
        CloseAfterReply with SASL_AUTHENTICATION_FAILED after the failure delay."""
        request_type = int.from_bytes(frame[:2], "big") if len(frame) >= 2 else -1
        message = SASL_GATE.refusal(conn, request_type)
        if message is None:
            return
        await sasl_failure_delay(conn.sasl)
        raise CloseAfterReply(self.session.error(ErrorCode.SASL_AUTHENTICATION_FAILED, message))

    def handle_now(self, frame: Frame, conn: ConnectionContext) -> Reply | None:
        """The reply to `frame` if it can be made right now, on the loop, without
        waiting for anything: a PRODUCE whose append runs inline (the partition
        service's policy), a FETCH with data to send or nothing to wait for
        (`Handlers.produce_now` / `fetch_now`). None, with nothing done, for
        anything else, which then goes through `handle`. Answers exactly as
        `handle` would."""
        session = self.session
        if not session.seen or not conn.authenticated:
            return None  # a connection's first request goes to `handle` (it may be a HANDSHAKE)
        if frame[0]:  # the int16 type, big-endian: every type so far has a zero high byte
            return None
        request_type = frame[1]
        if request_type == PRODUCE:
            now = self._produce_now
        elif request_type == FETCH:
            now = self._fetch_now
        else:
            return None
        quotas = self.partitions.quotas
        if quotas is None or not quotas.active:  # no client quota set: nothing to time or count
            session.clock = None
            reply = now(frame, session)
            if reply is not None:
                session.seen += 1
            return reply
        clock = self._clock()
        if clock is not None:
            clock.start()
        reply = now(frame, session)
        if reply is not None:
            if clock is not None:
                clock.stop()
            session.seen += 1
            self._count_quota(frame, conn)
        return reply

    def run_key(self, frame: Frame) -> Any:
        if len(frame) <= INLINE_APPEND_MAX_BYTES:
            return None  # only a PRODUCE larger than this is ever keyed (produce.py's run_key)
        session = self.session
        if not session.seen or not session.context.authenticated:
            return None  # `handle` first: the HANDSHAKE, the SASL gate
        return self.shared.run_key(frame)

    def begin(self, frame: Frame, conn: ConnectionContext) -> asyncio.Future:
        session = self.session
        session.seen += 1
        quotas = self.partitions.quotas
        if quotas is None or not quotas.active:  # no client quota set: nothing to time or count
            session.clock = None
            return self.shared.begin(frame, session)
        clock = self._clock()
        if clock is not None:
            clock.start()
        begun = self.shared.begin(frame, self.session)
        if clock is not None:
            clock.stop()
        self._count_quota(frame, conn)  # keyed frames are PRODUCEs
        return begun

    def _clock(self) -> HandlerClock | None:
        """A new request's clock while a request_percentage quota is set, else None."""
        session = self.session
        session.charged = False
        session.clock = HandlerClock() if self.partitions.request_quotas else None
        return session.clock

    def _count_quota(self, frame: Frame, conn: ConnectionContext) -> None:
        """Client quotas (broker/core/charges.py, the one charge rule): a PRODUCE or
        MULTIPRODUCE counts its record bytes and its handler's time;
        FETCH and MULTIFETCH charge their own (broker/native/fetch.py: a throttled one
        answers no records); any other request its handler's time. The native
        layouts have no throttle field: a throttled connection is muted instead
        (the connection shell stops reading it for the throttle time, NATIVE.md)."""
        session = self.session
        partitions = self.partitions
        quotas = partitions.quotas
        if session.charged or quotas is None or not quotas.active:
            return
        clock = session.clock
        seconds = clock.elapsed() if clock is not None else 0.0
        if len(frame) >= 2 and not frame[0] and frame[1] in (RequestType.PRODUCE, RequestType.MULTIPRODUCE):
            partitions.throttle(conn, "produce", session.client_id, produce_record_bytes(frame, session.version),
                                seconds)
        elif clock is not None:
            partitions.throttle(conn, "request", session.client_id, seconds)

    def bad_frame_reply(self, error: Any) -> Reply:
        self.session.seen += 1
        return self.session.error(error.code, error.message)

    def fatal_reply(self, error: Any) -> list[bytes]:
        return [error_response(error.code, error.message, self.session.version)]

    def begin_shutdown(self) -> None:
        self.shared.begin_shutdown()
