"""One Kafka-protocol request from the command line, for what the native protocol has
no request for (growing a topic's partitions: Kafka's CreatePartitions).

Contract: `kafka_call(address, request, timeout)` connects to the broker's Kafka
listener at "HOST:PORT", sends the kio request (header v1, or v2 for flexible
versions, as kio's `__header_schema__` says), and returns the decoded kio response
of the same API and version. Every failure (unreachable, closed, undecodable) is a
CliError with one line naming the address (when unreachable, also the option and the
environment variable that set it, and, for an address assumed because nothing
answered at --bootstrap-server (`ASSUMED`), that address). `security` (--command-config's
settings) adds TLS (SSL, SASL_SSL) and SASL (SASL_*: SaslHandshake v1 then
SaslAuthenticate v1 rounds, client/sasl.py) before the request; a failed
authentication is a CliError with the broker's reason.
"""

from __future__ import annotations

import io
import socket
import ssl
import struct

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from client import parse_bootstrap
from client.sasl import SaslCredentials, SaslFailed, run_exchange, sasl_credentials
from client.security import ssl_context

from . import CliError
from .client_support import KAFKA_BOOTSTRAP_ENV

SIZE = struct.Struct(">i")
CLIENT_ID = "strata-cli"
CORRELATION_ID = 1
# Kafka addresses assumed (kafka.port's default on the --bootstrap-server host) because
# nothing answered at --bootstrap-server: address -> that --bootstrap-server, so the
# error for an unreachable one says both (broker/cli/addresses.py fills it).
ASSUMED: dict[str, str] = {}


def _encode(request) -> bytes:
    cls = type(request)
    header_cls = cls.__header_schema__
    header = header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                        correlation_id=CORRELATION_ID, client_id=CLIENT_ID)
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header)
    entity_writer(cls)(buffer, request)
    body = buffer.getvalue()
    return SIZE.pack(len(body)) + body


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _roundtrip(sock: socket.socket, request, address: str):
    response_class = load_response_schema(type(request).__api_key__, type(request).__version__)
    sock.sendall(_encode(request))
    (size,) = SIZE.unpack(_read_exactly(sock, SIZE.size))
    frame = _read_exactly(sock, size)
    try:
        header, offset = entity_reader(response_class.__header_schema__)(frame, 0)
        response, _ = entity_reader(response_class)(frame, offset)
    except Exception as e:  # kio's decoding errors
        raise CliError(f"the Kafka listener at {address} answered what cannot be read: {e}") from None
    if header.correlation_id != CORRELATION_ID:
        raise CliError(f"the Kafka listener at {address} answered another request")
    return response


def _authenticate(sock: socket.socket, credentials: SaslCredentials, address: str) -> None:
    from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    handshake = _roundtrip(sock, SaslHandshakeRequest(mechanism=credentials.mechanism), address)
    if handshake.error_code != 0:
        raise CliError(f"the Kafka listener at {address} refused SASL {credentials.mechanism}: "
                       f"{handshake.error_code.name.upper()} (it offers {', '.join(handshake.mechanisms) or 'none'})")

    def round_trip(message: bytes) -> bytes:
        answer = _roundtrip(sock, SaslAuthenticateRequest(auth_bytes=message), address)
        if answer.error_code != 0:
            raise CliError(f"SASL authentication with the Kafka listener at {address} failed: "
                           f"{answer.error_message or answer.error_code.name.upper()}")
        return bytes(answer.auth_bytes)

    try:
        run_exchange(credentials, round_trip)
    except SaslFailed as e:
        raise CliError(f"SASL authentication with the Kafka listener at {address} failed: {e}") from None


def kafka_call(address: str, request, timeout: float = 30.0, security: dict[str, str] | None = None):
    try:
        host, port = parse_bootstrap(address)[0]
        context = ssl_context(security)
        credentials = sasl_credentials(security or {})
    except ValueError as e:
        raise CliError(str(e)) from None
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            sock = context.wrap_socket(raw, server_hostname=host) if context is not None else raw
            if credentials is not None:
                _authenticate(sock, credentials, address)
            return _roundtrip(sock, request, address)
    except ssl.SSLError as e:
        raise CliError(f"TLS with the Kafka listener at {address} failed: {e.reason or e}") from None
    except OSError as e:
        given = ASSUMED.get(address)
        what = (f"a broker at {given} (--bootstrap-server) nor a Kafka listener at {address} (kafka.port's "
                f"default)" if given else f"the Kafka listener at {address}")
        raise CliError(f"cannot reach {what}: {e.strerror or e} (where the broker's Kafka listener is: "
                       f"--kafka-bootstrap-server or ${KAFKA_BOOTSTRAP_ENV})") from None
