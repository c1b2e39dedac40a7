"""Produce over the partition service (broker/core/service.py).

Contract: each partition's records are appended as they arrived (the validator
restamps base offsets, and timestamps for LogAppendTime), by the partition
service's one policy: inline on the loop when no fsync is due and the set is
small enough, else through the partition's appender in the executor. acks 1 and
-1 answer once the batch is in the log; -1 adds no fsync (one replica: the
in-sync set is this log; durability follows flush.messages/flush.ms, as Kafka's).
acks 0: no answer; if a partition failed, the connection is closed, as Kafka
does so that the client notices. Other acks: INVALID_REQUIRED_ACKS. Batches with
producerId >= 0 are appended; idempotence (sequence checks, duplicates answered
with their original offset) is checked by Log.append itself, under the log's
lock (storage/producer_state.py). A transactional first write to a partition is
checked by the transaction coordinator (broker/kafka/transactions).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import structlog

from broker.net.request_handlers import CloseConnection
from kafka_format.batch import ATTRIBUTES_OFFSET, FIELD_OFFSET, PRODUCER_ID_OFFSET, TRANSACTIONAL_BIT
from kafka_format.errors import RecordValidationError, StrataError

from ..core import PartitionLog, append_outcome, strata_error
from ..security.authorizer import Op, Resource
from . import produce_response
from .allowed import allowed
from .codec import has_field
from .core_api import TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CoreApiBase, E, Target
from .produce_response import PartitionRow
from .request_types import DECLINE

log = structlog.get_logger("strata.kafka")

# A v2 batch header read from its attributes on: attributes, producerId, producerEpoch
TXN_FIELDS = struct.Struct(f">h{PRODUCER_ID_OFFSET - ATTRIBUTES_OFFSET - 2}xqh")
MAGIC_OFFSET = FIELD_OFFSET["magic"]


def _record_errors(failure: StrataError | None) -> tuple[tuple[tuple[int, str | None], ...], str | None]:
    """A failed partition's `record_errors` (Produce v8+) and `error_message`, as
    Kafka answers them: each record a RecordValidationError names, by its index in
    its batch, and the error's message; none and a null message for other errors
    (Kafka leaves generic messages out)."""
    if not isinstance(failure, RecordValidationError):
        return (), None
    return tuple(failure.record_errors), str(failure)


class ProduceApi(CoreApiBase):
    """Produce, with its fast path `produce_now`."""

    # broker/kafka/transactions' TransactionCoordinator (verify_produce), given by CoreHandlers
    transactions: Any

    def _produce_plan(self, req, ctx) -> list[tuple[Any, list[Target]]]:
        """Every partition of a Produce resolved, on the loop (a produce never creates
        a log: internal topics refuse it first), its records in `records`."""
        acks = req.acks
        by_id = not has_field(type(req.topic_data[0]), "name") if req.topic_data else False
        plan: list[tuple[Any, list[Target]]] = []
        transactional_id = getattr(req, "transactional_id", None)
        refused = (TRANSACTIONAL_ID_AUTHORIZATION_FAILED if transactional_id is not None and not allowed(
            ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id) else 0)
        for topic in req.topic_data:
            name = None if by_id else topic.name
            denied = refused or (0 if allowed(ctx, Op.WRITE, Resource.TOPIC, self._topic_name(name, topic))
                                 else E.topic_authorization_failed)
            targets = []
            for part in topic.partition_data:
                if acks not in (0, 1, -1):
                    targets.append(Target(part.index, error=E.invalid_required_acks))
                    continue
                if denied:
                    targets.append(Target(part.index, error=denied))
                    continue
                target = self._target(name, getattr(topic, "topic_id", None), part.index, produce=True)
                if part.records is None:
                    target.error = target.error or E.corrupt_message
                elif transactional_id is not None and not target.error:
                    target.error = self._verify_transactional(transactional_id, target.log, part.records)
                target.records = part.records
                targets.append(target)
            plan.append((topic, targets))
        return plan

    def _verify_transactional(self, transactional_id: str, partition_log: PartitionLog | None, records) -> int:
        """The transaction coordinator's check of a transactional first write to a
        partition (broker/kafka/transactions: verify_produce); 0 for anything else."""
        transactions = self.transactions
        if transactions is None or partition_log is None \
                or len(records) < ATTRIBUTES_OFFSET + TXN_FIELDS.size or records[MAGIC_OFFSET] != 2:
            return 0
        attributes, producer_id, epoch = TXN_FIELDS.unpack_from(records, ATTRIBUTES_OFFSET)
        if not attributes & TRANSACTIONAL_BIT or self.partitions.in_transaction(partition_log, producer_id):
            return 0
        return transactions.verify_produce(transactional_id, producer_id, epoch, partition_log.topic,
                                           partition_log.partition)

    def produce_now(self, req, ctx):
        """Produce without waiting (the fast path, KafkaApis.handle_now): when acks is
        1 or -1 and every partition's append runs inline by the partition service's
        policy, append them all on the loop and answer; else DECLINE, with nothing done."""
        if req.acks == 0:
            return DECLINE
        plan = self._produce_plan(req, ctx)
        partitions = self.partitions
        targets = []
        for _, planned in plan:
            for t in planned:
                if not t.error:
                    if not partitions.appends_inline(t.log, len(t.records)):
                        return DECLINE
                    targets.append(t)
        nbytes = self._produce_bytes(plan)
        for t in targets:
            try:
                t.result = partitions.append_inline(t.log, t.records)
            except Exception as e:
                t.error = partitions.error_code(e, t.log)
                t.failure = strata_error(e)
            t.records = None
        return self._produce_response(ctx, plan, self._throttle(ctx, "produce", nbytes))

    async def produce(self, req, ctx):
        plan = self._produce_plan(req, ctx)
        nbytes = self._produce_bytes(plan)
        # Each partition's append follows the partition service's one policy: inline
        # on the loop when cheap, else queued on the partition's appender; the
        # executor ones run meanwhile and are awaited below, in order.
        partitions = self.partitions
        for _, targets in plan:
            for target in targets:
                if not target.error:
                    target.result = partitions.start_append(target.log, target.records, append_outcome)
                    target.records = None
        for _, targets in plan:
            for target in targets:
                if not target.error:
                    started = target.result
                    done, target.error, target.failure = \
                        await started if isinstance(started, asyncio.Future) else started
                    target.result = done
        throttle = self._throttle(ctx, "produce", nbytes)
        if req.acks == 0:
            if any(t.error for _, targets in plan for t in targets):
                log.info("kafka_acks0_produce_failed", peer=ctx.peer)
                raise CloseConnection()
            return None
        return self._produce_response(ctx, plan, throttle)

    def _produce_response(self, ctx, plan: list[tuple[Any, list[Target]]], throttle: int = 0) -> list[bytes]:
        """The framed answer, a row per partition (produce_response.py writes kio's bytes)."""
        by_id = ctx.api_version >= produce_response.TOPIC_IDS_FROM
        topics = []
        for topic, targets in plan:
            rows = []
            for t in targets:
                if t.error:
                    record_errors, message = _record_errors(t.failure)
                    rows.append(PartitionRow(t.index, t.error, -1, -1, -1, record_errors, message))
                else:
                    done = t.result
                    rows.append(PartitionRow(t.index, 0, done.first_offset, done.log_append_time,
                                             done.log_start_offset))
            topics.append((topic.topic_id if by_id else topic.name, rows))
        return [produce_response.encode(ctx.correlation_id, ctx.api_version, throttle, topics)]
