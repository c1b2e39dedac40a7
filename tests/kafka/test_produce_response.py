"""The hand-written Produce response encoding (broker/kafka/produce_response.py)
writes, for every version it covers, the bytes kio writes for the same answer."""

from __future__ import annotations

import uuid

import pytest
from kio.index import load_response_schema

from broker.kafka import produce_response
from broker.kafka.codec import encode_response, has_field, make, nested
from broker.kafka.produce_response import PartitionRow
from broker.kafka.request_types import ApiKey

TOPIC_ID = uuid.UUID("6b1f5a2e-3c4d-4e5f-8a9b-0c1d2e3f4a5b")


def kio_reply(version, correlation_id, throttle, topics) -> bytes:
    """The same answer through kio entities."""
    R = load_response_schema(ApiKey.PRODUCE, version)
    TopicR = nested(R, "responses")
    PartR = nested(TopicR, "partition_responses")
    RecordErrorR = nested(PartR, "record_errors") if has_field(PartR, "record_errors") else None
    responses = []
    for topic, rows in topics:
        parts = tuple(
            make(PartR, index=row.partition, error_code=row.error, base_offset=row.base_offset,
                 log_append_time=row.log_append_time, log_start_offset=row.log_start_offset,
                 record_errors=() if RecordErrorR is None else tuple(
                     make(RecordErrorR, batch_index=i, batch_index_error_message=m) for i, m in row.record_errors),
                 error_message=row.error_message)
            for row in rows)
        by_id = has_field(TopicR, "topic_id")
        responses.append(make(TopicR, name=None if by_id else topic, topic_id=topic if by_id else None,
                              partition_responses=parts))
    return encode_response(correlation_id, make(R, responses=tuple(responses), throttle_time=throttle))


def answers(version):
    topic = TOPIC_ID if version >= 13 else "orders"
    other = uuid.UUID(int=7) if version >= 13 else "t\u00e9l\u00e9"  # a name of multi-byte characters
    yield []
    yield [(topic, [])]
    yield [(topic, [PartitionRow(0, 0, 0, -1, 0)])]
    yield [(topic, [PartitionRow(3, 0, 2**40, 1_795_000_000_123, 7),  # LogAppendTime
                    PartitionRow(1, 3, -1, -1, -1),  # UNKNOWN_TOPIC_OR_PARTITION
                    PartitionRow(2, 87, -1, -1, -1, ((0, "keyless"), (5, None), (2**20, "\u00e9" * 70)),
                                 "One or more records have been rejected")]),  # INVALID_RECORD (KIP-467)
           (other, [PartitionRow(0, 0, 9, -1, 0, (), "x" * 200)])]  # 201: a 2-byte varint length
    yield [(topic, [PartitionRow(i, 0, i * 10, -1, i) for i in range(300)])]  # long arrays
    if version >= 13:
        yield [(None, [PartitionRow(0, 100, -1, -1, -1)])]  # UNKNOWN_TOPIC_ID of a zero id


@pytest.mark.parametrize("version", range(produce_response.MIN_VERSION, produce_response.MAX_VERSION + 1))
def test_every_version_writes_what_kio_writes(version):
    for topics in answers(version):
        for throttle in (0, 250):
            expected = kio_reply(version, 42, throttle, topics)
            assert produce_response.encode(42, version, throttle, topics) == expected

