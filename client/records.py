"""The values the client hands back: consumed records and delivery reports.

Contract: plain immutable values, no behaviour. `Record` is what a consumer
yields (offsets are absolute; `timestamp_type` 0 = CreateTime, 1 =
LogAppendTime; `headers` are (str, bytes | None) pairs, empty before magic 2).
`RecordMetadata` is what a producer's send resolves to once the broker has
appended the record: its offset, and its timestamp (the broker's append time
under LogAppendTime, otherwise the producer's create time).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Record", "RecordMetadata"]


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_type: int = 0


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
