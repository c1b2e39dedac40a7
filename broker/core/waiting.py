"""Waiting for data: the partitions' wake-up events and the one long poll of
both protocols' fetches (the role of Kafka's DelayedFetch).

Every successful append sets its partition's event (`PartitionWaiters.notify`;
from the executor thread through call_soon_threadsafe, so a cancelled request
never swallows a wake-up). `LongPoll.poll(attempt, max_wait_ms)` is the loop of
every fetch that may wait: `attempt(may_wait)` reads and answers, or returns a
`Wait` naming the events to wait on (taken before it looked at the log ends) and
the logs whose deletion ends the request (UNKNOWN_TOPIC_OR_PARTITION); the poll
waits for one of them, for the rest of max_wait_ms, or for shutdown, then
attempts again. `begin_shutdown` answers every long poll at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from kafka_format.errors import UnknownTopicOrPartitionError

from .types import TopicPartition

T = TypeVar("T")


class AppendWatcher(Protocol):
    """What `PartitionWaiters.subscribe` tells of every append to a partition (a fetch session)."""

    def appended(self, tp: TopicPartition) -> None: ...


class PartitionWaiters:
    """One asyncio.Event per partition that a long poll is waiting on, and the
    watchers subscribed to partitions for good.

    `notify` sets the event and forgets it (the next waiter gets a fresh one), so
    an event is only ever set once; it also tells every watcher of the partition
    (`AppendWatcher.appended`), which stays subscribed until `unsubscribe`. Loop
    thread only, but `wanted`."""

    def __init__(self) -> None:
        self._events: dict[TopicPartition, asyncio.Event] = {}
        self._watchers: dict[TopicPartition, set[AppendWatcher]] = {}

    def event(self, tp: TopicPartition) -> asyncio.Event:
        event = self._events.get(tp)
        if event is None:
            event = self._events[tp] = asyncio.Event()
        return event

    def subscribe(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        self._watchers.setdefault(tp, set()).add(watcher)

    def unsubscribe(self, tp: TopicPartition, watcher: AppendWatcher) -> None:
        watchers = self._watchers.get(tp)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[tp]

    def notify(self, tp: TopicPartition) -> None:
        # Every append calls this: with nobody waiting anywhere, `tp` is not even hashed.
        if self._events:
            event = self._events.pop(tp, None)
            if event is not None:
                event.set()
        if self._watchers:
            watchers = self._watchers.get(tp)
            if watchers:
                for watcher in watchers:
                    watcher.appended(tp)

    def wanted(self, tp: TopicPartition) -> bool:
        """Whether a long poll or a watcher waits on `tp` (any thread: dict lookups)."""
        return tp in self._events or tp in self._watchers

    def notify_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()
        for tp, watchers in list(self._watchers.items()):
            for watcher in list(watchers):
                watcher.appended(tp)

    def __len__(self) -> int:
        return len(self._events)


async def wait_for_append(events: list[asyncio.Event], timeout: float) -> bool:
    """Wait until one of `events` is set (an append, a deleted topic, shutdown) or
    `timeout` seconds pass; False on timeout."""
    unique = list({id(e): e for e in events}.values())
    if not unique or timeout <= 0:
        return False
    if len(unique) == 1:
        try:
            await asyncio.wait_for(unique[0].wait(), timeout)
        except TimeoutError:
            return False
        return True
    waits = [asyncio.ensure_future(e.wait()) for e in unique]
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return bool(done)


class Wait:
    """An attempt's "nothing to answer yet": the events to wait on, and the logs
    whose replacement (a deleted topic) ends the request."""

    __slots__ = ("events", "logs")

    def __init__(self, events: list[asyncio.Event], logs: Sequence[Any] = ()):
        self.events = events
        self.logs = logs


class LongPoll:
    """The one long poll of every fetch, both protocols (`poll`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, waiters: PartitionWaiters,
                 live: Callable[[str, int], Any]):
        self.loop = loop
        self.waiters = waiters
        self._live = live  # (topic, partition) -> the partition's open log now
        self.shutting_down = False

    def watch(self, tp: TopicPartition) -> asyncio.Event:
        """The event the next append to `tp` sets. Take it before looking at the log
        end: an append that moves the end after that sets this very event."""
        return self.waiters.event(tp)

    async def poll(self, attempt: Callable[[bool], Awaitable[T | Wait]], max_wait_ms: int) -> T:
        """Attempt until an answer: `attempt(may_wait)` answers, or (only when
        `may_wait`: max_wait_ms left, no shutdown) returns a Wait; the poll waits
        for one of its events or the rest of max_wait_ms, raises
        UnknownTopicOrPartitionError when woken for a log of `Wait.logs` that is
        no longer the partition's (its topic was deleted), and attempts again."""
        loop = self.loop
        deadline = loop.time() + max_wait_ms / 1000
        while True:
            remaining = deadline - loop.time()
            outcome = await attempt(max_wait_ms > 0 and remaining > 0 and not self.shutting_down)
            if not isinstance(outcome, Wait):
                return outcome
            if not outcome.events:  # nothing to wait on: the next attempt answers
                deadline = loop.time()
                continue
            if await wait_for_append(outcome.events, deadline - loop.time()):
                for partition_log in outcome.logs:
                    if self._live(partition_log.topic, partition_log.partition) is not partition_log:
                        raise UnknownTopicOrPartitionError(
                            f"{partition_log.topic}-{partition_log.partition} was deleted")

    def begin_shutdown(self) -> None:
        """Answer every long poll now and make new ones answer at once."""
        self.shutting_down = True
        self.waiters.notify_all()
