"""Kafka's `--add-scram` argument (kafka-storage format; Kafka's ScramParser), for
SCRAM users seeded offline, before the broker first starts.

Contract:
- `parse_add_scram(argument)` reads `MECHANISM=[name=alice,password=secret]`
  (components comma-separated, a value may be double-quoted; besides `name`:
  `password`, or `saltedpassword` with `salt`, both base64; `iterations`, 4096 by
  default) and returns (user, mechanism name, ScramCredential): salted and hashed
  (RFC 5802), never the password. ValueError, worded as Kafka's, for an unknown
  mechanism or component, a missing name or password, base64 that does not
  decode, or iterations outside 4096..16384.
"""

from __future__ import annotations

import base64
import binascii
import os

from .scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, ScramCredential, credential_from_salted


def _components(config: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for component in config.split(","):
        key, equals, value = component.partition("=")
        if not equals:
            raise ValueError(f"No equals sign found in SCRAM component: {component}")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        out[key] = value
    return out


def _base64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"Failed to decode given {what}: {value}") from None


def parse_add_scram(argument: str) -> tuple[str, str, ScramCredential]:
    text = argument.strip()
    mechanism_name, equals, config = text.partition("=")
    if not equals:
        raise ValueError(f"Failed to find equals sign in SCRAM argument '{text}'")
    mechanism = MECHANISMS.get(mechanism_name)
    if mechanism is None:
        raise ValueError(f"The add-scram mechanism {mechanism_name} is not supported "
                         f"(one of: {', '.join(sorted(MECHANISMS))})")
    if not config.startswith("["):
        raise ValueError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ValueError("Expected configuration string to end with ]")
    components = _components(config[1:-1])
    name = components.pop("name", None)
    if not name:
        raise ValueError("You must supply 'name' to add-scram")
    salt_text = components.pop("salt", None)
    salt = _base64(salt_text, "salt") if salt_text is not None else os.urandom(32)
    iterations_text = components.pop("iterations", None)
    try:
        iterations = int(iterations_text) if iterations_text is not None else MIN_ITERATIONS
    except ValueError:
        raise ValueError(f"Failed to parse iterations count: {iterations_text}") from None
    password = components.pop("password", None)
    salted_text = components.pop("saltedpassword", None)
    if password is None and salted_text is None:
        raise ValueError("You must supply one of 'password' or 'saltedpassword' to add-scram")
    if password is None and salt_text is None:
        raise ValueError("You must supply 'salt' with 'saltedpassword' to add-scram")
    if components:
        raise ValueError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"The 'iterations' value must be >= {MIN_ITERATIONS} for add-scram using {mechanism.name}")
    if iterations > MAX_ITERATIONS:
        raise ValueError(f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram using {mechanism.name}")
    if password is not None:
        salted = mechanism.salted_password(password, salt, iterations)
    else:
        assert salted_text is not None
        salted = _base64(salted_text, "saltedPassword")
    return name, mechanism.name, credential_from_salted(mechanism, salt, salted, iterations)


__all__ = ["parse_add_scram"]
