"""The request-size caps both protocols apply: a fetch answer's size is an int32
on the wire (both protocols), so a fetch reads at most what fits one beside its
framing, and at most fetch.max.bytes."""

from __future__ import annotations

INT32_MAX = 2**31 - 1


def fetch_cap(requested: int, fetch_max_bytes: int, framing: int) -> int:
    """The byte budget of a fetch that asks `requested` bytes (negative: 0): at most
    fetch.max.bytes, and at most what an int32-sized answer holds beside `framing`
    bytes of its own headers."""
    return min(requested if requested >= 0 else 0, fetch_max_bytes, INT32_MAX - framing)
