"""The client side of TLS, configured with Kafka's (librdkafka's) setting names.

Contract: `ssl_context(settings)` takes a mapping of client settings and returns the
ssl.SSLContext to connect with, or None for a plain connection:
- `security.protocol`: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL (TLS
  for SSL and SASL_SSL; the SASL settings are client/sasl.py's).
- `ssl.ca.location`: PEM file of the CAs the broker's certificate must chain to
  (default: the system's); `ssl.ca.pem`: the same inline.
- `ssl.certificate.location` + `ssl.key.location` (+ `ssl.key.password`): the
  client's certificate and key, for listeners with ssl.client.auth; or
  `ssl.certificate.pem` + `ssl.key.pem` inline.
- `ssl.endpoint.identification.algorithm`: https (default: the broker's host
  name must match its certificate) or none.
Unknown names raise ValueError, as does a missing file (naming the setting).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from .sasl import SASL_SETTINGS

__all__ = ["SECURITY_SETTINGS", "ssl_context"]

SECURITY_SETTINGS = ("security.protocol", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
                     "ssl.key.location", "ssl.key.password", "ssl.certificate.pem", "ssl.key.pem",
                     "ssl.endpoint.identification.algorithm", *SASL_SETTINGS)


def ssl_context(settings: Mapping[str, str] | None) -> ssl.SSLContext | None:
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(SECURITY_SETTINGS))
    if unknown:
        raise ValueError(f"unknown security setting(s): {', '.join(unknown)}")
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return None
    if protocol not in ("SSL", "SASL_SSL"):
        raise ValueError(f"security.protocol: {protocol} is not supported "
                         "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if settings.get("ssl.ca.location"):
            context.load_verify_locations(cafile=settings["ssl.ca.location"])
        if settings.get("ssl.ca.pem"):
            context.load_verify_locations(cadata=settings["ssl.ca.pem"])
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"ssl.ca.location: cannot load the CA certificates: {e}") from None
    check = settings.get("ssl.endpoint.identification.algorithm", "https").lower()
    if check not in ("https", "none", ""):
        raise ValueError("ssl.endpoint.identification.algorithm: must be https or none")
    if check != "https":
        context.check_hostname = False
    password = settings.get("ssl.key.password") or None
    if settings.get("ssl.certificate.location"):
        try:
            context.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"),
                                    password)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"ssl.certificate.location: cannot load the client certificate: {e}") from None
    elif settings.get("ssl.certificate.pem"):
        fd = os.memfd_create("strata-client-cert", os.MFD_CLOEXEC)
        try:
            os.write(fd, (settings.get("ssl.key.pem", "") + "\n" + settings["ssl.certificate.pem"]).encode())
            context.load_cert_chain(f"/proc/self/fd/{fd}", password=password)
        except ssl.SSLError as e:
            raise ValueError(f"ssl.certificate.pem: cannot load the client certificate: {e}") from None
        finally:
            os.close(fd)
    return context
