"""Fetch over the partition service, with fetch sessions (KIP-227,
fetch_sessions.py) and isolation levels; see `FetchApi.fetch`.

Contract: reads happen on the loop (as native FETCH reads); the records are
FileSlices spliced into kio's encoding and sent with sendfile. Every read a
fetch takes is either answered (the splicer owns it) or released.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..core import READ_COMMITTED, MemorySlice, RecordSlice, Wait, reply_records, strata_error
from ..core.limits import fetch_cap
from ..security.authorizer import Op, Resource
from . import codec, fetch_response
from .allowed import allowed
from .codec import RecordsSplicer, has_field, make, nested
from .core_api import CoreApiBase, E, Target, release_reads
from .fetch_response import PartitionRow
from .fetch_sessions import FetchContext, FetchSessions
from .request_types import DECLINE

FETCH_FRAMING = 1 << 20  # room a Fetch answer keeps for everything but its records


def _aborted(AbortedR: type | None, aborted) -> tuple:
    """A Fetch partition's `aborted_transactions` from (producerId, firstOffset) pairs."""
    if AbortedR is None or not aborted:
        return ()
    return tuple(make(AbortedR, producer_id=producer_id, first_offset=first) for producer_id, first in aborted)


class FetchParams:
    """What a Fetch request asks, read once per request."""

    __slots__ = ("by_id", "replica", "max_wait_ms", "min_bytes", "budget", "isolation_level", "read_committed")

    def __init__(self, req, ctx, fetch_max_bytes: int):
        replica = getattr(req, "replica_id", -1)
        if has_field(type(req), "replica_state"):
            replica = req.replica_state.replica_id
        self.replica = replica
        self.by_id = ctx.api_version >= 13
        self.max_wait_ms = int(req.max_wait.total_seconds() * 1000)
        self.min_bytes = req.min_bytes
        self.budget = fetch_cap(req.max_bytes, fetch_max_bytes, FETCH_FRAMING)
        self.isolation_level = getattr(req, "isolation_level", 0)
        self.read_committed = self.isolation_level == READ_COMMITTED


class FetchApi(CoreApiBase):
    """Fetch, with its fast path `fetch_now`; owns the fetch session cache."""

    def __init__(self, apis):
        super().__init__(apis)
        self.fetch_sessions = FetchSessions(self.config.max_incremental_fetch_session_cache_slots,
                                            self.config.min_incremental_fetch_session_eviction_ms,
                                            subscriptions=self.partitions)
    async def fetch(self, req, ctx):
        """Kafka's fetch over the shared logs.

        - Sessions (fetch_sessions.py): an incremental fetch reads the partitions of
          its session that may have changed, answers those that did, and long-polls
          the session's one wake-up event.
        - Budget: min(max_bytes, fetch.max.bytes); each partition reads at most
          min(partition_max_bytes, what is left). Until some partition returned
          bytes, reads use min_one_message, so the first batch comes whole even past
          the limits (Kafka's minOneMessage); later partitions get whole batches
          that fit (a lone batch over the rest is cut, as Kafka's slice).
        - Answers at once with any error, with >= min_bytes, or when max_wait <= 0;
          otherwise waits in the core's one long poll (`PartitionService.poll`) for
          an append to one of the partitions (either protocol wakes it), for
          max_wait, or for shutdown, then reads again.
        - The records are FileSlices spliced into kio's encoding and sent with sendfile.
        """
        fetch = FetchParams(req, ctx, self.config.fetch_max_bytes)
        fetch.budget = self.partitions.fetch_budget(ctx.connection, ctx.client_id, fetch.budget)
        session = self.fetch_sessions.context(req, ctx.api_version, privileged=fetch.replica >= 0)
        if session.error:
            return self._fetch_refused(ctx, session.error)

        async def attempt(may_wait: bool):
            plan = self._fetch_plan(session.topics(), fetch, ctx)
            flat = [t for _, targets in plan for t in targets]
            for t in flat:
                if t.log is None and not t.error:
                    await self._create_log(t)
            events = self._watch(plan, session, may_wait)
            # Below the local log start of a tiered partition: the remote store, in the executor.
            budget = await self._read_remote(flat, fetch.budget, fetch.isolation_level)
            self._read_all(flat, budget, fetch.isolation_level)  # on the loop, as native FETCH reads
            plan = self._settle_unchanged(plan, session)
            if may_wait and events and not self._fetch_complete(flat, fetch):
                release_reads(flat)
                return Wait(events)
            try:
                return self._fetch_response(ctx, plan, fetch.read_committed, session)
            except BaseException:
                release_reads(flat)
                raise

        return await self.partitions.poll(attempt, fetch.max_wait_ms)

    def fetch_now(self, req, ctx):
        """Fetch without waiting (the fast path, KafkaApis.handle_now): the answer
        when it needs no log created and no long poll; else DECLINE, with nothing
        held (the reads are released)."""
        fetch = FetchParams(req, ctx, self.config.fetch_max_bytes)
        fetch.budget = self.partitions.fetch_budget(ctx.connection, ctx.client_id, fetch.budget)
        session = self.fetch_sessions.context(req, ctx.api_version, privileged=fetch.replica >= 0)
        if session.error:
            return self._fetch_refused(ctx, session.error)
        plan = self._fetch_plan(session.topics(), fetch, ctx)
        flat = [t for _, targets in plan for t in targets]
        if any(t.log is None and not t.error for t in flat):
            return DECLINE  # an internal topic's log to create: in the executor
        if any(not t.error and self.partitions.reads_remotely(t.log, t.offset) for t in flat):
            return DECLINE  # a read of the remote store: in the executor
        self._watch(plan, session, False)
        self._read_all(flat, fetch.budget, fetch.isolation_level)
        plan = self._settle_unchanged(plan, session)
        if (fetch.max_wait_ms > 0 and not self.apis.shutting_down and not self._fetch_complete(flat, fetch)
                and (session.incremental or any(t.log is not None for t in flat))):
            release_reads(flat)
            return DECLINE  # a long poll: the connection's task waits
        try:
            return self._fetch_response(ctx, plan, fetch.read_committed, session)
        except BaseException:
            release_reads(flat)
            raise

    def _watch(self, plan, session: FetchContext, may_wait: bool) -> list[asyncio.Event]:
        """The events a long poll waits on, taken before the reads: each partition's
        (`may_wait`); for an incremental fetch the session's one wake-up event, which
        every append to a partition it has read sets (the session subscribes each
        partition once, fetch_sessions.py)."""
        fetch_session = session.session
        if fetch_session is None:
            return [self.partitions.watch((t.log.topic, t.log.partition))
                    for _, targets in plan for t in targets if t.log is not None] if may_wait else []
        by_id = fetch_session.uses_topic_ids
        for topic, targets in plan:
            name = topic.topic_id if by_id else topic.topic
            for part, t in zip(topic.partitions, targets, strict=True):
                if t.log is None or t.error:
                    part.watching(False)
                else:
                    fetch_session.watch(part, (name, part.partition), (t.log.topic, t.log.partition))
        return [fetch_session.wake]

    @staticmethod
    def _settle_unchanged(plan, session: FetchContext) -> list[tuple[Any, list[Target]]]:
        """An incremental fetch's plan without the partitions read at their log end
        whose offsets the session already told (FetchContext.settle_unchanged):
        those count as answered now and the answer leaves them out."""
        if not session.incremental:
            return plan
        kept: list[tuple[Any, list[Target]]] = []
        for topic, targets in plan:
            parts, rest = [], []
            for part, t in zip(topic.partitions, targets, strict=True):
                partition_log = t.log
                if (t.error or partition_log is None or t.result is not None
                        or t.offset != partition_log.log_end_offset
                        or not session.settle_unchanged(topic, part, partition_log.log_end_offset,
                                                        partition_log.last_stable_offset,
                                                        partition_log.log_start_offset)):
                    parts.append(part)
                    rest.append(t)
            if rest:
                topic.partitions = parts
                kept.append((topic, rest))
        return kept

    def _throttled_response(self, ctx, plan, session: FetchContext, throttle: int) -> list:
        """A fetch over the client's quota (KIP-219, Kafka's getThrottledResponse):
        no partitions, `throttle_time_ms` set, the reads released; an incremental
        fetch keeps its session (the next epoch, nothing it would answer marked as
        answered, so the next fetch reads those partitions again), any other
        answers no session."""
        release_reads([t for _, targets in plan for t in targets])
        error, session_id = session.throttled(self.fetch_sessions.now_ms())
        response = make(ctx.response_class, throttle_time=throttle, error_code=error, session_id=session_id,
                        responses=())
        return [codec.encode_response(ctx.correlation_id, response)]

    @staticmethod
    def _fetch_refused(ctx, error: int):
        """The answer to a fetch its session refuses (Kafka's SessionErrorContext)."""
        return make(ctx.response_class, throttle_time=0, error_code=error, session_id=0, responses=())

    def _fetch_plan(self, topics, fetch: FetchParams, ctx) -> list[tuple[Any, list[Target]]]:
        """Every partition of a Fetch (the request's or its session's) resolved on the loop (`_target`);
        a topic the connection may not READ is TOPIC_AUTHORIZATION_FAILED."""
        plan: list[tuple[Any, list[Target]]] = []
        for topic in topics:
            name = None if fetch.by_id else topic.topic
            permitted = allowed(ctx, Op.READ, Resource.TOPIC, self._topic_name(name, topic))
            targets = []
            for part in topic.partitions:
                if fetch.replica >= 0:  # a follower: there are none
                    targets.append(Target(part.partition, error=E.not_leader_or_follower))
                    continue
                if not permitted:
                    targets.append(Target(part.partition, error=E.topic_authorization_failed))
                    continue
                target = self._target(name, getattr(topic, "topic_id", None), part.partition)
                target.offset = part.fetch_offset
                target.max_bytes = max(part.partition_max_bytes, 0)
                targets.append(target)
            plan.append((topic, targets))
        return plan

    @staticmethod
    def _fetch_complete(flat: list[Target], fetch: FetchParams) -> bool:
        """Whether a fetch answers now: an error, or min_bytes read."""
        total = sum(t.result.length for t in flat if t.result is not None)
        return total >= fetch.min_bytes or any(t.error for t in flat)

    async def _read_remote(self, flat: list[Target], budget: int, isolation_level: int) -> int:
        """Read, from the remote store, every partition whose fetch offset is below its
        local log start (the partition service's `read_remote`, in the executor);
        the budget left. `_read_all` keeps these reads."""
        for t in flat:
            t.isolated = None
        min_one = True
        for t in flat:
            if t.error or t.log is None or not self.partitions.reads_remotely(t.log, t.offset):
                continue
            try:
                t.isolated = await self.partitions.read_remote(t.log, t.offset, min(t.max_bytes, budget),
                                                               isolation_level, min_one_message=min_one)
            except Exception as e:
                t.error = self.partitions.error_code(e, t.log)
                t.failure = strata_error(e)
                continue
            found = t.isolated.records
            if found.length:
                budget = max(budget - found.length, 0)
                min_one = False
                t.result = found
        return budget

    def _read_all(self, flat: list[Target], budget: int, isolation_level: int) -> None:
        """Read every partition in order from the budget (on the loop: the partition
        service's read at the fetch's isolation level); a partition `_read_remote`
        read keeps that read."""
        min_one = True
        for t in flat:
            if t.error or t.log is None:
                continue
            if t.isolated is not None and isinstance(t.isolated.records, MemorySlice):
                continue
            t.isolated = None
            try:
                if t.offset == t.log.log_end_offset:
                    continue
                t.isolated = self.partitions.read_isolated(t.log, t.offset, min(t.max_bytes, budget),
                                                           isolation_level, min_one_message=min_one)
            except Exception as e:
                t.error = self.partitions.error_code(e, t.log)
                continue
            found = t.isolated.records
            if found.length:
                budget = max(budget - found.length, 0)
                min_one = False
                t.result = found
            else:
                found.release()

    def _fetch_response(self, ctx, plan, read_committed: bool, session: FetchContext):
        """The framed answer: a row per answered partition, encoded by hand
        (fetch_response.py) for v7 on, through kio entities before."""
        throttle = self._throttle(ctx, "fetch", self._fetch_bytes(plan))
        if throttle:
            return self._throttled_response(ctx, plan, session, throttle)
        topics: list[tuple[Any, list[PartitionRow]]] = []
        try:
            for topic, targets in plan:
                rows: list[PartitionRow] = []
                for part, t in zip(topic.partitions, targets, strict=True):
                    if t.error or t.log is None:
                        if session.include(topic, part, False, t.error, -1, -1, -1):
                            rows.append(PartitionRow(t.index, t.error or E.none, -1, -1, -1, None, b""))
                        continue
                    isolated = t.isolated
                    if isolated is not None:
                        end, lso, aborted = isolated.high_watermark, isolated.last_stable_offset, isolated.aborted
                    else:  # nothing read: at the log end
                        lso = t.log.last_stable_offset
                        end, aborted = t.log.log_end_offset, None
                    log_start = self.partitions.log_start_offset(t.log)
                    if not session.include(topic, part, t.result is not None, E.none, end, lso, log_start):
                        release_reads([t])
                        continue
                    records = reply_records(t.result) if t.result is not None else b""
                    t.result = None  # released, or the row owns it now
                    rows.append(PartitionRow(t.index, E.none, end, lso, log_start,
                                             tuple(aborted or ()) if read_committed else None, records))
                if rows or not session.incremental:
                    topics.append((topic, rows))
            error, session_id = session.finish(self.fetch_sessions.now_ms())
            if error:
                _release_rows(topics)
                return [codec.encode_response(ctx.correlation_id, self._fetch_refused(ctx, error))]
            if fetch_response.supports(ctx.api_version):
                by_id = ctx.api_version >= fetch_response.TOPIC_IDS_FROM
                return fetch_response.encode(
                    ctx.correlation_id, ctx.api_version, throttle, E.none, session_id,
                    [(topic.topic_id if by_id else topic.topic, rows) for topic, rows in topics])
            return self._kio_response(ctx, throttle, session_id, topics)
        except BaseException:
            _release_rows(topics)
            raise

    @staticmethod
    def _kio_response(ctx, throttle: int, session_id: int, topics: list[tuple[Any, list[PartitionRow]]]) -> list:
        """The framed answer through kio's entities (the versions fetch_response.py does not write)."""
        R = ctx.response_class
        TopicR = nested(R, "responses")
        PartR = nested(TopicR, "partitions")
        AbortedR = nested(PartR, "aborted_transactions") if has_field(PartR, "aborted_transactions") else None
        splicer = RecordsSplicer()
        responses = []
        for topic, rows in topics:
            parts = tuple(
                make(PartR, partition_index=row.partition, error_code=row.error, high_watermark=row.high_watermark,
                     last_stable_offset=row.last_stable_offset, log_start_offset=row.log_start_offset,
                     aborted_transactions=None if row.aborted is None else _aborted(AbortedR, row.aborted),
                     preferred_read_replica=-1,
                     records=splicer.marker(row.records) if isinstance(row.records, RecordSlice) else row.records)
                for row in rows)
            responses.append(make(TopicR, topic=getattr(topic, "topic", None),
                                  topic_id=getattr(topic, "topic_id", None), partitions=parts))
        response = make(R, throttle_time=throttle, error_code=E.none, session_id=session_id,
                        responses=tuple(responses))
        if not splicer.slices:
            return [codec.encode_response(ctx.correlation_id, response)]
        return codec.encode_spliced(ctx.correlation_id, response, splicer)


def _release_rows(topics: list[tuple[Any, list[PartitionRow]]]) -> None:
    for _, rows in topics:
        for row in rows:
            if isinstance(row.records, RecordSlice):
                row.records.release()
