"""Fetch sessions (KIP-227): incremental fetches on the Kafka listener.

Kafka's FetchSessionCache semantics, loop thread only:

- A full fetch (epoch 0) closes the session it names, if any, and asks for a new
  one: after the read, `finish` creates it from the response (the cached high
  watermark, last stable offset and log start offset of each partition) when
  `max.incremental.fetch.session.cache.slots` allows. A full cache evicts, as
  Kafka's `tryEvict`: the least recently used session idle longer than
  `min.incremental.fetch.session.eviction.ms`; else the least valuable evictable
  session (by privileged, then size, then id) when it is worth less than the new
  one. A session is evictable by anyone once older than the eviction time; a
  non-privileged one is always evictable by a privileged (follower) one. No slot:
  session id 0, the fetch is answered whole.
- Epoch -1 closes the named session; the fetch is answered without one.
- An incremental fetch (id, epoch n >= 1) needs the session (else
  FETCH_SESSION_ID_NOT_FOUND), its current epoch (else INVALID_FETCH_SESSION_EPOCH)
  and the same kind of topic keys (names before v13, ids from v13; else
  FETCH_SESSION_TOPIC_ID_ERROR). Its partitions add to or update the session,
  `forgotten_topics_data` removes some; a session left empty is closed and the
  fetch is answered without one. The partitions of the session that may have
  changed are read: those never read, with an error last time, named by the
  request, or appended to since their last read began. The session keeps them
  in a set (`dirty`) fed by the partition service: the first read of a
  partition subscribes the session to its appends for good (until the session
  leaves the cache or forgets it), and each append marks it and sets the
  session's `wake` event, the one event its long poll waits on. A partition
  read at its log end whose offsets the session already told counts as answered
  at once (`settle_unchanged`), so a long poll and a request the fast path
  declined read again only what changed; a partition the client moves to the
  high watermark it was told, with no append since, is not read at all
  (`caught_up`); a partition answered without records while some are left (a
  spent budget) stays to read. So an
  incremental fetch costs what changed, not the session's size. The answer holds only those with records, an
  error, or a changed high watermark, last stable offset or log start offset (a
  log start offset that moves without an append is answered with the
  partition's next read), and those move to the end of the session so that a
  bounded response serves every partition in turn.
- The epoch advances (1, 2, ..., 2^31-1, then 1) when the answer is built
  (`finish`), not when the request is checked: a request the fast path declines
  and the connection task handles again is checked twice and counts once.
  Applying a request's partitions to the session is idempotent for that reason.
- Sessions belong to no connection: any connection may continue one, as in Kafka.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode as E

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
MIN_SESSION_VERSION = 7  # Fetch v7 added sessions

Key = tuple[Any, int]  # (topic name before v13 / topic id from v13, partition)


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


class CachedPartition:
    """One partition of a session: what the client asked last, and what it was told.

    Its attribute names are those of a Fetch request's partition, so the handler
    reads it as one."""

    __slots__ = ("partition", "fetch_offset", "partition_max_bytes", "high_watermark", "last_stable_offset",
                 "log_start_offset", "appends", "seen", "pending", "read_offset", "order", "tp")

    def __init__(self, partition: int, fetch_offset: int, partition_max_bytes: int):
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.partition_max_bytes = partition_max_bytes
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.appends = 0  # appends told by the partition service since the session watches it
        self.seen = -1  # `appends` when its last answered read began; -1: read it (never read well)
        self.pending: int | None = None  # `appends` when the read in progress began; None: it cannot read
        self.read_offset = -1  # the fetch offset of the last answered read
        self.order = 0  # its place in the session's fetch order (FetchSession.rotate)
        self.tp: Any = None  # (topic name, partition) once the session watches its appends

    def may_have_changed(self) -> bool:
        """Whether to read the partition again: never read, failed, appended to since, or moved by the client."""
        return self.seen < 0 or self.appends != self.seen or self.read_offset != self.fetch_offset

    def caught_up(self) -> bool:
        """Whether the client's fetch offset is the high watermark it was told, with
        no append since that read and none in progress: nothing to read there."""
        return (self.pending is None and self.seen >= 0 and self.appends == self.seen
                and self.fetch_offset == self.high_watermark)

    def watching(self, readable: bool) -> None:
        """A read of the partition begins (`readable`: one that can see its appends);
        it counts once answered (`answered`): a read that is not (a fast path that
        declines, a long poll that reads again) leaves the partition to read again."""
        self.pending = self.appends if readable else None

    def answered(self) -> None:
        self.seen = -1 if self.pending is None else self.pending
        self.pending = None
        self.read_offset = self.fetch_offset

    def must_respond(self, has_records: bool, error: int, high_watermark: int, last_stable_offset: int,
                     log_start_offset: int) -> bool:
        """Whether an incremental answer includes this partition (Kafka's
        maybeUpdateResponseData); remembers what it is told. An error resets the
        high watermark so that the partition is answered again once it is gone."""
        changed = has_records
        if error:
            self.high_watermark = -1
            self.seen = -1  # read again next time
            return True
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            changed = True
        if last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = last_stable_offset
            changed = True
        if log_start_offset != self.log_start_offset:
            self.log_start_offset = log_start_offset
            changed = True
        return changed


class SessionTopic:
    """A run of one topic's session partitions, read by the handler as a Fetch request's topic."""

    __slots__ = ("topic", "topic_id", "partitions")

    def __init__(self, topic: str | None, topic_id: Any, partitions: list[CachedPartition]):
        self.topic = topic
        self.topic_id = topic_id
        self.partitions = partitions


class AppendSubscriptions(Protocol):
    """Where a session subscribes to its partitions' appends (the PartitionService)."""

    def subscribe_appends(self, tp: Any, watcher: Any) -> None: ...

    def unsubscribe_appends(self, tp: Any, watcher: Any) -> None: ...


class FetchSession:
    """A session's partitions in fetch order, and the set of those that may have
    changed (`dirty`): fed by the partition service's append notifications
    (`appended`, once `watch` subscribed the partition), by the requests that name
    partitions, and by reads that failed; an incremental fetch reads only those."""

    __slots__ = ("id", "privileged", "uses_topic_ids", "partitions", "epoch", "creation_ms", "last_used_ms",
                 "wake", "dirty", "watched", "closed", "_subscriptions", "_order")

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool,
                 partitions: dict[Key, CachedPartition], now_ms: int,
                 subscriptions: AppendSubscriptions | None = None):
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions  # in fetch order
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.wake = asyncio.Event()  # set by an append to any watched partition
        self.dirty: set[Key] = set(partitions)  # every partition that may have changed (and some that did not)
        self.watched: dict[Any, Key] = {}  # (topic name, partition) -> key, of the subscribed partitions
        self.closed = False  # out of the cache: a long poll still holding it subscribes nothing more
        self._subscriptions = subscriptions
        self._order = 0
        for cached in partitions.values():
            self._order += 1
            cached.order = self._order

    def update(self, topics, forgotten) -> None:
        """Add or update the request's partitions, remove the forgotten ones (idempotent)."""
        by_id = self.uses_topic_ids
        partitions, dirty = self.partitions, self.dirty
        for topic in topics:
            name = topic.topic_id if by_id else topic.topic
            for part in topic.partitions:
                key = (name, part.partition)
                cached = partitions.get(key)
                if cached is None:
                    cached = partitions[key] = CachedPartition(part.partition, part.fetch_offset,
                                                               part.partition_max_bytes)
                    self._order += 1
                    cached.order = self._order
                else:
                    cached.fetch_offset = part.fetch_offset
                    cached.partition_max_bytes = part.partition_max_bytes
                    if cached.caught_up():
                        cached.read_offset = part.fetch_offset  # nothing to read there: as if read
                        continue
                dirty.add(key)
        for topic in forgotten:
            name = topic.topic_id if by_id else topic.topic
            for index in topic.partitions:
                key = (name, index)
                cached = partitions.pop(key, None)
                dirty.discard(key)
                if cached is not None and cached.tp is not None:
                    self._unwatch(cached.tp, key)

    def watch(self, cached: CachedPartition, key: Key, tp: Any) -> None:
        """A read of `cached` (session key `key`, log `tp`) begins; its appends are
        told to `appended` from now on."""
        if cached.tp is None and not self.closed:
            cached.tp = tp
            self.watched[tp] = key
            if self._subscriptions is not None:
                self._subscriptions.subscribe_appends(tp, self)
        cached.watching(True)

    def appended(self, tp: Any) -> None:
        """The partition service's notification of an append to `tp` (loop thread)."""
        key = self.watched.get(tp)
        if key is None:
            return
        cached = self.partitions.get(key)
        if cached is not None:
            cached.appends += 1
            self.dirty.add(key)
        self.wake.set()

    def settled(self, key: Key, cached: CachedPartition) -> None:
        """After an answered read: out of `dirty` unless it still may have changed."""
        if not cached.may_have_changed():
            self.dirty.discard(key)

    def topics(self) -> list[SessionTopic]:
        """The session's partitions that may have changed since they were last
        read, as runs of one topic each, in fetch order; clears `wake` first, so
        an append after this look sets it."""
        self.wake.clear()
        partitions, dirty = self.partitions, self.dirty
        chosen: list[tuple[int, Key, CachedPartition]] = []
        for key in list(dirty):
            cached = partitions.get(key)
            if cached is None or not cached.may_have_changed():
                dirty.discard(key)
                continue
            chosen.append((cached.order, key, cached))
        chosen.sort(key=_first)
        runs: list[SessionTopic] = []
        current: SessionTopic | None = None
        current_name: Any = None
        for _, (name, _), cached in chosen:
            if current is None or name != current_name:
                current_name = name
                current = (SessionTopic(None, name, []) if self.uses_topic_ids
                           else SessionTopic(name, None, []))
                runs.append(current)
            current.partitions.append(cached)
        return runs

    def rotate(self, answered: list[Key]) -> None:
        """Move the answered partitions to the end of the fetch order."""
        partitions = self.partitions
        for key in answered:
            cached = partitions.pop(key, None)
            if cached is not None:
                partitions[key] = cached
                self._order += 1
                cached.order = self._order

    def close(self) -> None:
        """Stop watching the partitions' appends (the session leaves the cache)."""
        self.closed = True
        for tp, key in list(self.watched.items()):
            self._unwatch(tp, key)

    def _unwatch(self, tp: Any, key: Key) -> None:
        if self.watched.get(tp) == key:
            del self.watched[tp]
            if self._subscriptions is not None:
                self._subscriptions.unsubscribe_appends(tp, self)

    def evictable_rank(self) -> tuple[bool, int, int]:
        return self.privileged, len(self.partitions), self.id


def _first(item: tuple) -> Any:
    return item[0]


class FetchSessionCache:
    """The sessions of the broker, at most `max_entries`."""

    def __init__(self, max_entries: int, eviction_ms: int, rng: random.Random | None = None,
                 subscriptions: AppendSubscriptions | None = None):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}  # least recently used first
        self._rng = rng or random.Random()
        self._subscriptions = subscriptions

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self.sessions.pop(session.id, None)
        self.sessions[session.id] = session

    def maybe_create(self, now_ms: int, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[Key, CachedPartition]) -> FetchSession | None:
        """A new session, evicting one if the cache is full and Kafka would; None if there is no slot."""
        if self.max_entries <= 0:
            return None
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return None
        session_id = self._new_id()
        session = FetchSession(session_id, privileged, uses_topic_ids, partitions, now_ms, self._subscriptions)
        self.sessions[session_id] = session
        return session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        oldest = next(iter(self.sessions.values()), None)
        if oldest is None:
            return False
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self.remove(oldest.id)
            return True
        candidates = [s for s in self.sessions.values() if self._evictable(s, privileged, now_ms)]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.evictable_rank)
        if (privileged, size, INVALID_SESSION_ID) < least.evictable_rank():
            return False
        self.remove(least.id)
        return True

    def _evictable(self, session: FetchSession, privileged: bool, now_ms: int) -> bool:
        old = now_ms - session.creation_ms > self.eviction_ms
        return old or (privileged and not session.privileged)

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, INT32_MAX)
            if session_id not in self.sessions:
                return session_id


class FetchContext:
    """One Fetch request's view of the sessions: what to read, what to answer,
    and (`finish`) the session id of the answer."""

    __slots__ = ("cache", "error", "session", "create", "privileged", "uses_topic_ids", "expected_epoch",
                 "_request_topics", "_new", "_answered")

    def __init__(self, cache: FetchSessionCache, request_topics, *, error: int = 0,
                 session: FetchSession | None = None, create: bool = False, privileged: bool = False,
                 uses_topic_ids: bool = False):
        self.cache = cache
        self.error = error
        self.session = session  # an incremental fetch's session
        self.create = create  # a full fetch asking for a session
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.expected_epoch = session.epoch if session is not None else 0
        self._request_topics = request_topics
        self._new: dict[Key, CachedPartition] = {}
        self._answered: list[Key] = []

    @property
    def incremental(self) -> bool:
        return self.session is not None

    def topics(self) -> list:
        """The topics to read: the request's, or the whole session's for an incremental fetch."""
        if self.session is not None:
            return self.session.topics()
        return self._request_topics

    def include(self, topic, part, has_records: bool, error: int, high_watermark: int,
                last_stable_offset: int, log_start_offset: int) -> bool:
        """Whether the answer includes this partition of `topics()` (all but an
        incremental fetch's unchanged ones); records what the session caches."""
        name = topic.topic_id if self.uses_topic_ids else topic.topic
        if self.session is not None:
            part.answered()
            respond = part.must_respond(has_records, error, high_watermark, last_stable_offset, log_start_offset)
            if not has_records and part.fetch_offset < high_watermark:
                part.seen = -1  # records left unread (a spent budget): read it again
            self.session.settled((name, part.partition), part)
            if respond:
                self._answered.append((name, part.partition))
            return respond
        if self.create:
            cached = CachedPartition(part.partition, part.fetch_offset, part.partition_max_bytes)
            cached.must_respond(has_records, error, high_watermark, last_stable_offset, log_start_offset)
            self._new[(name, part.partition)] = cached
        return True

    def settle_unchanged(self, topic, part: CachedPartition, high_watermark: int, last_stable_offset: int,
                         log_start_offset: int) -> bool:
        """An incremental fetch's partition read at its log end (nothing to read):
        when its offsets are those the session last told, it counts as answered now
        (out of `dirty`, not read again until an append or the client moves it)
        and True: the answer leaves it out. So a long poll, and the connection task
        that takes over a request the fast path declined, read only what changed."""
        if part.pending is None or (part.high_watermark, part.last_stable_offset, part.log_start_offset) != (
                high_watermark, last_stable_offset, log_start_offset):
            return False
        part.answered()
        assert self.session is not None
        self.session.settled((topic.topic_id if self.uses_topic_ids else topic.topic, part.partition), part)
        return True

    def finish(self, now_ms: int) -> tuple[int, int]:
        """(error, session id) of the answer: a new session for a full fetch that
        asked for one; the next epoch of an incremental fetch's session."""
        session = self.session
        if session is not None:
            if self.cache.get(session.id) is not session or session.epoch != self.expected_epoch:
                return E.invalid_fetch_session_epoch, INVALID_SESSION_ID  # a concurrent fetch got there first
            session.epoch = next_epoch(session.epoch)
            session.rotate(self._answered)
            self.cache.touch(session, now_ms)
            return 0, session.id
        if self.create:
            created = self.cache.maybe_create(now_ms, self.privileged, self.uses_topic_ids, self._new)
            return 0, created.id if created is not None else INVALID_SESSION_ID
        return 0, INVALID_SESSION_ID


    def throttled(self, now_ms: int) -> tuple[int, int]:
        """(error, session id) of an answer the client's quota empties (Kafka's
        getThrottledResponse): an incremental fetch's session moves to its next
        epoch with nothing marked as answered; a full fetch creates no session."""
        session = self.session
        if session is None:
            return 0, INVALID_SESSION_ID
        if self.cache.get(session.id) is not session or session.epoch != self.expected_epoch:
            return E.invalid_fetch_session_epoch, session.id
        session.epoch = next_epoch(session.epoch)
        self.cache.touch(session, now_ms)
        return 0, session.id


class FetchSessions:
    """The broker's fetch session cache and the rules that pick a request's context."""

    def __init__(self, max_entries: int, eviction_ms: int, clock: Callable[[], float] = time.monotonic,
                 subscriptions: AppendSubscriptions | None = None):
        self.cache = FetchSessionCache(max_entries, eviction_ms, subscriptions=subscriptions)
        self._clock = clock

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def context(self, req, api_version: int, privileged: bool = False) -> FetchContext:
        """The context of a Fetch request (Kafka's FetchManager.newContext)."""
        cache = self.cache
        topics = req.topics
        if api_version < MIN_SESSION_VERSION:
            return FetchContext(cache, topics)
        session_id, epoch = req.session_id, req.session_epoch
        uses_topic_ids = api_version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id != INVALID_SESSION_ID:
                cache.remove(session_id)
            return FetchContext(cache, topics, create=epoch == INITIAL_EPOCH, privileged=privileged,
                                uses_topic_ids=uses_topic_ids)
        session = cache.get(session_id)
        if session is None:
            return FetchContext(cache, (), error=E.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(cache, (), error=E.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(cache, (), error=E.fetch_session_topic_id_error)
        session.update(topics, req.forgotten_topics_data)
        if not session.partitions:
            cache.remove(session_id)
            return FetchContext(cache, topics, uses_topic_ids=uses_topic_ids)
        return FetchContext(cache, topics, session=session, uses_topic_ids=uses_topic_ids)
