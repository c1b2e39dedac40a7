"""A topic holding committed, aborted and open transactions, for the readers' tests
(native client, Spark sources): transactional batches go in with a raw Kafka
Produce, markers through the partition service on the broker's loop (the
coordinator's WriteTxnMarkers step), as in tests/kafka/test_transactions_read.py.

Layout (offsets), producers A (committed), B (aborted), C (open until `end_txn`):
    partition 0: a1 0, a2 1, p1 2, b1 3, COMMIT(A) 4, ABORT(B) 5
    partition 1: a3 0, b2 1, c1 2, p2 3, COMMIT(A) 4, ABORT(B) 5   (LSO 2: C is open)
"""

from __future__ import annotations

import asyncio

from kafka_format import build_batch
from tests.broker.inprocess import InProcessBroker
from tests.kafka.conftest import create_topic
from tests.kafka.test_wire import produce_request
from tests.kafka.wire import KafkaWire

A, B, C = 1000, 1001, 1002  # producer ids
COMMITTED = {0: [b"a1", b"a2", b"p1"], 1: [b"a3"]}  # while C is open
EVERYTHING = {0: [b"a1", b"a2", b"p1", b"b1"], 1: [b"a3", b"b2", b"c1", b"p2"]}
COMMITTED_AFTER_C = {0: [b"a1", b"a2", b"p1"], 1: [b"a3", b"c1", b"p2"]}
TIMEOUT = 30


def txn_batch(pid: int, seq: int, *values: bytes) -> bytes:
    return build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=0, base_sequence=seq,
                       is_transactional=True)


def kafka_bootstrap(broker: InProcessBroker) -> str:
    host, port = broker.app.kafka_address
    return f"{host}:{port}"


def native_bootstrap(broker: InProcessBroker) -> str:
    host, port = broker.address
    return f"{host}:{port}"


def end_txn(broker: InProcessBroker, topic: str, partition: int, pid: int, commit: bool) -> None:
    partitions = broker.app.partitions

    async def write():
        await partitions.append_txn_marker(partitions.open_log(topic, partition), pid, 0, 0, commit=commit)
    assert broker.loop is not None
    asyncio.run_coroutine_threadsafe(write(), broker.loop).result(TIMEOUT)


def write_txn_topic(broker: InProcessBroker, name: str = "txn") -> str:
    """Create `name` (2 partitions) with the layout above; returns the topic."""
    bootstrap = kafka_bootstrap(broker)
    topic = create_topic(bootstrap, name, partitions=2)
    host, port = broker.app.kafka_address
    with KafkaWire(host, port) as conn:
        for partition, batch in [
            (0, txn_batch(A, 0, b"a1", b"a2")), (0, build_batch([(None, b"p1")])), (0, txn_batch(B, 0, b"b1")),
            (1, txn_batch(A, 2, b"a3")), (1, txn_batch(B, 1, b"b2")), (1, txn_batch(C, 0, b"c1")),
            (1, build_batch([(None, b"p2")])),
        ]:
            (answer,) = conn.call(produce_request(9, topic, partition, batch)).responses
            assert answer.partition_responses[0].error_code == 0
    for partition in (0, 1):
        end_txn(broker, topic, partition, A, commit=True)
        end_txn(broker, topic, partition, B, commit=False)
    return topic
