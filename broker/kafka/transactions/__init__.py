"""Kafka's transactions on the Kafka listener: the transaction coordinator.

    state.py        a transactional id's state and its legal moves (Kafka's TransactionMetadata)
    state_log.py    `__transaction_state` in Kafka's key and value layouts; rebuilt at start
    coordinator.py  the decisions (InitProducerId, AddPartitions/Offsets, EndTxn with its markers,
                    timeouts, expiration)
    handlers.py     the wire side (API keys 22, 24, 25, 26, 28, 65, 66)
    faults.py       test-only crash points (STRATA_TEST_CRASH_AT=txn:<step>)

`register(apis)` makes one TransactionCoordinator (`apis.transactions`); the app
calls its `start()` once the data directory is open (it reads the state log and
finishes what a crash left half-done). FindCoordinator with key type TRANSACTION
names this broker (broker/kafka/groups/handlers.py). The markers themselves are
written by PartitionService.append_txn_marker (broker/core/appends.py).
Settings: transaction.state.log.num.partitions, transaction.max.timeout.ms,
transaction.abort.timed.out.transaction.cleanup.interval.ms,
transactional.id.expiration.ms, transaction.remove.expired.transaction.cleanup.interval.ms.
"""

from __future__ import annotations

from .coordinator import TransactionCoordinator
from .handlers import TransactionHandlers


def register(apis) -> None:
    coordinator = TransactionCoordinator(apis, apis.core.next_producer_id)
    TransactionHandlers(apis, coordinator).register_all()
    apis.transactions = coordinator
    apis.on_shutdown(coordinator.close)


__all__ = ["TransactionCoordinator", "TransactionHandlers", "register"]
