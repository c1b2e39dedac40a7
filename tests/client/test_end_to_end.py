"""The client library against the real broker process."""

import asyncio
import socket
import threading
import time

import pytest

from client import (
    Admin,
    AsyncAdmin,
    AsyncConnection,
    AsyncConsumer,
    AsyncProducer,
    BrokerUnreachable,
    Consumer,
    MessageTooLargeForFetch,
    NoOffsetForPartition,
    OffsetOutOfRange,
    Producer,
    StrataClientError,
    partition_for_key,
)
from protocol import ErrorCode, FetchOffsetRequest, MetadataRequest, OffsetsRequest
from tests.broker_process import BrokerProcess

from .live_broker import unique


@pytest.fixture
def admin(live_broker):
    with Admin(live_broker.address) as admin:
        yield admin


@pytest.fixture
def topic(admin):
    """A fresh 3-partition topic."""
    name = unique("t")
    admin.create_topic(name, 3)
    return name


def test_admin_round_trip(live_broker, admin):
    name = unique("admin")
    admin.create_topic(name, 2, {"cleanup.policy": "compact", "segment.bytes": "200000"})
    assert name in admin.list_topics()
    described = admin.describe_topic(name)
    assert [(p.partition, p.log_start_offset, p.log_end_offset) for p in described.partitions] == \
        [(0, 0, 0), (1, 0, 0)]
    configs = admin.describe_config(name)
    assert configs["cleanup.policy"] == "compact" and configs["segment.bytes"] == "200000"
    assert "retention.ms" in configs  # every effective setting, defaults included

    admin.alter_config(name, {"retention.ms": "12345", "segment.bytes": None})
    configs = admin.describe_config(name)
    assert configs["retention.ms"] == "12345"
    assert configs["segment.bytes"] != "200000"  # back to its default

    with pytest.raises(StrataClientError) as e:
        admin.create_topic(name, 1)
    assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS and e.value.name == "TOPIC_ALREADY_EXISTS"
    with pytest.raises(StrataClientError) as e:
        admin.create_topic(unique("bad"), 0)
    assert e.value.code == ErrorCode.INVALID_PARTITIONS
    with pytest.raises(StrataClientError) as e:
        admin.create_topic("bad/name", 1)
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    with pytest.raises(StrataClientError) as e:
        admin.alter_config(name, {"retention.ms": "soon"})
    assert e.value.code == ErrorCode.INVALID_CONFIG

    admin.delete_topic(name)
    assert name not in admin.list_topics()
    with pytest.raises(StrataClientError) as e:
        admin.describe_topic(name)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_offsets(live_broker, admin):
    name = unique("offsets")
    admin.create_topic(name, 1)
    with Producer(live_broker.address, linger_ms=0) as producer:
        for i in range(10):
            producer.send_and_wait(name, b"v%d" % i, timestamp_ms=1_000_000 + i * 10)
    assert admin.offsets(name, 0, -1) == [10]
    assert admin.offsets(name, 0, -2) == [0]
    assert admin.offsets(name, 0, 1_000_045) == [5]
    assert admin.offsets(name, 0, 9_999_999_999) == []
    with pytest.raises(StrataClientError) as e:
        admin.offsets(name, 7, -1)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_records(live_broker, admin):
    name = unique("delete-records")
    admin.create_topic(name, 1)
    with Producer(live_broker.address) as producer:
        for i in range(10):
            producer.send_and_wait(name, b"v%d" % i)
    assert admin.delete_records(name, 0, 4) == 4
    assert admin.offsets(name, 0, -2) == [4]
    assert admin.describe_topic(name).partitions[0].log_start_offset == 4
    with Consumer(live_broker.address, auto_offset_reset="earliest") as consumer:
        consumer.assign(name, [0])
        consumer.seek(name, 0, 2)  # below the log start now: reset to it
        got = consumer.poll(2000)
        assert [r.offset for r in got] == [4, 5, 6, 7, 8, 9]


def test_many_messages_over_partitions_land_where_murmur2_says(live_broker, topic):
    keys = [b"key-%d" % (i % 97) for i in range(3000)]
    with Producer(live_broker.address, linger_ms=20) as producer:
        futures = [producer.send(topic, b"value-%d" % i, key) for i, key in enumerate(keys)]
        producer.flush()
        results = [f.result(10) for f in futures]
    for key, result in zip(keys, results, strict=True):
        assert result.partition == partition_for_key(key, 3)
    with Consumer(live_broker.address, auto_offset_reset="earliest") as consumer:
        consumer.subscribe(topic)
        got = []
        while len(got) < len(keys):
            batch = consumer.poll(2000)
            assert batch, f"stalled after {len(got)} records"
            got += batch
    assert sorted(r.value for r in got) == sorted(b"value-%d" % i for i in range(3000))
    for record in got:
        assert record.topic == topic and record.partition == partition_for_key(record.key, 3)
    by_partition = {}
    for record in got:
        by_partition.setdefault(record.partition, []).append(record.offset)
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))  # in order, none skipped
    # The producer's reported offsets are where the records are.
    reported = {(r.partition, r.offset) for r in results}
    assert reported == {(r.partition, r.offset) for r in got}


def test_record_larger_than_max_bytes_arrives_after_doubling(live_broker, admin):
    name = unique("large")
    admin.create_topic(name, 1)
    big = bytes(range(256)) * 400  # 100 KiB
    with Producer(live_broker.address) as producer:
        producer.send_and_wait(name, b"small")
        producer.send_and_wait(name, big, b"big-key", headers=[("kind", b"big")])
        producer.send_and_wait(name, b"after")
    with Consumer(live_broker.address, auto_offset_reset="earliest", max_bytes=1024) as consumer:
        consumer.assign(name, [0])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got += consumer.poll(500)
    assert [r.value for r in got] == [b"small", big, b"after"]
    assert got[1].headers == (("kind", b"big"),) and got[1].key == b"big-key"
    # A cap below the entry's size is a clear error rather than a stall.
    with Consumer(live_broker.address, auto_offset_reset="earliest", max_bytes=1024,
                  max_bytes_cap=4096) as consumer:
        consumer.assign(name, [0])
        consumer.seek(name, 0, 1)
        with pytest.raises(MessageTooLargeForFetch) as e:
            for _ in range(10):
                consumer.poll(500)
        assert e.value.name == "MESSAGE_TOO_LARGE"


def test_group_commit_and_resume_after_restart(live_broker, topic):
    group = unique("group")
    with Producer(live_broker.address) as producer:
        for i in range(30):
            producer.send(topic, b"m%d" % i, b"k%d" % i)
        producer.flush()
    first = Consumer(live_broker.address, group=group, auto_offset_reset="earliest",
                     enable_auto_commit=False)
    first.subscribe(topic)
    seen = []
    while len(seen) < 12:
        seen += first.poll(1000, max_records=12 - len(seen))
    assert len(seen) == 12
    first.commit()
    positions = {p: first.position(topic, p) for p in range(3)}
    for p in range(3):
        assert first.committed(topic, p) == positions[p]
    first.close()

    with Consumer(live_broker.address, group=group, auto_offset_reset="earliest") as second:
        second.subscribe(topic)
        rest = []
        while len(rest) < 18:
            batch = second.poll(1000)
            assert batch, f"stalled after {len(rest)}"
            rest += batch
        assert not second.poll(200)
    assert sorted(r.value for r in seen + rest) == sorted(b"m%d" % i for i in range(30))
    assert not {(r.partition, r.offset) for r in seen} & {(r.partition, r.offset) for r in rest}
    # Auto-commit on close: a third consumer of the group has nothing left.
    with Consumer(live_broker.address, group=group, auto_offset_reset="earliest") as third:
        third.subscribe(topic)
        assert third.poll(300) == []


def test_latest_is_the_default_start_without_a_commit(live_broker, admin):
    name = unique("latest")
    admin.create_topic(name, 1)
    with Producer(live_broker.address) as producer:
        producer.send_and_wait(name, b"old")
        with Consumer(live_broker.address) as consumer:
            consumer.assign(name, [0])
            assert consumer.position(name, 0) == 1
            producer.send_and_wait(name, b"new")
            got = consumer.poll(5000)
    assert [r.value for r in got] == [b"new"]


def test_auto_offset_reset_on_out_of_range(live_broker, admin):
    name = unique("reset")
    admin.create_topic(name, 1)
    with Producer(live_broker.address) as producer:
        for i in range(10):
            producer.send_and_wait(name, b"v%d" % i)

    with Consumer(live_broker.address, auto_offset_reset="earliest") as consumer:
        consumer.assign(name, [0])
        consumer.seek(name, 0, 500)  # past the log end: out of range
        got = consumer.poll(2000)
        assert [r.offset for r in got] == list(range(10))

    with Consumer(live_broker.address, auto_offset_reset="latest") as consumer:
        consumer.assign(name, [0])
        consumer.seek(name, 0, 500)
        assert consumer.poll(300) == []
        assert consumer.position(name, 0) == 10

    with Consumer(live_broker.address, auto_offset_reset="none") as consumer:
        consumer.assign(name, [0])
        consumer.seek(name, 0, 11)
        with pytest.raises(OffsetOutOfRange) as e:
            consumer.poll(300)
        assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE

    with Consumer(live_broker.address, group=unique("g"), auto_offset_reset="none") as consumer:
        consumer.assign(name, [0])
        with pytest.raises(NoOffsetForPartition):
            consumer.poll(300)


def test_long_poll_wakes_up_for_new_data(live_broker, admin):
    name = unique("longpoll")
    admin.create_topic(name, 1)
    with Consumer(live_broker.address, max_wait_ms=5000) as consumer:
        consumer.assign(name, [0])
        consumer.position(name, 0)
        timer = threading.Timer(0.3, lambda: Producer(live_broker.address).send_and_wait(name, b"late"))
        timer.start()
        got = consumer.poll(10_000)
        timer.join()
    assert [r.value for r in got] == [b"late"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_round_trip(live_broker, admin, codec):
    name = unique(codec)
    admin.create_topic(name, 1)
    with Producer(live_broker.address, compression=codec, linger_ms=50) as producer:
        futures = [producer.send(name, b"%s-%d" % (codec.encode(), i) * 20) for i in range(50)]
        producer.flush()
        assert [f.result().offset for f in futures] == list(range(50))
    with Consumer(live_broker.address, auto_offset_reset="earliest") as consumer:
        consumer.assign(name, [0])
        consumer.seek(name, 0, 17)  # inside a compressed batch: records before it are skipped
        got = []
        while len(got) < 33:
            batch = consumer.poll(2000)
            assert batch
            got += batch
    assert [r.offset for r in got] == list(range(17, 50))


def test_unknown_topic_and_unreachable_broker(live_broker):
    with Consumer(live_broker.address) as consumer:
        consumer.subscribe(unique("missing"))
        with pytest.raises(StrataClientError) as e:
            consumer.poll(100)
        assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with Admin("127.0.0.1:1", retries=0) as admin:
        with pytest.raises(BrokerUnreachable) as e:
            admin.list_topics()
        assert "127.0.0.1:1" in str(e.value) and e.value.code is None


async def test_asyncio_api(live_broker):
    name = unique("aio")
    group = unique("aio-group")
    async with AsyncAdmin(live_broker.address) as admin:
        await admin.create_topic(name, 2)
        assert name in await admin.list_topics()
    async with AsyncProducer(live_broker.address, linger_ms=5) as producer:
        futures = [await producer.send(name, f"v{i}", f"k{i}") for i in range(200)]
        results = await asyncio.gather(*futures)
    assert all(r.partition == partition_for_key(b"k%d" % i, 2) for i, r in enumerate(results))
    async with AsyncConsumer(live_broker.address, group=group, auto_offset_reset="earliest") as consumer:
        consumer.subscribe(name)
        got = []
        async for record in consumer:
            got.append(record)
            if len(got) == 200:
                break
        await consumer.commit()
        assert await consumer.committed(name, 0) == await consumer.position(name, 0)
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(200))


async def test_pipelined_requests_come_back_in_order(live_broker):
    connection = await AsyncConnection.open(live_broker.address)
    try:
        requests = [MetadataRequest(()), OffsetsRequest("no-such-topic", 0, -1, 1),
                    FetchOffsetRequest("g", "no-such-topic", 0)] * 30
        responses = await asyncio.gather(*(connection.request(r) for r in requests))
        for request, response in zip(requests, responses, strict=True):
            assert type(response).__name__ == {
                "MetadataRequest": "MetadataResponse", "OffsetsRequest": "OffsetsResponse",
                "FetchOffsetRequest": "FetchOffsetResponse"}[type(request).__name__]
        assert responses[1].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert connection.in_flight == 0
    finally:
        connection.close()
    with pytest.raises(BrokerUnreachable):
        await connection.request(MetadataRequest(()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_producer_retries_across_a_broker_restart_and_commits_survive_it(tmp_path):
    """Kill the broker mid-stream: sends retry until it is back on the same port,
    and a group's committed offset is still there after the restart."""
    process = BrokerProcess(tmp_path / "data", port=free_port()).start()
    address = f"{process.host}:{process.port}"
    try:
        name, group = unique("restart"), unique("restart-group")
        with Admin(address) as admin:
            admin.create_topic(name, 1)
        # A generous retry budget (about 25 s): a guard, not a speed assumption.
        with Producer(address, retries=60, retry_backoff_ms=50, retry_backoff_max_ms=500) as producer:
            assert producer.send_and_wait(name, b"before").offset == 0
            with Consumer(address, group=group, auto_offset_reset="earliest") as consumer:
                consumer.assign(name, [0])
                assert [r.value for r in consumer.poll(5000)] == [b"before"]
                consumer.commit()
            process.kill()
            restarter = threading.Timer(0.5, process.restart)
            restarter.start()
            metadata = producer.send_and_wait(name, b"after", timeout=60)
            restarter.join()
        assert metadata.offset == 1
        with Consumer(address, group=group, auto_offset_reset="earliest") as consumer:
            consumer.assign(name, [0])
            assert consumer.position(name, 0) == 1
            assert [r.value for r in consumer.poll(5000)] == [b"after"]
    finally:
        process.close()
