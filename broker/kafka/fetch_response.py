"""Fetch responses v7-v18 encoded by hand, the bytes kio writes for the same answer.

A Fetch answer is built once per request and holds a row per answered
partition; kio builds an entity per partition and writes it field by field,
which for a session's small answers costs more than reading the records. This
module writes the frame straight from the rows (struct packing), for the
versions that have fetch sessions (v7 on: top-level error code and session id;
v11: preferred read replica; v12: flexible, compact lengths and empty tagged
fields; v13: topic ids instead of names). The tagged fields Strata never sets
(a partition's diverging epoch, current leader and snapshot id; v16's node
endpoints) are written as absent, as kio writes them at their defaults.
tests/kafka/test_fetch_response.py checks every version byte for byte against
kio's encoding of the same answer (codec.encode_response / encode_spliced).

A partition's records are bytes, or a RecordSlice that the reply carries as its
own part, for sendfile (the rest of the reply is bytes around it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from ..core import RecordSlice
from .primitives import INT32, NO_TAGS, ZERO_UUID, compact_length, topic_name

MIN_VERSION = 7
MAX_VERSION = 18
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13
PREFERRED_READ_REPLICA_FROM = 11

_HEAD = struct.Struct(">ihi")  # throttle time, error code, session id
_PARTITION = struct.Struct(">ihqqq")  # index, error code, high watermark, last stable offset, log start offset
_ABORTED = struct.Struct(">qq")  # producer id, first offset


class PartitionRow(NamedTuple):
    """One answered partition: `aborted` None (read uncommitted, or an error) or
    (producer id, first offset) pairs; `records` bytes or a RecordSlice."""

    partition: int
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...] | None
    records: Any


def supports(version: int) -> bool:
    return MIN_VERSION <= version <= MAX_VERSION


def encode(correlation_id: int, version: int, throttle_ms: int, error: int, session_id: int,
           topics: list[tuple[Any, list[PartitionRow]]]) -> list:
    """The framed reply as parts (bytes, and a RecordSlice per sliced `records`):
    `topics` are (name before v13 / topic id (uuid.UUID) from v13, partition rows)."""
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM
    replica = version >= PREFERRED_READ_REPLICA_FROM
    pack_partition, pack_aborted, int32 = _PARTITION.pack, _ABORTED.pack, INT32.pack
    parts: list = []
    out: list[bytes] = [INT32.pack(correlation_id)]
    array: Callable[[int], bytes] = compact_length if flexible else int32
    if flexible:
        out.append(NO_TAGS)  # response header v1
    out.append(_HEAD.pack(throttle_ms, error, session_id))
    out.append(array(len(topics)))
    for topic, rows in topics:
        if by_id:
            out.append(ZERO_UUID if topic is None else topic.bytes)  # None: kio's zero uuid
        else:
            out.append(topic_name(topic, flexible))
        out.append(array(len(rows)))
        for row in rows:
            out.append(pack_partition(row.partition, row.error, row.high_watermark, row.last_stable_offset,
                                      row.log_start_offset))
            aborted = row.aborted
            if aborted is None:
                out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                out.append(array(len(aborted)))
                for producer_id, first_offset in aborted:
                    out.append(pack_aborted(producer_id, first_offset))
                    if flexible:
                        out.append(NO_TAGS)
            if replica:
                out.append(b"\xff\xff\xff\xff")  # preferred read replica: none
            records = row.records
            if records is None:
                out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            elif isinstance(records, RecordSlice):
                out.append(compact_length(records.length) if flexible else int32(records.length))
                parts.append(b"".join(out))
                parts.append(records)
                out = []
            else:
                out.append(compact_length(len(records)) if flexible else int32(len(records)))
                out.append(records)
            if flexible:
                out.append(NO_TAGS)  # partition: no tagged fields
        if flexible:
            out.append(NO_TAGS)  # topic: no tagged fields
    if flexible:
        out.append(NO_TAGS)  # response: no tagged fields
    parts.append(b"".join(out))
    size = sum(p.length if isinstance(p, RecordSlice) else len(p) for p in parts)
    parts[0] = INT32.pack(size) + parts[0]
    return parts
