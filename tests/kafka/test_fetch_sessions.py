"""The fetch session cache and its incremental semantics (broker/kafka/fetch_sessions.py),
without a broker: requests are plain objects with a Fetch request's attribute names."""

from __future__ import annotations

import uuid
from types import SimpleNamespace as NS

from kio.schema.errors import ErrorCode as E

from broker.kafka.fetch_sessions import INT32_MAX, CachedPartition, FetchSessionCache, FetchSessions, next_epoch


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(session_id=0, epoch=0, parts=(), forgotten=(), by_id=False):
    """parts: (topic, partition, offset); forgotten: (topic, [partitions])."""
    topics: dict = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append(NS(partition=partition, fetch_offset=offset, partition_max_bytes=1000))
    key = "topic_id" if by_id else "topic"
    other = "topic" if by_id else "topic_id"
    return NS(session_id=session_id, session_epoch=epoch,
              topics=[NS(**{key: t, other: None, "partitions": ps}) for t, ps in topics.items()],
              forgotten_topics_data=[NS(**{key: t, other: None, "partitions": ps}) for t, ps in forgotten])


def answer(context, state=None, now_ms=0):
    """Run `context` as the handler does: state maps (topic, partition) to
    (has_records, error, high watermark), by default (False, 0, 10); returns
    (error, session id, answered keys)."""
    state = state or {}
    answered = []
    for topic in context.topics():
        name = topic.topic_id if context.uses_topic_ids else topic.topic
        for part in topic.partitions:
            records, error, hw = state.get((name, part.partition), (False, 0, 10))
            if context.include(topic, part, records, error, hw, hw, 0):
                answered.append((name, part.partition))
    error, session_id = context.finish(now_ms)
    return error, session_id, answered


def opened(sessions, parts, by_id=False, version=12):
    context = sessions.context(request(parts=parts, by_id=by_id), version)
    error, session_id, answered = answer(context, now_ms=sessions.now_ms())
    assert error == 0 and session_id != 0 and len(answered) == len(parts)
    return session_id


def test_next_epoch_wraps_to_one():
    assert next_epoch(0) == 1 and next_epoch(5) == 6 and next_epoch(INT32_MAX) == 1 and next_epoch(-1) == -1


def test_full_fetch_creates_a_session_and_incremental_answers_only_changes():
    sessions = FetchSessions(10, 120_000)
    sid = opened(sessions, [("a", 0, 0), ("a", 1, 0), ("b", 0, 0)])
    # nothing changed: an empty answer, same session
    assert answer(sessions.context(request(sid, 1), 12)) == (0, sid, [])
    # new records on one partition, a high watermark change on another
    state = {("a", 1): (True, 0, 10), ("b", 0): (False, 0, 11)}
    assert answer(sessions.context(request(sid, 2), 12), state) == (0, sid, [("a", 1), ("b", 0)])
    # an error is answered every time
    state = {("a", 0): (False, E.unknown_topic_or_partition, -1), ("b", 0): (False, 0, 11)}
    assert answer(sessions.context(request(sid, 3), 12), state)[2] == [("a", 0)]
    assert answer(sessions.context(request(sid, 4), 12), state)[2] == [("a", 0)]
    # ...and once it is gone, the partition is answered again (its high watermark was reset)
    state = {("b", 0): (False, 0, 11)}
    assert answer(sessions.context(request(sid, 5), 12), state)[2] == [("a", 0)]
    assert answer(sessions.context(request(sid, 6), 12), state)[2] == []


def test_incremental_adds_updates_and_forgets_partitions():
    sessions = FetchSessions(10, 120_000)
    sid = opened(sessions, [("a", 0, 0), ("a", 1, 0)])
    context = sessions.context(request(sid, 1, parts=[("a", 1, 7), ("c", 0, 3)], forgotten=[("a", [0])]), 12)
    error, _, answered = answer(context)
    assert error == 0 and answered == [("c", 0)]  # the new partition has a high watermark to tell
    session = sessions.cache.get(sid)
    assert [(k, p.fetch_offset) for k, p in session.partitions.items()] == [(("a", 1), 7), (("c", 0), 3)]


def test_answered_partitions_move_to_the_end():
    sessions = FetchSessions(10, 120_000)
    sid = opened(sessions, [("a", 0, 0), ("a", 1, 0), ("a", 2, 0)])
    answer(sessions.context(request(sid, 1), 12), {("a", 0): (True, 0, 10)})
    assert list(sessions.cache.get(sid).partitions) == [("a", 1), ("a", 2), ("a", 0)]
    runs = sessions.context(request(sid, 2), 12).topics()
    assert [r.topic for r in runs] == ["a"] and [p.partition for p in runs[0].partitions] == [1, 2, 0]


def test_epoch_errors():
    sessions = FetchSessions(10, 120_000)
    sid = opened(sessions, [("a", 0, 0)])
    assert sessions.context(request(sid, 2), 12).error == E.invalid_fetch_session_epoch
    assert sessions.context(request(sid + 1, 1), 12).error == E.fetch_session_id_not_found
    assert sessions.context(request(sid, 1, by_id=True), 13).error == E.fetch_session_topic_id_error
    # the epoch counts once per answer, not per check (a declined fast path checks again)
    sessions.context(request(sid, 1), 12)
    assert answer(sessions.context(request(sid, 1), 12))[:2] == (0, sid)
    assert sessions.cache.get(sid).epoch == 2


def test_concurrent_use_of_one_epoch_fails_the_second():
    sessions = FetchSessions(10, 120_000)
    sid = opened(sessions, [("a", 0, 0)])
    first, second = sessions.context(request(sid, 1), 12), sessions.context(request(sid, 1), 12)
    assert answer(first)[0] == 0
    assert answer(second)[:2] == (E.invalid_fetch_session_epoch, 0)


def test_close_and_full_fetch_with_a_session_id():
    sessions = FetchSessions(10, 120_000)
    sid = opened(sessions, [("a", 0, 0)])
    assert answer(sessions.context(request(sid, -1, parts=[("a", 0, 0)]), 12))[:2] == (0, 0)
    assert sessions.cache.get(sid) is None and len(sessions.cache) == 0
    sid = opened(sessions, [("a", 0, 0)])
    new = answer(sessions.context(request(sid, 0, parts=[("a", 0, 0)]), 12))[1]
    assert new not in (0, sid) and sessions.cache.get(sid) is None and len(sessions.cache) == 1


def test_forgetting_every_partition_closes_the_session():
    sessions = FetchSessions(10, 120_000)
    sid = opened(sessions, [("a", 0, 0)])
    context = sessions.context(request(sid, 1, forgotten=[("a", [0])]), 12)
    assert not context.incremental and answer(context)[:2] == (0, 0)
    assert sessions.cache.get(sid) is None


def test_sessions_below_v7_and_with_no_slots_are_declined():
    assert answer(FetchSessions(10, 120_000).context(request(parts=[("a", 0, 0)]), 6))[1] == 0
    assert answer(FetchSessions(0, 120_000).context(request(parts=[("a", 0, 0)]), 12))[1] == 0


def test_topic_ids_key_the_session_from_v13():
    sessions = FetchSessions(10, 120_000)
    tid = uuid.uuid4()
    sid = opened(sessions, [(tid, 0, 0)], by_id=True, version=13)
    runs = sessions.context(request(sid, 1, by_id=True), 13).topics()
    assert runs[0].topic_id == tid and runs[0].topic is None
    assert sessions.context(request(sid, 1), 12).error == E.fetch_session_topic_id_error


def test_eviction_as_kafka():
    clock = Clock()
    sessions = FetchSessions(2, 120_000, clock=clock)
    small = opened(sessions, [("a", 0, 0)])
    clock.now += 1
    big = opened(sessions, [("a", 0, 0), ("a", 1, 0), ("a", 2, 0)])
    # full, and no session is older than the eviction time: no slot
    assert answer(sessions.context(request(parts=[("b", 0, 0)]), 12), now_ms=sessions.now_ms())[1] == 0
    # past the eviction time, a bigger session evicts the least valuable one (the smaller)
    clock.now += 121
    answer(sessions.context(request(small, 1), 12), now_ms=sessions.now_ms())  # used recently: not stale
    answer(sessions.context(request(big, 1), 12), now_ms=sessions.now_ms())
    cache = sessions.cache
    # both older than the eviction time now; last used more recently than that
    new = opened(sessions, [("b", 0, 0), ("b", 1, 0)])
    assert cache.get(small) is None and cache.get(big) is not None and cache.get(new) is not None
    # a session smaller than every evictable one gets no slot
    assert answer(sessions.context(request(parts=[("c", 0, 0)]), 12), now_ms=sessions.now_ms())[1] == 0


def test_stale_sessions_are_evicted_first():
    clock = Clock()
    sessions = FetchSessions(1, 120_000, clock=clock)
    old = opened(sessions, [("a", 0, 0), ("a", 1, 0)])
    clock.now += 121
    new = opened(sessions, [("b", 0, 0)])
    assert sessions.cache.get(old) is None and sessions.cache.get(new) is not None


def test_privileged_sessions_evict_consumer_sessions():
    cache = FetchSessionCache(1, 120_000)
    def parts(*keys):
        return {key: CachedPartition(key[1], 0, 1000) for key in keys}

    consumer = cache.maybe_create(0, False, False, parts(("a", 0), ("a", 1)))
    assert cache.maybe_create(1, False, False, parts(("b", 0))) is None
    follower = cache.maybe_create(2, True, False, parts(("b", 0)))
    assert follower is not None and cache.get(consumer.id) is None


class Subscriptions:
    """The partition service's side of the sessions' append subscriptions."""

    def __init__(self):
        self.watchers: dict = {}

    def subscribe_appends(self, tp, watcher):
        self.watchers.setdefault(tp, set()).add(watcher)

    def unsubscribe_appends(self, tp, watcher):
        self.watchers[tp].discard(watcher)
        if not self.watchers[tp]:
            del self.watchers[tp]

    def append(self, tp):
        for watcher in list(self.watchers.get(tp, ())):
            watcher.appended(tp)


def read(context):
    """Begin reading every partition of `context` as the handler does (subscribing
    it); the partitions read, as (topic, partition)."""
    keys = []
    for topic in context.topics():
        for part in topic.partitions:
            context.session.watch(part, (topic.topic, part.partition), (topic.topic, part.partition))
            keys.append((topic.topic, part.partition))
    return keys


def test_incremental_fetch_reads_only_partitions_that_may_have_changed():
    subscriptions = Subscriptions()
    sessions = FetchSessions(10, 120_000, subscriptions=subscriptions)
    sid = opened(sessions, [("a", 0, 10), ("a", 1, 10), ("a", 2, 10)])  # at the log end (10)
    context = sessions.context(request(sid, 1), 12)
    assert read(context) == [("a", 0), ("a", 1), ("a", 2)]
    assert len(context.topics()[0].partitions) == 3  # not answered yet: read again
    answer(context)
    assert set(subscriptions.watchers) == {("a", 0), ("a", 1), ("a", 2)}
    assert sessions.context(request(sid, 2), 12).topics() == []
    session = sessions.cache.get(sid)
    subscriptions.append(("a", 1))
    assert session.wake.is_set()
    runs = sessions.context(request(sid, 2, parts=[("a", 2, 5)]), 12).topics()  # 2 moved by the client
    assert [p.partition for r in runs for p in r.partitions] == [1, 2] and not session.wake.is_set()


def test_an_append_during_a_read_leaves_the_partition_to_read_again():
    subscriptions = Subscriptions()
    sessions = FetchSessions(10, 120_000, subscriptions=subscriptions)
    sid = opened(sessions, [("a", 0, 10), ("a", 1, 10)])  # at the log end (10)
    context = sessions.context(request(sid, 1), 12)
    read(context)
    answer(context)
    context = sessions.context(request(sid, 2), 12)
    subscriptions.append(("a", 0))
    assert read(context) == [("a", 0)]
    subscriptions.append(("a", 0))  # after the read began: the answer may miss it
    answer(context)
    assert read(sessions.context(request(sid, 3), 12)) == [("a", 0)]


def test_sessions_leaving_the_cache_or_forgetting_partitions_unsubscribe():
    subscriptions = Subscriptions()
    sessions = FetchSessions(10, 120_000, subscriptions=subscriptions)
    sid = opened(sessions, [("a", 0, 0), ("a", 1, 0)])
    context = sessions.context(request(sid, 1), 12)
    read(context)
    answer(context)
    context = sessions.context(request(sid, 2, forgotten=[("a", [0])]), 12)
    assert set(subscriptions.watchers) == {("a", 1)}
    answer(context)
    session = sessions.cache.get(sid)
    answer(sessions.context(request(sid, -1), 12))  # closed
    assert subscriptions.watchers == {} and session.closed
    session.watch(session.partitions[("a", 1)], ("a", 1), ("a", 1))  # a long poll still reading it
    assert subscriptions.watchers == {}


def test_a_partition_a_spent_budget_left_records_in_is_read_again():
    sessions = FetchSessions(10, 120_000, subscriptions=Subscriptions())
    sid = opened(sessions, [("a", 0, 0), ("a", 1, 0)])
    context = sessions.context(request(sid, 1), 12)
    read(context)
    answer(context, {("a", 0): (True, 0, 10), ("a", 1): (False, 0, 10)})  # 1: nothing fit, records left
    assert read(sessions.context(request(sid, 2), 12)) == [("a", 1)]


def test_partitions_at_their_log_end_with_nothing_new_settle_before_the_answer():
    subscriptions = Subscriptions()
    sessions = FetchSessions(10, 120_000, subscriptions=subscriptions)
    sid = opened(sessions, [("a", 0, 10), ("a", 1, 10)])  # told high watermark 10, log start 0
    context = sessions.context(request(sid, 1), 12)
    read(context)
    (topic,) = context.topics()
    first, second = topic.partitions
    assert context.settle_unchanged(topic, first, 10, 10, 0)
    assert not context.settle_unchanged(topic, second, 11, 11, 0)  # moved since: to answer
    assert read(context) == [("a", 1)]  # a long poll reads only what may have changed
    subscriptions.append(("a", 0))
    assert read(context) == [("a", 0), ("a", 1)]
    assert answer(context, {("a", 0): (True, 0, 11), ("a", 1): (False, 0, 11)})[2] == [("a", 0), ("a", 1)]


def test_a_partition_the_client_moves_to_the_told_high_watermark_is_not_read_again():
    subscriptions = Subscriptions()
    sessions = FetchSessions(10, 120_000, subscriptions=subscriptions)
    sid = opened(sessions, [("a", 0, 0), ("a", 1, 0)])
    context = sessions.context(request(sid, 1), 12)
    read(context)
    answer(context, {("a", 0): (True, 0, 3), ("a", 1): (True, 0, 3)})  # records up to 3 on both
    subscriptions.append(("a", 1))  # 1 grows past what the client was told
    assert read(sessions.context(request(sid, 2, parts=[("a", 0, 3), ("a", 1, 3)]), 12)) == [("a", 1)]
    # a move short of the high watermark it was told is read
    assert read(sessions.context(request(sid, 2, parts=[("a", 0, 2)]), 12)) == [("a", 0), ("a", 1)]
