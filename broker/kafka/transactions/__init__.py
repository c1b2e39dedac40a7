"""Kafka's transactions on the Kafka listener: the transaction coordinator.

    state.py        a transactional id's state and its legal moves (Kafka's TransactionMetadata)
    state_log.py    `__transaction_state` in Kafka's key and value layouts; rebuilt at start
    coordinator.py  the decisions (InitProducerId, AddPartitions/Offsets, EndTxn with its markers,
                    timeouts, expiration)
    handlers.py     the wire side (API keys 22, 24, 25, 26, 28, 65, 66)
    faults.py       test-only crash points (STRATA_TEST_CRASH_AT=txn:<step>)

The composition (broker/compose.py) makes one TransactionCoordinator, gives it to
the core handlers (Produce checks a transactional first write with it) and calls
`register(apis, coordinator, init_producer_id=...)`; the app calls its `start()`
once the data directory is open (it reads the state log and
finishes what a crash left half-done). FindCoordinator with key type TRANSACTION
names this broker (broker/kafka/groups/handlers.py). The markers themselves are
written by PartitionService.append_txn_marker (broker/core/appends.py).
Settings: transaction.state.log.num.partitions, transaction.max.timeout.ms,
transaction.abort.timed.out.transaction.cleanup.interval.ms,
transactional.id.expiration.ms, transaction.remove.expired.transaction.cleanup.interval.ms.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .coordinator import TransactionCoordinator
from .handlers import TransactionHandlers


def register(apis, coordinator: TransactionCoordinator, *,
             init_producer_id: Callable[[Any, Any], Awaitable[Any]]) -> None:
    """The transaction APIs over `coordinator`; InitProducerId without a transactional
    id goes to `init_producer_id` (the core's)."""
    TransactionHandlers(apis, coordinator, init_producer_id).register_all()
    apis.on_shutdown(coordinator.close)


__all__ = ["TransactionCoordinator", "TransactionHandlers", "register"]
