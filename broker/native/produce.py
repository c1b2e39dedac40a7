"""PRODUCE and MULTIPRODUCE, and the PRODUCE half of the fast path.

Contract:
- PRODUCE appends a message set through the partition service
  (`PartitionService.append`: inline on the loop or in the executor, the
  slow-disk back-off) and answers with the session's `produce_answer` (its
  version's layout). MULTIPRODUCE starts every item's append, then answers them
  in order; an item the ACLs refuse (`denied`) is TOPIC_AUTHORIZATION_FAILED.
- `produce_now(frame, session)` is the fast path's PRODUCE
  (broker/net/connection.py's FastPath, through `SessionHandlers.handle_now`): the
  reply when the append runs inline, else None with nothing done.
- `run_key` / `begin` stream pipelined PRODUCEs that go to the executor into the
  partition's appender, so consecutive PRODUCEs to one partition cost one
  executor hop.

Decisions where the spec is silent (Kafka's behaviour unless noted):
- PRODUCE to `__consumer_offsets`: INVALID_TOPIC_EXCEPTION ("cannot append to
  internal topic", ReplicaManager).
- PRODUCE and MULTIPRODUCE to an unknown topic answer UNKNOWN_TOPIC_OR_PARTITION:
  as in Kafka, a produce never creates a topic (auto.create.topics.enable acts on
  Metadata requests: the Kafka listener's, and the native METADATA from version 2
  with allowAutoTopicCreation 1).
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.net.request_handlers import Reply
from kafka_format.errors import StrataError
from protocol import (
    ErrorCode,
    MultiProduceRequest,
    MultiProduceResponse,
    ProduceRequest,
    ProduceResult,
    ProtocolError,
    RequestType,
    encode_response,
    parse_produce,
)
from protocol.requests import PRODUCE_FIXED, PRODUCE_HEAD

from ..core import INLINE_APPEND_MAX_BYTES, AppendResult
from ..security.authorizer import Op, Resource, TopicAuthorizationError
from .base import NativeApiBase, log
from .session_state import NativeSession, produced


def produce_result(result: AppendResult | None, code: int, error: StrataError | None) -> ProduceResult:
    """A MULTIPRODUCE item's result from its append's outcome."""
    if result is None:
        return ProduceResult(code)
    return ProduceResult(ErrorCode.NONE, result.first_offset, result.log_append_time)


class ProduceApi(NativeApiBase):
    """PRODUCE, MULTIPRODUCE and the PRODUCE fast path."""

    async def produce(self, req: ProduceRequest, session: NativeSession) -> Reply:
        partition_log = await self.partitions.partition_log(req.topic, req.partition, produce=True)
        return await self.partitions.append(partition_log, req.message_set, session.produce_answer)

    async def multiproduce(self, req: MultiProduceRequest, session: NativeSession,
                           denied: frozenset[int] = frozenset()) -> Reply:
        partitions = self.partitions
        started: list[Any] = []
        for index, item in enumerate(req.items):
            if index in denied:
                started.append(ProduceResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                partition_log = await partitions.partition_log(item.topic, item.partition, produce=True)
            except StrataError as e:
                started.append(ProduceResult(e.code))
                continue
            started.append(partitions.start_append(partition_log, item.message_set, produce_result))
        results = tuple([await item if isinstance(item, asyncio.Future) else item for item in started])
        return [encode_response(MultiProduceResponse(ErrorCode.NONE, results))]

    # ---- the fast path (broker.net.request_handlers.FastPath, through Handlers) ---------------------------

    def produce_now(self, frame, session: NativeSession) -> Reply | None:
        """handle_now for a PRODUCE: the reply when its append runs inline (the
        partition service's policy, `appends_inline`); else None, with nothing done."""
        partitions = self.partitions
        partition_log = None
        try:
            topic, partition, message_set = parse_produce(frame)
            if self.authorizer.enabled and not self._may(session.context, Op.WRITE, Resource.TOPIC, topic):
                raise TopicAuthorizationError(f"not authorized to WRITE topic {topic!r}")
            partition_log = partitions.open_log(topic, partition, produce=True)
            if not partitions.appends_inline(partition_log, len(message_set)):
                return None
            result = partitions.append_inline(partition_log, message_set)
        except ProtocolError as e:
            peer = session.context.peer
            self.bad_requests.record(peer, "bad_request", error=str(e), peer=peer)
            return session.error(e.code, e.message)
        except Exception as e:
            return session.error(*partitions.error_answer(e, partition_log))
        return produced(result)

    def run_key(self, frame) -> tuple[bytes, int] | None:
        """A PRODUCE whose append goes to the executor is keyed by its partition, so
        consecutive queued PRODUCEs to one partition share one executor hop (`begin`).
        Anything else: None."""
        size = len(frame)
        if size <= INLINE_APPEND_MAX_BYTES:
            return None
        type_, topic_len = PRODUCE_HEAD.unpack_from(frame)
        if type_ != RequestType.PRODUCE or topic_len < 0:
            return None
        at = PRODUCE_HEAD.size + topic_len
        if at + PRODUCE_FIXED.size > size:
            return None  # malformed: `handle` answers it alone
        topic = bytes(frame[PRODUCE_HEAD.size:at])
        partition, set_size = PRODUCE_FIXED.unpack_from(frame, at)
        partition_log = self.partitions.live_log(topic.decode("utf-8", "replace"), partition)
        # Not keyed when inline: the connection starts it after every earlier reply.
        if partition_log is None or self.partitions.appends_inline(partition_log, set_size, ordered_by_caller=True):
            return None  # inline (or an error `handle` answers)
        return topic, partition

    def begin(self, frame, session: NativeSession) -> asyncio.Future:
        """Start a keyed PRODUCE now and return the future of its reply. Parsing and
        checks happen here, on the loop; the append goes to the partition's appender,
        behind every append begun before it. The future never fails: errors are
        answered as `handle` answers them."""
        try:
            topic, partition, message_set = parse_produce(frame)  # run_key saw a PRODUCE type
            if self.authorizer.enabled and not self._may(session.context, Op.WRITE, Resource.TOPIC, topic):
                raise TopicAuthorizationError(f"not authorized to WRITE topic {topic!r}")
            partition_log = self.partitions.open_log(topic, partition, produce=True)
        except Exception as e:
            future = self.loop.create_future()
            if isinstance(e, ProtocolError):
                future.set_result(session.error(e.code, e.message))
            elif isinstance(e, StrataError):
                future.set_result(session.error(*self.partitions.error_answer(e)))
            else:
                log.exception("request_failed", request="ProduceRequest")
                future.set_result(session.error(ErrorCode.UNKNOWN_SERVER_ERROR))
            return future
        return self.partitions.append_later(partition_log, message_set,
                                            session.produce_answer)

