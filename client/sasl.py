"""The client side of SASL: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677).

Contract:
- `SaslCredentials(mechanism, username, password)`; `sasl_credentials(settings)`
  reads them from Kafka's client settings: `sasl.mechanism` (default PLAIN as
  Kafka's clients; GSSAPI) and `sasl.username`/`sasl.password` (librdkafka's
  names) or `sasl.jaas.config` (Java clients': PlainLoginModule/ScramLoginModule
  with username="..." password="..."). None when security.protocol is not
  SASL_*. ValueError names a missing or bad setting.
- `exchange(credentials)` is a generator of the client's messages: send what it
  yields, `send()` it the broker's answer bytes; it raises SaslFailed when the
  broker's SCRAM signature does not verify.
- `run_exchange(credentials, round_trip)` / `await run_exchange_async(...)` drive
  `exchange` over a transport: `round_trip(message)` sends one SaslAuthenticate
  and returns the broker's answer bytes (raising the transport's own error when
  the broker refuses); SaslFailed passes through.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass

__all__ = ["MECHANISMS", "SASL_SETTINGS", "SaslCredentials", "SaslFailed", "exchange", "run_exchange",
           "run_exchange_async", "sasl_credentials"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_SETTINGS = ("sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_JAAS_OPTION = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


class SaslFailed(Exception):
    pass


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = ""

    def __repr__(self) -> str:  # never the password
        return f"SaslCredentials({self.mechanism}, {self.username!r})"


def sasl_credentials(settings: Mapping[str, str]) -> SaslCredentials | None:
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    if not protocol.startswith("SASL_"):
        return None
    mechanism = (settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "PLAIN").upper()
    if mechanism not in MECHANISMS:
        raise ValueError(f"sasl.mechanism: {mechanism} is not supported ({', '.join(MECHANISMS)})")
    username, password = settings.get("sasl.username"), settings.get("sasl.password")
    if username is None and settings.get("sasl.jaas.config"):
        options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(settings["sasl.jaas.config"])}
        username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ValueError(f"security.protocol {protocol} needs sasl.username and sasl.password "
                         "(or sasl.jaas.config with username and password)")
    return SaslCredentials(mechanism, username, password)


def _hmac(name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, name).digest()


def exchange(credentials: SaslCredentials) -> Generator[bytes, bytes, None]:
    if credentials.mechanism == "PLAIN":
        yield b"\0" + credentials.username.encode() + b"\0" + credentials.password.encode()
        return
    name = _HASHES[credentials.mechanism]
    nonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = "n={},r={}".format(credentials.username.replace("=", "=3D").replace(",", "=2C"), nonce)
    server_first = (yield ("n,," + first_bare).encode()).decode()
    attributes = dict(item.split("=", 1) for item in server_first.split(","))
    server_nonce, salt, iterations = attributes["r"], base64.b64decode(attributes["s"]), int(attributes["i"])
    if not server_nonce.startswith(nonce):
        raise SaslFailed("the broker's SCRAM nonce does not extend the client's")
    salted = hashlib.pbkdf2_hmac(name, credentials.password.encode(), salt, iterations)
    client_key = _hmac(name, salted, b"Client Key")
    stored_key = hashlib.new(name, client_key).digest()
    without_proof = f"c=biws,r={server_nonce}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, _hmac(name, stored_key, auth_message), strict=True))
    server_final = yield f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    expected = b"v=" + base64.b64encode(_hmac(name, _hmac(name, salted, b"Server Key"), auth_message))
    if not hmac.compare_digest(server_final, expected):
        raise SaslFailed("the broker's SCRAM signature does not verify")


def run_exchange(credentials: SaslCredentials, round_trip: Callable[[bytes], bytes]) -> None:
    """The whole exchange over a blocking transport."""
    steps = exchange(credentials)
    message = next(steps)
    while True:
        answer = round_trip(message)
        try:
            message = steps.send(answer)
        except StopIteration:
            return


async def run_exchange_async(credentials: SaslCredentials, round_trip: Callable[[bytes], Awaitable[bytes]]) -> None:
    """The whole exchange over an asyncio transport."""
    steps = exchange(credentials)
    message = next(steps)
    while True:
        answer = await round_trip(message)
        try:
            message = steps.send(answer)
        except StopIteration:
            return
