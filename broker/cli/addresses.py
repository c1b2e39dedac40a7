"""One address for every command: which protocol answers at `--bootstrap-server`, and
where the broker's other listener is.

Contract:
- `probe(address, security)` connects to the first address of "HOST:PORT[,...]" that
  accepts a connection (TLS first when `security` says SSL or SASL_SSL) and finds out
  which protocol answers there: it sends the native HANDSHAKE (answered by a native
  listener before any authentication), and when that is not answered as the native
  protocol answers it, Kafka's ApiVersions v0 on a second connection (answered by a
  Kafka listener before any authentication). Returns (NATIVE or KAFKA, the "HOST:PORT"
  that answered), or (None, the first address) when no address accepts a connection,
  so that the command's own client reports the unreachable broker as it always did.
  Every wait is bounded by PROBE_TIMEOUT_S (a connection not accepted in time counts
  as no connection); a listener that accepts and never answers, answers neither
  protocol, or breaks TLS is a CliError of one line.
- `native_address(args)`: the native listener for a command that speaks the native
  protocol. `--bootstrap-server` itself when the native protocol answers there (or
  nothing does); when Kafka's protocol answers, the native listener the broker
  describes through that Kafka listener: DescribeConfigs of broker 0 for
  `native.advertised.listeners`, `native.listeners`, `port` and `host.name` (with the
  Kafka keys, to tell which listener was reached).
- `kafka_address(args)`: the Kafka listener for a command that speaks Kafka's admin
  APIs. `--kafka-bootstrap-server`, else $STRATA_KAFKA_BOOTSTRAP_SERVER; else
  `--bootstrap-server` itself when Kafka's protocol answers there; when the native
  protocol answers, the Kafka listener the broker names in its DESCRIBE_LISTENERS
  answer; when nothing answers there, the --bootstrap-server host on port 9092
  (kafka.port's default).
- Of the other protocol's listeners the one chosen has the name of the listener
  reached (matched by its port), else the security protocol of --command-config
  (PLAINTEXT without one), else it is the first; a host of "" (a listener on every
  address) is the host the command reached. Both answers are kept on `args`, so a
  command probes once.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import struct
from typing import Any

from client import StrataClientError, parse_bootstrap
from client.security import ssl_context
from protocol import (
    PROTOCOL_VERSION,
    HandshakeRequest,
    ListenerInfo,
    ProtocolError,
    RequestType,
    encode_request,
    parse_response,
)

from . import CliError
from .client_support import KAFKA_BOOTSTRAP_ENV, check_bootstrap, command_config
from .kafka_admin import KafkaAdmin
from .kafka_call import ASSUMED

NATIVE, KAFKA = "native", "kafka"
PROBE_TIMEOUT_S = 5.0  # a live listener answers either probe at once: this bounds a silent one
MAX_PROBE_ANSWER = 1 << 20  # either answer is a few hundred bytes; more is neither protocol
PROBE_CLIENT_ID = "strata-cli-probe"
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 0x5354524b, len(PROBE_CLIENT_ID)) + PROBE_CLIENT_ID.encode()
KAFKA_PORT = 9092  # kafka.port's default
NODE_ID = "0"  # the broker's node id: a Strata broker is node 0
LISTENER_KEYS = ("host.name", "port", "kafka.port", "listeners", "native.listeners", "advertised.listeners",
                 "native.advertised.listeners", "listener.security.protocol.map")
_MEMO = "_strata_addresses"


class _NoAnswer(Exception):
    """The peer closed the connection (or answered what is neither protocol)."""


class _Unreachable(Exception):
    """Nothing accepts a connection there (or the name does not resolve)."""


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _security_protocol(security: dict[str, str] | None) -> str:
    return (security or {}).get("security.protocol", "PLAINTEXT").upper()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise _NoAnswer("closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _exchange(host: str, port: int, context: ssl.SSLContext | None, frame: bytes) -> bytes:
    """Send one frame on a new connection and return the answer's frame (after its size)."""
    try:
        raw = socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S)
    except OSError as e:  # refused, unreachable, no answer to the connect, a name that does not resolve
        raise _Unreachable(str(e)) from None
    with raw:
        try:
            sock = context.wrap_socket(raw, server_hostname=host) if context is not None else raw
            sock.sendall(frame)
            (size,) = struct.unpack(">i", _read_exactly(sock, 4))
            if not 2 <= size <= MAX_PROBE_ANSWER:
                raise _NoAnswer(f"a frame of {size} bytes")
            return _read_exactly(sock, size)
        except (TimeoutError, ssl.SSLError):
            raise
        except OSError as e:  # reset, broken pipe: the peer gave up on what it read
            raise _NoAnswer(str(e)) from None


def _is_native(answer: bytes) -> bool:
    try:
        parse_response(RequestType.HANDSHAKE, answer, 1)
    except ProtocolError:
        return False
    return True


def _is_kafka(answer: bytes) -> bool:
    return len(answer) >= 6 and struct.unpack_from(">i", answer)[0] == struct.unpack_from(">i", API_VERSIONS_V0, 4)[0]


def probe(address: str, security: dict[str, str] | None) -> tuple[str | None, str]:
    """(NATIVE | KAFKA | None, the address that answered): see the module contract."""
    try:
        addresses = parse_bootstrap(address)
        context = ssl_context(security)
    except ValueError as e:
        raise CliError(str(e)) from None
    native_probe = encode_request(HandshakeRequest(PROTOCOL_VERSION, PROBE_CLIENT_ID))
    kafka_probe = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0
    for host, port in addresses:
        where = format_address(host, port)
        try:
            try:
                if _is_native(_exchange(host, port, context, native_probe)):
                    return NATIVE, where
            except _NoAnswer:
                pass
            try:
                if _is_kafka(_exchange(host, port, context, kafka_probe)):
                    return KAFKA, where
            except _NoAnswer:
                pass
        except TimeoutError:
            raise CliError(f"{where} accepted the connection but answered nothing within {PROBE_TIMEOUT_S:g} s: "
                           f"is it a listener of a Strata broker?") from None
        except ssl.SSLError as e:
            raise CliError(f"TLS with {where} failed: {e.reason or e} (is it a TLS listener, and do the "
                           f"--command-config ssl.* settings match it?)") from None
        except _Unreachable:
            continue  # nothing listens there: the next address
        tls = "" if context is not None else " (a TLS listener? --command-config sets security.protocol=SSL)"
        raise CliError(f"{where} answers neither Strata's native protocol nor Kafka's{tls}")
    return None, format_address(*addresses[0])


def _memo(args: argparse.Namespace) -> dict[str, Any]:
    memo = getattr(args, _MEMO, None)
    if memo is None:
        memo = {}
        setattr(args, _MEMO, memo)
    return memo


def _probed(args: argparse.Namespace) -> tuple[str | None, str]:
    memo = _memo(args)
    if "probe" not in memo:
        memo["probe"] = probe(check_bootstrap(args.bootstrap_server), command_config(args))
    return memo["probe"]


def native_address(args: argparse.Namespace) -> str:
    """The native listener's address for these arguments (see the module contract)."""
    memo = _memo(args)
    if "native" not in memo:
        kind, reached = _probed(args)
        memo["native"] = (_native_from_kafka(reached, command_config(args)) if kind == KAFKA
                          else args.bootstrap_server)
    return memo["native"]


def kafka_address(args: argparse.Namespace) -> str:
    """The Kafka listener's address for these arguments (see the module contract)."""
    explicit = args.kafka_bootstrap_server or os.environ.get(KAFKA_BOOTSTRAP_ENV)
    if explicit:
        return check_bootstrap(explicit)
    memo = _memo(args)
    if "kafka" not in memo:
        kind, reached = _probed(args)
        if kind == KAFKA:
            memo["kafka"] = reached
        elif kind == NATIVE:
            memo["kafka"] = _kafka_from_native(reached, command_config(args))
        else:
            memo["kafka"] = format_address(parse_bootstrap(reached)[0][0], KAFKA_PORT)
            ASSUMED[memo["kafka"]] = args.bootstrap_server
    return memo["kafka"]


def choose(listeners: list[ListenerInfo], reached: str, wanted: str, security: dict[str, str] | None) -> str:
    """The address of the `wanted` protocol's listener for a command that reached `reached`
    (see the module contract); a CliError when the broker has none."""
    host, port = parse_bootstrap(reached)[0]
    others = [info for info in listeners if info.protocol == wanted]
    if not others:
        what = "Kafka listener (kafka.port -1?)" if wanted == KAFKA else "native listener"
        raise CliError(f"the broker at {reached} has no {what}")
    own = [info for info in listeners if info.protocol != wanted and info.port == port and info.host in ("", host)]
    security_protocol = _security_protocol(security)
    pick = (next((info for info in others if own and info.name == own[0].name), None)
            or next((info for info in others if info.security_protocol == security_protocol), None)
            or others[0])
    if not pick.port:
        raise CliError(f"the broker at {reached} does not tell its {wanted} listener's port (it takes any free "
                       f"port): give its address, or set native.advertised.listeners on the broker")
    return format_address(pick.host or host, pick.port)


def _kafka_from_native(reached: str, security: dict[str, str] | None) -> str:
    from client import Admin

    try:
        with Admin(reached, retries=1, security=security) as admin:
            listeners = admin.describe_listeners()
    except StrataClientError as e:
        raise CliError(f"cannot ask the broker at {reached} where its Kafka listener is: {' '.join(str(e).split())} "
                       f"(give it with --kafka-bootstrap-server)") from None
    return choose(listeners, reached, KAFKA, security)


def listeners_from_configs(values: dict[str, str | None]) -> list[ListenerInfo]:
    """Both protocols' listeners as a broker's configuration describes them (`LISTENER_KEYS`),
    each at its advertised address, else its configured one (a wildcard host as "")."""
    from broker.net.listeners import DEFAULT_PROTOCOL_MAP, WILDCARD_HOSTS, parse_listener_list, parse_protocol_map

    def text(key: str) -> str:
        return values.get(key) or ""

    host = text("host.name")
    security = parse_protocol_map(text("listener.security.protocol.map") or DEFAULT_PROTOCOL_MAP)
    kafka = parse_listener_list(text("listeners"))
    if not kafka and int(text("kafka.port") or KAFKA_PORT) >= 0:
        kafka = [("PLAINTEXT", host, int(text("kafka.port") or KAFKA_PORT))]
    native = parse_listener_list(text("native.listeners")) or [("PLAINTEXT", host, int(text("port") or 0))]
    out = []
    for protocol, entries, key in ((KAFKA, kafka, "advertised.listeners"),
                                   (NATIVE, native, "native.advertised.listeners")):
        told = {name: (h, p) for name, h, p in parse_listener_list(text(key))}
        for name, h, p in entries:
            told_host, told_port = told.get(name, (h, p))
            told_host = "" if told_host in WILDCARD_HOSTS else told_host
            out.append(ListenerInfo(protocol, name, security.get(name, name), told_host, told_port or p))
    return out


def _native_from_kafka(reached: str, security: dict[str, str] | None) -> str:
    hint = "give --bootstrap-server the native listener's address"
    try:
        values = KafkaAdmin(reached, security).broker_config_values(NODE_ID, LISTENER_KEYS)
    except CliError as e:
        raise CliError(f"cannot ask the Kafka listener at {reached} where the native listener is: {e} "
                       f"({hint})") from None
    if "native.listeners" not in values or "port" not in values:
        raise CliError(f"the Kafka listener at {reached} describes no native listener (native.listeners): "
                       f"not a Strata broker? ({hint})")
    try:
        listeners = listeners_from_configs(values)
    except ValueError as e:
        raise CliError(f"the Kafka listener at {reached} describes listeners that cannot be read: {e}") from None
    return choose(listeners, reached, NATIVE, security)
