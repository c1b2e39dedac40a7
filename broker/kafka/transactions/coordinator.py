"""The transaction coordinator: Kafka's TransactionCoordinator on one node.

Every change of a transactional id is written to `__transaction_state` first
(state_log.py), then applied in memory, under the id's lock; requests of
one id are serialized by that lock. The decisions, as Kafka's:

- InitProducerId: an unknown id gets a new producer id, epoch 0; a known one its
  epoch + 1 (a new producer id when the epoch is exhausted), which fences the
  older instance: its requests then get PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
  for versions that predate it, handlers.py). A transaction the older instance
  left open is aborted first, its markers written, with a fencing epoch.
  transaction.timeout.ms must be within 1..transaction.max.timeout.ms, else
  INVALID_TRANSACTION_TIMEOUT. With v3+'s expected producer id / epoch, a producer
  that is not the current one is PRODUCER_FENCED.
- AddPartitionsToTxn / AddOffsetsToTxn (the group's `__consumer_offsets`
  partition): the id's state becomes Ongoing (the transaction starts), written
  only when a partition is new. Partitions the handler refused (authorization)
  keep their code, unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION,
  and the request's other partitions OPERATION_NOT_ATTEMPTED; nothing is added.
- EndTxn: PrepareCommit / PrepareAbort is written (the decision), and EndTxn
  answers, as Kafka's; then, in a task of its own (`_complete`), a COMMIT or
  ABORT marker to every partition of the transaction (Kafka's WriteTxnMarkers,
  in-process), then CompleteCommit / CompleteAbort. A retry of a completed
  EndTxn answers NONE; the other outcome INVALID_TXN_STATE; EndTxn without a
  transaction INVALID_TXN_STATE.
- Requests of an id whose markers are being written wait for them (`_settled`:
  local appends, done in a moment) rather than being answered
  CONCURRENT_TRANSACTIONS, which clients retry only after a back-off (librdkafka:
  20 ms); so the producer's next transaction starts at once. A request that
  still finds a Prepare* state (the completion failed; the timeout task tries
  it again) gets CONCURRENT_TRANSACTIONS.
- Produce (`verify_produce`, called by the Kafka Produce handler): a
  transactional batch that would open its producer's transaction on a partition
  is accepted only when that partition is in the id's ongoing transaction.
- Start (`start`): every id is read back from `__transaction_state`; an id in
  PrepareCommit/PrepareAbort gets its markers written again (a marker closes
  nothing twice: writing it again is harmless) and completes. An Ongoing one is
  aborted once its timeout passes.
- Timeouts: every transaction.abort.timed.out.transaction.cleanup.interval.ms,
  transactions open longer than their timeout are aborted with a fencing epoch
  (the producer gets PRODUCER_FENCED / INVALID_PRODUCER_EPOCH next and must
  initialise again). Ids idle longer than transactional.id.expiration.ms are
  forgotten (a tombstone).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from broker.state.group_offsets import GroupOffsets
from broker.state.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

from .faults import crash_point
from .state import TopicPartition, TxnMetadata, TxnState
from .state_log import TransactionStateLog

log = structlog.get_logger("strata.transactions")

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120

COORDINATOR_EPOCH = 0  # one node: the state log's partitions never change leader
MAX_EPOCH = 32767 - 1  # Kafka bumps to a new producer id before Short.MaxValue


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class IdLock:
    """A transactional id's lock and how many requests hold or await it."""

    __slots__ = ("lock", "users")

    def __init__(self):
        self.lock = asyncio.Lock()
        self.users = 0


class HeldIdLock:
    """`async with`: hold a transactional id's lock (`TransactionCoordinator._lock`).
    The lock exists in `locks` only while some request holds or awaits it: the last
    one out removes it, so an expired id (or an id a client only made up) keeps nothing."""

    __slots__ = ("locks", "transactional_id", "entry")

    def __init__(self, locks: dict[str, IdLock], transactional_id: str):
        self.locks = locks
        self.transactional_id = transactional_id
        entry = locks.get(transactional_id)
        if entry is None:
            entry = locks[transactional_id] = IdLock()
        entry.users += 1
        self.entry = entry

    async def __aenter__(self) -> None:
        try:
            await self.entry.lock.acquire()
        except BaseException:  # cancelled while waiting: no longer a user
            self._leave()
            raise

    async def __aexit__(self, *exc_info) -> None:
        self.entry.lock.release()
        self._leave()

    def _leave(self) -> None:
        entry = self.entry
        entry.users -= 1
        if entry.users == 0 and self.locks.get(self.transactional_id) is entry:
            del self.locks[self.transactional_id]


class TransactionCoordinator:
    def __init__(self, apis, next_producer_id: Callable[[], Awaitable[int]], *,
                 clock: Callable[[], int] = now_ms):
        self.apis = apis
        self.partitions = apis.partitions
        self.registry = apis.registry
        self.offsets: GroupOffsets = apis.offsets
        self.config = apis.config
        self._next_producer_id = next_producer_id
        self._clock = clock
        self.state_log = TransactionStateLog(self.partitions.internal_log, self._partition_count,
                                             lambda topic, partition: self.partitions.waiters.notify(
                                                 (topic, partition)))
        self.states: dict[str, TxnMetadata] = {}
        self._locks: dict[str, IdLock] = {}  # only ids with a request holding or awaiting the lock
        self._completions: dict[str, asyncio.Task] = {}  # transactional id -> its `_complete` task
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    # ---- start and stop ------------------------------------------------------------------------

    def now(self) -> int:
        return self._clock()

    def _partition_count(self) -> int:
        count = self.registry.partitions(TRANSACTION_STATE_TOPIC)
        return count if count is not None else self.config["transaction.state.log.num.partitions"]

    async def start(self) -> None:
        """Read `__transaction_state` back (when it exists), finish the transactions
        that were completing, start the timeout and expiration tasks."""
        if self.registry.get(TRANSACTION_STATE_TOPIC) is not None:
            self.states = await self.apis.blocking(self.state_log.load, self.apis.partitions.all_logs())
        self._ready.set()
        for meta in list(self.states.values()):
            if meta.state.completing:
                async with self._lock(meta.transactional_id):
                    await self._finish(meta, meta.state == TxnState.PREPARE_COMMIT)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                                         self.abort_timed_out)),
            loop.create_task(self._every(
                self.config["transaction.remove.expired.transaction.cleanup.interval.ms"], self.expire_ids)),
        ]

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception as e:  # noqa: BLE001 - a failed round is logged, the next one tries again
                log.error("transaction_cleanup_failed", error=str(e))

    async def ensure_topic(self) -> None:
        """Register `__transaction_state` on first use, as Kafka creates it lazily."""
        if self.registry.get(TRANSACTION_STATE_TOPIC) is None:
            await self.apis.blocking(self.registry.ensure_internal_topic,
                                     self.config["transaction.state.log.num.partitions"], TRANSACTION_STATE_TOPIC)

    async def _settled(self, transactional_id: str) -> None:
        """Wait until the markers of the id's ended transaction are written and its
        Complete* state with them (`_complete`), if they are being written."""
        task = self._completions.get(transactional_id)
        if task is not None:
            await asyncio.wait({task})  # never raises; a cancelled caller leaves the task running

    def _lock(self, transactional_id: str) -> HeldIdLock:
        """`async with`: hold the id's lock (it exists only while used: HeldIdLock)."""
        return HeldIdLock(self._locks, transactional_id)

    @property
    def locked_ids(self) -> set[str]:
        """The ids whose lock is held or awaited now."""
        return set(self._locks)

    async def _write(self, meta: TxnMetadata) -> TxnMetadata:
        """Append the id's new state to `__transaction_state` (by the partition
        service's append policy: on the loop when cheap, as produce), then apply it."""
        partition, batch = self.state_log.record(meta)
        partition_log = await self.partitions.partition_log(TRANSACTION_STATE_TOPIC, partition)
        if self.partitions.try_append_inline(partition_log, batch) is None:
            await self.apis.blocking(self.state_log.write, meta)
        if meta.state == TxnState.DEAD:
            self.states.pop(meta.transactional_id, None)
        else:
            self.states[meta.transactional_id] = meta
        return meta

    # ---- InitProducerId ------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = -1) -> tuple[int, int, int]:
        """(error, producer id, epoch)."""
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return INVALID_TRANSACTION_TIMEOUT, -1, -1
        if not self._ready.is_set():
            return COORDINATOR_LOAD_IN_PROGRESS, -1, -1
        await self.ensure_topic()
        await self._settled(transactional_id)
        async with self._lock(transactional_id):
            meta = self.states.get(transactional_id)
            now = self._clock()
            if meta is None:
                producer_id = await self._next_producer_id()
                meta = TxnMetadata(transactional_id, producer_id, 0, timeout_ms, TxnState.EMPTY, set(), -1, now)
                await self._write(meta)
                return NONE, producer_id, 0
            if meta.state.completing:
                return CONCURRENT_TRANSACTIONS, -1, -1
            if expected_producer_id != -1 and (expected_producer_id != meta.producer_id
                                               or expected_epoch > meta.producer_epoch):
                return PRODUCER_FENCED, -1, -1
            if meta.state == TxnState.ONGOING:
                meta = await self._abort_fenced(meta)
            if meta.producer_epoch >= MAX_EPOCH:
                producer_id, epoch = await self._next_producer_id(), 0
                previous = meta.producer_id
            else:
                producer_id, epoch, previous = meta.producer_id, meta.producer_epoch + 1, meta.previous_producer_id
            meta = await self._write(meta.moved(TxnState.EMPTY, now, producer_id=producer_id, producer_epoch=epoch,
                                                timeout_ms=timeout_ms, partitions=set(), start_ms=-1,
                                                previous_producer_id=previous))
            return NONE, meta.producer_id, meta.producer_epoch

    async def _abort_fenced(self, meta: TxnMetadata) -> TxnMetadata:
        """Abort an open transaction with epoch + 1, so the producer that opened it is fenced."""
        epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH + 1 else meta.producer_epoch
        log.info("transaction_aborted_by_coordinator", transactional_id=meta.transactional_id,
                 producer_id=meta.producer_id, epoch=epoch)
        prepared = meta.moved(TxnState.PREPARE_ABORT, self._clock(), producer_epoch=epoch)
        await self._write(prepared)
        return await self._finish(prepared, False)

    # ---- checks --------------------------------------------------------------------------------

    def _check(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[int, TxnMetadata | None]:
        meta = self.states.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING, None
        if epoch != meta.producer_epoch:
            return PRODUCER_FENCED, None
        if meta.state.completing:
            return CONCURRENT_TRANSACTIONS, None
        return NONE, meta

    # ---- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             wanted: list[TopicPartition],
                             refused: dict[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """The error of each partition (all NONE: added). `refused`: partitions the
        request may not add, with their error (TOPIC_AUTHORIZATION_FAILED); any of
        them, or an unknown partition, fails the whole request."""
        failed = dict(refused or {})
        failed.update({tp: UNKNOWN_TOPIC_OR_PARTITION for tp in wanted
                       if tp not in failed and not self._partition_exists(tp)})
        if failed:
            return {tp: failed.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
        await self._settled(transactional_id)
        async with self._lock(transactional_id):
            error, meta = self._check(transactional_id, producer_id, epoch)
            if meta is not None:
                await self._add(meta, wanted)
        return {tp: error for tp in wanted}

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> int:
        await self._settled(transactional_id)
        async with self._lock(transactional_id):
            error, meta = self._check(transactional_id, producer_id, epoch)
            if meta is not None:
                await self._add(meta, [(OFFSETS_TOPIC, self.offsets.partition_for(group))])
            return error

    async def _add(self, meta: TxnMetadata, wanted: list[TopicPartition]) -> None:
        if meta.state == TxnState.ONGOING and all(tp in meta.partitions for tp in wanted):
            return
        now = self._clock()
        start = meta.start_ms if meta.state == TxnState.ONGOING else now
        await self._write(meta.moved(TxnState.ONGOING, now, partitions=meta.partitions | set(wanted),
                                     start_ms=start))
        crash_point("after-add-partitions")

    def _partition_exists(self, tp: TopicPartition) -> bool:
        count = self.registry.partitions(tp[0])
        return count is not None and 0 <= tp[1] < count

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          wanted: list[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ VerifyOnly, as Kafka's handleVerifyPartitionsInTransaction:
        NONE for each partition in the id's transaction, TRANSACTION_ABORTABLE for the
        others; every partition INVALID_PRODUCER_ID_MAPPING / PRODUCER_FENCED /
        CONCURRENT_TRANSACTIONS for another producer, another epoch, markers being written."""
        meta = self.states.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return dict.fromkeys(wanted, INVALID_PRODUCER_ID_MAPPING)
        if epoch != meta.producer_epoch:
            return dict.fromkeys(wanted, PRODUCER_FENCED)
        if meta.state.completing:
            return dict.fromkeys(wanted, CONCURRENT_TRANSACTIONS)
        return {tp: NONE if tp in meta.partitions else TRANSACTION_ABORTABLE for tp in wanted}

    # ---- Produce verification (KIP-890 part 1, in-process) ------------------------------------

    def verify_produce(self, transactional_id: str, producer_id: int, epoch: int, topic: str,
                       partition: int) -> int:
        """A transactional Produce that would open the producer's transaction on a
        partition: NONE when the coordinator has the partition in the id's ongoing
        transaction, else INVALID_PRODUCER_EPOCH (another epoch: fenced or timed
        out) or INVALID_TXN_STATE, so a late write cannot open a transaction the
        coordinator will never end (a hanging transaction holding the last stable
        offset), as Kafka's transaction.partition.verification.enable."""
        meta = self.states.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.producer_epoch:
            return INVALID_PRODUCER_EPOCH
        if meta.state != TxnState.ONGOING or (topic, partition) not in meta.partitions:
            return INVALID_TXN_STATE
        return NONE

    # ---- TxnOffsetCommit -----------------------------------------------------------------------

    def check_offset_commit(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> int:
        """TxnOffsetCommit's check: the current producer of the id, in a transaction
        that holds the group's offsets partition (AddOffsetsToTxn came first), so
        that the transaction's marker will settle the offsets."""
        meta = self.states.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.producer_epoch:
            return PRODUCER_FENCED
        if meta.state != TxnState.ONGOING or (OFFSETS_TOPIC, self.offsets.partition_for(group)) not in meta.partitions:
            return INVALID_TXN_STATE
        return NONE

    # ---- EndTxn --------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        await self._settled(transactional_id)
        async with self._lock(transactional_id):
            meta = self.states.get(transactional_id)
            if meta is None or meta.producer_id != producer_id:
                return INVALID_PRODUCER_ID_MAPPING
            if epoch != meta.producer_epoch:
                return PRODUCER_FENCED
            if meta.state.completing:
                return CONCURRENT_TRANSACTIONS
            if meta.state == TxnState.COMPLETE_COMMIT:
                return NONE if commit else INVALID_TXN_STATE
            if meta.state == TxnState.COMPLETE_ABORT:
                return INVALID_TXN_STATE if commit else NONE
            if meta.state != TxnState.ONGOING:
                return INVALID_TXN_STATE
            crash_point("before-prepare")
            prepared = await self._write(meta.moved(
                TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, self._clock()))
            crash_point("after-prepare")
            self._completions[transactional_id] = asyncio.get_running_loop().create_task(
                self._complete(prepared, commit))
            return NONE

    async def _complete(self, prepared: TxnMetadata, commit: bool) -> None:
        """The rest of an answered EndTxn (or of a completion that failed before):
        the markers and Complete*, under the id's lock, unless the id moved on."""
        transactional_id = prepared.transactional_id
        try:
            async with self._lock(transactional_id):
                current = self.states.get(transactional_id)
                if current is not None and current.state == prepared.state \
                        and current.producer_id == prepared.producer_id \
                        and current.producer_epoch == prepared.producer_epoch:
                    await self._finish(current, commit)
        except Exception as e:  # noqa: BLE001 - the state stays Prepare*; abort_timed_out tries again
            log.error("transaction_completion_failed", transactional_id=transactional_id, error=str(e))
        finally:
            if self._completions.get(transactional_id) is asyncio.current_task():
                del self._completions[transactional_id]

    async def _finish(self, prepared: TxnMetadata, commit: bool) -> TxnMetadata:
        """Write the markers of a prepared transaction, then its Complete* state."""
        for index, (topic, partition) in enumerate(sorted(prepared.partitions)):
            await self._write_marker(prepared, topic, partition, commit)
            if index == 0:
                crash_point("after-first-marker")
        crash_point("before-complete")
        return await self._write(prepared.moved(
            TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, self._clock(), partitions=set()))

    async def _write_marker(self, meta: TxnMetadata, topic: str, partition: int, commit: bool) -> None:
        """Write one partition's marker. A partition that no longer exists needs none
        (Kafka drops markers for partitions that are gone); any other failure raises,
        so the transaction stays Prepare* and its completion is tried again."""
        if not self._partition_exists((topic, partition)):
            log.warning("transaction_marker_not_written", transactional_id=meta.transactional_id,
                        topic=topic, partition=partition, error="the partition no longer exists")
            return
        partition_log = await self.partitions.partition_log(topic, partition)
        await self.partitions.append_txn_marker(partition_log, meta.producer_id, meta.producer_epoch,
                                                COORDINATOR_EPOCH, commit)
        if topic == OFFSETS_TOPIC:
            self.offsets.complete_transaction(meta.producer_id, commit)

    # ---- timeouts and expiration ---------------------------------------------------------------

    async def abort_timed_out(self) -> None:
        """Abort the transactions open longer than their timeout; complete again the
        ended ones whose completion failed (a Prepare* state with no `_complete` running)."""
        now = self._clock()
        for meta in list(self.states.values()):
            if meta.state.completing and meta.transactional_id not in self._completions:
                await self._complete(meta, meta.state == TxnState.PREPARE_COMMIT)
                continue
            if meta.state == TxnState.ONGOING and now > meta.start_ms + meta.timeout_ms:
                async with self._lock(meta.transactional_id):
                    current = self.states.get(meta.transactional_id)
                    if current is not None and current.state == TxnState.ONGOING \
                            and now > current.start_ms + current.timeout_ms:
                        await self._abort_fenced(current)

    async def expire_ids(self) -> None:
        now = self._clock()
        expiration = self.config["transactional.id.expiration.ms"]
        for meta in list(self.states.values()):
            if meta.state.idle and now - meta.last_update_ms > expiration:
                async with self._lock(meta.transactional_id):
                    current = self.states.get(meta.transactional_id)
                    if current is not None and current.state.idle and now - current.last_update_ms > expiration:
                        with contextlib.suppress(ValueError):
                            await self._write(current.moved(TxnState.DEAD, now))
