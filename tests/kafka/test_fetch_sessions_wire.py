"""Fetch sessions (KIP-227) on the real broker, at the byte level (tests/kafka/wire.py)."""

from __future__ import annotations

import threading
import time

from confluent_kafka.admin import AdminClient
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.kafka.codec import make, nested
from kafka_format import build_batch
from tests.kafka.test_wire import produce_request, topic_id


def fetch(version: int, parts=(), *, session_id=0, epoch=0, forgotten=(), max_wait_ms=0, topic_ids=None,
          max_bytes=50 << 20):
    """parts: (topic, partition, offset); forgotten: (topic, [partitions]); topics are
    sent by id (topic_ids maps names to ids) from v13."""
    cls = load_request_schema(1, version)
    T, F = nested(cls, "topics"), nested(cls, "forgotten_topics_data")
    P = nested(T, "partitions")
    ids = topic_ids or {}
    topics: dict[str, list] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append(make(P, partition=partition, fetch_offset=offset,
                                                 partition_max_bytes=1 << 20))
    return make(cls, replica_id=-1, max_wait=max_wait_ms, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                session_id=session_id, session_epoch=epoch,
                topics=tuple(make(T, topic=t, topic_id=ids.get(t), partitions=tuple(ps)) for t, ps in topics.items()),
                forgotten_topics_data=tuple(make(F, topic=t, topic_id=ids.get(t), partitions=tuple(ps))
                                            for t, ps in forgotten),
                rack_id="")


def answered(response) -> dict:
    return {(getattr(t, "topic", None) or t.topic_id, p.partition_index): p
            for t in response.responses for p in t.partitions}


def produce(conn, topic: str, partition: int, value: bytes = b"v") -> None:
    response = conn.call(produce_request(9, topic, partition, build_batch([(None, value)])))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_incremental_fetches_answer_only_what_changed(wire, new_topic):
    topic = new_topic(partitions=4)
    conn = wire()
    produce(conn, topic, 1)
    full = conn.call(fetch(12, [(topic, p, 0) for p in range(4)]))
    sid = full.session_id
    assert full.error_code == ErrorCode.none and sid != 0 and len(answered(full)) == 4
    # the client moves on from partition 1: nothing changed, an empty answer at once (max_wait 0)
    response = conn.call(fetch(12, [(topic, 1, 1)], session_id=sid, epoch=1))
    assert response.error_code == ErrorCode.none and response.session_id == sid and answered(response) == {}
    # a long poll over the session is woken by an append to one of its partitions
    result = {}

    def poll():
        started = time.monotonic()
        result["response"] = conn.call(fetch(12, session_id=sid, epoch=2, max_wait_ms=20_000))
        result["took"] = time.monotonic() - started

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)
    produce(wire(), topic, 3, b"new")
    thread.join(10)
    got = answered(result["response"])
    assert list(got) == [(topic, 3)] and result["took"] < 10
    assert got[(topic, 3)].high_watermark == 1 and got[(topic, 3)].records
    # the client moves on from partition 3 and forgets 0 and 2; adding 0 back answers it (new to the session)
    response = conn.call(fetch(12, [(topic, 3, 1)], session_id=sid, epoch=3, forgotten=[(topic, [0, 2])]))
    assert answered(response) == {}
    response = conn.call(fetch(12, [(topic, 0, 0)], session_id=sid, epoch=4))
    assert list(answered(response)) == [(topic, 0)]


def test_records_a_spent_budget_left_are_answered_by_the_next_incremental_fetch(wire, new_topic):
    topic = new_topic(partitions=2)
    conn = wire()
    sid = conn.call(fetch(12, [(topic, 0, 0), (topic, 1, 0)])).session_id
    produce(conn, topic, 0, b"a" * 100)
    produce(conn, topic, 1, b"b" * 100)
    # max_bytes 1: the first partition's batch comes whole (min one message), the second gets none
    response = conn.call(fetch(12, session_id=sid, epoch=1, max_bytes=1))
    got = answered(response)
    first = next(key for key, p in got.items() if p.records)
    assert len([p for p in got.values() if p.records]) == 1
    # the client moves on from the first; nothing new is appended, yet the other's records come
    response = conn.call(fetch(12, [(topic, first[1], 1)], session_id=sid, epoch=2))
    got = answered(response)
    assert list(got) == [(topic, 1 - first[1])] and got[(topic, 1 - first[1])].records


def test_session_errors_and_close(wire, new_topic):
    topic = new_topic()
    conn = wire()
    sid = conn.call(fetch(12, [(topic, 0, 0)])).session_id
    assert conn.call(fetch(12, session_id=sid, epoch=5)).error_code == ErrorCode.invalid_fetch_session_epoch
    assert conn.call(fetch(12, session_id=sid + 1, epoch=1)).error_code == ErrorCode.fetch_session_id_not_found
    ids = {topic: topic_id(conn, topic)}
    response = conn.call(fetch(13, session_id=sid, epoch=1, topic_ids=ids))
    assert response.error_code == ErrorCode.fetch_session_topic_id_error
    # another connection continues the session; then closes it (epoch -1: answered without one)
    other = wire()
    assert other.call(fetch(12, session_id=sid, epoch=1)).session_id == sid
    closed = other.call(fetch(12, [(topic, 0, 0)], session_id=sid, epoch=-1))
    assert closed.error_code == ErrorCode.none and closed.session_id == 0 and len(answered(closed)) == 1
    assert conn.call(fetch(12, session_id=sid, epoch=2)).error_code == ErrorCode.fetch_session_id_not_found


def test_deleted_topic_is_answered_unknown_topic_id(wire, new_topic, bootstrap):
    kept, doomed = new_topic(), new_topic()
    conn = wire()
    ids = {kept: topic_id(conn, kept), doomed: topic_id(conn, doomed)}
    full = conn.call(fetch(13, [(kept, 0, 0), (doomed, 0, 0)], topic_ids=ids))
    sid = full.session_id
    assert sid != 0 and len(answered(full)) == 2
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([doomed], operation_timeout=10)[doomed].result(30)
    response = conn.call(fetch(13, session_id=sid, epoch=1, topic_ids=ids, max_wait_ms=5000))
    assert {k: p.error_code for k, p in answered(response).items()} == {
        (ids[doomed], 0): ErrorCode.unknown_topic_id}
    # the client forgets it; the session goes on with the kept topic
    response = conn.call(fetch(13, session_id=sid, epoch=2, forgotten=[(doomed, [0])], topic_ids=ids))
    assert response.error_code == ErrorCode.none and answered(response) == {}
