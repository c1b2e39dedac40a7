"""The transaction APIs on the Kafka listener: the wire side of coordinator.py.

    InitProducerId        22 v0-5  with a transactional id: the coordinator; without: core handlers
    AddPartitionsToTxn    24 v0-5  v0-3 from clients; v4-5 the brokers' batch form (KIP-890):
                                   several ids, each added or, with VerifyOnly, checked
    AddOffsetsToTxn       25 v0-4
    EndTxn                26 v0-4  (v5 is transaction version 2: the epoch bumped by every
                                   EndTxn; Strata finalizes no `transaction.version`
                                   feature, so clients stay on version 1 and never send it)
    TxnOffsetCommit       28 v0-4
    DescribeTransactions  65 v0
    ListTransactions      66 v0-2

A write of `__transaction_state` that fails (a full disk: KAFKA_STORAGE_ERROR) is
answered NOT_COORDINATOR, as Kafka's TransactionStateManager maps it (clients
look the coordinator up and retry); the transaction's state is unchanged. An
InitProducerId that needs a producer id block that cannot be claimed answers
COORDINATOR_LOAD_IN_PROGRESS (broker/kafka/producer_ids.py).
PRODUCER_FENCED (90) is answered as INVALID_PRODUCER_EPOCH (47) to the versions
that predate it (InitProducerId < 4, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
< 2, TxnOffsetCommit < 3), as Kafka's handlers do.

Authorization, as KafkaApis: WRITE on the transactional id, whose refusal refuses
the whole request, is checked by the guards of broker/kafka/acls.py (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit; TxnOffsetCommit's
READ on the group too). The checks of each item are here:
- AddPartitionsToTxn: WRITE on each topic (internal topics are never writable);
  any refused topic fails the request: its partitions TOPIC_AUTHORIZATION_FAILED,
  unknown ones UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED.
- AddOffsetsToTxn: READ on the group, else GROUP_AUTHORIZATION_FAILED.
- TxnOffsetCommit: READ on each topic; a refused topic's partitions get
  TOPIC_AUTHORIZATION_FAILED and the others are committed.
- DescribeTransactions: DESCRIBE on each id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  for it; the partitions of topics the principal may not DESCRIBE are left out.
- ListTransactions: only the ids the principal may DESCRIBE.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Awaitable, Callable
from typing import Any

from broker.state.internal_topics import is_internal
from kafka_format.errors import KafkaStorageError, StrataError

from ...security.authorizer import Op, Resource
from ..allowed import allowed
from ..codec import make, nested
from ..request_types import ApiKey
from .coordinator import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    TRANSACTION_ABORTABLE,
    TransactionCoordinator,
)
from .state import TxnState

TRANSACTIONAL_ID_NOT_FOUND = 105
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
NOT_COORDINATOR = 16
# Kafka's -1 "no start time": kio writes this field as round(timestamp * 1000).
NO_START_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)
INVALID_REQUEST = 42
# First version of each API that knows PRODUCER_FENCED.
FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2,
                ApiKey.END_TXN: 2, ApiKey.TXN_OFFSET_COMMIT: 3}


def _code(error: int, api: ApiKey, version: int) -> int:
    if error == PRODUCER_FENCED and version < FENCED_SINCE[api]:
        return INVALID_PRODUCER_EPOCH
    return error


def _failed(error: StrataError) -> int:
    """The code for a coordinator call that raised: NOT_COORDINATOR for a state log
    write that failed, as Kafka's appendTransactionToLog; else the error's own."""
    return NOT_COORDINATOR if isinstance(error, KafkaStorageError) else error.code


def _millis(value) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


class TransactionHandlers:
    def __init__(self, apis, coordinator: TransactionCoordinator,
                 init_producer_id: Callable[[Any, Any], Awaitable[Any]]):
        self.apis = apis
        self.coordinator = coordinator
        self._init_idempotent = init_producer_id  # InitProducerId without a transactional id (the core's)

    def register_all(self) -> None:
        r = self.apis.register
        r(ApiKey.INIT_PRODUCER_ID, self.init_producer_id, 0, 5)
        r(ApiKey.ADD_PARTITIONS_TO_TXN, self.add_partitions_to_txn, 0, 5)
        r(ApiKey.ADD_OFFSETS_TO_TXN, self.add_offsets_to_txn, 0, 4)
        r(ApiKey.END_TXN, self.end_txn, 0, 4)
        r(ApiKey.TXN_OFFSET_COMMIT, self.txn_offset_commit, 0, 4)
        r(ApiKey.DESCRIBE_TRANSACTIONS, self.describe_transactions, 0, 0)
        r(ApiKey.LIST_TRANSACTIONS, self.list_transactions, 0, 2)

    async def init_producer_id(self, req, ctx):
        if req.transactional_id is None:
            return await self._init_idempotent(req, ctx)
        R = ctx.response_class
        if not req.transactional_id:
            return make(R, throttle_time=0, error_code=INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
        try:
            error, producer_id, epoch = await self.coordinator.init_producer_id(
                req.transactional_id, _millis(req.transaction_timeout), getattr(req, "producer_id", -1),
                getattr(req, "producer_epoch", -1))
        except StrataError as e:
            error, producer_id, epoch = _failed(e), -1, -1
        return make(R, throttle_time=0, error_code=_code(error, ApiKey.INIT_PRODUCER_ID, ctx.api_version),
                    producer_id=producer_id, producer_epoch=epoch)

    async def add_partitions_to_txn(self, req, ctx):
        if ctx.api_version >= 4:
            return await self._add_partitions_batch(req, ctx)
        R = ctx.response_class
        TopicR = nested(R, "results_by_topic_v3_and_below")
        PartR = nested(TopicR, "results_by_partition")
        wanted = [(topic.name, partition) for topic in req.v3_and_below_topics for partition in topic.partitions]
        writable = {name: not is_internal(name) and allowed(ctx, Op.WRITE, Resource.TOPIC, name)
                    for name, _ in wanted}
        try:
            errors = await self.coordinator.add_partitions(
                req.v3_and_below_transactional_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                wanted, {tp: TOPIC_AUTHORIZATION_FAILED for tp in wanted if not writable[tp[0]]})
        except StrataError as e:
            errors = dict.fromkeys(wanted, _failed(e))
        by_topic: dict[str, list] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(make(
                PartR, partition_index=partition,
                partition_error_code=_code(error, ApiKey.ADD_PARTITIONS_TO_TXN, ctx.api_version)))
        return make(R, throttle_time=0, results_by_topic_v3_and_below=tuple(
            make(TopicR, name=topic, results_by_partition=tuple(parts)) for topic, parts in by_topic.items()))

    async def _add_partitions_batch(self, req, ctx):
        """v4+: each transaction of the batch on its own (CLUSTER_ACTION was the guard's;
        no topic ACLs, as Kafka's). VerifyOnly: whether each partition is in the id's
        ongoing transaction (TRANSACTION_ABORTABLE, v4: INVALID_TXN_STATE, when not);
        else added as v3's. One result per transactional id."""
        R = ctx.response_class
        ResultR = nested(R, "results_by_transaction")
        TopicR = nested(ResultR, "topic_results")
        PartR = nested(TopicR, "results_by_partition")
        results = []
        for txn in req.transactions:
            wanted = [(topic.name, partition) for topic in txn.topics for partition in topic.partitions]
            if not txn.transactional_id:
                errors = dict.fromkeys(wanted, INVALID_REQUEST)
            elif txn.verify_only:
                errors = self.coordinator.verify_partitions(txn.transactional_id, txn.producer_id,
                                                            txn.producer_epoch, wanted)
            else:
                try:
                    errors = await self.coordinator.add_partitions(txn.transactional_id, txn.producer_id,
                                                                   txn.producer_epoch, wanted)
                except StrataError as e:
                    errors = dict.fromkeys(wanted, _failed(e))
            by_topic: dict[str, list] = {}
            for (topic, partition), error in errors.items():
                if error == TRANSACTION_ABORTABLE and ctx.api_version < 5:
                    error = INVALID_TXN_STATE
                by_topic.setdefault(topic, []).append(make(PartR, partition_index=partition,
                                                           partition_error_code=error))
            results.append(make(ResultR, transactional_id=txn.transactional_id, topic_results=tuple(
                make(TopicR, name=topic, results_by_partition=tuple(parts)) for topic, parts in by_topic.items())))
        return make(R, throttle_time=0, error_code=NONE, results_by_transaction=tuple(results))

    async def add_offsets_to_txn(self, req, ctx):
        if not allowed(ctx, Op.READ, Resource.GROUP, req.group_id):
            return make(ctx.response_class, throttle_time=0, error_code=GROUP_AUTHORIZATION_FAILED)
        try:
            error = await self.coordinator.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch,
                                                       req.group_id)
        except StrataError as e:
            error = _failed(e)
        return make(ctx.response_class, throttle_time=0,
                    error_code=_code(error, ApiKey.ADD_OFFSETS_TO_TXN, ctx.api_version))

    async def end_txn(self, req, ctx):
        try:
            error = await self.coordinator.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                   req.committed)
        except StrataError as e:
            error = _failed(e)
        return make(ctx.response_class, throttle_time=0, error_code=_code(error, ApiKey.END_TXN, ctx.api_version))

    async def txn_offset_commit(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        readable = {topic.name: allowed(ctx, Op.READ, Resource.TOPIC, topic.name) for topic in req.topics}
        entries = [(topic.name, p.partition_index, p.committed_offset, p.committed_metadata,
                    getattr(p, "committed_leader_epoch", -1)) for topic in req.topics for p in topic.partitions]
        permitted = [entry for entry in entries if readable[entry[0]]]
        codes: list = []
        if permitted:
            error = _code(self.coordinator.check_offset_commit(req.transactional_id, req.producer_id,
                                                               req.producer_epoch, req.group_id),
                          ApiKey.TXN_OFFSET_COMMIT, ctx.api_version)
            codes = [error] * len(permitted)
            if error == NONE:
                try:
                    results = await self.apis.blocking(self.apis.offsets.commit_transactional, req.group_id,
                                                       req.producer_id, req.producer_epoch, permitted)
                    codes = [NONE if e is None else e.code for e in results]
                except StrataError as e:
                    codes = [e.code] * len(permitted)
        answers = iter(codes)
        by_topic: dict[str, list] = {}
        for topic, partition, *_ in entries:
            code = next(answers) if readable[topic] else TOPIC_AUTHORIZATION_FAILED
            by_topic.setdefault(topic, []).append(make(PartR, partition_index=partition, error_code=code))
        return make(R, throttle_time=0, topics=tuple(make(TopicR, name=topic, partitions=tuple(parts))
                                                     for topic, parts in by_topic.items()))

    async def describe_transactions(self, req, ctx):
        R = ctx.response_class
        StateR = nested(R, "transaction_states")
        TopicR = nested(StateR, "topics")
        out = []
        for transactional_id in req.transactional_ids:
            if not allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, transactional_id):
                out.append(make(StateR, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                transactional_id=transactional_id, transaction_state="",
                                transaction_timeout=datetime.timedelta(0), transaction_start_time=0,
                                producer_id=0, producer_epoch=0, topics=()))
                continue
            meta = self.coordinator.states.get(transactional_id)
            if meta is None:
                out.append(make(StateR, error_code=TRANSACTIONAL_ID_NOT_FOUND, transactional_id=transactional_id,
                                transaction_state="", transaction_timeout=datetime.timedelta(0),
                                transaction_start_time=NO_START_TIME, producer_id=-1, producer_epoch=-1, topics=()))
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(meta.partitions):
                if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, topic):
                    by_topic.setdefault(topic, []).append(partition)
            start = (datetime.datetime.fromtimestamp(meta.start_ms / 1000, tz=datetime.UTC)
                     if meta.start_ms >= 0 else NO_START_TIME)
            out.append(make(StateR, error_code=NONE, transactional_id=transactional_id,
                            transaction_state=meta.state.display,
                            transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
                            transaction_start_time=start, producer_id=meta.producer_id,
                            producer_epoch=meta.producer_epoch,
                            topics=tuple(make(TopicR, topic=t, partitions=tuple(p)) for t, p in by_topic.items())))
        return make(R, throttle_time=0, transaction_states=tuple(out))

    async def list_transactions(self, req, ctx):
        R = ctx.response_class
        StateR = nested(R, "transaction_states")
        known = {state.display: state for state in TxnState}
        wanted = {known[name] for name in req.state_filters if name in known}
        unknown = tuple(name for name in req.state_filters if name not in known)
        producers = set(req.producer_id_filters)
        duration = getattr(req, "duration_filter", -1)
        pattern = getattr(req, "transactional_id_pattern", None)
        try:
            matcher = re.compile(pattern) if pattern else None
        except re.error:
            return make(R, throttle_time=0, error_code=INVALID_REQUEST, unknown_state_filters=(),
                        transaction_states=())
        now = self.coordinator.now()
        out = []
        for meta in sorted(self.coordinator.states.values(), key=lambda m: m.transactional_id):
            if req.state_filters and meta.state not in wanted:
                continue
            if producers and meta.producer_id not in producers:
                continue
            if duration >= 0 and (meta.state != TxnState.ONGOING or now - meta.start_ms < duration):
                continue
            if matcher is not None and not matcher.fullmatch(meta.transactional_id):
                continue
            if not allowed(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, meta.transactional_id):
                continue
            out.append(make(StateR, transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                            transaction_state=meta.state.display))
        return make(R, throttle_time=0, error_code=NONE, unknown_state_filters=unknown,
                    transaction_states=tuple(out))
