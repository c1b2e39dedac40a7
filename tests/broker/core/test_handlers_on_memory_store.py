"""Native and Kafka handlers driven through the broker core over an in-memory
partition store (memory_store.py): produce, fetch at both isolation levels, the
long poll, and the offset lookups with Kafka's special timestamps; no files, no
sockets (the end-to-end tests in tests/broker and tests/kafka stay)."""

from __future__ import annotations

import asyncio

from kio.index import load_request_schema, load_response_schema

from broker.core import READ_COMMITTED, FetchSpec, OffsetKind, OffsetQuery
from broker.kafka.codec import make, nested
from broker.native.session import produce_record_bytes
from kafka_format import build_batch
from protocol import (
    ErrorCode,
    FetchRequest,
    HandshakeRequest,
    IsolationLevel,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceItem,
    ProduceRequest,
    encode_request,
    parse_response,
)
from tests.kafka.wire import decode, encode

PRODUCER = 7


def joined(parts) -> bytes:
    return b"".join(bytes(p) if isinstance(p, (bytes, bytearray, memoryview)) else p.read() for p in parts)


async def native_call(core, request, version: int = 1):
    reply = await core.native.handle(encode_request(request, version)[4:], core.connection)
    return parse_response(request.TYPE, joined(reply)[4:], version)


async def native_v2(core) -> None:
    answer = await native_call(core, HandshakeRequest(2, "tests"))
    assert answer.error == ErrorCode.NONE
    core.native.session.version = 2


def transactional(value: bytes) -> bytes:
    """A one-record batch of an open transaction of PRODUCER (attributes and producer id set)."""
    return build_batch([(None, value)], producer_id=PRODUCER, producer_epoch=0, base_sequence=0,
                       is_transactional=True, base_timestamp=500, max_timestamp=500)


def stamped(timestamp: int) -> bytes:
    return build_batch([(None, b"v")], base_timestamp=timestamp, max_timestamp=timestamp)


async def kafka_call(core, api_key: int, version: int, **values):
    request = make(load_request_schema(api_key, version), **values)
    reply = await core.kafka.handle(encode(request, 1)[4:], core.connection)
    return decode(load_response_schema(api_key, version), joined(reply)[4:])[1]


def kafka_fetch(topic: str, offset: int, isolation_level: int, version: int = 12):
    cls = load_request_schema(1, version)
    T = nested(cls, "topics")
    P = nested(T, "partitions")
    return dict(replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation_level,
                session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                topics=(make(T, topic=topic, partitions=(make(P, partition=0, fetch_offset=offset,
                                                             partition_max_bytes=1 << 20),)),))


def kafka_list_offsets(topic: str, timestamp: int, isolation_level: int = 0, version: int = 7):
    cls = load_request_schema(2, version)
    T = nested(cls, "topics")
    P = nested(T, "partitions")
    return dict(replica_id=-1, isolation_level=isolation_level,
                topics=(make(T, name=topic, partitions=(make(P, partition_index=0, timestamp=timestamp),)),))


# ---- native -----------------------------------------------------------------------------------------


async def test_a_native_produce_appends_to_the_store_and_a_fetch_reads_it_back(core):
    [partition_log] = core.store.add_topic("t")
    batch = build_batch([(None, b"hello")])
    answer = await native_call(core, ProduceRequest("t", 0, batch))
    assert (answer.error, answer.base_offset) == (ErrorCode.NONE, 0)
    assert partition_log.log_end_offset == 1 and core.service.append_stats.inline == 1
    fetched = await native_call(core, FetchRequest("t", 0, 0, 1 << 20))
    assert fetched.error == ErrorCode.NONE and bytes(fetched.message_set) == partition_log.batches[0].data
    unknown = await native_call(core, FetchRequest("nope", 0, 0, 1 << 20))
    assert unknown.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_native_read_committed_fetch_stops_at_an_open_transaction_and_lists_the_aborted(core):
    [partition_log] = core.store.add_topic("t")
    await native_v2(core)
    assert (await native_call(core, ProduceRequest("t", 0, transactional(b"maybe")), 2)).error == ErrorCode.NONE
    committed = FetchRequest("t", 0, 0, 1 << 20, 0, IsolationLevel.READ_COMMITTED)
    open_txn = await native_call(core, committed, 2)
    assert (open_txn.high_watermark, open_txn.last_stable_offset, bytes(open_txn.message_set)) == (1, 0, b"")
    uncommitted = await native_call(core, FetchRequest("t", 0, 0, 1 << 20, 0, IsolationLevel.READ_UNCOMMITTED), 2)
    assert bytes(uncommitted.message_set) == partition_log.batches[0].data and uncommitted.aborted == ()
    await core.service.append_txn_marker(partition_log, PRODUCER, 0, 0, commit=False)
    aborted = await native_call(core, committed, 2)
    assert (aborted.high_watermark, aborted.last_stable_offset) == (2, 2)
    assert [(a.producer_id, a.first_offset) for a in aborted.aborted] == [(PRODUCER, 0)]


async def test_a_native_long_poll_waits_for_an_append_and_a_deleted_topic_ends_it(core):
    [partition_log] = core.store.add_topic("t")
    waiting = asyncio.ensure_future(native_call(core, FetchRequest("t", 0, 0, 1 << 20, 30_000)))
    await asyncio.sleep(0)
    assert not waiting.done()
    core.service.append_inline(partition_log, build_batch([(None, b"late")]))
    fetched = await asyncio.wait_for(waiting, 10)
    assert bytes(fetched.message_set) == partition_log.batches[0].data

    waiting = asyncio.ensure_future(native_call(core, FetchRequest("t", 0, 1, 1 << 20, 30_000)))
    await asyncio.sleep(0)
    del core.store.logs[("t", 0)]  # the topic's log goes: the wake-up finds another (none)
    core.service.waiters.notify(("t", 0))
    answer = await asyncio.wait_for(waiting, 10)
    assert answer.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_native_offsets_ask_the_core_lookup(core):
    [partition_log] = core.store.add_topic("t")
    for timestamp in (1000, 3000, 2000):
        core.service.append_inline(partition_log, stamped(timestamp))
    partition_log.log_start_offset = 1

    async def offsets(time: int) -> tuple[int, ...]:
        answer = await native_call(core, OffsetsRequest("t", 0, time, 1))
        assert answer.error == ErrorCode.NONE
        return answer.offsets

    assert await offsets(OffsetsRequest.LATEST) == (3,)
    assert await offsets(OffsetsRequest.EARLIEST) == (1,)
    assert await offsets(2500) == (1,)  # the first record at or after the time
    assert await offsets(9999) == ()
    refused = await native_call(core, OffsetsRequest("t", 0, -3, 1))
    assert refused.error == ErrorCode.INVALID_REQUEST


# ---- Kafka ------------------------------------------------------------------------------------------


async def test_a_kafka_produce_and_read_committed_fetch_go_through_the_core(core):
    [partition_log] = core.store.add_topic("t")
    cls = load_request_schema(0, 9)
    T = nested(cls, "topic_data")
    P = nested(T, "partition_data")
    produced = await kafka_call(core, 0, 9, transactional_id=None, acks=1, timeout=5000, topic_data=(
        make(T, name="t", partition_data=(make(P, index=0, records=build_batch([(None, b"one")])),)),))
    part = produced.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)

    core.service.append_inline(partition_log, transactional(b"maybe"))
    committed = (await kafka_call(core, 1, 12, **kafka_fetch("t", 0, 1))).responses[0].partitions[0]
    assert (committed.high_watermark, committed.last_stable_offset) == (2, 1)
    assert committed.records == partition_log.batches[0].data and committed.aborted_transactions == ()
    await core.service.append_txn_marker(partition_log, PRODUCER, 0, 0, commit=False)
    after = (await kafka_call(core, 1, 12, **kafka_fetch("t", 1, 1))).responses[0].partitions[0]
    assert after.last_stable_offset == 3
    assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [(PRODUCER, 1)]
    uncommitted = (await kafka_call(core, 1, 12, **kafka_fetch("t", 1, 0))).responses[0].partitions[0]
    assert uncommitted.aborted_transactions is None


async def test_kafka_list_offsets_answers_every_special_timestamp_from_the_core(core):
    [partition_log] = core.store.add_topic("t")
    for timestamp in (1000, 3000, 2000):
        core.service.append_inline(partition_log, stamped(timestamp))
    core.service.append_inline(partition_log, transactional(b"open"))

    async def lookup(timestamp: int, isolation_level: int = 0) -> tuple[int, int]:
        answer = await kafka_call(core, 2, 7, **kafka_list_offsets("t", timestamp, isolation_level))
        part = answer.topics[0].partitions[0]
        assert part.error_code == 0
        return part.timestamp, part.offset

    assert await lookup(-1) == (-1, 4)  # latest: the log end
    assert await lookup(-1, 1) == (-1, 3)  # read_committed: the last stable offset
    assert await lookup(-2) == (-1, 0)  # earliest
    assert await lookup(-3) == (3000, 1)  # the largest timestamp
    assert await lookup(-4) == (-1, 0)  # earliest local
    assert await lookup(-5) == (-1, -1)  # latest tiered: nothing is tiered
    assert await lookup(1500) == (3000, 1)
    assert await lookup(5000) == (-1, -1)


def test_an_offset_query_names_its_kind_by_kafkas_special_timestamps():
    assert [OffsetQuery.of(t).kind for t in (-1, -2, -3, -4, -5, 0, 17)] == [
        OffsetKind.LATEST, OffsetKind.EARLIEST, OffsetKind.MAX_TIMESTAMP, OffsetKind.EARLIEST_LOCAL,
        OffsetKind.LATEST_TIERED, OffsetKind.TIMESTAMP, OffsetKind.TIMESTAMP]
    assert OffsetQuery.of(-9).kind is OffsetKind.TIMESTAMP  # no special timestamp: a lookup, as Kafka's
    assert OffsetQuery.of(-3).wire_timestamp == -3 and OffsetQuery.of(42).wire_timestamp == 42



def test_a_native_produce_is_charged_its_record_bytes_as_a_kafka_produce():
    one, two = build_batch([(None, b"a" * 10)]), build_batch([(None, b"b" * 30)])
    assert produce_record_bytes(encode_request(ProduceRequest("topic", 0, one))[4:], 1) == len(one)
    multi = MultiProduceRequest((ProduceItem("t", 0, one), ProduceItem("u", 3, two)))
    assert produce_record_bytes(encode_request(multi)[4:], 1) == len(one) + len(two)
    assert produce_record_bytes(b"\x00\x00garbage", 1) == 0


async def test_the_isolated_read_answers_its_aborted_transactions_in_one_call(core):
    [partition_log] = core.store.add_topic("t")
    core.service.append_inline(partition_log, transactional(b"gone"))
    await core.service.append_txn_marker(partition_log, PRODUCER, 0, 0, commit=False)
    core.service.append_inline(partition_log, build_batch([(None, b"kept")]))
    read = core.service.read_spec(partition_log, FetchSpec(0, 1 << 20, READ_COMMITTED))
    assert (read.high_watermark, read.last_stable_offset, read.aborted) == (3, 3, ((PRODUCER, 0),))
    assert read.records.read() == b"".join(b.data for b in partition_log.batches)
    uncommitted = core.service.read_spec(partition_log, FetchSpec(2, 1 << 20))
    assert uncommitted.aborted is None and uncommitted.records.read() == partition_log.batches[2].data
