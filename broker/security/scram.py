"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server side.

Contract:
- `MECHANISMS`: mechanism name -> `ScramMechanism` (hash name, Kafka's
  ScramMechanism type byte as AlterUserScramCredentials carries it: 1 = SHA-256,
  2 = SHA-512). Iterations as Kafka: at least 4096, at most 16384.
- `ScramCredential` is what the broker keeps of a password: salt, StoredKey,
  ServerKey, iterations -- never the password or the salted password.
  `credential_from_salted(mechanism, salt, salted_password, iterations)` derives
  it from what AlterUserScramCredentials sends; `credential_from_password` is the
  same from a clear password (tools, tests).
- `ScramServer(mechanism, lookup)` runs one exchange: `first(message)` takes the
  client-first message and returns the server-first one; `final(message)` takes
  the client-final message, checks the proof and returns (server-final message,
  user). `lookup(user)` returns the user's ScramCredential or None. Any failure
  raises SaslAuthenticationFailedError with Kafka's wording.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

from .errors import SaslAuthenticationFailedError

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    type: int  # Kafka's ScramMechanism id

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


MECHANISMS: dict[str, ScramMechanism] = {
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", "sha256", 1),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", "sha512", 2),
}
BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS.values()}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def credential_from_salted(mechanism: ScramMechanism, salt: bytes, salted_password: bytes,
                           iterations: int) -> ScramCredential:
    client_key = mechanism.hmac(salted_password, b"Client Key")
    return ScramCredential(salt, mechanism.hash(client_key), mechanism.hmac(salted_password, b"Server Key"),
                           iterations)


def credential_from_password(mechanism: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted(mechanism, salt, mechanism.salted_password(password, salt, iterations),
                                  iterations)


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for item in message.split(","):
        key, eq, value = item.partition("=")
        if not eq or len(key) != 1:
            raise SaslAuthenticationFailedError(f"Invalid SCRAM message: bad attribute {item[:20]!r}")
        out.append((key, value))
    return out


def _saslname(value: str) -> str:
    """RFC 5802 saslname: '=2C' is ',', '=3D' is '='; any other '=' is invalid."""
    out, at = [], 0
    while at < len(value):
        if value[at] == "=":
            code = value[at + 1:at + 3]
            if code not in ("2C", "3D"):
                raise SaslAuthenticationFailedError("Invalid SCRAM user name encoding")
            out.append("," if code == "2C" else "=")
            at += 3
        else:
            out.append(value[at])
            at += 1
    return "".join(out)


class ScramServer:
    """One SCRAM exchange, server side (see the module contract)."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None]):
        self.mechanism = mechanism
        self.lookup = lookup
        self.user: str | None = None
        self.credential: ScramCredential | None = None
        self.gs2_header = ""
        self.client_first_bare = ""
        self.server_first = ""
        self.nonce = ""

    def failed(self) -> SaslAuthenticationFailedError:
        return SaslAuthenticationFailedError(
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{self.mechanism.name}")

    def first(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailedError("Invalid SCRAM client first message: not UTF-8") from None
        flag, comma, rest = text.partition(",")
        authzid_part, comma2, bare = rest.partition(",")
        if not comma or not comma2 or flag not in ("n", "y"):
            raise SaslAuthenticationFailedError(
                "Invalid SCRAM client first message: channel binding is not supported" if flag.startswith("p=")
                else "Invalid SCRAM client first message")
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r" or not attributes[1][1]:
            raise SaslAuthenticationFailedError("Invalid SCRAM client first message: expected n=<user>,r=<nonce>")
        user = _saslname(attributes[0][1])
        if authzid_part and (not authzid_part.startswith("a=") or _saslname(authzid_part[2:]) != user):
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is different from username")
        credential = self.lookup(user)
        if credential is None:
            raise self.failed()
        self.user, self.credential = user, credential
        self.gs2_header = f"{flag},{authzid_part},"
        self.client_first_bare = bare
        # Letters and digits only, as Kafka's ScramFormatter makes it (some clients mis-parse others).
        self.nonce = attributes[1][1] + os.urandom(16).hex()
        self.server_first = (f"r={self.nonce},s={base64.b64encode(credential.salt).decode()},"
                             f"i={credential.iterations}")
        return self.server_first.encode()

    def final(self, message: bytes) -> tuple[bytes, str]:
        assert self.credential is not None and self.user is not None
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailedError("Invalid SCRAM client final message: not UTF-8") from None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationFailedError("Invalid SCRAM client final message: no proof")
        attributes = dict(_attributes(without_proof))
        if attributes.get("c") != base64.b64encode(self.gs2_header.encode()).decode():
            raise SaslAuthenticationFailedError("Invalid SCRAM client final message: channel binding mismatch")
        if attributes.get("r") != self.nonce:
            raise SaslAuthenticationFailedError("Invalid SCRAM client final message: nonce mismatch")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise SaslAuthenticationFailedError("Invalid SCRAM client final message: bad proof") from None
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        mechanism, credential = self.mechanism, self.credential
        signature = mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self.failed()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(mechanism.hash(client_key), credential.stored_key):
            raise self.failed()
        server_signature = mechanism.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature), self.user
