"""Producer batching, linger, partitioning and retries against a scripted broker.

No timing assumptions: "lingering" is checked by what has NOT been sent while
a very long linger holds the batch, and delivery by awaiting the futures.
"""

import asyncio
import threading

import pytest

from client import AsyncProducer, Producer, StrataClientError
from client.partitioner import partition_for_key
from protocol import ErrorCode

from .fake_broker import FakeBroker

LONG_LINGER_MS = 600_000


@pytest.fixture
async def fake():
    broker = FakeBroker({"t": 4, "one": 1})
    address = await broker.start()
    broker.address = address
    yield broker
    await broker.stop()


async def wait_until(predicate, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never came true"
        await asyncio.sleep(0.005)


async def test_a_long_linger_holds_records_until_flush(fake):
    producer = AsyncProducer(fake.address, linger_ms=LONG_LINGER_MS)
    futures = [await producer.send("one", b"v%d" % i) for i in range(10)]
    await asyncio.sleep(0.05)  # plenty of loop turns: nothing may leave before the linger
    assert fake.produced == []
    assert not any(f.done() for f in futures)
    await producer.flush()
    assert len(fake.produced) == 1  # one batch, one request
    assert [r.value for r in fake.produced[0][2]] == [b"v%d" % i for i in range(10)]
    assert [f.result().offset for f in futures] == list(range(10))
    await producer.close()


async def test_linger_expiry_sends_without_flush(fake):
    producer = AsyncProducer(fake.address, linger_ms=1)
    future = await producer.send("one", b"x")
    metadata = await asyncio.wait_for(future, 10)
    assert (metadata.topic, metadata.partition, metadata.offset) == ("one", 0, 0)
    await producer.close()


async def test_batches_close_at_max_batch_bytes(fake):
    producer = AsyncProducer(fake.address, linger_ms=LONG_LINGER_MS, max_batch_bytes=1000)
    futures = [await producer.send("one", bytes(100)) for _ in range(30)]
    # Full batches leave at once, lingering or not.
    await wait_until(lambda: len(fake.produced) >= 2)
    await producer.flush()
    sizes = [len(records) for _, _, records in fake.produced]
    assert sum(sizes) == 30 and len(sizes) >= 4
    assert all(n * 100 <= 1000 for n in sizes)
    assert [f.result().offset for f in futures] == list(range(30))  # order kept
    await producer.close()


async def test_a_record_larger_than_a_batch_travels_alone(fake):
    producer = AsyncProducer(fake.address, linger_ms=LONG_LINGER_MS, max_batch_bytes=100)
    await producer.send("one", b"small")
    big = await producer.send("one", bytes(500))
    await producer.send("one", b"small again")
    await producer.flush()
    assert [len(r) for _, _, r in fake.produced] == [1, 1, 1]
    assert big.result().offset == 1
    await producer.close()


async def test_keys_go_where_murmur2_says_and_keyless_records_stick(fake):
    producer = AsyncProducer(fake.address, linger_ms=LONG_LINGER_MS)
    keyed = {key: await producer.send("t", b"v", key) for key in (b"a", b"b", b"c", b"d", b"e")}
    keyless = [await producer.send("t", b"no key") for _ in range(5)]
    await producer.flush()
    for key, future in keyed.items():
        assert future.result().partition == partition_for_key(key, 4)
    # Sticky: keyless records share one partition while its batch is open.
    assert len({f.result().partition for f in keyless}) == 1
    await producer.close()


async def test_explicit_partition_wins_and_is_checked(fake):
    producer = AsyncProducer(fake.address)
    metadata = await producer.send_and_wait("t", b"v", b"a", partition=3)
    assert metadata.partition == 3
    with pytest.raises(StrataClientError) as e:
        await producer.send("t", b"v", partition=4)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await producer.close()


async def test_unknown_topic_raises_from_send(fake):
    producer = AsyncProducer(fake.address)
    with pytest.raises(StrataClientError) as e:
        await producer.send("missing", b"v")
    assert e.value.name == "UNKNOWN_TOPIC_OR_PARTITION"
    await producer.close()


async def test_connection_loss_is_retried(fake):
    fake.drop_produce_requests = 2
    producer = AsyncProducer(fake.address, retries=3, retry_backoff_ms=1)
    metadata = await producer.send_and_wait("one", b"v", headers=[("h", b"x")])
    assert metadata.offset == 0
    assert fake.connections == 3  # two dropped, then a fresh connection that worked
    assert fake.produced[0][2][0].headers == (("h", b"x"),)
    await producer.close()


async def test_retries_are_bounded(fake):
    fake.drop_produce_requests = 10
    producer = AsyncProducer(fake.address, retries=2, retry_backoff_ms=1)
    future = await producer.send("one", b"v")
    with pytest.raises(StrataClientError) as e:
        await future
    assert e.value.retriable and e.value.code is None
    assert fake.connections == 3
    await producer.close()


async def test_compressed_batches_arrive_intact(fake):
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        producer = AsyncProducer(fake.address, compression=codec)
        await producer.send_and_wait("one", b"x" * 1000, b"key")
        await producer.close()
    assert all(r[2][0].value == b"x" * 1000 for r in fake.produced)
    with pytest.raises(ValueError):
        AsyncProducer(fake.address, compression="brotli")


async def test_send_after_close_raises(fake):
    producer = AsyncProducer(fake.address)
    await producer.close()
    with pytest.raises(StrataClientError):
        await producer.send("one", b"v")


async def test_unreachable_broker_fails_the_send(fake):
    await fake.stop()
    producer = AsyncProducer(fake.address, retries=1, retry_backoff_ms=1)
    with pytest.raises(StrataClientError) as e:
        await producer.send("one", b"v")
    assert type(e.value).__name__ == "BrokerUnreachable"
    assert "cannot reach broker" in str(e.value)
    await producer.close()
    await fake.start()  # the fixture stops it again


def test_blocking_producer_keeps_order_and_returns_futures():
    """The sync face runs the same producer on the client's loop thread."""
    loop = asyncio.new_event_loop()
    broker = FakeBroker({"one": 1})
    address = loop.run_until_complete(broker.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with Producer(address, linger_ms=LONG_LINGER_MS) as producer:
            futures = [producer.send("one", f"v{i}") for i in range(50)]
            producer.flush()
            assert [f.result(5).offset for f in futures] == list(range(50))
        assert [r.value for _, _, recs in broker.produced for r in recs] == \
            [f"v{i}".encode() for i in range(50)]
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_blocking_producer_buffer_limit_sends_lingering_batches():
    """A full buffer must not wait for a linger that may never end."""
    loop = asyncio.new_event_loop()
    broker = FakeBroker({"t": 4})
    address = loop.run_until_complete(broker.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with Producer(address, linger_ms=LONG_LINGER_MS, max_buffer_bytes=2000) as producer:
            # 100 records of ~140 bytes: the sends below would block forever if a full
            # buffer waited for the (ten-minute) linger.
            futures = [producer.send("t", bytes(100), b"k%d" % i) for i in range(100)]
            assert sum(f.done() for f in futures) >= 80  # most were pushed out early
            producer.flush()
            assert all(f.result(0).offset >= 0 for f in futures)
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
