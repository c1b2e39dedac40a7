"""Kafka's JAAS configuration line, as `sasl.jaas.config` carries it.

`parse_jaas(text)` reads `<LoginModule class> <flag> key="value" key=value ...;`
and returns (module class, {key: value}); ValueError names what is wrong. Values
may be double-quoted (with backslash escapes) or bare words.
"""

from __future__ import annotations

import re

FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    body = text.strip()
    if not body.endswith(";"):
        raise ValueError("a JAAS line ends with ';'")
    body = body[:-1].strip()
    parts = body.split(None, 2)
    if len(parts) < 2:
        raise ValueError("expected '<LoginModule class> required key=\"value\" ...;'")
    module, flag = parts[0], parts[1].lower()
    if flag not in FLAGS:
        raise ValueError(f"control flag {parts[1]!r} is not one of {', '.join(FLAGS)}")
    rest = parts[2] if len(parts) > 2 else ""
    options: dict[str, str] = {}
    at = 0
    while at < len(rest):
        if not rest[at:].strip():
            break
        match = _OPTION.match(rest, at)
        if match is None:
            raise ValueError(f"cannot read an option at {rest[at:].strip()[:30]!r}")
        key, value = match.group(1), match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[key] = value
        at = match.end()
    return module, options


def plain_users(options: dict[str, str]) -> dict[str, str]:
    """PlainLoginModule's `user_<name>="<password>"` options -> {name: password}."""
    return {key[5:]: value for key, value in options.items() if key.startswith("user_") and len(key) > 5}
