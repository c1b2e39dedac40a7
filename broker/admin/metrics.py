"""The broker's metrics, one object for both protocols, in Prometheus' exposition.

Contract:
- `BrokerMetrics` owns a `prometheus_client.CollectorRegistry` (never the global
  one). Names follow Kafka's JMX metrics as the Prometheus JMX exporter renders
  them (kafka_<domain>_<type>_<name>, lower case; meters as `_total`); the list is
  in broker/METRICS.md.
- Hot path, counted where both protocols meet: the partition service
  (broker/core/service.py) calls `topic(name)` for a topic's `TopicMetrics`, made
  once per topic and cached, and counts appends (messages and bytes in, produce
  requests and failures) and reads (bytes out, fetch requests and failures) on
  it on the loop thread (an executor append hands its count over with
  call_soon_threadsafe): plain integers, no lock, no label dict and no
  prometheus_client call per request; `forget_topic` drops a deleted topic's series. The connection
  shell (broker/net/connection.py) times every request of both listeners on the
  `RequestStats` of its API, from `requests_for(protocol, names)`: plain counters
  and a bucket list updated on the loop thread, rendered at scrape time.
- Everything that is state (per-partition sizes, offsets and segment counts,
  group lag, connections, queues, the cleaner, retention, disk space) is read at
  scrape time by `BrokerCollector` from the broker's `MetricSources`: nothing is
  kept up to date on the request path.
- Wiring rule: the metrics pull. `BrokerMetrics(sources)` is given, when it is made,
  a function that returns the broker's MetricSources, or None while the broker is
  not built (the admin port serves /metrics during recovery); the app owns the one
  transition from None to the built graph (broker/app.py). Nothing hands the
  metrics an object after they are made.
- `render()` is the text exposition of every metric (prometheus_client's
  `generate_latest`).
"""

from __future__ import annotations

import shutil
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# kafka_network_requestmetrics_totaltimems buckets, in milliseconds.
LATENCY_BOUNDS_MS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
                                        1000.0, 2500.0, 5000.0, 10000.0, 30000.0)
API_SLOTS = 256  # request type / api key values a frame's first two bytes can name with a zero high byte
UNKNOWN_API = API_SLOTS  # the slot of anything else
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def camel_name(enum_name: str) -> str:
    """LIST_OFFSETS -> ListOffsets: Kafka's request names as its RequestMetrics label them."""
    return "".join(part.capitalize() for part in enum_name.split("_"))


class RequestStats:
    """One API of one protocol: requests answered and their total time, in ms buckets.
    Loop thread only (no lock)."""

    __slots__ = ("name", "sum_ms", "buckets")

    def __init__(self, name: str):
        self.name = name
        self.sum_ms = 0.0
        self.buckets = [0] * (len(LATENCY_BOUNDS_MS) + 1)

    def observe(self, seconds: float) -> None:
        ms = seconds * 1000.0
        self.sum_ms += ms
        self.buckets[bisect_left(LATENCY_BOUNDS_MS, ms)] += 1

    @property
    def count(self) -> int:
        """Requests answered (counted once, in their bucket)."""
        return sum(self.buckets)


# The per-topic counters: (TopicMetrics slot, metric name, help), as BrokerTopicMetrics names them.
TOPIC_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("messages_in", "kafka_server_brokertopicmetrics_messagesin", "Records appended, per topic (MessagesInPerSec)"),
    ("bytes_in", "kafka_server_brokertopicmetrics_bytesin",
     "Bytes of record batches appended, per topic (BytesInPerSec)"),
    ("bytes_out", "kafka_server_brokertopicmetrics_bytesout",
     "Bytes of record batches read for fetches, per topic (BytesOutPerSec)"),
    ("produce_requests", "kafka_server_brokertopicmetrics_totalproducerequests",
     "Partition appends, per topic (TotalProduceRequestsPerSec)"),
    ("failed_produce", "kafka_server_brokertopicmetrics_failedproducerequests",
     "Partition appends that failed, per topic (FailedProduceRequestsPerSec)"),
    ("fetch_requests", "kafka_server_brokertopicmetrics_totalfetchrequests",
     "Partition reads, per topic (TotalFetchRequestsPerSec)"),
    ("failed_fetch", "kafka_server_brokertopicmetrics_failedfetchrequests",
     "Partition reads that failed, per topic (FailedFetchRequestsPerSec)"),
)


class TopicMetrics:
    """A topic's counters: plain integers, counted on the loop thread only (an
    executor append hands its count to the loop), rendered at scrape time (on the
    loop too), so no lock. Appends are counted through BrokerMetrics.appended /
    append_failed (one call per append on the produce path)."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "produce_requests", "failed_produce",
                 "fetch_requests", "failed_fetch")

    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.bytes_out = 0
        self.produce_requests = self.failed_produce = self.fetch_requests = self.failed_fetch = 0

    def read(self, size: int) -> None:
        self.fetch_requests += 1
        self.bytes_out += size

    def read_failed(self) -> None:
        self.fetch_requests += 1
        self.failed_fetch += 1

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, slot) for slot, _, _ in TOPIC_COUNTERS)


class CountingExecutor(ThreadPoolExecutor):
    """The I/O threads (num.io.threads) counting their jobs: `queued` submitted and
    not started, `busy` running (Kafka's request handler pool idle/busy)."""

    def __init__(self, max_workers: int, thread_name_prefix: str = ""):
        super().__init__(max_workers, thread_name_prefix=thread_name_prefix)
        self.threads = max_workers
        self.queued = 0
        self.busy = 0
        self._count_lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with self._count_lock:
            self.queued += 1
        try:
            return super().submit(self._counted, fn, args, kwargs)
        except BaseException:
            with self._count_lock:
                self.queued -= 1
            raise

    def _counted(self, fn, args, kwargs):
        with self._count_lock:
            self.queued -= 1
            self.busy += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with self._count_lock:
                self.busy -= 1


@dataclass(frozen=True)
class MetricSources:
    """The built broker, as the collector reads it at scrape time."""

    manager: Any  # storage LogManager (partitions, retention, disk, its cleaner)
    offsets: Any  # GroupOffsets (group lag)
    servers: Mapping[tuple[str, str], Any]  # (protocol, listener name) -> BrokerServer
    memory: Any  # RequestMemory
    executor: Any  # the I/O threads (a CountingExecutor is counted)
    quotas: Any  # broker/core/quotas.py ClientQuotas
    tiering: Any = None  # broker/core/tiering.py Tiering, with tiered storage
    shares: Any = None  # broker/kafka/share_groups.py ShareGroups, with a Kafka listener


def not_built() -> MetricSources | None:
    return None


class BrokerMetrics:
    """The broker's metrics registry: hot-path counters and the scrape-time collector.
    `sources()` is the built broker, or None before it is built."""

    def __init__(self, sources: Callable[[], MetricSources | None] = not_built) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._topics: dict[str, TopicMetrics] = {}
        self._requests: dict[str, list[RequestStats]] = {}  # protocol -> stats by API slot
        self.collector = BrokerCollector(self, sources)
        self.registry.register(self.collector)

    # ---- the hot path's handles ----

    def topic(self, name: str) -> TopicMetrics:
        """The topic's counters (created on first use; loop thread)."""
        found = self._topics.get(name)
        if found is None:
            found = self._topics.setdefault(name, TopicMetrics())
        return found

    def appended(self, topic: str, records: int, size: int) -> None:
        """Count an append to `topic` (loop thread): its records and bytes."""
        counters = self._topics.get(topic) or self.topic(topic)
        counters.produce_requests += 1
        counters.messages_in += records
        counters.bytes_in += size

    def append_failed(self, topic: str) -> None:
        """Count a failed append to `topic` (loop thread)."""
        counters = self.topic(topic)
        counters.produce_requests += 1
        counters.failed_produce += 1

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series go."""
        self._topics.pop(name, None)

    def topics(self) -> list[tuple[str, TopicMetrics]]:
        return sorted(self._topics.items())

    def requests_for(self, protocol: str, names: Mapping[int, str]) -> list[RequestStats]:
        """The RequestStats of `protocol`'s APIs, indexed by request type / api key
        (UNKNOWN_API: anything else); one list per protocol, shared by its listeners."""
        stats = self._requests.get(protocol)
        if stats is None:
            unknown = RequestStats("Unknown")
            stats = [RequestStats(names[i]) if i in names else unknown for i in range(API_SLOTS)] + [unknown]
            self._requests[protocol] = stats
        return stats

    def request_stats(self) -> Iterator[tuple[str, RequestStats]]:
        """(protocol, stats) of every API that has answered a request."""
        for protocol, stats in self._requests.items():
            for item in {id(s): s for s in stats}.values():
                if item.count:
                    yield protocol, item

    def render(self) -> bytes:
        return generate_latest(self.registry)


# Share groups (KIP-932): (Counters field, metric name, documentation), per share partition.
SHARE_COUNTERS = (
    ("acquired", "records_acquired", "Records acquired by share consumers (each delivery counts)"),
    ("acknowledged", "records_acknowledged", "Records accepted by share consumers"),
    ("released", "records_released", "Records released by share consumers (delivered again)"),
    ("rejected", "records_rejected", "Records rejected by share consumers (archived)"),
    ("archived", "records_archived", "Records archived: rejected, or at the delivery count limit"),
    ("lock_timeouts", "lock_timeouts", "Acquisition locks that timed out (the records became available)"),
)


class BrokerCollector(Collector):
    """The gauges of broker state, computed when scraped from `sources()` (MetricSources);
    before the broker is built only the hot-path counters and zeros."""

    def __init__(self, metrics: BrokerMetrics, sources: Callable[[], MetricSources | None]):
        self.metrics = metrics
        self.sources = sources

    def collect(self) -> Iterable[Metric]:
        built = self.sources()
        yield from self._topics()
        yield from self._requests()
        if built is not None:
            yield from self._partitions(built.manager)
            yield from self._retention(built.manager)
            yield from self._disk(built.manager.data_dir)
        yield from self._cleaner(built.manager.cleaner if built is not None else None)
        if built is not None and built.tiering is not None:
            yield from self._tiering(built.tiering)
        if built is not None:
            yield from self._group_lag(built.offsets, built.manager)
        yield from self._network(built)
        if built is not None and built.shares is not None:
            yield from self._share_groups(built.shares)

    def _topics(self) -> Iterator[Metric]:
        families = [CounterMetricFamily(name, documentation, labels=["topic"])
                    for _, name, documentation in TOPIC_COUNTERS]
        for topic, counters in self.metrics.topics():
            for family, count in zip(families, counters.values(), strict=True):
                family.add_metric([topic], count)
        yield from families

    def _requests(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, per API and protocol (RequestsPerSec)",
                                       labels=["request", "protocol"])
        times = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                      "Time from the start of handling to the reply written, in ms (TotalTimeMs)",
                                      labels=["request", "protocol"])
        for protocol, stats in self.metrics.request_stats():
            labels = [stats.name, protocol]
            requests.add_metric(labels, stats.count)
            cumulative, buckets = 0, []
            for bound, count in zip((*LATENCY_BOUNDS_MS, float("inf")), stats.buckets, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            times.add_metric(labels, buckets, stats.sum_ms)
        yield requests
        yield times

    def _partitions(self, manager) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's segments (Log Size)", labels=labels)
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition (NumLogSegments)",
                                     labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "The partition's log start offset", labels=labels)
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "The partition's log end offset", labels=labels)
        under = GaugeMetricFamily("kafka_cluster_partition_underreplicated",
                                  "1 when the partition is under-replicated (one node: never)", labels=labels)
        for (topic, partition), partition_log in sorted(manager.logs_by_partition().items()):
            key = [topic, str(partition)]
            snapshot = partition_log.segments.snapshot()
            size.add_metric(key, snapshot.size_in_bytes())
            segments.add_metric(key, len(snapshot))
            start.add_metric(key, partition_log.log_start_offset)
            end.add_metric(key, partition_log.log_end_offset)
            under.add_metric(key, 0)
        yield from (size, segments, start, end, under)
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Under-replicated partitions (one node: always 0)", value=0)

    def _tiering(self, tiering) -> Iterator[Metric]:
        """Tiered partitions (broker/core/tiering.py): Kafka's RemoteCopyLagBytes,
        RemoteCopyLagSegments and RemoteLogSizeBytes per partition, the local size,
        the failing partitions, and the partition deletions still pending."""
        labels = ["topic", "partition"]
        lag_bytes = GaugeMetricFamily("kafka_server_brokertopicmetrics_remotecopylagbytes",
                                      "Bytes of rolled segments not yet copied to the remote store "
                                      "(RemoteCopyLagBytes)", labels=labels)
        lag_segments = GaugeMetricFamily("kafka_server_brokertopicmetrics_remotecopylagsegments",
                                         "Rolled segments not yet copied to the remote store (RemoteCopyLagSegments)",
                                         labels=labels)
        remote_size = GaugeMetricFamily("kafka_server_brokertopicmetrics_remotelogsizebytes",
                                        "Bytes of the partition in the remote store (RemoteLogSizeBytes)",
                                        labels=labels)
        local_size = GaugeMetricFamily("strata_tiered_local_log_size_bytes",
                                       "Bytes of a tiered partition's local segments", labels=labels)
        remote_start = GaugeMetricFamily("strata_tiered_remote_log_start_offset",
                                         "The first offset in the remote store (-1: none)", labels=labels)
        failures = GaugeMetricFamily("strata_tiered_store_failures",
                                     "Consecutive failed remote store operations of the partition", labels=labels)
        for (topic, partition), stats in tiering.stats().items():
            key = [topic, str(partition)]
            lag_bytes.add_metric(key, stats.copy_lag_bytes)
            lag_segments.add_metric(key, stats.copy_lag_segments)
            remote_size.add_metric(key, stats.remote_size_bytes)
            local_size.add_metric(key, stats.local_size_bytes)
            remote_start.add_metric(key, -1 if stats.remote_log_start_offset is None
                                    else stats.remote_log_start_offset)
            failures.add_metric(key, stats.failures)
        yield from (lag_bytes, lag_segments, remote_size, local_size, remote_start, failures)
        yield GaugeMetricFamily("strata_tiered_pending_partition_deletions",
                                "Deleted partitions whose remote data is not deleted yet (retried with back-off)",
                                value=tiering.pending_partition_deletes())

    def _retention(self, manager) -> Iterator[Metric]:
        yield CounterMetricFamily("kafka_log_logmanager_retentiondeletedsegments",
                                  "Segments deleted by retention (time, size or log start)",
                                  value=manager.retention_deleted_segments)
        yield CounterMetricFamily("kafka_log_logmanager_retentiondeletedbytes",
                                  "Bytes of the segments deleted by retention",
                                  value=manager.retention_deleted_bytes)

    def _disk(self, data_dir: str) -> Iterator[Metric]:
        try:
            usage = shutil.disk_usage(data_dir)
        except OSError:
            return
        free = GaugeMetricFamily("kafka_log_logmanager_logdirectoryfreebytes",
                                 "Free bytes on the data directory's file system", labels=["logdirectory"])
        free.add_metric([data_dir], usage.free)
        total = GaugeMetricFamily("kafka_log_logmanager_logdirectorytotalbytes",
                                  "Size of the data directory's file system in bytes", labels=["logdirectory"])
        total.add_metric([data_dir], usage.total)
        yield free
        yield total

    def _cleaner(self, cleaner) -> Iterator[Metric]:
        """The log cleaner's totals (zeros without one: log.cleaner.enable false, or not built)."""
        runs = bytes_read = bytes_written = 0
        dirty = 0.0
        if cleaner is not None:
            runs, bytes_read, bytes_written = cleaner.cleans, cleaner.bytes_read, cleaner.bytes_written
            dirty = cleaner.cleaner_manager.dirtiest_ratio
        yield CounterMetricFamily("kafka_log_logcleaner_cleanerruns", "Log cleans finished", value=runs)
        yield CounterMetricFamily("kafka_log_logcleaner_bytesread", "Bytes the cleaner read", value=bytes_read)
        yield CounterMetricFamily("kafka_log_logcleaner_byteswritten", "Bytes the cleaner wrote",
                                  value=bytes_written)
        yield GaugeMetricFamily("kafka_log_logcleanermanager_max_dirty_percent",
                                "The dirtiest compacted log's dirty ratio, in percent, at the last check",
                                value=round(dirty * 100, 2))

    def _group_lag(self, offsets, manager) -> Iterator[Metric]:
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset",
                                    labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset minus the group's committed offset",
                                labels=labels)
        logs = manager.logs_by_partition()
        for (group, topic, partition), committed in sorted(offsets.all_committed()):
            partition_log = logs.get((topic, partition))
            if partition_log is None:
                continue
            key = [group, topic, str(partition)]
            current.add_metric(key, committed.offset)
            lag.add_metric(key, max(partition_log.log_end_offset - committed.offset, 0))
        yield current
        yield lag

    def _share_groups(self, shares) -> Iterator[Metric]:
        """Per share partition (broker/kafka/share_groups.py ShareGroups.metric_rows): the
        records acquired, acknowledged, released, rejected, archived, the lock timeouts, and
        the lag (the records not yet acknowledged or archived)."""
        labels = ["sharegroup", "topic", "partition"]
        families = [(field, CounterMetricFamily(f"strata_share_group_{name}", documentation, labels=labels))
                    for field, name, documentation in SHARE_COUNTERS]
        lag = GaugeMetricFamily("strata_share_group_lag", "Records of the share partition not yet acknowledged "
                                "or archived (high watermark - start offset - records done past it)", labels=labels)
        for group, topic, partition, counters, records_lag in shares.metric_rows():
            key = [group, topic, str(partition)]
            for field, family in families:
                family.add_metric(key, getattr(counters, field))
            if records_lag >= 0:
                lag.add_metric(key, records_lag)
        for _, family in families:
            yield family
        yield lag

    def _network(self, built: MetricSources | None) -> Iterator[Metric]:
        servers = built.servers if built is not None else {}
        connections = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count",
                                        "Open connections, per listener", labels=["listener", "protocol"])
        created = CounterMetricFamily("kafka_server_socketservermetrics_connection_creation",
                                      "Connections accepted, per listener", labels=["listener", "protocol"])
        queued = 0
        for (protocol, listener), server in servers.items():
            connections.add_metric([listener, protocol], len(server.connections))
            created.add_metric([listener, protocol], server.stats.connections_accepted)
            queued += sum(conn.in_flight for conn in list(server.connections))
        yield connections
        yield created
        mutes = CounterMetricFamily("kafka_network_socketserver_throttle_mutes",
                                    "Connections muted after a reply a client quota throttled (KIP-219), "
                                    "per listener", labels=["listener", "protocol"])
        mute_ms = CounterMetricFamily("kafka_network_socketserver_throttle_mute_ms",
                                      "Throttle time of those mutes in ms, per listener",
                                      labels=["listener", "protocol"])
        delayed = CounterMetricFamily("kafka_network_socketserver_connections_delayed",
                                      "New connections made to wait by max.connection.creation.rate "
                                      "(broker-wide or the listener's), per listener", labels=["listener", "protocol"])
        throttled = CounterMetricFamily("kafka_network_socketserver_connections_throttled",
                                        "New connections over their IP's connection_creation_rate quota, "
                                        "closed after the throttle time, per listener",
                                        labels=["listener", "protocol"])
        for (protocol, listener), server in servers.items():
            mutes.add_metric([listener, protocol], server.stats.throttle_mutes)
            mute_ms.add_metric([listener, protocol], server.stats.throttle_mute_ms)
            delayed.add_metric([listener, protocol], server.stats.connections_delayed)
            throttled.add_metric([listener, protocol], server.stats.connections_throttled)
        yield mutes
        yield mute_ms
        yield delayed
        yield throttled
        quotas = built.quotas if built is not None else None
        if quotas is not None:
            throttled = CounterMetricFamily("kafka_server_quota_throttled_requests",
                                            "Requests a client quota (byte rate, request time or controller "
                                            "mutations) throttled, "
                                            "per quota type",
                                            labels=["quota_type"])
            throttle_ms = CounterMetricFamily("kafka_server_quota_throttle_time_ms",
                                              "Throttle time given to those requests in ms, per quota type",
                                              labels=["quota_type"])
            for kind in sorted(quotas.throttled):
                throttled.add_metric([kind], quotas.throttled[kind])
                throttle_ms.add_metric([kind], quotas.throttle_ms_total[kind])
            yield throttled
            yield throttle_ms
        yield GaugeMetricFamily("kafka_network_requestchannel_requestqueuesize",
                                "Requests read and not yet answered, over every connection", value=queued)
        memory = built.memory if built is not None else None
        if memory is not None:
            yield GaugeMetricFamily("kafka_network_socketserver_memorypoolused",
                                    "Bytes of queued.max.request.bytes held by requests read", value=memory.used)
            if memory.bounded:
                yield GaugeMetricFamily("kafka_network_socketserver_memorypoolavailable",
                                        "Bytes of queued.max.request.bytes still free",
                                        value=max(memory.max_bytes - memory.used, 0))
        executor = built.executor if built is not None else None
        if isinstance(executor, CountingExecutor):
            yield GaugeMetricFamily("kafka_server_kafkarequesthandlerpool_threads",
                                    "I/O threads (num.io.threads)", value=executor.threads)
            yield GaugeMetricFamily("kafka_server_kafkarequesthandlerpool_busythreads",
                                    "I/O threads running a job (appends, long reads, topic changes)",
                                    value=executor.busy)
            yield GaugeMetricFamily("kafka_server_kafkarequesthandlerpool_queuedjobs",
                                    "Jobs waiting for an I/O thread", value=executor.queued)
