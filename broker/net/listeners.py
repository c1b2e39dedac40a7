"""Listeners as Kafka names them, for both protocols, and what a connection knows of its own.

Contract:
- `listener_specs(values, sources)` reads the configuration (broker/config/broker_config.py) and
  returns every listener to open, `ListenerSpec`s, Kafka's first, or raises
  InvalidConfigError naming the key:
  - `listeners`: Kafka-protocol listeners, `NAME://HOST:PORT,...` (HOST empty =
    every address). Empty: the shorthand `PLAINTEXT://host.name:kafka.port`
    (none when kafka.port is -1).
  - `native.listeners`: native-protocol listeners in the same form. Empty: the
    shorthand `PLAINTEXT://host.name:port`.
  - `listener.security.protocol.map`: `NAME:PROTOCOL,...`, Kafka's default maps
    PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL to themselves. Every listener's
    name must be in it.
  - `advertised.listeners`: `NAME://HOST:PORT` per Kafka listener, what
    Metadata/FindCoordinator answer a client connected to that listener; a
    listener without one advertises its bound address (a wildcard host replaced by
    this machine's canonical name), port 0 = the bound port. Names must be
    Kafka listeners.
  - `native.advertised.listeners`: the same per native listener: the address
    clients reach it at (DESCRIBE_LISTENERS answers it). Names must be native
    listeners.
  Names are unique within a protocol (case-insensitive, kept upper-case); a
  native and a Kafka listener may share a name, and then share its
  `listener.name.<name>.ssl.*` settings.
- `Listener`: a spec at run time, with the bound address, what it advertises
  (`advertised`, Metadata's answer; `described`, DESCRIBE_LISTENERS' answer),
  (SSL) its TLS context source (broker/net/tls.py) and principal mapper, and
  (SASL_*) its SASL settings and the broker's SaslAuthenticator
  (broker/security/sasl.py).
- `ConnectionContext`: what one connection knows of itself, for the request
  handlers: its listener (name, security protocol), the peer address, the
  subject of the client's TLS certificate when it presented one (mTLS), and its
  `principal` ("User:ANONYMOUS" until authenticated; "User:<name>" after SASL;
  "User:<mapped subject>" for a client certificate on an SSL listener, through
  ssl.principal.mapping.rules). On a SASL listener `authenticated` is False
  until the SASL exchange succeeds (and again once its session expires) and
  `sasl` is the connection's SaslSession; elsewhere `authenticated` is True and
  `sasl` None. `throttle_ms`: the throttle time its current request earned under
  client quotas (broker/core/quotas.py).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.security.principal import ANONYMOUS
from kafka_format.errors import InvalidConfigError

KAFKA = "kafka"
NATIVE = "native"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


def parse_listener(text: str) -> tuple[str, str, int]:
    """`NAME://HOST:PORT` (HOST may be empty or a bracketed IPv6 address) ->
    (NAME upper-cased, host, port); ValueError when malformed."""
    name, sep, rest = text.strip().partition("://")
    if not sep or not name:
        raise ValueError(f"{text.strip()!r}: expected NAME://HOST:PORT")
    if not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"{text.strip()!r}: a listener name has letters, digits, '_' and '-' only")
    host, colon, port = rest.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text.strip()!r}: expected NAME://HOST:PORT with a port 0..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return name.upper(), host, int(port)


def parse_listener_list(text: str) -> list[tuple[str, str, int]]:
    """A comma list of listeners, each name once; ValueError when malformed."""
    out: list[tuple[str, str, int]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        listener = parse_listener(item)
        if any(listener[0] == seen[0] for seen in out):
            raise ValueError(f"listener name {listener[0]} appears more than once")
        out.append(listener)
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}; ValueError when malformed."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, colon, protocol = item.strip().partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not colon or not name:
            raise ValueError(f"{item.strip()!r}: expected NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{item.strip()!r}: the security protocol must be one of "
                             f"{', '.join(SECURITY_PROTOCOLS)}")
        if name in out:
            raise ValueError(f"listener name {name} appears more than once")
        out[name] = protocol
    return out


def list_complaint(value: str) -> str | None:
    """Key check of listeners, native.listeners, advertised.listeners."""
    try:
        parse_listener_list(value)
    except ValueError as e:
        return str(e)
    return None


def map_complaint(value: str) -> str | None:
    try:
        parse_protocol_map(value)
    except ValueError as e:
        return str(e)
    return None


@dataclass(frozen=True)
class ListenerSpec:
    """One listener to open, as configured."""

    protocol: str  # KAFKA or NATIVE
    name: str  # upper-case
    host: str  # "" = every address
    port: int  # 0 = any free port
    security_protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    advertised: tuple[str, int] | None = None  # [native.]advertised.listeners' entry, port 0 = bound

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS


def listener_specs(values: Mapping[str, Any], sources: Mapping[str, str]) -> tuple[ListenerSpec, ...]:
    """Every listener of the configuration (see the module contract)."""
    def fail(key: str, message: str) -> InvalidConfigError:
        return InvalidConfigError(f"{key}: {message} ({sources.get(key, 'default')})")

    protocol_map = parse_protocol_map(values["listener.security.protocol.map"])
    host = values["host.name"]
    kafka = parse_listener_list(values["listeners"])
    if not kafka and values["kafka.port"] >= 0:
        kafka = [("PLAINTEXT", host, values["kafka.port"])]
    native = parse_listener_list(values["native.listeners"])
    if not native:
        native = [("PLAINTEXT", host, values["port"])]
    advertised = {name: (h, p) for name, h, p in parse_listener_list(values["advertised.listeners"])}
    native_advertised = {name: (h, p) for name, h, p in parse_listener_list(values["native.advertised.listeners"])}
    for key, entries, told, which in (("advertised.listeners", kafka, advertised, "Kafka"),
                                      ("native.advertised.listeners", native, native_advertised, "native")):
        names = {name for name, _, _ in entries}
        for name in told:
            if name not in names:
                raise fail(key, f"listener {name} is not one of the {which} listeners ({', '.join(sorted(names))})")
    specs: list[ListenerSpec] = []
    for protocol, entries, key in ((KAFKA, kafka, "listeners"), (NATIVE, native, "native.listeners")):
        for name, h, p in entries:
            security = protocol_map.get(name)
            if security is None:
                raise fail("listener.security.protocol.map",
                           f"no security protocol for listener {name} (of {key})")
            specs.append(ListenerSpec(protocol, name, h, p, security,
                                      (advertised if protocol == KAFKA else native_advertised).get(name)))
    return tuple(specs)


WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def canonical_host(host: str) -> str:
    """A wildcard bind address (empty, 0.0.0.0, ::) is advertised as this machine's name."""
    return socket.getfqdn() if host in WILDCARD_HOSTS else host


@dataclass(eq=False)
class Listener:
    """A listener at run time: its spec, the bound address and (SSL) its TLS contexts."""

    spec: ListenerSpec
    tls: Any = None  # broker.net.tls.ServerTls when the listener is SSL
    address: tuple[str, int] | None = None  # bound (host, port)
    sasl: Any = None  # broker.security.sasl.ListenerSasl on a SASL_* listener
    authenticator: Any = None  # broker.security.sasl.SaslAuthenticator (SASL_* listeners)
    principal_mapper: Any = None  # broker.security.principal.SslPrincipalMapper (TLS listeners)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def security_protocol(self) -> str:
        return self.spec.security_protocol

    @property
    def advertised(self) -> tuple[str, int]:
        """What Metadata/FindCoordinator answer on this listener."""
        assert self.address is not None, "not bound yet"
        host, port = self.spec.advertised or self.address
        return canonical_host(host), port or self.address[1]

    @property
    def described(self) -> tuple[str, int]:
        """What DESCRIBE_LISTENERS answers for this listener: its advertised entry (port 0 =
        the bound port), else the bound address; a host of "" (an advertised entry without
        one, or a listener on every address) stands for the host the client reached."""
        assert self.address is not None, "not bound yet"
        host, port = self.spec.advertised or (self.spec.host, self.address[1])
        return ("" if host in WILDCARD_HOSTS else host), port or self.address[1]


@dataclass(eq=False, slots=True)
class ConnectionContext:
    """One connection as the request handlers see it (see the module contract)."""

    listener: Listener | None
    peer: Any = None  # (host, port) as the socket reports it
    peer_certificate_subject: str | None = None  # RFC 4514, when the client sent a certificate
    # Client quotas: the throttle time (ms) a handler gave the request being answered;
    # the connection mutes itself that long once the reply is out (KIP-219), then
    # sets it back to 0 (broker/net/connection.py, broker/core/quotas.py).
    throttle_ms: int = 0
    principal: str = ANONYMOUS  # "User:<name>" once known
    authenticated: bool = True  # False on a SASL listener until the exchange succeeds
    sasl: Any = None  # the connection's SaslSession on a SASL listener

    def __post_init__(self) -> None:
        listener = self.listener
        if listener is not None and listener.sasl is not None:
            self.authenticated = False
            self.sasl = listener.authenticator.session(self)

    def certificate_presented(self, subject: str | None) -> None:
        """The client's TLS certificate subject: on an SSL listener it names the principal
        (NoMatchingRule when no ssl.principal.mapping.rules rule maps it)."""
        self.peer_certificate_subject = subject
        listener = self.listener
        if subject and listener is not None and listener.sasl is None:
            mapper = listener.principal_mapper
            self.principal = "User:" + (mapper.name(subject) if mapper is not None else subject)

    @property
    def listener_name(self) -> str | None:
        return self.listener.name if self.listener is not None else None

    @property
    def security_protocol(self) -> str:
        return self.listener.security_protocol if self.listener is not None else "PLAINTEXT"


__all__ = ["ConnectionContext", "DEFAULT_PROTOCOL_MAP", "KAFKA", "Listener", "ListenerSpec", "NATIVE",
           "SECURITY_PROTOCOLS", "WILDCARD_HOSTS",
           "canonical_host", "listener_specs", "parse_listener", "parse_listener_list",
           "parse_protocol_map"]
