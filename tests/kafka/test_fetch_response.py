"""The hand-written Fetch response encoding (broker/kafka/fetch_response.py) writes,
for every version it covers, the bytes kio writes for the same answer."""

from __future__ import annotations

import os
import uuid

import pytest
from kio.index import load_response_schema

from broker.kafka import fetch_response
from broker.kafka.codec import RecordsSplicer, encode_response, encode_spliced, has_field, make, nested
from broker.kafka.fetch_response import PartitionRow
from broker.kafka.request_types import ApiKey
from storage.file_records import FileRecords

TOPIC_ID = uuid.UUID("6b1f5a2e-3c4d-4e5f-8a9b-0c1d2e3f4a5b")


def kio_reply(version, correlation_id, throttle, error, session_id, topics, splicer=None):
    """The same answer through kio entities (the handler's encoding before the fast path)."""
    R = load_response_schema(ApiKey.FETCH, version)
    TopicR = nested(R, "responses")
    PartR = nested(TopicR, "partitions")
    AbortedR = nested(PartR, "aborted_transactions")
    responses = []
    for topic, rows in topics:
        parts = []
        for row in rows:
            records = row.records
            if splicer is not None and not isinstance(records, (bytes, type(None))):
                records = splicer.marker(records)
            aborted = None if row.aborted is None else tuple(
                make(AbortedR, producer_id=p, first_offset=f) for p, f in row.aborted)
            parts.append(make(PartR, partition_index=row.partition, error_code=row.error,
                              high_watermark=row.high_watermark, last_stable_offset=row.last_stable_offset,
                              log_start_offset=row.log_start_offset, aborted_transactions=aborted,
                              preferred_read_replica=-1, records=records))
        by_id = has_field(TopicR, "topic_id")
        responses.append(make(TopicR, topic=None if by_id else topic, topic_id=topic if by_id else None,
                              partitions=tuple(parts)))
    response = make(R, throttle_time=throttle, error_code=error, session_id=session_id, responses=tuple(responses))
    if splicer is not None and splicer.slices:
        return encode_spliced(correlation_id, response, splicer)
    return [encode_response(correlation_id, response)]


def flat(parts) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.read() for p in parts)


def answers(version):
    topic = TOPIC_ID if version >= 13 else "orders"
    other = uuid.UUID(int=7) if version >= 13 else "t\u00e9l\u00e9"  # a name of multi-byte characters
    big = os.urandom(300)
    yield []  # nothing changed
    yield [(topic, [])]  # a full fetch's topic with no partitions
    yield [(topic, [PartitionRow(0, 0, 10, 10, 0, None, b"")])]
    yield [(topic, [PartitionRow(3, 0, 2**40, 2**40 - 5, 7, (), big),
                    PartitionRow(1, 3, -1, -1, -1, None, b""),  # UNKNOWN_TOPIC_OR_PARTITION
                    PartitionRow(2, 0, 5, 4, 0, ((1000, 4), (2**50, 0)), b"x" * 200)]),
           (other, [PartitionRow(0, 0, 1, 1, 0, None, b"\x00" * 130)])]  # 131: a 2-byte varint length
    yield [(topic, [PartitionRow(i, 0, i, i, 0, None, b"r" * (i % 3)) for i in range(300)])]  # long arrays
    if version >= 13:
        yield [(None, [PartitionRow(0, 100, -1, -1, -1, None, b"")])]  # UNKNOWN_TOPIC_ID of a zero id


@pytest.mark.parametrize("version", range(fetch_response.MIN_VERSION, fetch_response.MAX_VERSION + 1))
def test_every_version_writes_what_kio_writes(version):
    for topics in answers(version):
        for throttle, error, session_id in ((0, 0, 0), (250, 0, 123456789), (0, 70, 0)):
            expected = kio_reply(version, 42, throttle, error, session_id, topics)
            assert fetch_response.encode(42, version, throttle, error, session_id, topics) == expected


@pytest.mark.parametrize("version", [7, 11, 12, 13, 16, 18])
def test_sliced_records_are_parts_around_the_same_bytes(version, tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(5000))
    records = FileRecords.open(str(path))
    topic = TOPIC_ID if version >= 13 else "orders"

    def rows():
        return [(topic, [PartitionRow(0, 0, 9, 9, 0, None, records.slice(100, 3000)),
                         PartitionRow(1, 0, 9, 9, 0, (), b"inline"),
                         PartitionRow(2, 0, 9, 9, 0, None, records.slice(4000, 1000))])]

    splicer = RecordsSplicer()
    expected = kio_reply(version, 5, 0, 0, 77, rows(), splicer)
    got = fetch_response.encode(5, version, 0, 0, 77, rows())
    assert [type(p) for p in got] == [type(p) for p in expected]
    assert flat(got) == flat(expected)
    assert [p.length for p in got if not isinstance(p, bytes)] == [3000, 1000]
    for parts in (got, expected):
        for p in parts:
            if not isinstance(p, bytes):
                p.release()
    records.close_descriptor()
