"""Java properties text (`server.properties`) parsed as java.util.Properties reads it."""

from __future__ import annotations

from collections.abc import Iterable

from kafka_format.errors import InvalidConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(line number, logical line) with continuations joined, as java.util.Properties."""
    physical = text.splitlines()
    i = 0
    while i < len(physical):
        number = i + 1
        line = physical[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(physical):
            line = line[:-1] + physical[i].lstrip(" \t\f")
            i += 1
        if _continues(line):
            line = line[:-1]  # a continuation at the end of the file: drop the backslash
        yield number, line


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes continues the line."""
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _unescape(raw: str) -> str:
    out = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != "\\" or i + 1 >= len(raw):
            out.append(c)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\u escape {raw[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str, origin: str = "properties") -> dict[str, str]:
    """Parse Java properties text: `key=value`, `key: value` or `key value`; `#` and
    `!` comments; backslash continuations and escapes (`\\t`, `\\n`, `\\uXXXX`, `\\=`).
    Later duplicates win, as in java.util.Properties."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key_end = len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                key_end = i
                break
            i += 1
        rest = line[key_end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        try:
            key, value = _unescape(line[:key_end]), _unescape(rest)
        except ValueError as e:
            raise InvalidConfigError(f"{origin}, line {number}: {e}") from None
        props[key] = value
    return props
