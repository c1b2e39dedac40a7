"""Consuming: `AsyncConsumer` and the blocking `Consumer`.

Contract:
- Partitions: `assign(topic, partitions)` takes the given partitions;
  `subscribe(topic)` takes all of a topic's partitions, looked up on the next
  poll. Both may be called for several topics; neither does I/O. A subscribed
  topic's partition count is asked again once `metadata_max_age_ms` (Kafka's
  metadata.max.age.ms, default 300000) have passed, and partitions the topic
  grew meanwhile (Kafka's CreatePartitions) are taken too; such a partition
  without a committed offset starts at its beginning, since all it holds was
  written after the subscription began.
- Starting position of a partition, decided on the first poll that needs it:
  a `seek()` wins; else, with a `group`, the group's committed offset; else
  `auto_offset_reset`: "earliest" (log start), "latest" (log end, the
  default, as Kafka's consumer), or "none" (raise NoOffsetForPartition).
- Following offsets: after each fetch the position moves to one past the last
  offset of the last whole entry, skipping records below the position inside
  an entry (compacted or compressed entries may start below it); see fetch.py.
- Large entries: each partition is fetched with `max_bytes`; an answer with
  only a cut-short first entry doubles that partition's fetch size and
  fetches again at once, up to `max_bytes_cap` (then MessageTooLargeForFetch);
  after a whole entry arrives the size goes back to `max_bytes`.
- OFFSET_OUT_OF_RANGE applies `auto_offset_reset` ("none" raises
  OffsetOutOfRange).
- `poll(timeout_ms, max_records)` returns the records that are ready, waiting
  up to `timeout_ms` for some (long polls use FETCH's maxWaitMs, at most
  `max_wait_ms` per request). One assigned partition is long-polled directly;
  several are fetched together with one MULTIFETCH, and when none has data one
  of them (in turn) is long-polled, so data arriving on another partition
  waits at most `max_wait_ms`.
- Positions move only as records are handed out, so `commit()` (default: the
  positions of every partition with one) never commits a record the caller
  has not seen. With `enable_auto_commit` (default: on when a group is given)
  positions are committed every `auto_commit_interval_ms` during polls and on
  `close()`.
- Iterating (`async for` / `for`) yields records forever.
- `isolation_level` (Kafka's isolation.level): "read_uncommitted" (the
  default, as Kafka's) hands out every data record; "read_committed" fetches
  with FETCH version 2 at isolation 1, so the broker stops at the last stable
  offset and names the aborted transactions of the range, whose records are
  dropped (fetch.py, Kafka's rule); control batches are never handed out.
  Under read_committed each partition is fetched with its own FETCH (MULTIFETCH
  has no isolation), pipelined on the one connection, and "latest" means the
  last stable offset, as Kafka's ListOffsets READ_COMMITTED. A broker that
  speaks only version 1 is refused with a clear error.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping

from protocol import CommitOffsetRequest, ErrorCode, FetchItem, FetchRequest, MultiFetchRequest, OffsetsRequest
from protocol.requests import IsolationLevel

from .admin import DEFAULT_METADATA_MAX_AGE_MS, AsyncAdmin
from .errors import NoOffsetForPartition, OffsetOutOfRange, StrataClientError, raise_for
from .fetch import grow_fetch_size, read_fetched
from .loop_thread import LoopThread
from .records import Record
from .session import BrokerSession

__all__ = ["AsyncConsumer", "Consumer", "TopicPartition"]

TopicPartition = tuple[str, int]
RESET_POLICIES = ("earliest", "latest", "none")
ISOLATION_LEVELS = {"read_uncommitted": IsolationLevel.READ_UNCOMMITTED,
                    "read_committed": IsolationLevel.READ_COMMITTED}
DEFAULT_MAX_BYTES = 1024 * 1024  # Kafka's max.partition.fetch.bytes
DEFAULT_MAX_BYTES_CAP = 64 * 1024 * 1024
DEFAULT_MAX_WAIT_MS = 500  # Kafka's fetch.max.wait.ms


class _Chunk:
    """Fetched records of one partition not yet handed out."""

    __slots__ = ("tp", "records", "next_offset")

    def __init__(self, tp: TopicPartition, records: deque[Record], next_offset: int):
        self.tp = tp
        self.records = records
        self.next_offset = next_offset


class AsyncConsumer:
    def __init__(self, bootstrap: str, *, group: str | None = None,
                 auto_offset_reset: str = "latest", enable_auto_commit: bool | None = None,
                 auto_commit_interval_ms: int = 5000, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_bytes_cap: int = DEFAULT_MAX_BYTES_CAP,
                 max_wait_ms: int = DEFAULT_MAX_WAIT_MS,
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
                 isolation_level: str = "read_uncommitted", **session_options):
        if auto_offset_reset not in RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {', '.join(RESET_POLICIES)}")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}")
        if not 0 < max_bytes <= max_bytes_cap:
            raise ValueError("need 0 < max_bytes <= max_bytes_cap")
        if enable_auto_commit and group is None:
            raise ValueError("auto-commit needs a group")
        self.group = group
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = (group is not None if enable_auto_commit is None
                                   else enable_auto_commit)
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.max_bytes = max_bytes
        self.max_bytes_cap = max_bytes_cap
        self.max_wait_ms = max_wait_ms
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.isolation_level = isolation_level
        self.read_committed = isolation_level == "read_committed"
        self._session = BrokerSession(bootstrap, **session_options)
        self._admin = AsyncAdmin(session=self._session)
        self._subscriptions: list[str] = []  # topics whose partitions are still to look up
        self._subscribed: dict[str, tuple[int, float]] = {}  # topic -> (partitions, monotonic time asked)
        self._grown: set[TopicPartition] = set()  # partitions a subscribed topic grew: start at the beginning
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._pending_reset: dict[TopicPartition, str] = {}  # tp -> policy, from seek_to_*
        self._fetch_size: dict[TopicPartition, int] = {}
        self._buffer: deque[_Chunk] = deque()
        self._long_poll_turn = 0
        self._last_commit = time.monotonic()
        self._committed_positions: dict[TopicPartition, int] = {}
        self._closed = False

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- what to consume ---------------------------------------------------------------

    def assign(self, topic: str, partitions: Iterable[int]) -> None:
        for partition in partitions:
            tp = (topic, int(partition))
            if tp not in self._assigned:
                self._assigned.append(tp)

    def subscribe(self, topics: str | Iterable[str]) -> None:
        for topic in [topics] if isinstance(topics, str) else topics:
            if topic not in self._subscriptions:
                self._subscriptions.append(topic)

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers, asked of the broker (unknown topic: raises)."""
        return [p.partition for p in (await self._admin.describe_topic(topic)).partitions]

    async def assignment(self) -> list[TopicPartition]:
        await self._resolve_subscriptions()
        return list(self._assigned)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        tp = (topic, partition)
        self._drop_buffered(tp)
        self._pending_reset.pop(tp, None)
        self._positions[tp] = offset

    def seek_to_beginning(self, topic: str, partition: int) -> None:
        self._seek_by_policy((topic, partition), "earliest")

    def seek_to_end(self, topic: str, partition: int) -> None:
        self._seek_by_policy((topic, partition), "latest")

    def _seek_by_policy(self, tp: TopicPartition, policy: str) -> None:
        self._drop_buffered(tp)
        self._positions.pop(tp, None)
        self._pending_reset[tp] = policy

    async def position(self, topic: str, partition: int) -> int:
        """The offset of the next record the consumer will hand out for this partition."""
        tp = (topic, partition)
        if tp not in self._positions:
            await self._init_position(tp)
        return self._positions[tp]

    async def committed(self, topic: str, partition: int) -> int | None:
        group = self._require_group()
        found = await self._admin.committed(group, topic, partition)
        return None if found is None else found[0]

    # ---- polling ---------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[Record]:
        """Records ready now, or within `timeout_ms` (an empty list when none came)."""
        if self._closed:
            raise StrataClientError("consumer is closed")
        await self._maybe_auto_commit()
        deadline = time.monotonic() + timeout_ms / 1000
        await self._resolve_subscriptions()
        if not self._assigned:
            raise StrataClientError("no partitions assigned: call assign() or subscribe() first")
        while not self._buffer:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            await self._fetch_round(max(0, min(remaining_ms, self.max_wait_ms)))
            if self._buffer or time.monotonic() >= deadline:
                break
        return self._hand_out(max_records)

    async def __aiter__(self):
        while True:
            for record in await self.poll(self.max_wait_ms):
                yield record

    def _hand_out(self, max_records: int | None) -> list[Record]:
        out: list[Record] = []
        while self._buffer and (max_records is None or len(out) < max_records):
            chunk = self._buffer[0]
            while chunk.records and (max_records is None or len(out) < max_records):
                record = chunk.records.popleft()
                out.append(record)
                self._positions[chunk.tp] = record.offset + 1
            if not chunk.records:
                self._buffer.popleft()
                self._positions[chunk.tp] = chunk.next_offset
        return out

    def _drop_buffered(self, tp: TopicPartition) -> None:
        self._buffer = deque(c for c in self._buffer if c.tp != tp)

    async def _fetch_round(self, wait_ms: int) -> None:
        """One round of fetches over the assigned partitions with nothing buffered."""
        await self._init_positions()
        buffered = {chunk.tp for chunk in self._buffer}
        wanted = [tp for tp in self._assigned if tp not in buffered]
        if not wanted:
            return
        if len(wanted) == 1:
            await self._fetch_one(wanted[0], wait_ms)
            return
        if self.read_committed:
            progressed = any(await asyncio.gather(*(self._fetch_one(tp, 0) for tp in wanted)))
        else:
            progressed = await self._multifetch(wanted)
        if not progressed and wait_ms > 0:
            tp = wanted[self._long_poll_turn % len(wanted)]
            self._long_poll_turn += 1
            await self._fetch_one(tp, wait_ms)

    async def _multifetch(self, wanted: list[TopicPartition]) -> bool:
        """One MULTIFETCH over `wanted` (read_uncommitted); True when any progressed."""
        items = tuple(FetchItem(tp[0], tp[1], self._positions[tp], self._size(tp)) for tp in wanted)
        response = await self._session.retrying(
            lambda: self._session.call(MultiFetchRequest(items), "multifetch"))
        if len(response.items) != len(items):
            raise StrataClientError(f"broker answered {len(response.items)} of {len(items)} "
                                    f"fetches", ErrorCode.CORRUPT_MESSAGE)
        progressed = False
        for item, (error, message_set) in zip(items, response.items, strict=True):
            progressed |= await self._take_fetched((item.topic, item.partition), item.offset,
                                                   error, message_set)
        return progressed

    async def _fetch_one(self, tp: TopicPartition, wait_ms: int) -> bool:
        offset = self._positions[tp]
        request = FetchRequest(tp[0], tp[1], offset, self._size(tp), wait_ms,
                               ISOLATION_LEVELS[self.isolation_level])
        # The broker may hold a long poll for wait_ms: allow for it on top of the timeout.
        timeout = self._session.request_timeout_ms + wait_ms
        response = await self._session.retrying(lambda: self._fetch_request(request, timeout))
        aborted = response.aborted if self.read_committed and not response.error else None
        return await self._take_fetched(tp, offset, response.error, response.message_set,
                                        response.message, aborted)

    async def _fetch_request(self, request: FetchRequest, timeout: int):
        """Send a FETCH; under read_committed the connection must speak version 2."""
        if self.read_committed:
            return await self._session.request_v2(request, "isolation_level read_committed", timeout)
        return await self._session.request(request, timeout)

    def _size(self, tp: TopicPartition) -> int:
        return self._fetch_size.get(tp, self.max_bytes)

    async def _take_fetched(self, tp: TopicPartition, offset: int, error: int,
                            message_set, reason: str | None = None,
                            aborted: tuple[tuple[int, int], ...] | None = None) -> bool:
        """Buffer what a fetch brought; True when the partition made progress."""
        if self._positions.get(tp) != offset:
            return False  # a seek happened meanwhile: this answer is stale
        where = f"{tp[0]}-{tp[1]}"
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._reset(tp, self.auto_offset_reset, OffsetOutOfRange(
                f"{where}: offset {offset} is out of range and auto_offset_reset is 'none'"))
            return True
        raise_for(error, f"fetch {where} at offset {offset}", reason)
        fetched = read_fetched(message_set, offset, aborted)
        if fetched.too_small:
            self._fetch_size[tp] = grow_fetch_size(self._size(tp), self.max_bytes_cap,
                                                   f"offset {offset} of {where}")
            return True
        self._fetch_size.pop(tp, None)
        if fetched.records:
            records = deque(Record(tp[0], tp[1], r.offset, r.timestamp, r.key, r.value,
                                   r.headers, r.timestamp_type) for r in fetched.records)
            self._buffer.append(_Chunk(tp, records, fetched.next_offset))
        else:
            self._positions[tp] = fetched.next_offset
        return fetched.next_offset != offset

    # ---- positions ----------------------------------------------------------------

    async def _resolve_subscriptions(self) -> None:
        while self._subscriptions:
            topic = self._subscriptions[0]
            count = await self._admin.partition_count(topic)
            self.assign(topic, range(count))
            self._subscribed[topic] = (count, time.monotonic())
            self._subscriptions.pop(0)
        now = time.monotonic()
        for topic, (known, asked) in list(self._subscribed.items()):
            if now - asked < self.metadata_max_age:
                continue
            try:
                count = await self._admin.partition_count(topic)
            except StrataClientError:
                count = known  # deleted or unreachable: fetches report it; ask again later
            self._subscribed[topic] = (max(known, count), time.monotonic())
            for partition in range(known, count):
                self._grown.add((topic, partition))
            self.assign(topic, range(known, count))

    async def _init_positions(self) -> None:
        missing = [tp for tp in self._assigned if tp not in self._positions]
        if missing:
            await asyncio.gather(*(self._init_position(tp) for tp in missing))

    async def _init_position(self, tp: TopicPartition) -> None:
        policy = self._pending_reset.pop(tp, None)
        if policy is None and self.group is not None:
            found = await self._admin.committed(self.group, tp[0], tp[1])
            if found is not None:
                self._positions[tp] = self._committed_positions[tp] = found[0]
                return
        if policy is None and tp in self._grown:
            policy = "earliest"  # all it holds came after the subscription
        self._grown.discard(tp)
        why = f"group {self.group!r} has no committed offset" if self.group else "no position"
        await self._reset(tp, policy or self.auto_offset_reset, NoOffsetForPartition(
            f"{tp[0]}-{tp[1]}: {why} and auto_offset_reset is 'none'"))

    async def _reset(self, tp: TopicPartition, policy: str,
                     refusal: StrataClientError) -> None:
        """Move to the log start or end per `policy`; "none" raises `refusal`."""
        if policy == "none":
            raise refusal
        time_ = OffsetsRequest.EARLIEST if policy == "earliest" else OffsetsRequest.LATEST
        offsets = await self._admin.offsets(tp[0], tp[1], time_, 1)
        if not offsets:
            raise StrataClientError(f"{tp[0]}-{tp[1]}: the broker gave no {policy} offset")
        position = offsets[0]
        if self.read_committed and time_ == OffsetsRequest.LATEST:
            position = await self._admin.last_stable_offset(tp[0], tp[1], position)
        self._drop_buffered(tp)
        self._positions[tp] = position

    # ---- committing -------------------------------------------------------------------

    def _require_group(self) -> str:
        """The consumer's group; raises when it has none."""
        if self.group is None:
            raise StrataClientError("committed offsets need a consumer group")
        return self.group

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (default: every current position) for the group."""
        group = self._require_group()
        if offsets is None:
            offsets = dict(self._positions)
        requests = [CommitOffsetRequest(group, t, p, o) for (t, p), o in offsets.items()]
        responses = await asyncio.gather(*(self._session.request(r) for r in requests))
        for request, response in zip(requests, responses, strict=True):
            raise_for(response.error, f"commit offset {request.offset} of {request.topic}-"
                                      f"{request.partition} for group {self.group!r}", response.message)
        self._committed_positions.update(offsets)
        self._last_commit = time.monotonic()

    async def _maybe_auto_commit(self, force: bool = False) -> None:
        if not self.enable_auto_commit:
            return
        due = force or time.monotonic() - self._last_commit >= self.auto_commit_interval_ms / 1000
        changed = {tp: o for tp, o in self._positions.items()
                   if self._committed_positions.get(tp) != o}
        if due and changed:
            await self.commit(changed)

    async def close(self) -> None:
        """Commit (with auto-commit on) and close the connection."""
        if self._closed:
            return
        try:
            await self._maybe_auto_commit(force=True)
        finally:
            self._closed = True
            self._session.close()


class Consumer:
    """The blocking face of AsyncConsumer (runs it on the shared client loop thread)."""

    def __init__(self, bootstrap: str, **options):
        self._loop = LoopThread.shared()
        self._consumer = AsyncConsumer(bootstrap, **options)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def group(self) -> str | None:
        return self._consumer.group

    def assign(self, topic: str, partitions: Iterable[int]) -> None:
        self._loop.run(_call(self._consumer.assign, topic, list(partitions)))

    def subscribe(self, topics: str | Iterable[str]) -> None:
        self._loop.run(_call(self._consumer.subscribe, topics))

    def assignment(self) -> list[TopicPartition]:
        return self._loop.run(self._consumer.assignment())

    def partitions_for(self, topic: str) -> list[int]:
        return self._loop.run(self._consumer.partitions_for(topic))

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._loop.run(_call(self._consumer.seek, topic, partition, offset))

    def seek_to_beginning(self, topic: str, partition: int) -> None:
        self._loop.run(_call(self._consumer.seek_to_beginning, topic, partition))

    def seek_to_end(self, topic: str, partition: int) -> None:
        self._loop.run(_call(self._consumer.seek_to_end, topic, partition))

    def position(self, topic: str, partition: int) -> int:
        return self._loop.run(self._consumer.position(topic, partition))

    def committed(self, topic: str, partition: int) -> int | None:
        return self._loop.run(self._consumer.committed(topic, partition))

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[Record]:
        return self._loop.run(self._consumer.poll(timeout_ms, max_records))

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        self._loop.run(self._consumer.commit(offsets))

    def close(self) -> None:
        self._loop.run(self._consumer.close())

    def __iter__(self) -> Iterator[Record]:
        while True:
            yield from self.poll(self._consumer.max_wait_ms)


async def _call(fn, *args):
    """Run a plain method on the loop thread: the consumer's state belongs to that thread."""
    return fn(*args)
