"""The transaction coordinator's decisions (broker/kafka/transactions/coordinator.py)
over an in-memory stand-in of the partition service, so a marker write can be held
open: Kafka's error codes for stale producers, wrong states and requests that
arrive while markers are being written."""

from __future__ import annotations

import asyncio
import itertools

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
from broker.state.internal_topics import TRANSACTION_STATE_TOPIC
from kafka_format.errors import KafkaStorageError


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


def test_end_txn_answers_once_prepared_and_later_requests_wait_for_the_markers():
    async def run():
        c, apis = await _coordinator()
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 1000, 0, [("t", 0)])
        apis.partitions.gate.clear()  # the marker write is held open
        assert await c.end_txn("tx", 1000, 0, True) == NONE  # answered once PrepareCommit is written
        assert c.states["tx"].state == TxnState.PREPARE_COMMIT and apis.partitions.markers == []
        retry = asyncio.create_task(c.end_txn("tx", 1000, 0, True))
        adding = asyncio.create_task(c.add_partitions("tx", 1000, 0, [("t", 1)]))
        await asyncio.sleep(0.01)
        assert not adding.done() and not retry.done()  # waiting for the markers, not CONCURRENT_TRANSACTIONS
        apis.partitions.gate.set()
        assert await retry == NONE  # a retry of the completed commit
        assert await adding == {("t", 1): NONE}  # the next transaction
        assert apis.partitions.markers == [(("t", 0), 1000, 0, True)]
        assert c.states["tx"].state == TxnState.ONGOING and c.states["tx"].partitions == {("t", 1)}
        c.close()

    asyncio.run(run())


def test_a_failed_completion_is_tried_again_and_meanwhile_answers_concurrent_transactions():
    async def run():
        c, apis = await _coordinator()
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 1000, 0, [("t", 0)])
        written = apis.partitions.append_txn_marker

        async def failing(*args):
            raise OSError("disk gone")

        apis.partitions.append_txn_marker = failing
        assert await c.end_txn("tx", 1000, 0, False) == NONE
        await asyncio.sleep(0.01)
        assert c.states["tx"].state == TxnState.PREPARE_ABORT  # the completion failed
        assert await c.add_partitions("tx", 1000, 0, [("t", 1)]) == {("t", 1): CONCURRENT_TRANSACTIONS}
        apis.partitions.append_txn_marker = written
        await c.abort_timed_out()  # the cleanup round completes it
        assert c.states["tx"].state == TxnState.COMPLETE_ABORT
        assert apis.partitions.markers == [(("t", 0), 1000, 0, False)]
        c.close()

    asyncio.run(run())


def test_a_marker_the_log_refuses_keeps_the_transaction_prepared():
    """A storage error on a partition that still exists is not a deleted partition:
    the transaction is not completed without its marker."""
    async def run():
        c, apis = await _coordinator()
        await c.init_producer_id("tx", 60_000)
        await c.add_partitions("tx", 1000, 0, [("t", 0)])
        written = apis.partitions.append_txn_marker

        async def refusing(*args):
            raise KafkaStorageError("the log directory is offline")

        apis.partitions.append_txn_marker = refusing
        assert await c.end_txn("tx", 1000, 0, True) == NONE
        await asyncio.sleep(0.01)
        assert c.states["tx"].state == TxnState.PREPARE_COMMIT
        assert apis.partitions.markers == []
        apis.partitions.append_txn_marker = written
        await c.abort_timed_out()
        assert c.states["tx"].state == TxnState.COMPLETE_COMMIT
        assert apis.partitions.markers == [(("t", 0), 1000, 0, True)]
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


def test_an_expired_id_keeps_no_lock_nor_state():
    async def run():
        clock = [1_000]
        c, apis = await _coordinator(lambda: clock[0])
        apis.config["transactional.id.expiration.ms"] = 10_000
        assert await c.init_producer_id("tx", 5_000) == (NONE, 1000, 0)
        assert await c.add_partitions("tx", 1000, 0, [("t", 0)]) == {("t", 0): NONE}
        assert await c.end_txn("tx", 1000, 0, True) == NONE
        # requests that queue on one id's lock: the lock goes with the last of them
        results = await asyncio.gather(*(c.add_partitions("tx", 1000, 0, [("t", p)]) for p in (0, 1)),
                                       c.add_partitions("made-up", 7, 0, [("t", 0)]))
        assert results[2] == {("t", 0): INVALID_PRODUCER_ID_MAPPING}
        assert await c.end_txn("tx", 1000, 0, False) == NONE
        await asyncio.sleep(0.01)  # the markers and CompleteAbort
        assert c.states["tx"].state == TxnState.COMPLETE_ABORT and c.locked_ids == set()
        clock[0] += 10_001
        await c.expire_ids()
        assert "tx" not in c.states and c.locked_ids == set()
        # the id starts over: a new producer id, epoch 0, and its transactions work
        assert await c.init_producer_id("tx", 5_000) == (NONE, 1001, 0)
        assert await c.add_partitions("tx", 1001, 0, [("t", 1)]) == {("t", 1): NONE}
        assert await c.end_txn("tx", 1001, 0, True) == NONE
        await c.add_partitions("tx", 1001, 0, [("t", 0)])  # settles the completion
        assert c.locked_ids == set()
        c.close()

    asyncio.run(run())


def test_a_request_cancelled_while_waiting_for_the_lock_keeps_no_lock():
    async def run():
        c, _ = await _coordinator()
        release = asyncio.Event()

        async def hold():
            async with c._lock("tx"):  # noqa: SLF001 - the lock the id's requests take
                await release.wait()

        async def wait_for_lock():
            async with c._lock("tx"):  # noqa: SLF001
                pass

        holder = asyncio.ensure_future(hold())
        await asyncio.sleep(0)
        queued = [asyncio.ensure_future(wait_for_lock()) for _ in range(2)]
        await asyncio.sleep(0)
        assert c.locked_ids == {"tx"}
        queued[0].cancel()
        await asyncio.gather(queued[0], return_exceptions=True)
        assert c.locked_ids == {"tx"}  # still held and awaited
        release.set()
        await asyncio.gather(holder, queued[1])
        assert c.locked_ids == set()
        c.close()

    asyncio.run(run())
