"""InitProducerId for idempotent producers, and the producer-id allocator.

Contract: producer ids come from KafkaState's claimed blocks (a block is claimed
in the executor, one claim at a time); an idempotent producer needs
IDEMPOTENT_WRITE on the cluster or WRITE on some topic. Transactional ids are
served by broker/kafka/transactions, which replaces this handler and allocates
through `next_producer_id`; without it they are refused with INVALID_REQUEST.
When no block can be claimed (its write failed: a full disk) InitProducerId
answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka's RPCProducerIdManager does while
it has no block: a retriable code, so producers try again once there is room.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from kafka_format.errors import KafkaStorageError, StrataError

from ..security.authorizer import Op, Resource
from .allowed import allowed, allowed_cluster
from .codec import make
from .core_api import TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CoreApiBase, E
from .state import KafkaState

log = structlog.get_logger("strata.kafka")


class ProducerIdsUnavailable(StrataError):
    """No producer id block could be claimed (its write failed)."""

    code = 14  # COORDINATOR_LOAD_IN_PROGRESS


class ProducerIdAllocator:
    """Producer ids from KafkaState's blocks, for InitProducerId and the transaction
    coordinator; `blocking` runs a block's claim in the executor."""

    def __init__(self, state: KafkaState, blocking: Callable[..., Awaitable[Any]]):
        self.state = state
        self.blocking = blocking
        self._claiming: asyncio.Lock | None = None

    async def next_producer_id(self) -> int:
        """The next producer id; ProducerIdsUnavailable when a block must be claimed
        and cannot be (a full disk)."""
        while True:
            value = self.state.next_producer_id()
            if value is not None:
                return value
            if self._claiming is None:
                self._claiming = asyncio.Lock()
            async with self._claiming:
                try:
                    await self.blocking(self.state.claim_block)
                except KafkaStorageError as e:
                    log.warning("producer_id_block_unavailable", error=str(e))
                    raise ProducerIdsUnavailable(str(e)) from None


class ProducerIdsApi(CoreApiBase):
    """InitProducerId (idempotent producers)."""

    producer_ids: ProducerIdAllocator  # given by CoreHandlers
    async def init_producer_id(self, req, ctx):
        R = ctx.response_class
        if req.transactional_id is not None and not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID,
                                                            req.transactional_id):
            return make(R, throttle_time=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                        producer_epoch=-1)
        if req.transactional_id is None and not may_write_idempotently(ctx):
            return make(R, throttle_time=0, error_code=E.cluster_authorization_failed, producer_id=-1,
                        producer_epoch=-1)
        if req.transactional_id is not None:
            # Served by broker/kafka/transactions, which replaces this handler; without
            # that module there is no coordinator and transactional producers are refused.
            log.info("kafka_transactions_unsupported", transactional_id=req.transactional_id,
                     peer=ctx.peer)
            return make(R, throttle_time=0, error_code=E.invalid_request, producer_id=-1,
                        producer_epoch=-1)
        try:
            producer_id = await self.next_producer_id()
        except ProducerIdsUnavailable as e:
            return make(R, throttle_time=0, error_code=e.code, producer_id=-1, producer_epoch=-1)
        return make(R, throttle_time=0, error_code=E.none, producer_id=producer_id, producer_epoch=0)

    async def next_producer_id(self) -> int:
        return await self.producer_ids.next_producer_id()


def may_write_idempotently(ctx) -> bool:
    """InitProducerId without a transactional id, as Kafka: IDEMPOTENT_WRITE on the
    cluster, or WRITE on some topic."""
    if allowed_cluster(ctx, Op.IDEMPOTENT_WRITE):
        return True
    authorizer = ctx.apis.partitions.authorizer
    return authorizer.authorize_any(ctx.connection, Op.WRITE, Resource.TOPIC)
