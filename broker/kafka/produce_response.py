"""Produce responses v3-v13 encoded by hand, the bytes kio writes for the same answer.

A client such as librdkafka sends one Produce request per partition batch, so a
producer writing to many partitions makes the broker answer thousands of small
Produce requests a second; building kio entities for each answer and writing
them field by field costs more than the append itself. This module writes the
frame straight from the rows (struct packing), for every version the broker
serves: v5 adds the log start offset, v8 the record errors and error message
(KIP-467), v9 is flexible (compact lengths, empty tagged fields), v10's tagged
fields (current leader, node endpoints) are written as absent, as kio writes them
at their defaults, and v13 names topics by id. tests/kafka/test_produce_response.py
checks every version byte for byte against kio's encoding of the same answer.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from .primitives import INT32, NO_TAGS, ZERO_UUID, compact_length, compact_string, string, topic_name

MIN_VERSION = 3
MAX_VERSION = 13
LOG_START_OFFSET_FROM = 5
RECORD_ERRORS_FROM = 8
FLEXIBLE_FROM = 9
TOPIC_IDS_FROM = 13

_ROW_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_ROW = struct.Struct(">ihqqq")  # the same and the log start offset (v5 on)


class PartitionRow(NamedTuple):
    """One answered partition: `record_errors` are (batch index, message or None)
    pairs, `error_message` None or the message (both answered from v8)."""

    partition: int
    error: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    record_errors: tuple[tuple[int, str | None], ...] = ()
    error_message: str | None = None


def encode(correlation_id: int, version: int, throttle_ms: int, topics: list[tuple[Any, list[PartitionRow]]]) -> bytes:
    """The framed reply: `topics` are (name before v13 / topic id (uuid.UUID or None)
    from v13, partition rows)."""
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM
    array = compact_length if flexible else INT32.pack
    write_string = compact_string if flexible else string
    with_log_start = version >= LOG_START_OFFSET_FROM
    pack_row = (_ROW if with_log_start else _ROW_V3).pack
    plain_tail = _PLAIN_TAILS[version]
    out: list[bytes] = [INT32.pack(correlation_id)]
    if flexible:
        out.append(NO_TAGS)  # response header v1
    out.append(array(len(topics)))
    for topic, rows in topics:
        if by_id:
            out.append(ZERO_UUID if topic is None else topic.bytes)  # None: kio's zero uuid
        else:
            out.append(topic_name(topic, flexible))
        out.append(array(len(rows)))
        for row in rows:
            if with_log_start:
                out.append(pack_row(row.partition, row.error, row.base_offset, row.log_append_time,
                                    row.log_start_offset))
            else:
                out.append(pack_row(row.partition, row.error, row.base_offset, row.log_append_time))
            if version < RECORD_ERRORS_FROM or (not row.record_errors and row.error_message is None):
                out.append(plain_tail)
                continue
            out.append(array(len(row.record_errors)))
            for batch_index, message in row.record_errors:
                out.append(INT32.pack(batch_index))
                out.append(write_string(message))
                if flexible:
                    out.append(NO_TAGS)
            out.append(write_string(row.error_message))
            if flexible:
                out.append(NO_TAGS)  # partition: no tagged fields
        if flexible:
            out.append(NO_TAGS)  # topic: no tagged fields
    out.append(INT32.pack(throttle_ms))
    if flexible:
        out.append(NO_TAGS)  # response: no tagged fields
    body = b"".join(out)
    return INT32.pack(len(body)) + body


def _plain_tail(version: int) -> bytes:
    """What follows a partition's offsets when it has no record errors and no message."""
    if version < RECORD_ERRORS_FROM:
        return b""
    if version < FLEXIBLE_FROM:
        return b"\x00\x00\x00\x00\xff\xff"  # record errors: none; error message: null
    return b"\x01\x00" + NO_TAGS  # the same, compact; no tagged fields


_PLAIN_TAILS = tuple(_plain_tail(version) for version in range(MAX_VERSION + 1))
