"""TLS on a listener: Kafka's ssl.* settings made into a server SSLContext, and reloaded
when the keystore or truststore files change.

Contract:
- `settings_for(values, listener_name)`: the listener's ssl.* settings, each
  `listener.name.<name>.ssl.*` (the name lower-cased, as Kafka) over the broker-wide
  `ssl.*`.
- `build_server_context(settings, where)` -> ssl.SSLContext, or InvalidConfigError
  naming the key (and `where`: the listener):
  - keystore (the broker's certificate chain and key): `ssl.keystore.type` JKS
    (Kafka's default), PKCS12 or PEM. JKS from `ssl.keystore.location`, read with
    pyjks: the store opened and checked with `ssl.keystore.password`, its private key
    decrypted with `ssl.key.password` (the store password when that is not set), as
    Kafka; a JKS-typed file that is PKCS12 (what keytool writes by default) is read as
    PKCS12, as Java does. PEM from
    `ssl.keystore.location` (one file with the private key and the certificate
    chain) or inline `ssl.keystore.certificate.chain` + `ssl.keystore.key`; the key
    may be encrypted (`ssl.key.password`). PKCS12 from `ssl.keystore.location`,
    opened with `ssl.keystore.password` (or `ssl.key.password`). Key and chain are
    read with `cryptography` and handed to OpenSSL through an anonymous in-memory
    file (memfd): the decrypted key never touches a disk.
  - truststore (the CAs client certificates must chain to): `ssl.truststore.type`
    JKS, PKCS12 or PEM, `ssl.truststore.location` or inline `ssl.truststore.certificates`;
    a JKS truststore's trusted certificates, its integrity checked when
    `ssl.truststore.password` is set (Java's rule).
  - a wrong password or a damaged store file is one InvalidConfigError line naming the
    key and the file.
  - `ssl.client.auth`: none (no client certificate asked), requested (asked, and
    verified when sent), required (a client without a trusted certificate fails the
    handshake). requested and required need a truststore.
  - `ssl.enabled.protocols`: TLSv1.2, TLSv1.3 (also TLSv1, TLSv1.1 if OpenSSL allows);
    the lowest and highest listed bound the versions.
  - `ssl.cipher.suites`: Kafka's (IANA) names, e.g. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    or OpenSSL's; empty = OpenSSL's defaults. TLS 1.3 suites cannot be chosen one by
    one through Python's ssl module: a list naming none of them turns TLS 1.3 off, a
    list naming only TLS 1.3 suites turns TLS 1.2 and below off.
- `ServerTls(settings, where, on_handshake_failure)`: the listener's TLS. `context` is what the server
  listens with: an SSLContext whose `wrap_bio` hands every new connection to the
  current real context, so `reload_if_changed()` swaps certificates for new
  connections without touching open ones. A change that fails to load is logged
  and the previous context stays.
- A failed handshake (a plaintext client, a missing or untrusted client
  certificate, no common protocol or suite) is counted (`handshake_failures`) and
  passed to `on_handshake_failure(reason)`, given to the constructor (the
  broker gives broker/net/server.py's `HandshakeFailures`, which logs it
  rate-limited, with OpenSSL's reason, e.g. WRONG_VERSION_NUMBER for a plaintext
  client).
- `peer_certificate_subject(transport)`: the client certificate's subject in
  RFC 4514 form (CN=...,OU=...), None when the client sent none.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kafka_format.errors import InvalidConfigError

log = structlog.get_logger("strata.tls")

SSL_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
            "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type",
            "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
            "ssl.client.auth", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.protocol",
            "ssl.endpoint.identification.algorithm")
STORE_TYPES = ("PEM", "PKCS12", "JKS")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOL_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
                     "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256")
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----", re.DOTALL)


def listener_key(listener_name: str, key: str) -> str:
    return f"listener.name.{listener_name.lower()}.{key}"


def settings_for(values: Mapping[str, Any], listener_name: str) -> dict[str, Any]:
    """The listener's ssl.* settings: per-listener overrides over the broker-wide ones."""
    out = {}
    for key in SSL_KEYS:
        override = values.get(listener_key(listener_name, key))
        out[key] = override if override is not None else values.get(key)
    return out


# ---- keystore and truststore ---------------------------------------------------------------

def _blocks(data: bytes, labels: tuple[str, ...]) -> list[bytes]:
    return [m.group(0) for m in _PEM_BLOCK.finditer(data) if m.group(1).decode() in labels]


def _read(path: str, key: str, where: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidConfigError(f"{key}: cannot read {path}: {e.strerror} ({where})") from None


def _password(value: Any) -> bytes | None:
    return str(value).encode() if value not in (None, "") else None


JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS


def _is_jks(data: bytes) -> bool:
    return data[:4] in JKS_MAGIC


def _open_jks(data: bytes, location: str, password: str | None, location_key: str, password_key: str,
              what: str, where: str) -> Any:
    """A JKS (or JCEKS) store read with pyjks, its integrity checked with `password` when given."""
    import jks

    try:
        return jks.KeyStore.loads(data, password, try_decrypt_keys=False)
    except jks.util.KeystoreSignatureException:
        raise InvalidConfigError(f"{password_key}: wrong password for the JKS {what} {location} "
                                 f"({where})") from None
    except Exception as e:  # pyjks reports a damaged file in several ways (format, ASN.1, lengths)
        raise InvalidConfigError(f"{location_key}: {location} is not a readable JKS {what}: "
                                 f"{str(e) or type(e).__name__} ({where})") from None


def _jks_key_and_chain(data: bytes, location: str, s: Mapping[str, Any], where: str) -> tuple[Any, list[Any]]:
    """The private key and certificate chain of a JKS keystore, opened as Kafka does: the store
    with ssl.keystore.password, the key with ssl.key.password, else the store password."""
    import jks
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_der_private_key

    store_password = s["ssl.keystore.password"]
    if store_password in (None, ""):
        raise InvalidConfigError(f"ssl.keystore.password: the JKS keystore {location} needs its password "
                                 f"({where})")
    store = _open_jks(data, location, str(store_password), "ssl.keystore.location", "ssl.keystore.password",
                      "keystore", where)
    if not store.private_keys:
        raise InvalidConfigError(f"ssl.keystore.location: the JKS keystore {location} holds no private key "
                                 f"entry ({where})")
    alias = sorted(store.private_keys)[0]
    entry = store.private_keys[alias]
    key_password = s["ssl.key.password"] if s["ssl.key.password"] not in (None, "") else store_password
    try:
        entry.decrypt(str(key_password))
        key = load_der_private_key(entry.pkey_pkcs8, None)
        chain = [x509.load_der_x509_certificate(der) for _type, der in entry.cert_chain]
    except jks.util.DecryptionFailureException:
        given = "ssl.key.password" if s["ssl.key.password"] not in (None, "") else "ssl.keystore.password"
        raise InvalidConfigError(f"ssl.key.password: cannot decrypt the private key {alias!r} of {location} "
                                 f"with {given} ({where})") from None
    except Exception as e:  # a damaged key or certificate inside the store
        raise InvalidConfigError(f"ssl.keystore.location: the key entry {alias!r} of {location} is damaged: "
                                 f"{str(e) or type(e).__name__} ({where})") from None
    if not chain:
        raise InvalidConfigError(f"ssl.keystore.location: the key entry {alias!r} of {location} has no "
                                 f"certificate ({where})")
    return key, chain


def _jks_trusted(data: bytes, location: str, s: Mapping[str, Any], where: str) -> bytes:
    """A JKS truststore's trusted certificates as PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    password = s["ssl.truststore.password"]
    store = _open_jks(data, location, None if password in (None, "") else str(password),
                      "ssl.truststore.location", "ssl.truststore.password", "truststore", where)
    try:
        certs = [x509.load_der_x509_certificate(entry.cert) for _alias, entry in sorted(store.certs.items())]
    except ValueError as e:
        raise InvalidConfigError(f"ssl.truststore.location: {location} holds a damaged certificate: {e} "
                                 f"({where})") from None
    if not certs:
        raise InvalidConfigError(f"ssl.truststore.location: the JKS truststore {location} holds no trusted "
                                 f"certificate ({where})")
    return b"".join(c.public_bytes(Encoding.PEM) for c in certs)


def _load_keystore(s: Mapping[str, Any], where: str) -> tuple[Any, list[Any]]:
    """(private key, certificate chain) as cryptography objects."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12

    def fail(key: str, message: str) -> InvalidConfigError:
        return InvalidConfigError(f"{key}: {message} ({where})")

    kind = str(s["ssl.keystore.type"]).upper()
    location, chain, inline_key = s["ssl.keystore.location"], s["ssl.keystore.certificate.chain"], \
        s["ssl.keystore.key"]
    if kind == "JKS":
        if not location:
            raise fail("ssl.keystore.location", "a JKS keystore needs ssl.keystore.location (or set "
                                                "ssl.keystore.type=PEM for ssl.keystore.certificate.chain and "
                                                "ssl.keystore.key)")
        data = _read(location, "ssl.keystore.location", where)
        if not _is_jks(data):
            kind = "PKCS12"  # Java's JKS keystore type reads PKCS12 files too (keytool's default format)
        else:
            return _jks_key_and_chain(data, location, s, where)
    if kind == "PKCS12":
        if not location:
            raise fail("ssl.keystore.location", "a PKCS12 keystore needs ssl.keystore.location")
        data = _read(location, "ssl.keystore.location", where)
        password = _password(s["ssl.keystore.password"]) or _password(s["ssl.key.password"])
        try:
            key, cert, extra = pkcs12.load_key_and_certificates(data, password)
        except ValueError as e:
            raise fail("ssl.keystore.location", f"cannot open PKCS12 keystore {location} "
                                                f"(wrong ssl.keystore.password?): {e}") from None
        if key is None or cert is None:
            raise fail("ssl.keystore.location", f"PKCS12 keystore {location} holds no private key "
                                                "and certificate")
        return key, [cert, *extra]
    if location and (chain or inline_key):
        raise fail("ssl.keystore.location", "set either ssl.keystore.location or the inline "
                                            "ssl.keystore.certificate.chain and ssl.keystore.key, not both")
    if location:
        data = _read(location, "ssl.keystore.location", where)
        key_data, cert_data, key_name = data, data, "ssl.keystore.location"
    elif chain and inline_key:
        key_data, cert_data, key_name = str(inline_key).encode(), str(chain).encode(), "ssl.keystore.key"
    else:
        raise fail("ssl.keystore.location", "an SSL listener needs a keystore: ssl.keystore.location, "
                                            "or ssl.keystore.certificate.chain and ssl.keystore.key")
    keys = _blocks(key_data, ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"))
    certs = _blocks(cert_data, ("CERTIFICATE",))
    if len(keys) != 1:
        raise fail(key_name, f"expected one PEM private key, found {len(keys)}")
    if not certs:
        raise fail("ssl.keystore.certificate.chain" if chain else key_name, "no PEM certificate found")
    try:
        key = load_pem_private_key(keys[0], _password(s["ssl.key.password"]))
    except TypeError:
        raise fail("ssl.key.password", "the private key is encrypted: set ssl.key.password") from None
    except ValueError as e:
        raise fail("ssl.key.password", f"cannot decrypt or read the private key: {e}") from None
    try:
        return key, [x509.load_pem_x509_certificate(c) for c in certs]
    except ValueError as e:
        raise fail(key_name, f"bad certificate: {e}") from None


def _trusted_pem(s: Mapping[str, Any], where: str) -> str | None:
    """The truststore's certificates as PEM text, None when there is no truststore."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    kind = str(s["ssl.truststore.type"]).upper()
    location, inline = s["ssl.truststore.location"], s["ssl.truststore.certificates"]
    if not location and not inline:
        return None
    if inline:
        data = str(inline).encode()
    elif kind in ("PKCS12", "JKS"):
        raw = _read(location, "ssl.truststore.location", where)
        if kind == "JKS" and _is_jks(raw):
            return _jks_trusted(raw, location, s, where).decode()
        try:  # PKCS12, also under JKS (Java's JKS type reads PKCS12 files)
            store = pkcs12.load_pkcs12(raw, _password(s["ssl.truststore.password"]))
        except ValueError as e:
            raise InvalidConfigError(f"ssl.truststore.location: cannot open PKCS12 truststore {location} "
                                     f"(wrong ssl.truststore.password?): {e} ({where})") from None
        certs = ([store.cert] if store.cert is not None else []) + list(store.additional_certs)
        data = b"".join(c.certificate.public_bytes(Encoding.PEM) for c in certs)
    else:
        data = _read(location, "ssl.truststore.location", where)
    blocks = _blocks(data, ("CERTIFICATE",))
    if not blocks:
        key = "ssl.truststore.certificates" if inline else "ssl.truststore.location"
        raise InvalidConfigError(f"{key}: no PEM certificate found ({where})")
    return b"\n".join(blocks).decode()


def _load_chain_into(context: ssl.SSLContext, key: Any, chain: list[Any]) -> None:
    """Give OpenSSL the key and chain through an anonymous in-memory file."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    pem += b"".join(c.public_bytes(Encoding.PEM) for c in chain)
    fd = os.memfd_create("strata-keystore", os.MFD_CLOEXEC)
    try:
        os.write(fd, pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


# ---- protocols and cipher suites -----------------------------------------------------------------

def openssl_cipher_name(name: str) -> str:
    """Kafka's (IANA) TLS 1.2 suite name in OpenSSL's spelling; other names unchanged.
    TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 -> ECDHE-RSA-AES256-GCM-SHA384."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    exchange, _, cipher = name[4:].partition("_WITH_")
    prefix = "" if exchange == "RSA" else exchange.replace("_", "-") + "-"
    m = re.fullmatch(r"(AES|CAMELLIA|ARIA)_(128|256)_(GCM|CBC|CCM)_(SHA|SHA256|SHA384)", cipher)
    if m:
        algo, bits, mode, mac = m.groups()
        if mode == "CBC":
            return f"{prefix}{algo}{bits}-{mac}"
        return f"{prefix}{algo}{bits}-{mode}-{mac}" if mode == "GCM" else f"{prefix}{algo}{bits}-{mode}"
    if cipher.startswith("CHACHA20_POLY1305"):
        return f"{prefix}CHACHA20-POLY1305"
    return name


def _apply_protocols(context: ssl.SSLContext, s: Mapping[str, Any], where: str) -> None:
    names = [p.strip() for p in str(s["ssl.enabled.protocols"] or "").split(",") if p.strip()]
    if not names:
        raise InvalidConfigError(f"ssl.enabled.protocols: must name at least one protocol ({where})")
    versions = []
    for name in names:
        if name not in PROTOCOL_VERSIONS:
            raise InvalidConfigError(f"ssl.enabled.protocols: unknown or unsupported protocol {name!r}, "
                                     f"expected {', '.join(PROTOCOL_VERSIONS)} ({where})")
        versions.append(PROTOCOL_VERSIONS[name])
    low, high = min(versions), max(versions)
    suites = [c.strip() for c in str(s["ssl.cipher.suites"] or "").split(",") if c.strip()]
    if suites:
        tls13 = [c for c in suites if c in TLS13_SUITES]
        older = [openssl_cipher_name(c) for c in suites if c not in TLS13_SUITES]
        if not tls13:
            high = min(high, ssl.TLSVersion.TLSv1_2)
        if not older:
            low = max(low, ssl.TLSVersion.TLSv1_3)
        else:
            try:
                context.set_ciphers(":".join(older))
            except ssl.SSLError:
                raise InvalidConfigError(f"ssl.cipher.suites: OpenSSL knows none of {', '.join(older)} "
                                         f"({where})") from None
            known = {c["name"] for c in context.get_ciphers()}
            unknown = [c for c in suites if c not in TLS13_SUITES and openssl_cipher_name(c) not in known]
            if unknown:
                raise InvalidConfigError(f"ssl.cipher.suites: unknown or unavailable suite(s) "
                                         f"{', '.join(unknown)} ({where})")
        if low > high:
            raise InvalidConfigError(f"ssl.cipher.suites: no listed suite works with ssl.enabled.protocols "
                                     f"{', '.join(names)} ({where})")
    try:
        context.minimum_version, context.maximum_version = low, high
    except (ValueError, ssl.SSLError) as e:
        raise InvalidConfigError(f"ssl.enabled.protocols: {e} ({where})") from None


def build_server_context(s: Mapping[str, Any], where: str) -> ssl.SSLContext:
    """The listener's SSLContext (see the module contract)."""
    auth = str(s["ssl.client.auth"] or "none").lower()
    if auth not in CLIENT_AUTH:
        raise InvalidConfigError(f"ssl.client.auth: must be one of none, requested, required ({where})")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    key, chain = _load_keystore(s, where)
    try:
        _load_chain_into(context, key, chain)
    except ssl.SSLError as e:
        raise InvalidConfigError(f"ssl.keystore.location: the private key does not match the certificate "
                                 f"or OpenSSL refuses them: {e.reason or e} ({where})") from None
    trusted = _trusted_pem(s, where)
    if trusted is not None:
        try:
            context.load_verify_locations(cadata=trusted)
        except ssl.SSLError as e:
            raise InvalidConfigError(f"ssl.truststore.location: OpenSSL refuses a certificate: "
                                     f"{e.reason or e} ({where})") from None
    elif auth != "none":
        raise InvalidConfigError(f"ssl.client.auth: {auth} needs a truststore (ssl.truststore.location or "
                                 f"ssl.truststore.certificates) to verify client certificates ({where})")
    context.verify_mode = CLIENT_AUTH[auth]
    _apply_protocols(context, s, where)
    return context


def watched_files(s: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(s[k]) for k in ("ssl.keystore.location", "ssl.truststore.location") if s[k])


def _file_state(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class _SwappableContext(ssl.SSLContext):
    """Listens for the server; each new connection gets the real context current then."""

    current: ssl.SSLContext

    def wrap_bio(self, incoming, outgoing, server_side=False, server_hostname=None, session=None):
        return self.current.wrap_bio(incoming, outgoing, server_side=server_side,
                                     server_hostname=server_hostname, session=session)


def _reporting_sslobject(report: Callable[[str], None]) -> type[ssl.SSLObject]:
    """An SSLObject class that tells `report` why a handshake failed (the TLS layer
    itself closes such a connection without a word)."""
    class HandshakeReporting(ssl.SSLObject):
        def do_handshake(self) -> None:
            try:
                super().do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise
            except ssl.SSLError as e:
                report(str(e.reason or e))
                raise

    return HandshakeReporting


class ServerTls:
    """One listener's TLS (see the module contract)."""

    def __init__(self, settings: Mapping[str, Any], where: str,
                 on_handshake_failure: Callable[[str], None] | None = None):
        self.settings = dict(settings)
        self.where = where
        self.files = watched_files(self.settings)
        self._states = [_file_state(p) for p in self.files]
        self.on_handshake_failure = on_handshake_failure
        self._sslobject_class = _reporting_sslobject(self._handshake_failed)
        self.context = _SwappableContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.current = self._build()
        self.reloads = 0
        self.handshake_failures = 0

    def _build(self) -> ssl.SSLContext:
        context = build_server_context(self.settings, self.where)
        context.sslobject_class = self._sslobject_class
        return context

    def _handshake_failed(self, reason: str) -> None:
        self.handshake_failures += 1
        if self.on_handshake_failure is not None:
            self.on_handshake_failure(reason)

    def reload_if_changed(self) -> bool:
        """Rebuild the context when a keystore or truststore file changed; True when
        new connections now get a new context."""
        states = [_file_state(p) for p in self.files]
        if states == self._states:
            return False
        self._states = states
        try:
            fresh = self._build()
        except InvalidConfigError as e:
            log.error("tls_reload_failed", listener=self.where, error=str(e),
                      hint="the previous certificates stay in use")
            return False
        self.context.current = fresh
        self.reloads += 1
        log.info("tls_reloaded", listener=self.where, files=list(self.files))
        return True


def peer_certificate_subject(transport: Any) -> str | None:
    sslobj = transport.get_extra_info("ssl_object")
    der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    if not der:
        return None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


__all__ = ["SSL_KEYS", "ServerTls", "build_server_context", "listener_key", "openssl_cipher_name",
           "peer_certificate_subject", "settings_for"]
