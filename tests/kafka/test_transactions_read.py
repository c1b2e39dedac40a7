"""Reading transactional data over Kafka's protocol: transactional
batches written with a raw Produce, markers appended through the partition service
in-process (the coordinator's WriteTxnMarkers step), then real consumers at both
isolation levels, and ListOffsets READ_COMMITTED."""

from __future__ import annotations

import asyncio
import dataclasses

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_format import build_batch, iter_entries
from tests.broker.inprocess import InProcessBroker
from tests.kafka.conftest import create_topic
from tests.kafka.test_wire import fetch_request, only_partition, produce_request
from tests.kafka.wire import KafkaWire

TIMEOUT = 30
A, B, C = 1000, 1001, 1002  # producer ids


def txn_batch(pid: int, seq: int, *values: bytes) -> bytes:
    return build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=0, base_sequence=seq,
                       is_transactional=True)


def consume_all(bootstrap: str, topic: str, isolation: str, expected: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}", "auto.offset.reset": "earliest",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got: dict[int, list[bytes]] = {0: [], 1: []}
    try:
        for _ in range(40):
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                got[message.partition()].append(message.value())
            if sum(map(len, got.values())) >= expected:
                for message in consumer.consume(100, 0.5):  # nothing more comes
                    got[message.partition()].append(message.value())
                break
    finally:
        consumer.close()
    return got


def test_read_committed_sees_only_committed_data(tmp_path):
    broker = InProcessBroker(tmp_path).start()
    try:
        host, port = broker.app.kafka_address
        bootstrap = f"{host}:{port}"
        topic = create_topic(bootstrap, "txn", partitions=2)
        with KafkaWire(host, port) as conn:
            for partition, batch in [
                (0, txn_batch(A, 0, b"a1", b"a2")), (0, build_batch([(None, b"p1")])), (0, txn_batch(B, 0, b"b1")),
                (1, txn_batch(A, 2, b"a3")), (1, txn_batch(B, 1, b"b2")), (1, txn_batch(C, 0, b"c1")),
                (1, build_batch([(None, b"p2")])),
            ]:
                (answer,) = conn.call(produce_request(9, topic, partition, batch)).responses
                assert answer.partition_responses[0].error_code == 0
        partitions = broker.app.partitions

        def markers():
            async def write():
                for partition in (0, 1):
                    log = partitions.open_log(topic, partition)
                    await partitions.append_txn_marker(log, A, 0, 0, commit=True)
                    await partitions.append_txn_marker(log, B, 0, 0, commit=False)
            return asyncio.run_coroutine_threadsafe(write(), broker.loop).result(TIMEOUT)

        markers()
        committed = consume_all(bootstrap, topic, "read_committed", 4)
        assert committed == {0: [b"a1", b"a2", b"p1"], 1: [b"a3"]}  # c1 is open: p2 is past the LSO
        everything = consume_all(bootstrap, topic, "read_uncommitted", 8)
        assert everything == {0: [b"a1", b"a2", b"p1", b"b1"], 1: [b"a3", b"b2", b"c1", b"p2"]}

        # Partition 1: a3 0, b2 1, c1 2, p2 3, COMMIT(A) 4, ABORT(B) 5; C is open from 2.
        with KafkaWire(host, port) as conn:
            fetch = dataclasses.replace(fetch_request(12, [(topic, 1, 0, 1 << 20)]), isolation_level=1)
            part = only_partition(conn.call(fetch))
            assert (part.high_watermark, part.last_stable_offset) == (6, 2)
            assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(B, 1)]
            plain = only_partition(conn.call(fetch_request(12, [(topic, 1, 0, 1 << 20)])))
            assert plain.last_stable_offset == 2 and plain.aborted_transactions is None

        admin = AdminClient({"bootstrap.servers": bootstrap})
        tp = TopicPartition(topic, 1)
        latest = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED)
        assert latest[tp].result(TIMEOUT).offset == 2
        latest = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_UNCOMMITTED)
        assert latest[tp].result(TIMEOUT).offset == 6

        def two_step_view():  # what the native FETCH version 2 calls
            log = partitions.open_log(topic, 1)
            found = partitions.read(log, 0, 1 << 20, isolation_level=1)
            try:
                return list(iter_entries(found.read())), partitions.fetch_isolation(log, 1, 0, found)
            finally:
                found.release()
        entries, isolation = broker.call_in_loop(two_step_view)
        assert [e.last_offset for e in entries] == [0, 1]
        assert (isolation.last_stable_offset, isolation.aborted) == (2, ((B, 1),))

        async def close_c():
            await partitions.append_txn_marker(partitions.open_log(topic, 1), C, 0, 0, commit=True)
        asyncio.run_coroutine_threadsafe(close_c(), broker.loop).result(TIMEOUT)
        committed = consume_all(bootstrap, topic, "read_committed", 6)
        assert committed == {0: [b"a1", b"a2", b"p1"], 1: [b"a3", b"c1", b"p2"]}
    finally:
        broker.stop()
