"""The Kafka listener at the byte level, driven with kio-encoded requests
(tests/kafka/wire.py): versions, unsupported requests, Produce/Fetch framing,
the zero-copy splice, minOneMessage, long polls, acks=0 (fetch sessions:
test_fetch_sessions_wire.py)."""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from broker.kafka.codec import make, nested
from kafka_format import build_batch, iter_entries
from protocol import FetchRequest as NativeFetch
from protocol import ProduceRequest as NativeProduce
from tests.broker.wire import NativeClient
from tests.kafka.wire import decode, encode


def request(api_key: int, version: int, **values):
    return make(load_request_schema(api_key, version), **values)


def produce_request(version: int, topic: str, partition: int, records: bytes | None, acks: int = 1,
                    topic_id=None):
    cls = load_request_schema(0, version)
    T = nested(cls, "topic_data")
    P = nested(T, "partition_data")
    return make(cls, transactional_id=None, acks=acks, timeout=5000,
                topic_data=(make(T, name=topic, topic_id=topic_id,
                                 partition_data=(make(P, index=partition, records=records),)),))


def fetch_request(version: int, parts: list[tuple[str, int, int, int]], *, max_wait_ms: int = 0,
                  min_bytes: int = 1, max_bytes: int = 50 << 20, topic_ids: dict | None = None,
                  session_id: int = 0, session_epoch: int = -1):
    """parts: (topic, partition, offset, partition_max_bytes)."""
    cls = load_request_schema(1, version)
    T = nested(cls, "topics")
    P = nested(T, "partitions")
    topics: dict[str, list] = {}
    for topic, partition, offset, limit in parts:
        topics.setdefault(topic, []).append(make(P, partition=partition, fetch_offset=offset,
                                                 partition_max_bytes=limit))
    return make(cls, replica_id=-1, max_wait=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                isolation_level=0, session_id=session_id, session_epoch=session_epoch,
                topics=tuple(make(T, topic=t, topic_id=(topic_ids or {}).get(t), partitions=tuple(ps))
                             for t, ps in topics.items()),
                forgotten_topics_data=(), rack_id="")


def metadata(conn, version: int, topics: list[str] | None):
    cls = load_request_schema(3, version)
    T = nested(cls, "topics")
    wanted = None if topics is None else tuple(make(T, name=t) for t in topics)
    return conn.call(make(cls, topics=wanted if wanted is not None or version else (),
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def topic_id(conn, topic: str):
    return metadata(conn, 12, [topic]).topics[0].topic_id


def restamped_only(stored: bytes, sent: bytes) -> bool:
    """Same batch bytes except baseOffset (0..8) and partitionLeaderEpoch (12..16),
    which the CRC does not cover."""
    return len(stored) == len(sent) and stored[8:12] == sent[8:12] and stored[16:] == sent[16:]


def only_partition(response):
    (topic,) = response.responses
    (part,) = topic.partitions
    return part


# ---- ApiVersions and unsupported requests ---------------------------------------------------------

def test_api_versions_lists_the_core_apis(wire):
    conn = wire()
    for version in (0, 3, 4):
        response = conn.call(request(18, version, client_software_name="tests",
                                     client_software_version="1"))
        assert response.error_code == ErrorCode.none
        got = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        expected = {0: (3, 13), 1: (4, 18), 2: (1, 10), 3: (0, 13), 18: (0, 4), 19: (2, 7), 20: (1, 6),
                    21: (0, 2), 22: (0, 5), 32: (1, 4), 33: (0, 2), 44: (0, 1)}
        assert {k: got.get(k) for k in expected} == expected


def test_unknown_api_versions_version_gets_a_v0_answer(wire):
    conn = wire()
    conn.send_raw(struct.pack(">hhih", 18, 99, 4242, -1))  # header v1 with a null client id
    frame = conn.recv_raw()
    correlation_id, response = decode(load_response_schema(18, 0), frame)  # header v0, body v0
    assert correlation_id == 4242
    assert response.error_code == ErrorCode.unsupported_version
    assert (18, 0, 4) in {(k.api_key, k.min_version, k.max_version) for k in response.api_keys}
    # The connection stays usable.
    assert conn.call(request(18, 3, client_software_name="t", client_software_version="1")).error_code == 0


@pytest.mark.parametrize("api_key,version", [(0, 2), (1, 3), (3, 99), (9999, 0)])
def test_unsupported_api_or_version_closes_the_connection(wire, api_key, version):
    conn = wire(timeout=10)
    conn.send_raw(struct.pack(">hhih", api_key, version, 1, -1) + b"\x00" * 16)
    assert conn.at_eof()


def test_undecodable_request_closes_the_connection(wire):
    conn = wire(timeout=10)
    conn.send_raw(struct.pack(">hhih", 3, 9, 1, -1) + b"\xff")  # Metadata v9, truncated body
    assert conn.at_eof()


# ---- Metadata -------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 4, 9, 10, 12, 13])
def test_metadata_versions(wire, new_topic, kafka_broker, version):
    topic = new_topic(partitions=3)
    response = metadata(wire(), version, [topic, "no-such-topic-" + topic] if version >= 4 else [topic])
    (broker,) = response.brokers
    assert (broker.node_id, broker.host, broker.port) == (0, *kafka_broker.kafka_address)
    found = {t.name: t for t in response.topics}
    assert found[topic].error_code == ErrorCode.none
    assert [(p.partition_index, p.leader_id, tuple(p.replica_nodes)) for p in found[topic].partitions] == \
        [(0, 0, (0,)), (1, 0, (0,)), (2, 0, (0,))]
    if version >= 1:
        assert response.controller_id == 0
    if version >= 2:
        assert response.cluster_id and len(response.cluster_id) == 22
    if version >= 4:
        # allow_auto_topic_creation=False: not created even though the broker allows it.
        assert found["no-such-topic-" + topic].error_code == ErrorCode.unknown_topic_or_partition
    if version >= 10:
        assert found[topic].topic_id is not None


def test_metadata_all_topics_and_internal_flag(wire, new_topic):
    topic = new_topic()
    response = metadata(wire(), 12, None)
    found = {t.name: t for t in response.topics}
    assert topic in found and not found[topic].is_internal
    assert found["__consumer_offsets"].is_internal


def test_metadata_auto_creates_when_asked(wire):
    conn = wire()
    cls = load_request_schema(3, 12)
    name = f"auto-{time.monotonic_ns()}"
    response = conn.call(make(cls, topics=(make(nested(cls, "topics"), name=name),),
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.none and len(topic.partitions) == 1


# ---- Produce and Fetch ---------------------------------------------------------------------------

@pytest.mark.parametrize("produce_version,fetch_version", [(3, 4), (7, 11), (9, 12), (12, 15), (13, 18)])
def test_produce_then_fetch_every_framing(wire, new_topic, produce_version, fetch_version):
    topic = new_topic()
    conn = wire()
    ids = {topic: topic_id(conn, topic)}
    first = build_batch([(b"k1", b"v1"), (None, b"v2")])
    second = build_batch([(None, b"x" * 300)])
    for expected_offset, batch in ((0, first), (2, second)):
        response = conn.call(produce_request(produce_version, topic, 0, batch,
                                             topic_id=ids[topic] if produce_version >= 13 else None))
        (part,) = response.responses[0].partition_responses
        assert (part.error_code, part.base_offset) == (ErrorCode.none, expected_offset)
    response = conn.call(fetch_request(fetch_version, [(topic, 0, 0, 1 << 20)], topic_ids=ids))
    part = only_partition(response)
    assert part.error_code == ErrorCode.none and part.high_watermark == 3
    entries = list(iter_entries(part.records))
    assert [e.base_offset for e in entries] == [0, 2]
    assert [r.value for e in entries for r in e.records()] == [b"v1", b"v2", b"x" * 300]
    # Bytes as sent: only the base offset and the partition leader epoch are restamped.
    assert restamped_only(part.records[:len(first)], first)
    assert restamped_only(part.records[len(first):], second)


def test_fetch_returns_the_whole_batch_holding_the_offset(wire, new_topic):
    topic = new_topic()
    conn = wire()
    batch = build_batch([(None, b"a"), (None, b"b"), (None, b"c")])
    conn.call(produce_request(9, topic, 0, batch))
    part = only_partition(conn.call(fetch_request(12, [(topic, 0, 1, 1 << 20)])))
    (entry,) = iter_entries(part.records)
    assert (entry.base_offset, entry.last_offset) == (0, 2)  # from the batch start, as Kafka


def test_fetch_min_one_message_for_the_first_partition_only(wire, new_topic):
    topic = new_topic(partitions=2)
    conn = wire()
    big = build_batch([(None, b"z" * 50_000)])
    for partition in (0, 1):
        conn.call(produce_request(9, topic, partition, big))
    response = conn.call(fetch_request(12, [(topic, 0, 0, 100), (topic, 1, 0, 100)]))
    p0, p1 = response.responses[0].partitions
    assert len(p0.records) == len(big)  # whole batch although over partition_max_bytes
    assert len(p1.records) <= 100  # nothing was empty before it: no exception for it


def test_fetch_respects_max_bytes_after_the_first_batch(wire, new_topic):
    topic = new_topic()
    conn = wire()
    batch = build_batch([(None, b"y" * 1000)])
    for _ in range(10):
        conn.call(produce_request(9, topic, 0, batch))
    part = only_partition(conn.call(fetch_request(12, [(topic, 0, 0, 1 << 20)], max_bytes=3 * len(batch) + 10)))
    assert len(part.records) == 3 * len(batch)  # whole batches within max_bytes


def test_fetch_errors(wire, new_topic):
    topic = new_topic()
    conn = wire()
    conn.call(produce_request(9, topic, 0, build_batch([(None, b"v")])))
    part = only_partition(conn.call(fetch_request(12, [(topic, 0, 5, 1000)])))
    assert part.error_code == ErrorCode.offset_out_of_range
    part = only_partition(conn.call(fetch_request(12, [(topic, 7, 0, 1000)])))
    assert part.error_code == ErrorCode.unknown_topic_or_partition
    response = conn.call(fetch_request(13, [(topic, 0, 0, 1000)], topic_ids={topic: uuid.uuid4()}))
    assert only_partition(response).error_code == ErrorCode.unknown_topic_id


def test_long_poll_times_out_with_an_empty_answer(wire, new_topic):
    topic = new_topic()
    started = time.monotonic()
    part = only_partition(wire().call(fetch_request(12, [(topic, 0, 0, 1000)], max_wait_ms=300)))
    assert time.monotonic() - started >= 0.25
    assert part.error_code == ErrorCode.none and not part.records


def test_long_poll_is_woken_by_a_native_produce(wire, new_topic, kafka_broker):
    topic = new_topic()
    conn = wire()
    result = {}

    def poll():
        started = time.monotonic()
        result["response"] = conn.call(fetch_request(12, [(topic, 0, 0, 1000)], max_wait_ms=20_000))
        result["took"] = time.monotonic() - started

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)
    native = NativeClient(*kafka_broker.address)
    try:
        assert native.call(NativeProduce(topic, 0, build_batch([(None, b"wake")]))).error == 0
    finally:
        native.close()
    thread.join(30)
    assert result["took"] < 15
    (entry,) = iter_entries(only_partition(result["response"]).records)
    assert [r.value for r in entry.records()] == [b"wake"]


def test_long_poll_waits_for_min_bytes(wire, new_topic):
    topic = new_topic()
    conn, producer = wire(), wire()
    small = build_batch([(None, b"s")])
    producer.call(produce_request(9, topic, 0, small))
    result = {}

    def poll():
        result["response"] = conn.call(fetch_request(12, [(topic, 0, 0, 1 << 20)], max_wait_ms=20_000,
                                                     min_bytes=2 * len(small) + 1))

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)
    assert "response" not in result  # one batch is below min_bytes: still waiting
    producer.call(produce_request(9, topic, 0, small))
    time.sleep(0.2)
    assert "response" not in result
    producer.call(produce_request(9, topic, 0, small))
    thread.join(30)
    assert len(only_partition(result["response"]).records) == 3 * len(small)


# ---- acks ---------------------------------------------------------------------------------------

def test_acks_zero_has_no_answer_and_keeps_order(wire, new_topic):
    topic = new_topic()
    conn = wire()
    conn.sock.sendall(encode(produce_request(9, topic, 0, build_batch([(None, b"fire-and-forget")]),
                                             acks=0), 77))
    # The next answer on the connection is the Metadata one (wire.recv checks correlation ids).
    assert metadata(conn, 12, [topic]).topics[0].error_code == ErrorCode.none
    part = only_partition(conn.call(fetch_request(12, [(topic, 0, 0, 1000)])))
    assert part.high_watermark == 1


def test_acks_zero_failure_closes_the_connection(wire):
    conn = wire(timeout=10)
    conn.sock.sendall(encode(produce_request(9, "__consumer_offsets", 0, build_batch([(None, b"x")]),
                                             acks=0), 5))
    assert conn.at_eof()


def test_bad_acks_and_internal_topic(wire, new_topic):
    topic = new_topic()
    conn = wire()
    (part,) = conn.call(produce_request(9, topic, 0, build_batch([(None, b"x")]), acks=2)) \
        .responses[0].partition_responses
    assert part.error_code == ErrorCode.invalid_required_acks
    (part,) = conn.call(produce_request(9, "__consumer_offsets", 0, build_batch([(None, b"x")]))) \
        .responses[0].partition_responses
    assert part.error_code == ErrorCode.invalid_topic_exception


def test_corrupt_records_are_refused(wire, new_topic):
    topic = new_topic()
    batch = bytearray(build_batch([(None, b"x")]))
    batch[-1] ^= 0xFF  # CRC mismatch
    (part,) = wire().call(produce_request(9, topic, 0, bytes(batch))).responses[0].partition_responses
    assert part.error_code == ErrorCode.corrupt_message


# ---- InitProducerId -------------------------------------------------------------------------------

def test_init_producer_id_hands_out_new_ids(wire):
    conn = wire()
    ids = set()
    for version in (0, 2, 4, 5):
        response = conn.call(request(22, version, transactional_id=None, transaction_timeout=60_000,
                                     producer_id=-1, producer_epoch=-1))
        assert response.error_code == ErrorCode.none and response.producer_epoch == 0
        ids.add(response.producer_id)
    assert len(ids) == 4 and min(ids) >= 0


def test_transactional_init_producer_id_bumps_the_epoch(wire):
    conn = wire()
    first = conn.call(request(22, 4, transactional_id="wire-tx", transaction_timeout=60_000))
    second = conn.call(request(22, 4, transactional_id="wire-tx", transaction_timeout=60_000))
    assert (first.error_code, second.error_code) == (ErrorCode.none, ErrorCode.none)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    too_long = conn.call(request(22, 4, transactional_id="wire-tx", transaction_timeout=900_001))
    assert too_long.error_code == ErrorCode.invalid_transaction_timeout
    empty = conn.call(request(22, 4, transactional_id="", transaction_timeout=60_000))
    assert empty.error_code == ErrorCode.invalid_request


def test_idempotent_batches_are_appended(wire, new_topic):
    topic = new_topic()
    conn = wire()
    pid = conn.call(request(22, 4, transactional_id=None, transaction_timeout=60_000)).producer_id
    batch = build_batch([(None, b"a"), (None, b"b")], producer_id=pid, producer_epoch=0, base_sequence=0)
    (part,) = conn.call(produce_request(9, topic, 0, batch)).responses[0].partition_responses
    assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)
    (entry,) = iter_entries(only_partition(conn.call(fetch_request(12, [(topic, 0, 0, 1000)]))).records)
    assert (entry.producer_id, entry.base_sequence) == (pid, 0)


def test_native_fetch_sees_kafka_bytes(wire, new_topic, kafka_broker):
    topic = new_topic()
    batch = build_batch([(b"k", b"from kafka")])
    wire().call(produce_request(9, topic, 0, batch))
    native = NativeClient(*kafka_broker.address)
    try:
        response = native.call(NativeFetch(topic, 0, 0, 1 << 20, 0))
    finally:
        native.close()
    assert restamped_only(bytes(response.message_set), batch)
