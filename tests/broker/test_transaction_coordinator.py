"""The transaction coordinator's decisions (broker/kafka/transactions/coordinator.py)
over an in-memory stand-in of the partition service, so a marker write can be held
open: Kafka's error codes for stale producers, wrong states and requests that
arrive while markers are being written."""

from __future__ import annotations

import asyncio
import itertools

from broker.internal_topics import TRANSACTION_STATE_TOPIC
from broker.kafka.transactions.coordinator import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    OPERATION_NOT_ATTEMPTED,
    PRODUCER_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
    TransactionCoordinator,
)
from broker.kafka.transactions.state import TxnState


class _StateLogPartition:
    def __init__(self):
        self.batches = []

    def append(self, batch):
        self.batches.append(batch)


class _Partitions:
    def __init__(self):
        self.state_log = _StateLogPartition()
        self.markers = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiters = self

    def notify(self, tp):
        pass

    def internal_log(self, topic, partition):
        return self.state_log

    async def partition_log(self, topic, partition):
        return self.state_log if topic == TRANSACTION_STATE_TOPIC else (topic, partition)

    def try_append_inline(self, partition_log, batch):
        partition_log.append(batch)
        return partition_log

    async def append_txn_marker(self, partition_log, producer_id, epoch, coordinator_epoch, commit):
        await self.gate.wait()
        self.markers.append((partition_log, producer_id, epoch, commit))


class _Registry:
    def partitions(self, name):
        return {"t": 2, TRANSACTION_STATE_TOPIC: 50}.get(name)

    def get(self, name):
        return None  # no state log to read back: the coordinator starts empty

    def ensure_internal_topic(self, partitions, name):
        pass


class _Offsets:
    def partition_for(self, group):
        return 0

    def complete_transaction(self, producer_id, commit):
        pass


class _Apis:
    def __init__(self):
        self.partitions = _Partitions()
        self.registry = _Registry()
        self.offsets = _Offsets()
        self.config = {"transaction.max.timeout.ms": 900_000, "transaction.state.log.num.partitions": 50,
                       "transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000,
                       "transaction.remove.expired.transaction.cleanup.interval.ms": 3_600_000}

    async def blocking(self, fn, *args):
        return fn(*args)


async def _coordinator(clock=None) -> tuple[TransactionCoordinator, _Apis]:
    apis = _Apis()
    ids = itertools.count(1000)

    async def next_id():
        return next(ids)

    coordinator = TransactionCoordinator(apis, next_id, **({"clock": clock} if clock else {}))
    await coordinator.start()
    return coordinator, apis


def test_producer_checks_and_states():
    async def run():
        c, apis = await _coordinator()
        assert await c.init_producer_id("tx", 900_001) == (INVALID_TRANSACTION_TIMEOUT, -1, -1)
        assert await c.init_producer_id("tx", 60_000) == (NONE, 1000, 0)
        assert await c.end_txn("tx", 1000, 0, True) == INVALID_TXN_STATE  # no transaction
        assert await c.add_partitions("tx", 1000, 0, [("t", 0), ("nope", 0)]) == {
            ("t", 0): OPERATION_NOT_ATTEMPTED, ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert await c.add_partitions("tx", 999, 0, [("t", 0)]) == {("t", 0): INVALID_PRODUCER_ID_MAPPING}
        assert await c.add_partitions("tx", 1000, 0, [("t", 0), ("t", 1)]) == {("t", 0): NONE, ("t", 1): NONE}
        assert c.states["tx"].state == TxnState.ONGOING
        # a second instance: the open transaction is aborted with a fencing epoch, then epoch 2
        assert await c.init_producer_id("tx", 60_000) == (NONE, 1000, 2)
        assert sorted(apis.partitions.markers) == [(("t", 0), 1000, 1, False), (("t", 1), 1000, 1, False)]
        assert await c.add_partitions("tx", 1000, 0, [("t", 0)]) == {("t", 0): PRODUCER_FENCED}
        assert await c.add_offsets("tx", 1000, 2, "g") == NONE
        assert await c.end_txn("tx", 1000, 2, True) == NONE
        assert await c.end_txn("tx", 1000, 2, True) == NONE  # a retry of the completed commit
        assert await c.end_txn("tx", 1000, 2, False) == INVALID_TXN_STATE
        assert c.states["tx"].state == TxnState.COMPLETE_COMMIT and not c.states["tx"].partitions
        assert await c.init_producer_id("tx", 60_000, expected_producer_id=5, expected_epoch=2) == (
            PRODUCER_FENCED, -1, -1)
        c.close()

    asyncio.run(run())


def test_requests_while_markers_are_written_get_concurrent_transactions():
    async def run():
        c, apis = await _coordinator()
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 1000, 0, [("t", 0)])
        apis.partitions.gate.clear()
        ending = asyncio.create_task(c.end_txn("tx", 1000, 0, True))
        while c.states["tx"].state != TxnState.PREPARE_COMMIT:
            await asyncio.sleep(0)
        assert await c.add_partitions("tx", 1000, 0, [("t", 1)]) == {("t", 1): CONCURRENT_TRANSACTIONS}
        assert await c.init_producer_id("tx", 60_000) == (CONCURRENT_TRANSACTIONS, -1, -1)
        assert await c.end_txn("tx", 1000, 0, True) == CONCURRENT_TRANSACTIONS
        apis.partitions.gate.set()
        assert await ending == NONE
        assert c.states["tx"].state == TxnState.COMPLETE_COMMIT
        c.close()

    asyncio.run(run())


def test_timed_out_transaction_is_aborted_with_a_fencing_epoch():
    async def run():
        clock = [1_000]
        c, apis = await _coordinator(lambda: clock[0])
        await c.init_producer_id("tx", 5_000)
        await c.add_partitions("tx", 1000, 0, [("t", 1)])
        clock[0] += 5_000
        await c.abort_timed_out()
        assert c.states["tx"].state == TxnState.ONGOING  # not over its timeout yet
        clock[0] += 1
        await c.abort_timed_out()
        assert c.states["tx"].state == TxnState.COMPLETE_ABORT
        assert apis.partitions.markers == [(("t", 1), 1000, 1, False)]
        assert await c.end_txn("tx", 1000, 0, True) == PRODUCER_FENCED
        c.close()

    asyncio.run(run())
