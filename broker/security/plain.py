"""SASL PLAIN (RFC 4616), the server side: one message, `authzid NUL authcid NUL passwd`.

`check_plain(message, users)` returns the authenticated user name or raises
SaslAuthenticationFailedError. As Kafka's PlainSaslServer, an authorization id,
when present, must equal the user name. Passwords are compared in constant time.
"""

from __future__ import annotations

import hmac

from .errors import SaslAuthenticationFailedError

FAILED = "Authentication failed: Invalid username or password"


def check_plain(message: bytes, users: dict[str, str]) -> str:
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise SaslAuthenticationFailedError("Invalid SASL/PLAIN response: expected 3 tokens")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError("Invalid SASL/PLAIN response: not UTF-8") from None
    if not user:
        raise SaslAuthenticationFailedError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationFailedError("Authentication failed: password not specified")
    expected = users.get(user)
    # Compared even for an unknown user, so that timing does not tell which users exist.
    ok = hmac.compare_digest((expected or "\0").encode(), password.encode()) and expected is not None
    if not ok:
        raise SaslAuthenticationFailedError(FAILED)
    if authzid and authzid != user:
        raise SaslAuthenticationFailedError("Authentication failed: Client requested an authorization id "
                                            "that is different from username")
    return user
