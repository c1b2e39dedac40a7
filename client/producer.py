"""Producing: `AsyncProducer` and the blocking `Producer`.

Contract:
- `send(topic, value, key=None, *, partition=None, timestamp_ms=None,
  headers=None)` places the record in its partition's open batch and returns
  a future that resolves to RecordMetadata (offset, timestamp) once the broker
  has appended it, or fails with the StrataClientError that stopped it. The
  async `send` returns once the record is queued (it may first ask the broker
  for the topic's partition count; an unknown topic or a bad partition raises
  from `send` itself). As Kafka's producer, that METADATA asks the broker to
  create a missing topic (`allow_auto_create_topics`, default True; the broker
  does when its auto.create.topics.enable is on, with its num.partitions); when
  it does not, `send` raises an error naming the topic. The blocking `send` returns a concurrent.futures.Future
  at once: it hands the record to the loop thread without a round trip (see
  `Producer`), and successive sends from one thread keep their order.
- Partitioning: an explicit `partition` wins; a keyed record goes to
  `to_positive(murmur2(key)) % partitions` (Kafka's default partitioner); a
  keyless record uses the sticky partitioner (see partitioner.py). A topic's
  partition count is asked once and kept for `metadata_max_age_ms` (Kafka's
  metadata.max.age.ms, default 300000), then asked again, so a topic grown
  meanwhile (Kafka's CreatePartitions) maps keys by its new count, as Kafka's
  producer does after its metadata refresh.
- Batching, per partition: a batch closes when adding a record would take it
  past `max_batch_bytes` (estimated from the record sizes; one record larger
  than that travels alone and the broker judges it), when `linger_ms` have
  passed since its first record, or on `flush()`/`close()`. Each closed batch
  becomes one magic-2 record batch (kafka_format.build_batch, optional
  compression none/gzip/snappy/lz4/zstd) sent in one PRODUCE request.
- Ordering: at most one batch per partition is in flight, so a retried batch
  can never overtake a later one; batches of different partitions are
  pipelined on the one connection.
- Retries: transport failures (broker unreachable, connection reset, request
  timeout) are retried `retries` times with exponential backoff (see
  session.py); broker error codes fail the batch's futures at once, except
  MESSAGE_TOO_LARGE and RECORD_LIST_TOO_LARGE for a batch of several records:
  as Kafka's producer, it is split (in halves, sent in order, down to single
  records), so only the records too large by themselves fail. Like
  Kafka's producer without idempotence, a retry after a lost answer may
  append a batch twice (at-least-once).
- `flush()` closes every open batch and waits until every record sent so far
  has succeeded or failed; it does not raise for failed records (their
  futures carry the errors). `close()` flushes, then closes the connection;
  sending after close raises.
- Keys, values and header values are bytes (str is encoded as UTF-8; None is
  null).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple, TypeVar, overload

from kafka_format import build_batch
from kafka_format.codecs import Codec
from protocol import ErrorCode, ProduceRequest

from .admin import DEFAULT_METADATA_MAX_AGE_MS, AsyncAdmin
from .errors import StrataClientError, raise_for
from .loop_thread import LoopThread
from .partitioner import StickyPartitioner, partition_for_key
from .records import RecordMetadata
from .session import BrokerSession

__all__ = ["AsyncProducer", "Producer", "COMPRESSION_CODECS"]

COMPRESSION_CODECS = {"none": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY,
                      "lz4": Codec.LZ4, "zstd": Codec.ZSTD}
DEFAULT_MAX_BATCH_BYTES = 16384  # Kafka's batch.size
DEFAULT_LINGER_MS = 5
# Upper bound of a record's framing in a batch beyond its key, value and headers:
# length, attributes, timestamp and offset deltas, key and value lengths, header count.
RECORD_OVERHEAD_ESTIMATE = 5 + 1 + 10 + 5 + 5 + 5 + 5
BATCH_HEADER_BYTES = 61
# The broker's answers to a batch too large as a whole: split it and send the parts.
SPLIT_ON = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)


def _as_bytes(data, what: str) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, str or None, not {type(data).__name__}")


class PreparedRecord(NamedTuple):
    """A record with its bytes ready: everything about it that needs no broker."""
    topic: str
    partition: int | None  # None: the partitioner decides
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    size: int  # estimated bytes in a batch


def prepare_record(topic: str, value, key, partition: int | None, timestamp_ms: int | None,
                   headers) -> PreparedRecord:
    """Check and convert a send's arguments (raises TypeError for bad types)."""
    value = _as_bytes(value, "value")
    key = _as_bytes(key, "key")
    headers = tuple((str(h), _as_bytes(v, "header value")) for h, v in (headers or ()))
    timestamp = time.time_ns() // 1_000_000 if timestamp_ms is None else int(timestamp_ms)
    return PreparedRecord(topic, partition, key, value, timestamp, headers,
                          _record_size(key, value, headers))


def check_partition(topic: str, partition: int, partition_count: int) -> None:
    if not 0 <= partition < partition_count:
        raise StrataClientError(f"topic {topic!r} has no partition {partition} "
                                f"(it has {partition_count})", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


# Where a record's outcome goes: an asyncio future (async API) or a
# concurrent.futures.Future (blocking API, resolved from the loop thread directly:
# no per-record callback hop, which was most of a send's cost).
Sink = asyncio.Future | concurrent.futures.Future
SinkT = TypeVar("SinkT", asyncio.Future, concurrent.futures.Future)


class _Batch:
    """Records on their way to one partition, with where their outcomes go."""

    __slots__ = ("records", "sinks", "size", "timer", "finished")

    def __init__(self, finished: asyncio.Future) -> None:
        self.records: list[tuple] = []  # (key, value, timestamp, headers)
        self.sinks: list[Sink] = []
        self.size = BATCH_HEADER_BYTES
        self.timer: asyncio.TimerHandle | None = None
        self.finished = finished  # resolved when every sink is: what flush() waits for


class _PartitionQueue:
    __slots__ = ("topic", "partition", "open", "closed", "sending")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.open: _Batch | None = None
        self.closed: deque[_Batch] = deque()  # closed, waiting for the one in flight
        self.sending = False


def _record_size(key: bytes | None, value: bytes | None, headers) -> int:
    size = RECORD_OVERHEAD_ESTIMATE + len(key or b"") + len(value or b"")
    for h_key, h_value in headers:
        size += 10 + len(h_key.encode("utf-8")) + len(h_value or b"")
    return size


class AsyncProducer:
    def __init__(self, bootstrap: str, *, linger_ms: int = DEFAULT_LINGER_MS,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, compression: str = "none",
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
                 allow_auto_create_topics: bool = True, **session_options):
        if compression not in COMPRESSION_CODECS:
            raise ValueError(f"unknown compression {compression!r}: use one of "
                             f"{', '.join(COMPRESSION_CODECS)}")
        if linger_ms < 0 or max_batch_bytes <= 0 or metadata_max_age_ms < 0:
            raise ValueError("linger_ms and metadata_max_age_ms must be >= 0 and max_batch_bytes > 0")
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.allow_auto_create_topics = allow_auto_create_topics
        self.linger_ms = linger_ms
        self.max_batch_bytes = max_batch_bytes
        self.codec = COMPRESSION_CODECS[compression]
        self._session = BrokerSession(bootstrap, **session_options)
        self._admin = AsyncAdmin(session=self._session)  # metadata over the same connection
        self._partition_counts: dict[str, int] = {}
        self._counted_at: dict[str, float] = {}  # time.monotonic() of each count's answer
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._sticky = StickyPartitioner()
        self._unfinished: set[asyncio.Future] = set()  # each batch's `finished`
        self._senders: set[asyncio.Task] = set()
        self._closed = False
        # Called with a batch's estimated record bytes once it is answered (or failed):
        # the blocking Producer's back-pressure accounting.
        self.on_batch_done: Callable[[int], None] | None = None

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- sending -----------------------------------------------------------------

    async def send(self, topic: str, value, key=None, *, partition: int | None = None,
                   timestamp_ms: int | None = None,
                   headers: Iterable[tuple[str, bytes | str | None]] | None = None
                   ) -> asyncio.Future:
        """Queue one record; the returned future resolves to its RecordMetadata."""
        record = prepare_record(topic, value, key, partition, timestamp_ms, headers)
        self.check_open()
        return self.enqueue(record, await self.partition_count(topic))

    def check_open(self) -> None:
        if self._closed:
            raise StrataClientError("producer is closed")

    @overload
    def enqueue(self, record: PreparedRecord, partition_count: int, sink: None = None) -> asyncio.Future: ...
    @overload
    def enqueue(self, record: PreparedRecord, partition_count: int, sink: SinkT) -> SinkT: ...
    def enqueue(self, record: PreparedRecord, partition_count: int,
                sink: Sink | None = None) -> Sink:
        """Place a prepared record in its partition's batch (on the loop, no awaiting);
        its outcome goes to `sink` (default: a new asyncio future), which is returned."""
        self.check_open()
        partition = record.partition
        if partition is None:
            partition = (partition_for_key(record.key, partition_count) if record.key is not None
                         else self._sticky.partition(record.topic, partition_count))
        else:
            check_partition(record.topic, partition, partition_count)
        return self._append(record.topic, partition,
                            (record.key, record.value, record.timestamp, record.headers),
                            record.size, sink)

    async def send_and_wait(self, topic: str, value, key=None, **kwargs) -> RecordMetadata:
        return await (await self.send(topic, value, key, **kwargs))

    async def partition_count(self, topic: str) -> int:
        count = self.cached_partition_count(topic)
        if count is None:
            count = await self._admin.partition_count(topic, auto_create=self.allow_auto_create_topics)
            self._counted_at[topic] = time.monotonic()
            self._partition_counts[topic] = count
        return count

    def cached_partition_count(self, topic: str) -> int | None:
        """The partition count already known and not older than metadata_max_age_ms,
        without asking (any thread may read it)."""
        count = self._partition_counts.get(topic)
        if count is None or time.monotonic() - self._counted_at.get(topic, 0.0) >= self.metadata_max_age:
            return None
        return count

    def _append(self, topic: str, partition: int, record: tuple, size: int,
                sink: Sink | None) -> Sink:
        loop = asyncio.get_running_loop()
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = _PartitionQueue(topic, partition)
        batch = queue.open
        if batch is not None and batch.size + size > self.max_batch_bytes:
            self._close_batch(queue)
            batch = None
        if batch is None:
            batch = queue.open = _Batch(loop.create_future())
            self._unfinished.add(batch.finished)
            batch.timer = loop.call_later(self.linger_ms / 1000, self._linger_expired, queue, batch)
        if sink is None:
            sink = loop.create_future()
        batch.records.append(record)
        batch.sinks.append(sink)
        batch.size += size
        if batch.size >= self.max_batch_bytes:
            self._close_batch(queue)
        return sink

    def _linger_expired(self, queue: _PartitionQueue, batch: _Batch) -> None:
        if queue.open is batch:
            self._close_batch(queue)

    def _close_batch(self, queue: _PartitionQueue) -> None:
        batch, queue.open = queue.open, None
        if batch is None:
            return
        if batch.timer is not None:
            batch.timer.cancel()
        queue.closed.append(batch)
        self._sticky.on_batch_closed(queue.topic, queue.partition,
                                     self._partition_counts.get(queue.topic, 1))
        if not queue.sending:
            queue.sending = True
            task = asyncio.get_running_loop().create_task(self._send_closed(queue))
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)

    async def _send_closed(self, queue: _PartitionQueue) -> None:
        """Send the partition's closed batches one at a time, in order."""
        try:
            while queue.closed:
                await self._send_batch(queue, queue.closed.popleft())
        finally:
            queue.sending = False

    async def _send_batch(self, queue: _PartitionQueue, batch: _Batch) -> None:
        try:
            await self._deliver(queue, batch)
        finally:
            self._unfinished.discard(batch.finished)
            batch.finished.set_result(None)
            if self.on_batch_done is not None:
                self.on_batch_done(batch.size - BATCH_HEADER_BYTES)

    async def _deliver(self, queue: _PartitionQueue, batch: _Batch) -> None:
        await self._deliver_part(queue, batch.records, batch.sinks)

    async def _deliver_part(self, queue: _PartitionQueue, records: list[tuple], sinks: list[Sink]) -> None:
        """Send `records` as one batch; a batch the broker finds too large is split in
        two halves sent in order, down to single records (Kafka's producer splits too),
        so only a record too large by itself fails."""
        where = f"produce to {queue.topic}-{queue.partition}"
        try:
            message_set = build_batch(records, codec=self.codec)
            request = ProduceRequest(queue.topic, queue.partition, message_set)
            response = await self._session.retrying(lambda: self._session.request(request))
            raise_for(response.error, where, response.message)
        except asyncio.CancelledError:
            self._fail(sinks, StrataClientError(f"{where}: producer closed before the answer"))
            raise
        except StrataClientError as e:
            if e.code in SPLIT_ON and len(records) > 1:
                half = len(records) // 2
                await self._deliver_part(queue, records[:half], sinks[:half])
                await self._deliver_part(queue, records[half:], sinks[half:])
                return
            if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._partition_counts.pop(queue.topic, None)  # deleted or recreated: ask again
            self._fail(sinks, e)
            return
        except Exception as e:  # a record build_batch refused: report, never lose the task
            self._fail(sinks, StrataClientError(f"{where}: {type(e).__name__}: {e}"))
            return
        topic, partition, base = queue.topic, queue.partition, response.base_offset
        append_time = response.log_append_time
        for i, (sink, record) in enumerate(zip(sinks, records, strict=True)):
            if not sink.done():
                sink.set_result(RecordMetadata(topic, partition, base + i,
                                               record[2] if append_time == -1 else append_time))

    @staticmethod
    def _fail(sinks: list[Sink], error: StrataClientError) -> None:
        for sink in sinks:
            if not sink.done():
                sink.set_exception(error)
                if isinstance(sink, asyncio.Future):
                    # The caller learns of the error through the future; reading it here
                    # keeps asyncio from also logging "exception was never retrieved".
                    sink.exception()

    # ---- flushing and closing --------------------------------------------------------

    def close_open_batches(self) -> None:
        """Send every open batch now, without waiting for its linger."""
        for queue in list(self._queues.values()):
            self._close_batch(queue)

    async def flush(self) -> None:
        """Close every open batch and wait until every record sent so far is answered."""
        self.close_open_batches()
        if self._unfinished:
            await asyncio.wait(list(self._unfinished))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush()
        finally:
            for task in list(self._senders):
                task.cancel()
            self._session.close()


class Producer:
    """The blocking face of AsyncProducer (runs it on the shared client loop thread).

    `send` hands the record to the loop thread without waiting for it (only
    the first send to a topic waits, for its partition count): records go
    into a hand-off queue, and the loop is woken only when that queue was
    empty, since one wake-up per record (a self-pipe write and a GIL hand-over
    each) cost more than the rest of a send. The queue is FIFO and `flush`
    and `close` drain it first, so one thread's sends keep their order and
    nothing queued is missed. Back-pressure: when
    records of more than `max_buffer_bytes` are waiting for their answer,
    `send` blocks until some are answered (Kafka's buffer.memory, 32 MiB).
    """

    def __init__(self, bootstrap: str, *, max_buffer_bytes: int = 32 * 1024 * 1024, **options):
        self._loop = LoopThread.shared()
        self._producer = AsyncProducer(bootstrap, **options)
        self.max_buffer_bytes = max_buffer_bytes
        self._buffered = 0
        self._buffer_freed = threading.Condition()
        self._handoff: deque[tuple] = deque()  # (record, partition count, result future)
        self._handoff_lock = threading.Lock()
        self._wakeup_scheduled = False
        self._producer.on_batch_done = self._release

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, topic: str, value, key=None, *, partition: int | None = None,
             timestamp_ms: int | None = None, headers=None) -> concurrent.futures.Future:
        """Queue one record; the future gives its RecordMetadata (or the error)."""
        record = prepare_record(topic, value, key, partition, timestamp_ms, headers)
        self._producer.check_open()
        count = self._producer.cached_partition_count(topic)
        if count is None:
            count = self.partition_count(topic)
        if partition is not None:
            check_partition(topic, partition, count)
        self._reserve(record.size)
        result: concurrent.futures.Future = concurrent.futures.Future()
        result.set_running_or_notify_cancel()
        with self._handoff_lock:
            self._handoff.append((record, count, result))
            wake, self._wakeup_scheduled = not self._wakeup_scheduled, True
        if wake:
            self._loop.call_soon(self._drain_handoff)
        return result

    def _drain_handoff(self) -> None:
        """On the loop thread: queue everything handed off so far, in order."""
        with self._handoff_lock:
            items = list(self._handoff)
            self._handoff.clear()
            self._wakeup_scheduled = False
        for item in items:
            self._enqueue(*item)

    def _enqueue(self, record: PreparedRecord, count: int,
                 result: concurrent.futures.Future) -> None:
        """On the loop thread: queue the record; its batch resolves `result`."""
        try:
            self._producer.enqueue(record, count, result)
        except Exception as e:  # closed meanwhile, or a partition check
            self._release(record.size)
            result.set_exception(e)

    def _reserve(self, size: int) -> None:
        with self._buffer_freed:
            # One record larger than the whole buffer still goes when the buffer is empty.
            if self._buffered and self._buffered + size > self.max_buffer_bytes:
                # The buffer may be full of lingering batches: send them now (as Kafka's
                # accumulator does when its memory is exhausted), or we would wait forever.
                self._loop.call_soon(self._send_everything_now)
            while self._buffered and self._buffered + size > self.max_buffer_bytes:
                self._buffer_freed.wait()
            self._buffered += size

    def _send_everything_now(self) -> None:
        self._drain_handoff()
        self._producer.close_open_batches()

    def _release(self, size: int) -> None:
        with self._buffer_freed:
            self._buffered -= size
            self._buffer_freed.notify_all()

    def send_and_wait(self, topic: str, value, key=None, timeout: float | None = None,
                      **kwargs) -> RecordMetadata:
        return self.send(topic, value, key, **kwargs).result(timeout)

    def partition_count(self, topic: str) -> int:
        return self._loop.run(self._producer.partition_count(topic))

    def flush(self, timeout: float | None = None) -> None:
        self._loop.run(self._after_handoff(self._producer.flush), timeout)

    def close(self) -> None:
        self._loop.run(self._after_handoff(self._producer.close))

    async def _after_handoff(self, step) -> None:
        self._drain_handoff()
        await step()

