"""broker.handlers.Appender: a partition's appends run in the order submitted, one job at
a time, each reply resolved as its append finishes, errors answered per append, and a
long stream handed to the executor in several jobs without losing its order."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from broker.handlers import APPENDS_PER_JOB, Appender, PartitionWaiters
from protocol import ErrorCode, RequestType, parse_response
from storage.errors import CorruptRecordError, KafkaStorageError
from storage.log import AppendResult


class FakeLog:
    """Records what it appends; message sets are b"<n>" (b"bad" raises CorruptRecordError)."""

    topic, partition = "t", 0

    def __init__(self):
        self.appended: list[bytes] = []
        self.threads: set[str] = set()
        self.busy = False  # set while an append runs: two at once would be a bug

    def append(self, data, *, in_place=False):
        assert in_place and not self.busy
        self.busy = True
        try:
            self.threads.add(threading.current_thread().name)
            if bytes(data) == b"bad":
                raise CorruptRecordError("bad bytes")
            offset = len(self.appended)
            self.appended.append(bytes(data))
            return AppendResult(offset, offset, -1, 1, 0)
        finally:
            self.busy = False


class CountingExecutor(ThreadPoolExecutor):
    jobs = 0

    def submit(self, fn, *args, **kwargs):
        self.jobs += 1
        return super().submit(fn, *args, **kwargs)


class FakeHandlers:
    def __init__(self, loop, executor):
        self.loop = loop
        self.executor = executor
        self.waiters = PartitionWaiters()
        self.idle_calls = 0

    def _error_code(self, e, one):
        return e.code

    def _appender_idle(self, appender):
        self.idle_calls += 1


def offsets(replies):
    out = []
    for reply in replies:
        response = parse_response(RequestType.PRODUCE, b"".join(reply)[4:])
        out.append(response.base_offset if response.error == ErrorCode.NONE else response.error)
    return out


def run(coro):
    return asyncio.run(coro)


def test_a_long_stream_keeps_its_order_across_jobs():
    count = 3 * APPENDS_PER_JOB + 5

    async def main():
        loop = asyncio.get_running_loop()
        with CountingExecutor(4) as executor:
            handlers = FakeHandlers(loop, executor)
            one = FakeLog()
            appender = Appender(handlers, one)
            futures = []
            for i in range(count):
                futures.append(loop.create_future())
                appender.submit(b"%d" % i, futures[-1])
            replies = await asyncio.gather(*futures)
            await asyncio.sleep(0)  # let the idle notice arrive
            while not appender.idle():
                await asyncio.sleep(0.001)
            return one, replies, executor.jobs

    one, replies, jobs = run(main())
    assert one.appended == [b"%d" % i for i in range(count)]
    assert offsets(replies) == list(range(count))
    assert jobs >= 4  # a job yields its thread after APPENDS_PER_JOB appends


def test_errors_are_answered_per_append_and_the_rest_goes_on():
    async def main():
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as executor:
            handlers = FakeHandlers(loop, executor)
            one = FakeLog()
            appender = Appender(handlers, one)
            futures = [loop.create_future() for _ in range(3)]
            for data, future in zip([b"a", b"bad", b"c"], futures):
                appender.submit(data, future)
            return one, await asyncio.gather(*futures)

    one, replies = run(main())
    assert one.appended == [b"a", b"c"]
    assert offsets(replies) == [0, CorruptRecordError.code, 1]


def test_a_cancelled_reply_does_not_undo_its_append():
    async def main():
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1) as executor:
            handlers = FakeHandlers(loop, executor)
            one = FakeLog()
            appender = Appender(handlers, one)
            gone, kept = loop.create_future(), loop.create_future()
            appender.submit(b"x", gone)
            gone.cancel()  # the connection died
            appender.submit(b"y", kept)
            return one, await kept

    one, reply = run(main())
    assert one.appended == [b"x", b"y"] and offsets([reply]) == [1]


def test_after_executor_shutdown_appends_are_refused_not_lost_silently():
    async def main():
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(1)
        executor.shutdown()
        appender = Appender(FakeHandlers(loop, executor), FakeLog())
        future = loop.create_future()
        appender.submit(b"late", future)
        return await future

    reply = run(main())
    assert offsets([reply]) == [KafkaStorageError.code]
