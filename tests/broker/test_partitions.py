"""broker.core.PartitionService: the partition service both protocols share.

Appender: a partition's executor appends run in the order submitted, one job at a
time, each answer resolved as its append finishes, errors answered per append, and a
long stream handed to the executor in several jobs without losing its order.

PartitionService, over a real TopicRegistry and LogManager in a temporary directory:
finding logs and their errors, the one inline-versus-executor append policy (sizes,
flush.messages, an append queued before, the slow-disk back-off), on-loop reads,
waiting for appends, and the mapping of errors to Kafka codes."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker.config.broker_config import BrokerConfig
from broker.core import (
    APPENDS_PER_JOB,
    INLINE_APPEND_MAX_BYTES,
    LARGE_INLINE_APPEND_MAX_BYTES,
    Appender,
    PartitionService,
    PartitionWaiters,
    append_outcome,
)
from broker.core import appends as appends_module
from broker.native import produce_answer
from broker.state.topic_registry import TopicRegistry
from kafka_format import build_batch
from kafka_format.errors import (
    CorruptRecordError,
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from protocol import ErrorCode, RequestType, parse_response
from storage.log import AppendResult
from storage.manager import LogManager


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


class FakeService:
    def __init__(self, loop, executor):
        self.loop = loop
        self.executor = executor
        self.waiters = PartitionWaiters()
        self.metrics = None  # no BrokerMetrics: nothing counted
        self.idle_calls = 0

    def error_code(self, e, partition_log):
        return e.code

    def appender_idle(self, appender):
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
            service = FakeService(loop, executor)
            one = FakeLog()
            appender = Appender(service, one)
            futures = []
            for i in range(count):
                futures.append(loop.create_future())
                appender.submit(b"%d" % i, futures[-1], produce_answer)
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
            service = FakeService(loop, executor)
            one = FakeLog()
            appender = Appender(service, one)
            futures = [loop.create_future() for _ in range(3)]
            for data, future in zip([b"a", b"bad", b"c"], futures, strict=True):
                appender.submit(data, future, produce_answer)
            return one, await asyncio.gather(*futures)

    one, replies = run(main())
    assert one.appended == [b"a", b"c"]
    assert offsets(replies) == [0, CorruptRecordError.code, 1]


def test_a_cancelled_reply_does_not_undo_its_append():
    async def main():
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1) as executor:
            service = FakeService(loop, executor)
            one = FakeLog()
            appender = Appender(service, one)
            gone, kept = loop.create_future(), loop.create_future()
            appender.submit(b"x", gone, produce_answer)
            gone.cancel()  # the connection died
            appender.submit(b"y", kept, produce_answer)
            return one, await kept

    one, reply = run(main())
    assert one.appended == [b"x", b"y"] and offsets([reply]) == [1]


def test_after_executor_shutdown_appends_are_refused_not_lost_silently():
    async def main():
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(1)
        executor.shutdown()
        appender = Appender(FakeService(loop, executor), FakeLog())
        future = loop.create_future()
        appender.submit(b"late", future, produce_answer)
        return await future

    reply = run(main())
    assert offsets([reply]) == [KafkaStorageError.code]


# ---- PartitionService over real storage -------------------------------------------------------------


class Broker:
    """A PartitionService over a registry and a log manager in `data_dir`, on a running loop."""

    def __init__(self, data_dir, loop, executor, *overrides: str):
        self.config = BrokerConfig.load(overrides=list(overrides), data_dir=str(data_dir), environ={})
        self.registry = TopicRegistry(str(data_dir), self.config.log_defaults, num_partitions=1)
        self.registry.load()
        self.manager = LogManager(str(data_dir), config_for=self.registry.log_config)
        self.manager.startup()
        self.registry.reconcile(self.manager)
        self.registry.ensure_internal_topic(1)
        self.service = PartitionService(self.config, self.manager, self.registry, executor, loop)

    def create(self, name: str, partitions: int = 1, configs=()):
        self.registry.create(name, partitions, configs)
        return self.manager.get_log(name, 0)

    def close(self):
        self.manager.shutdown()


def batch(size: int = 100) -> bytearray:
    return bytearray(build_batch([(None, b"x" * size)]))


def with_broker(tmp_path, test, *overrides):
    async def main():
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as executor:
            broker = Broker(tmp_path, loop, executor, *overrides)
            try:
                return await test(broker)
            finally:
                broker.close()
    return run(main())


def test_open_log_answers_each_missing_or_refused_partition_with_its_code(tmp_path):
    async def test(broker):
        service = broker.service
        partition_log = broker.create("t", 2)
        assert service.open_log("t", 0) is partition_log
        for topic, partition in (("t", 2), ("t", -1), ("nope", 0)):
            with pytest.raises(UnknownTopicOrPartitionError):
                service.open_log(topic, partition)
        with pytest.raises(InvalidTopicError):
            service.open_log("__consumer_offsets", 0, produce=True)
        with pytest.raises(InvalidTopicError):
            service.open_log("bad/name", 0)
        # An internal topic's log is created on first use, in the executor.
        assert service.open_log("__consumer_offsets", 0) is None
        created = await service.partition_log("__consumer_offsets", 0)
        assert service.open_log("__consumer_offsets", 0) is created

    with_broker(tmp_path, test)


def test_small_appends_run_inline_and_wake_long_polls(tmp_path):
    async def test(broker):
        service = broker.service
        partition_log = broker.create("t")
        event = service.watch(("t", 0))
        result, code, _ = await service.append(partition_log, batch(), append_outcome)
        assert (code, result.first_offset) == (0, 0) and event.is_set()
        assert (service.append_stats.inline, service.append_stats.executor) == (1, 0)
        assert partition_log.log_end_offset == 1

    with_broker(tmp_path, test)


def test_appends_with_an_fsync_due_or_over_1_mib_go_to_the_executor(tmp_path):
    async def test(broker):
        service = broker.service
        synced = broker.create("synced", configs=[("flush.messages", "1")])
        plain = broker.create("plain")
        assert not service.appends_inline(synced, 100)
        assert service.appends_inline(plain, LARGE_INLINE_APPEND_MAX_BYTES)
        assert not service.appends_inline(plain, LARGE_INLINE_APPEND_MAX_BYTES + 1)
        assert service.try_append_inline(synced, batch()) is None  # nothing done
        assert synced.log_end_offset == 0
        started = service.start_append(synced, batch(), append_outcome)
        assert isinstance(started, asyncio.Future)
        result, code, _ = await started
        assert (code, result.first_offset, synced.log_end_offset) == (0, 0, 1)
        assert (service.append_stats.inline, service.append_stats.executor) == (0, 1)

    with_broker(tmp_path, test)


def test_an_append_never_overtakes_one_queued_in_the_executor(tmp_path):
    async def test(broker):
        service = broker.service
        partition_log = broker.create("t", configs=[("max.message.bytes", str(4 << 20))])
        big = bytearray(build_batch([(None, b"x" * 1000)] * (LARGE_INLINE_APPEND_MAX_BYTES // 1000 + 10)))
        first = service.start_append(partition_log, big, append_outcome)  # over 1 MiB: the executor
        second = service.start_append(partition_log, batch(), append_outcome)  # small, but queued behind
        assert isinstance(first, asyncio.Future) and isinstance(second, asyncio.Future)
        (r1, c1, _), (r2, c2, _) = await first, await second
        assert c1 == c2 == 0 and r2.first_offset == r1.last_offset + 1
        assert service.appends_inline(partition_log, 100, ordered_by_caller=True)  # the caller orders
        for _ in range(1000):  # the appender's idle notice comes from the executor thread
            if service.appends_inline(partition_log, 100):
                break
            await asyncio.sleep(0.01)
        assert service.appends_inline(partition_log, 100)  # idle again: inline again

    with_broker(tmp_path, test)


def test_a_slow_inline_append_backs_large_appends_off_to_the_executor(tmp_path, monkeypatch):
    monkeypatch.setattr(appends_module, "SLOW_INLINE_APPEND_S", -1.0)  # every inline append is "slow"

    async def test(broker):
        service = broker.service
        partition_log = broker.create("t")
        assert service.try_append_inline(partition_log, batch()) is not None
        assert service.append_stats.backoffs == 1
        assert service.appends_inline(partition_log, INLINE_APPEND_MAX_BYTES)  # small: still inline
        assert not service.appends_inline(partition_log, INLINE_APPEND_MAX_BYTES + 1)

    with_broker(tmp_path, test)


def test_errors_map_to_kafka_codes_in_one_place(tmp_path):
    async def test(broker):
        service = broker.service
        partition_log = broker.create("t")
        assert service.error_code(CorruptRecordError("x"), partition_log) == CorruptRecordError.code
        assert service.error_code(KafkaStorageError("x"), partition_log) == KafkaStorageError.code
        assert service.error_code(ValueError("bug"), partition_log) == ErrorCode.UNKNOWN_SERVER_ERROR
        result, code, _ = await service.append(partition_log, bytearray(b"not a batch"), append_outcome)
        assert result is None and code == ErrorCode.CORRUPT_MESSAGE
        await service.remove_topic("t")
        # A log closed under a request by a topic deletion reads as an unknown partition.
        assert service.error_code(KafkaStorageError("closed"), partition_log) == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    with_broker(tmp_path, test)


def test_reads_run_on_the_loop_and_long_polls_wake_on_appends(tmp_path):
    async def test(broker):
        service = broker.service
        partition_log = broker.create("t")
        event = service.watch(("t", 0))
        assert not await service.wait_for_append([event], 0.01)  # nothing came: timed out
        waiting = asyncio.ensure_future(service.wait_for_append([event, service.watch(("t", 0))], 30))
        await asyncio.sleep(0)
        await service.append(partition_log, batch(), append_outcome)
        assert await waiting
        found = service.read(partition_log, 0, 1 << 20)
        try:
            assert found.length == len(batch())  # the one batch, whole
        finally:
            found.release()
        with pytest.raises(OffsetOutOfRangeError):
            service.read(partition_log, 5, 1 << 20)

    with_broker(tmp_path, test)


def test_shutdown_answers_long_polls_at_once(tmp_path):
    async def test(broker):
        service = broker.service
        broker.create("t")
        waiting = asyncio.ensure_future(service.wait_for_append([service.watch(("t", 0))], 30))
        await asyncio.sleep(0)
        service.begin_shutdown()
        assert await waiting and service.shutting_down

    with_broker(tmp_path, test)


def test_delete_records_moves_the_log_start_and_refuses_internal_topics(tmp_path):
    async def test(broker):
        service = broker.service
        partition_log = broker.create("t")
        for _ in range(3):
            await service.append(partition_log, batch(), append_outcome)
        assert await service.delete_records_before(partition_log, 2) == 2
        assert await service.delete_records_before(partition_log, 1) == 2  # never back
        assert await service.delete_records_before(partition_log, -1) == 3
        with pytest.raises(OffsetOutOfRangeError):
            await service.delete_records_before(partition_log, 4)
        internal = await service.partition_log("__consumer_offsets", 0)
        with pytest.raises(InvalidTopicError):
            await service.delete_records_before(internal, 0)

    with_broker(tmp_path, test)
