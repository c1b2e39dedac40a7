"""A transactional id's state, as Kafka's TransactionMetadata keeps it.

States and their numbers (the TransactionStatus byte of `__transaction_state`
values, Kafka's TransactionState ids):

    Empty 0          no transaction open (after InitProducerId)
    Ongoing 1        partitions or offsets were added
    PrepareCommit 2  EndTxn(commit) accepted; the COMMIT markers are being written
    PrepareAbort 3   EndTxn(abort), a timeout or a fencing InitProducerId; ABORT markers
    CompleteCommit 4 every marker written
    CompleteAbort 5
    Dead 6           the id expired (transactional.id.expiration.ms); a tombstone follows
    PrepareEpochFence 7  (Kafka's; not written by Strata, read as PrepareAbort)

Legal moves (Kafka's TransactionState.validPreviousStates): Ongoing from Empty,
Ongoing or a Complete state; Prepare* from Ongoing; Complete* from the matching
Prepare*; Empty from Empty or a Complete state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """Kafka's name (DescribeTransactions, ListTransactions)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def completing(self) -> bool:
        """Markers are being written: requests get CONCURRENT_TRANSACTIONS meanwhile."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)

    @property
    def idle(self) -> bool:
        """No transaction open nor completing."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

TopicPartition = tuple[str, int]


@dataclass
class TxnMetadata:
    """One transactional id: its producer, epoch, timeout, state and partitions.
    Changed only by the coordinator, under the id's lock, after the new value is
    in `__transaction_state`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_version: int = 0

    def moved(self, state: TxnState, now_ms: int, **changes) -> TxnMetadata:
        """A copy in `state` (a legal move, else ValueError), last updated at `now_ms`."""
        if self.state not in VALID_PREVIOUS[state]:
            raise ValueError(f"transactional id {self.transactional_id!r}: {self.state.display} "
                             f"cannot become {state.display}")
        values = dict(self.__dict__, state=state, last_update_ms=now_ms, partitions=set(self.partitions))
        values.update(changes)
        return TxnMetadata(**values)


__all__ = ["TopicPartition", "TxnMetadata", "TxnState", "VALID_PREVIOUS"]
