"""What the native protocol keeps per connection: `NativeSession`, and the answers
whose layout depends on the version in force.

Contract:
- `NativeSession` holds the version in force (1 until a HANDSHAKE settles on another,
  NATIVE-PROTOCOL.md "Version 2"), whether the HANDSHAKE happened, how many requests
  the connection has begun, its ConnectionContext (`session.context`) and the
  clock of the request being handled. `error(code, message)` is an error answer
  as that version lays it out: an empty body in version 1, `message:str?` from
  version 2 on. `produce_answer` is the PRODUCE answer function
  (broker/core/appends.py's `Answer`) for that version.
- `NativeSession.agree(requested)` is the HANDSHAKE rule: only as the first
  request, once; the version in force is the lower of the client's and
  PROTOCOL_VERSION; a version below 1 is INVALID_REQUEST.
- `listener_sasl_mechanisms(context)` is the one place that says which SASL
  mechanisms a connection's listener requires (its ListenerSasl,
  broker/security/sasl.py; none on a listener without SASL); a HANDSHAKE answers it.
The per-connection dispatch (the SASL gate, quotas, the fast path) is session.py's.
"""

from __future__ import annotations

from broker.net.handler_clock import HandlerClock
from broker.net.listeners import ConnectionContext
from broker.net.request_handlers import Reply
from kafka_format.errors import InvalidRequestError, StrataError
from protocol import PROTOCOL_VERSION, error_response, produce_response

from ..core import AppendResult, error_reason

MESSAGE_VERSION = 2  # error answers carry their message from this version on


def listener_sasl_mechanisms(context: ConnectionContext) -> tuple[str, ...]:
    """The SASL mechanisms the connection's listener requires, in the order a
    HANDSHAKE lists them (Kafka's [listener.name.<listener>.]sasl.enabled.mechanisms);
    none on a listener without SASL."""
    sasl = context.sasl
    return sasl.mechanisms if sasl is not None else ()


def produced(result: AppendResult) -> Reply:
    """A successful PRODUCE's reply, the same in every version."""
    return [produce_response(result.first_offset, result.log_append_time)]


def produce_answer(result: AppendResult | None, code: int, error: StrataError | None) -> Reply:
    """A version-1 PRODUCE's reply from its append's outcome (runs where the append
    ran): the code, no words."""
    if result is None:
        return [error_response(code)]
    return produced(result)


def produce_answer_v2(result: AppendResult | None, code: int, error: StrataError | None) -> Reply:
    """`produce_answer` from version 2 on: an error carries its reason."""
    if result is None:
        return [error_response(code, error_reason(code, error), MESSAGE_VERSION)]
    return produced(result)


class NativeSession:
    """The per-connection state of the native protocol (see the module contract)."""

    __slots__ = ("version", "handshaken", "seen", "produce_answer", "context", "client_id", "clock", "charged")

    def __init__(self, context: ConnectionContext) -> None:
        self.version = 1
        self.handshaken = False
        self.seen = 0  # requests begun on the connection, the one being handled included
        self.produce_answer = produce_answer
        self.context = context  # the connection's ConnectionContext
        self.client_id: str | None = None  # the HANDSHAKE's clientId (client quotas)
        # request_percentage quotas: the clock of the request being handled (None while no
        # such quota is set) and whether its handler charged the quotas itself (FETCH).
        self.clock: HandlerClock | None = None
        self.charged = False

    def error(self, code: int, message: str | None = None) -> Reply:
        return [error_response(code, message, self.version)]

    def agree(self, requested: int) -> int:
        """The HANDSHAKE rule: the version in force from now on. Raises InvalidRequestError
        for a HANDSHAKE that is not the connection's first request, or a second one."""
        if self.handshaken or self.seen != 1:
            raise InvalidRequestError("HANDSHAKE is answered once, as the first request of a connection")
        self.handshaken = True
        if requested < 1:
            raise InvalidRequestError(f"version {requested} is below 1, the lowest native protocol version")
        self.version = min(requested, PROTOCOL_VERSION)
        if self.version >= MESSAGE_VERSION:
            self.produce_answer = produce_answer_v2
        return self.version


__all__ = ["MESSAGE_VERSION", "NativeSession", "listener_sasl_mechanisms", "produce_answer", "produce_answer_v2",
           "produced"]
