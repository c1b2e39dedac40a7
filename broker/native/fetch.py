"""FETCH and MULTIFETCH, and the FETCH half of the fast path.

Contract:
- FETCH reads on the loop through the partition service
  (`PartitionService.read_isolated`) and answers the message set as a
  `RecordSlice` the server sends with sendfile; from version 2 on the answer
  carries the high watermark, the last stable offset and the aborted list
  (the same isolated read's) before the message set.
- Long-poll FETCH: at the log end with maxWaitMs > 0 the request waits in the
  core's one long poll (`PartitionService.poll`, broker/core/waiting.py) for an
  append to the partition, for the timeout, or for shutdown; then it answers what
  is there (possibly an empty set); a topic deleted meanwhile answers
  UNKNOWN_TOPIC_OR_PARTITION.
  MULTIFETCH never waits.
- `fetch_now(frame, session)` is the fast path's FETCH (through
  `SessionHandlers.handle_now`): the answer when there is data or nothing to wait for,
  else None with nothing done.
- A cancelled handler (the connection died) never leaks a RecordSlice: results
  that arrive after the cancellation are released.

Decisions where the spec is silent (Kafka's behaviour unless noted):
- FETCH from `__consumer_offsets` is allowed.
- FETCH/MULTIFETCH: negative maxBytes is INVALID_REQUEST (Strata); negative
  maxWaitMs means no wait (Kafka: maxWait <= 0 answers at once). A FETCH answer
  is capped at fetch.max.bytes, a MULTIFETCH answer in total (items are served
  in order from the remaining budget; an item past it gets an empty set).
- FETCH version 2: an isolationLevel other than 0 and 1 is INVALID_REQUEST (Kafka
  knows no other). A FETCH error's body is its message alone, as every error's.
  A read_committed FETCH at or past the last stable offset (below the log end)
  has nothing to read: it long-polls as one at the log end does, until a marker
  moves the LSO, as Kafka's delayed fetch waits for data up to its isolation's bound.
"""

from __future__ import annotations

from broker.net.request_handlers import Reply
from kafka_format.errors import InvalidRequestError, StrataError
from protocol import (
    ErrorCode,
    FetchRequest,
    IsolationLevel,
    MultiFetchRequest,
    ProtocolError,
    fetch_response_header,
    fetch_v2_response_header,
    multifetch_response_parts,
    parse_request,
)

from ..core import IsolatedRead, PartitionLog, RecordSlice, Wait, release_all, reply_part
from ..core.limits import fetch_cap
from ..security.authorizer import Op, Resource
from .base import NativeApiBase
from .session_state import NativeSession

HEADER_SIZE = 6  # size:int32 | error:int16, in front of every MessageSetSend
ISOLATION_LEVELS = frozenset(int(level) for level in IsolationLevel)
FETCH_FRAMING = 2  # what a FETCH or MULTIFETCH answer's int32 size counts beside its parts
FETCH_V2_OFFSETS_BYTES = 28  # a version-2 FETCH answer's highWatermark, lastStableOffset, logStartOffset, abortedCount


def check_fetch(req: FetchRequest) -> None:
    """A FETCH's arguments the codec cannot judge. Raises InvalidRequestError."""
    if req.max_bytes < 0:
        raise InvalidRequestError(f"maxBytes {req.max_bytes} is negative")
    if req.isolation_level not in ISOLATION_LEVELS:
        raise InvalidRequestError(f"isolationLevel {req.isolation_level} is neither 0 (read_uncommitted) "
                                  "nor 1 (read_committed)")


class FetchApi(NativeApiBase):
    """FETCH, MULTIFETCH and the FETCH fast path."""

    async def fetch(self, req: FetchRequest, session: NativeSession) -> Reply:
        check_fetch(req)
        partitions = self.partitions
        tp = (req.topic, req.partition)
        partition_log = await partitions.partition_log(req.topic, req.partition)

        async def attempt(may_wait: bool) -> Reply | Wait:
            # Take the event before looking at the log end: an append that moves the
            # end after this point sets this very event.
            event = partitions.watch(tp) if may_wait else None
            if event is not None and self._nothing_to_read(partition_log, req, session):
                return Wait([event], (partition_log,))
            if partitions.reads_remotely(partition_log, req.offset):
                return await self._remote_fetch_answer(partition_log, req, session)
            return self._fetch_answer(partition_log, req, session)

        return await partitions.poll(attempt, req.max_wait_ms)

    @staticmethod
    def _nothing_to_read(partition_log: PartitionLog, req: FetchRequest, session: NativeSession) -> bool:
        """Whether a FETCH has nothing to read now: its offset is the log end, or under
        read_committed (version 2) at or past the last stable offset (up to the log end;
        a marker that moves the LSO wakes the long poll, as an append does)."""
        if req.offset == partition_log.log_end_offset:
            return True
        return (session.version >= 2 and req.isolation_level == IsolationLevel.READ_COMMITTED
                and partition_log.last_stable_offset <= req.offset < partition_log.log_end_offset)

    def _fetch_max_bytes(self, req: FetchRequest, session: NativeSession) -> int:
        v2 = session.version >= 2
        return self.partitions.fetch_budget(session.context, session.client_id, fetch_cap(
            req.max_bytes, self.config.fetch_max_bytes, FETCH_FRAMING + (FETCH_V2_OFFSETS_BYTES if v2 else 0)))

    async def _remote_fetch_answer(self, partition_log: PartitionLog, req: FetchRequest,
                                   session: NativeSession) -> Reply:
        """A FETCH below the local log start of a tiered partition: the records from
        the remote store (the partition service's `read_remote`, in the executor),
        answered as `_fetch_answer` answers a local read."""
        level = req.isolation_level if session.version >= 2 else IsolationLevel.READ_UNCOMMITTED
        try:
            isolated = await self.partitions.read_remote(partition_log, req.offset,
                                                         self._fetch_max_bytes(req, session), level,
                                                         min_one_message=False)
        except StrataError as e:
            return session.error(*self.partitions.error_answer(e, partition_log))
        return self._answer(partition_log, isolated, session)

    def _fetch_answer(self, partition_log: PartitionLog, req: FetchRequest, session: NativeSession) -> Reply:
        """A FETCH's answer from what the log holds now (no waiting): the message set,
        after the offsets and the aborted list from version 2 on."""
        v2 = session.version >= 2
        max_bytes = self._fetch_max_bytes(req, session)
        try:
            isolated = self.partitions.read_isolated(partition_log, req.offset, max_bytes,
                                                     req.isolation_level if v2 else IsolationLevel.READ_UNCOMMITTED)
        except StrataError as e:
            return session.error(*self.partitions.error_answer(e, partition_log))
        return self._answer(partition_log, isolated, session)

    def _answer(self, partition_log: PartitionLog, isolated: IsolatedRead, session: NativeSession) -> Reply:
        v2 = session.version >= 2
        found = isolated.records
        length = found.length
        if self._fetch_throttled(session, length):
            length = 0  # over the consumer quota: answered empty (KIP-219)
        if not length:
            found.release()
        if v2:
            header = fetch_v2_response_header(isolated.high_watermark, isolated.last_stable_offset,
                                              self.partitions.log_start_offset(partition_log),
                                              isolated.aborted or (), length)
        else:
            header = fetch_response_header(ErrorCode.NONE, length)
        return [header, reply_part(found)] if length else [header]

    def _fetch_throttled(self, session: NativeSession, nbytes: int) -> bool:
        """Client quotas (the partition service's one policy): charge a FETCH's or
        MULTIFETCH's record bytes and handler time; True when over a quota, and
        then the answer holds no records (Kafka's throttled Fetch, KIP-219) and
        the connection is muted after it."""
        quotas = self.partitions.quotas
        if quotas is None or not quotas.active:
            return False
        session.charged = True
        clock = session.clock
        return self.partitions.throttle(session.context, "fetch", session.client_id, nbytes,
                                        clock.elapsed() if clock is not None else 0.0) > 0

    def fetch_now(self, frame, session: NativeSession) -> Reply | None:
        """handle_now for a FETCH: the answer when nothing needs waiting for (data
        there, no long poll to start, the partition's log open); else None."""
        try:
            req = parse_request(frame, session.version)
        except ProtocolError:
            return None  # `handle` answers it
        if not isinstance(req, FetchRequest) or req.max_bytes < 0 or req.isolation_level not in ISOLATION_LEVELS:
            return None
        if self.authorizer.enabled and not self._may(session.context, Op.READ, Resource.TOPIC, req.topic):
            return None  # `handle` answers the refusal
        try:
            partition_log = self.partitions.open_log(req.topic, req.partition)
        except StrataError as e:
            return session.error(*self.partitions.error_answer(e))
        if partition_log is None or (self._nothing_to_read(partition_log, req, session) and req.max_wait_ms > 0
                                     and not self.partitions.shutting_down):
            return None  # an internal log to create, or a long poll: the task waits
        if self.partitions.reads_remotely(partition_log, req.offset):
            return None  # a read of the remote store: the task awaits it
        return self._fetch_answer(partition_log, req, session)

    async def multifetch(self, req: MultiFetchRequest, session: NativeSession,
                         denied: frozenset[int] = frozenset()) -> Reply:
        partitions = self.partitions
        targets: list[PartitionLog | int] = []
        for index, item in enumerate(req.items):
            if index in denied:
                targets.append(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            if item.max_bytes < 0:
                targets.append(ErrorCode.INVALID_REQUEST)
                continue
            try:
                targets.append(await partitions.partition_log(item.topic, item.partition))
            except StrataError as e:
                targets.append(e.code)
        # The whole answer must fit an int32 size (and fetch.max.bytes).
        budget = partitions.fetch_budget(session.context, session.client_id,
                                         fetch_cap(self.config.fetch_max_bytes, self.config.fetch_max_bytes,
                                                   FETCH_FRAMING + HEADER_SIZE * len(req.items)))
        results: list[tuple[int, RecordSlice | None]] = []
        try:
            for item, target in zip(req.items, targets, strict=True):
                if isinstance(target, int):
                    results.append((target, None))
                    continue
                try:
                    if partitions.reads_remotely(target, item.offset):
                        found = (await partitions.read_remote(target, item.offset, min(item.max_bytes, budget),
                                                              IsolationLevel.READ_UNCOMMITTED,
                                                              min_one_message=False)).records
                    else:
                        found = partitions.read(target, item.offset, min(item.max_bytes, budget))
                except Exception as e:
                    results.append((partitions.error_code(e, target), None))
                    continue
                budget -= found.length
                results.append((ErrorCode.NONE, found))
        except BaseException:
            release_all([s for _, s in results if s is not None])
            raise
        if self._fetch_throttled(session, sum(s.length for _, s in results if s is not None)):
            release_all([s for _, s in results if s is not None])  # over the consumer quota: no records
            results = [(error, None) for error, _ in results]
        top, headers = multifetch_response_parts([(error, s.length if s else 0) for error, s in results])
        parts: Reply = [top]
        for header, (_, answer) in zip(headers, results, strict=True):
            parts.append(header)
            if answer is not None:
                if answer.length:
                    parts.append(reply_part(answer))
                else:
                    answer.release()
        return parts
