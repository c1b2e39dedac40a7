"""SASL on a listener: its settings, and one connection's authentication state.

Contract:
- `SUPPORTED_MECHANISMS`: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.
- `listener_sasl(values, listener, security_protocol)` reads a SASL_* listener's
  settings as Kafka does, each `listener.name.<listener>.<key>` first, then the
  plain key: `sasl.enabled.mechanisms` (a mechanism Strata does not implement is
  an InvalidConfigError naming the key), `connections.max.reauth.ms`, and PLAIN's
  users from the JAAS line (`listener.name.<l>.plain.sasl.jaas.config`, then
  `listener.name.<l>.sasl.jaas.config`, then `sasl.jaas.config`: Kafka's
  PlainLoginModule with `user_<name>="<password>"` options). None for a listener
  without SASL.
- `SaslAuthenticator` is broker-wide: the SCRAM credential store (set once the
  data directory is locked), `connection.failed.authentication.delay.ms`, and
  the rate-limited log of failed logins (broker/net/bad_request_log.py, keyed by the
  client's address, with the broker-wide cap). `session(context)` gives a
  connection its `SaslSession`.
- `SaslSession` is one connection's SASL state, driven by both protocols:
  `handshake(mechanism)` (Kafka's SaslHandshake) chooses the mechanism,
  `authenticate(mechanism, bytes)` runs one round and returns (reply bytes,
  session lifetime ms: 0 until the exchange completes or when there is no
  re-authentication). On success the ConnectionContext gets `principal`
  ("User:<name>") and `authenticated`; with `connections.max.reauth.ms` a timer
  marks the session expired when its lifetime ends (`authenticated` False again,
  `expired` True), and a new exchange on the same connection renews it (with the
  same principal, as Kafka requires). Every failure raises
  SaslAuthenticationFailedError (or UnsupportedSaslMechanismError), is logged
  with the client address, and `failure_delay_s` is how long the caller waits
  before answering and closing. The state per connection is a few fields and at
  most one exchange in progress.
- `SaslGate` is the one rule of both protocols for a request that comes before a
  SASL listener's connection has authenticated (or after its session expired):
  the protocol's authentication requests pass, any other is refused, its failure
  logged with the authenticator, and the connection closes. Each protocol gives
  the request types it admits and its own words for the refusal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_format.errors import InvalidConfigError

from .credentials import ScramCredentialStore
from .errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from .jaas import PLAIN_MODULE, parse_jaas, plain_users
from .plain import check_plain
from .principal import user_principal
from .scram import MECHANISMS as SCRAM_MECHANISMS
from .scram import ScramServer

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_MECHANISMS = ",".join(SUPPORTED_MECHANISMS)


def mechanisms_complaint(value: str) -> str | None:
    """Key check of sasl.enabled.mechanisms."""
    names = [m.strip().upper() for m in value.split(",") if m.strip()]
    unknown = [m for m in names if m not in SUPPORTED_MECHANISMS]
    if unknown:
        return (f"{', '.join(unknown)} not supported; Strata implements {', '.join(SUPPORTED_MECHANISMS)}")
    return None


@dataclass(frozen=True)
class ListenerSasl:
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    reauth_ms: int = 0


def _setting(values: Mapping[str, Any], listener: str, key: str) -> tuple[Any, str]:
    scoped = f"listener.name.{listener.lower()}.{key}"
    if values.get(scoped) is not None:
        return values[scoped], scoped
    return values.get(key), key


def listener_sasl(values: Mapping[str, Any], listener: str, security_protocol: str) -> ListenerSasl | None:
    if not security_protocol.startswith("SASL_"):
        return None
    text, key = _setting(values, listener, "sasl.enabled.mechanisms")
    text = DEFAULT_MECHANISMS if text is None else text
    complaint = mechanisms_complaint(text)
    if complaint:
        raise InvalidConfigError(f"{key}: {complaint}")
    mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    if not mechanisms:
        raise InvalidConfigError(f"{key}: listener {listener} uses {security_protocol} but enables no "
                                 "SASL mechanism")
    users: dict[str, str] = {}
    for jaas_key in (f"listener.name.{listener.lower()}.plain.sasl.jaas.config",
                     f"listener.name.{listener.lower()}.sasl.jaas.config", "sasl.jaas.config"):
        jaas = values.get(jaas_key)
        if not jaas:
            continue
        try:
            module, options = parse_jaas(jaas)
        except ValueError as e:
            raise InvalidConfigError(f"{jaas_key}: {e}") from None
        if module == PLAIN_MODULE:
            users = plain_users(options)
            break
    reauth, _ = _setting(values, listener, "connections.max.reauth.ms")
    return ListenerSasl(mechanisms, users, int(reauth or 0))


async def sasl_failure_delay(session: SaslSession) -> None:
    """Wait connection.failed.authentication.delay.ms before answering a failure."""
    delay = session.authenticator.failure_delay_s
    if delay:
        await asyncio.sleep(delay)


@dataclass(frozen=True, slots=True)
class SaslGate:
    """What passes before authentication, and the refusal of the rest (see the module contract)."""

    admitted: frozenset[int]  # the protocol's request types that authenticate
    unauthenticated: Callable[[int], str]  # the refusal's words for request type N
    expired: Callable[[int], str]  # the same after the session expired (connections.max.reauth.ms)

    def refusal(self, context: Any, request_type: int) -> str | None:
        """None for a request that passes; else the refusal's message, already recorded as
        a failed login of the connection (the caller answers, or not, and closes)."""
        if request_type in self.admitted:
            return None
        sasl = context.sasl
        message = (self.expired if sasl.expired else self.unauthenticated)(request_type)
        sasl.authenticator.failed(context, None, message)
        return message


class SaslAuthenticator:
    """Broker-wide SASL: credentials, failure delay and logging (see the module contract)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, bad_requests: Any, failure_delay_ms: int = 100,
                 store: ScramCredentialStore | None = None):
        self.loop = loop
        self.bad_requests = bad_requests
        self.failure_delay_s = max(0, failure_delay_ms) / 1000
        self.store = store  # the SCRAM credentials (None: every SCRAM login fails)
        self.failures = 0  # failed authentications since the start

    def failed(self, context: Any, mechanism: str | None, message: str) -> None:
        self.failures += 1
        self.bad_requests.record(context.peer, "sasl_authentication_failed", peer=context.peer,
                                 listener=context.listener_name, mechanism=mechanism, error=message)

    def session(self, context: Any) -> SaslSession:
        return SaslSession(self, context.listener.sasl, context)


class SaslSession:
    """One connection's SASL state (see the module contract)."""

    __slots__ = ("authenticator", "settings", "context", "mechanism", "exchange", "expired", "_timer")

    def __init__(self, authenticator: SaslAuthenticator, settings: ListenerSasl, context: Any):
        self.authenticator = authenticator
        self.settings = settings
        self.context = context
        self.mechanism: str | None = None  # chosen by a Kafka SaslHandshake
        self.exchange: ScramServer | None = None  # a SCRAM exchange waiting for its final message
        self.expired = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self.settings.mechanisms

    def _check_mechanism(self, mechanism: str) -> None:
        if mechanism not in self.settings.mechanisms:
            raise UnsupportedSaslMechanismError(
                f"Unsupported SASL mechanism {mechanism}; this listener enables "
                f"{', '.join(self.settings.mechanisms)}")

    def handshake(self, mechanism: str) -> None:
        """Kafka's SaslHandshake: the mechanism of the exchange that follows."""
        if self.exchange is not None or self.mechanism is not None:
            raise IllegalSaslStateError("SaslHandshake during an authentication exchange")
        self._check_mechanism(mechanism)
        self.mechanism = mechanism

    def authenticate(self, mechanism: str, data: bytes) -> tuple[bytes, int]:
        """One round of the exchange (see the module contract)."""
        try:
            return self._round(mechanism, data)
        except (SaslAuthenticationFailedError, UnsupportedSaslMechanismError, IllegalSaslStateError) as e:
            self.exchange = None
            self.mechanism = None
            self.authenticator.failed(self.context, mechanism, str(e))
            raise

    def _round(self, mechanism: str, data: bytes) -> tuple[bytes, int]:
        self._check_mechanism(mechanism)
        exchange = self.exchange
        if exchange is not None:
            if exchange.mechanism.name != mechanism:
                raise SaslAuthenticationFailedError(
                    f"SASL mechanism {mechanism} in the middle of a {exchange.mechanism.name} exchange")
            self.exchange = None
            reply, user = exchange.final(data)
            return reply, self._complete(user)
        if mechanism == "PLAIN":
            return b"", self._complete(check_plain(data, dict(self.settings.plain_users)))
        store = self.authenticator.store
        scram = SCRAM_MECHANISMS[mechanism]
        server = ScramServer(scram, lambda user: store.lookup(mechanism, user) if store is not None else None)
        reply = server.first(data)
        self.exchange = server
        return reply, 0

    def _complete(self, user: str) -> int:
        principal = user_principal(user)
        context = self.context
        if (context.authenticated or self.expired) and principal != context.principal:
            raise SaslAuthenticationFailedError(
                f"Cannot change principals during re-authentication from {context.principal}: {principal}")
        context.principal = principal
        context.authenticated = True
        self.expired = False
        self.mechanism = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        lifetime = self.settings.reauth_ms
        if lifetime > 0:
            self._timer = self.authenticator.loop.call_later(lifetime / 1000, self._expire)
        return lifetime

    def _expire(self) -> None:
        self._timer = None
        self.expired = True
        self.context.authenticated = False

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
