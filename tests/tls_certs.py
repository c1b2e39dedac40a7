"""Certificates for TLS tests, made at test time with `cryptography` (never checked in).

`CertificateAuthority(name)` makes a self-signed CA; `ca.issue(cn, server=True, ou="tests")`
an EC key and a certificate (subject CN=<cn>,OU=<ou>) for localhost/127.0.0.1 signed by it. `write_pem`,
`write_pkcs12` put them in files the way Kafka's keystores hold them.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    chain: list[x509.Certificate]

    def cert_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [self.cert, *self.chain])

    def key_pem(self, password: bytes | None = None) -> bytes:
        encryption = (serialization.BestAvailableEncryption(password) if password
                      else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)

    def write_pem(self, path: Path, password: bytes | None = None) -> Path:
        """Kafka's PEM keystore file: the private key, then the certificate chain."""
        path.write_bytes(self.key_pem(password) + self.cert_pem())
        return path

    def write_pkcs12(self, path: Path, password: bytes) -> Path:
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"strata", self.key, self.cert, self.chain, serialization.BestAvailableEncryption(password)))
        return path

    def write_split(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """(certificate file, key file), as librdkafka's ssl.certificate/key.location take them."""
        cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert.write_bytes(self.cert_pem())
        key.write_bytes(self.key_pem())
        return cert, key


def _name(cn: str, ou: str | None = "tests") -> x509.Name:
    """Subject CN=<cn>,OU=<ou> as RFC 4514 prints it (OU left out when None)."""
    ou_part = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou)] if ou is not None else []
    return x509.Name([*ou_part, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class CertificateAuthority:
    def __init__(self, name: str = "Strata test CA"):
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write_pem(self, path: Path) -> Path:
        path.write_bytes(self.cert_pem())
        return path

    def issue(self, cn: str, *, server: bool = True, ou: str | None = "tests") -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(cn, ou)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return Issued(key, builder.sign(self.key, hashes.SHA256()), [])
