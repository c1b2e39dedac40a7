"""The HTTP admin port of the real broker: Prometheus metrics after traffic of both
protocols and a consumer group, health checks, admin.port -1, and the log format."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from broker.app import BrokerApp
from broker.config.broker_config import BrokerConfig
from kafka_format import build_batch
from protocol import CommitOffsetRequest, CreateTopicRequest, FetchRequest, ProduceRequest
from storage.manager import LogManager
from tests.broker.wire import NativeClient

TIMEOUT = 30


def scrape(broker) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items: value} of every sample /metrics shows."""
    return scrape_url(broker.admin_url("/metrics"))


def scrape_url(url: str) -> dict[str, dict[tuple, float]]:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[name][tuple(sorted((k, str(v)) for k, v in labels.items()))]


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_metrics_after_both_protocols_and_a_group(broker):
    b = broker()
    native = NativeClient(*b.address)
    try:
        assert native.call(CreateTopicRequest("m", 2)).error == 0
        for values in ([b"a", b"b"], [b"c"], [b"d", b"e", b"f"]):
            assert native.call(ProduceRequest("m", 0, build_batch([(None, v) for v in values]))).error == 0
        bad = bytearray(build_batch([(None, b"x")]))
        bad[-1] ^= 0xFF  # the CRC no longer matches: the append fails
        assert native.call(ProduceRequest("m", 0, bytes(bad))).error != 0
        assert native.call(FetchRequest("m", 0, 0, 1 << 20)).error == 0
        assert native.call(FetchRequest("m", 0, 99, 1 << 20)).error != 0  # out of range: a failed fetch
        assert native.call(CommitOffsetRequest("native-group", "m", 0, 1)).error == 0

        producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(4):
            producer.produce("m", f"k{i}".encode(), partition=1)
        assert producer.flush(TIMEOUT) == 0
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "kafka-group",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["m"])
            got = 0
            deadline = time.monotonic() + TIMEOUT
            while got < 10 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got += 1
            assert got == 10
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        for _ in range(2):  # two more on partition 1: the Kafka group lags by 2 there
            assert native.call(ProduceRequest("m", 1, build_batch([(None, b"late")]))).error == 0

        m = scrape(b)
        # Per topic, both protocols counted once, where appends and reads happen.
        assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="m") == 12
        assert value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic="m") > 12
        assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="m") > 0
        assert value(m, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="m") == 1
        assert value(m, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic="m") >= 7
        assert value(m, "kafka_server_brokertopicmetrics_failedfetchrequests_total", topic="m") == 1
        assert value(m, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic="m") >= 3
        # Requests per API and protocol, and their time histograms.
        for request, protocol in (("Produce", "native"), ("Fetch", "native"), ("CreateTopic", "native"),
                                  ("Produce", "kafka"), ("Fetch", "kafka"), ("Metadata", "kafka"),
                                  ("ApiVersions", "kafka"), ("OffsetCommit", "kafka")):
            count = value(m, "kafka_network_requestmetrics_requests_total", request=request, protocol=protocol)
            assert count >= 1, (request, protocol)
            assert value(m, "kafka_network_requestmetrics_totaltimems_count", request=request,
                         protocol=protocol) == count
            assert value(m, "kafka_network_requestmetrics_totaltimems_bucket", request=request,
                         protocol=protocol, le="+Inf") == count
        assert value(m, "kafka_network_requestmetrics_requests_total", request="Produce", protocol="native") == 6
        # Partition state, computed when scraped.
        assert value(m, "kafka_log_log_logendoffset", topic="m", partition=0) == 6
        assert value(m, "kafka_log_log_logendoffset", topic="m", partition=1) == 6
        assert value(m, "kafka_log_log_logstartoffset", topic="m", partition=0) == 0
        assert value(m, "kafka_log_log_numlogsegments", topic="m", partition=0) == 1
        assert value(m, "kafka_log_log_size", topic="m", partition=0) == \
            (Path(b.data_dir) / "m-0" / "00000000000000000000.log").stat().st_size
        assert value(m, "kafka_cluster_partition_underreplicated", topic="m", partition=1) == 0
        assert value(m, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        # Committed offsets of both protocols' groups and their lag.
        assert value(m, "kafka_consumergroup_lag", consumergroup="native-group", topic="m", partition=0) == 5
        assert value(m, "kafka_consumergroup_lag", consumergroup="kafka-group", topic="m", partition=1) == 2
        assert value(m, "kafka_consumergroup_lag", consumergroup="kafka-group", topic="m", partition=0) == 0
        assert value(m, "kafka_consumergroup_current_offset", consumergroup="kafka-group", topic="m",
                     partition=1) == 4
        # Connections, queues, the cleaner, retention, disk.
        assert value(m, "kafka_server_socketservermetrics_connection_count",
                     listener="PLAINTEXT", protocol="native") == 1
        assert value(m, "kafka_server_socketservermetrics_connection_creation_total",
                     listener="PLAINTEXT", protocol="kafka") >= 2
        assert value(m, "kafka_network_requestchannel_requestqueuesize") == 0
        assert value(m, "kafka_network_socketserver_memorypoolused") == 0
        assert value(m, "kafka_network_socketserver_memorypoolavailable") > 0
        assert value(m, "kafka_server_kafkarequesthandlerpool_threads") == 8
        assert value(m, "kafka_server_kafkarequesthandlerpool_busythreads") == 0
        assert value(m, "kafka_server_kafkarequesthandlerpool_queuedjobs") == 0
        assert value(m, "kafka_log_logcleaner_cleanerruns_total") == 0
        assert "kafka_log_logcleanermanager_max_dirty_percent" in m
        assert value(m, "kafka_log_logmanager_retentiondeletedsegments_total") == 0
        assert value(m, "kafka_log_logmanager_logdirectoryfreebytes", logdirectory=b.data_dir) > 0
    finally:
        native.close()


def test_a_deleted_topics_series_go(broker):
    b = broker()
    native = NativeClient(*b.address)
    try:
        assert native.call(CreateTopicRequest("gone", 1)).error == 0
        assert native.call(ProduceRequest("gone", 0, build_batch([(None, b"v")]))).error == 0
        assert value(scrape(b), "kafka_server_brokertopicmetrics_messagesin_total", topic="gone") == 1
        from protocol import DeleteTopicRequest
        assert native.call(DeleteTopicRequest("gone")).error == 0
    finally:
        native.close()
    m = scrape(b)
    assert not any(dict(labels).get("topic") == "gone" for series in m.values() for labels in series)


def test_health_endpoints_and_unknown_paths(broker):
    b = broker()
    assert status(b.admin_url("/health/live")) == 200
    assert status(b.admin_url("/health/ready")) == 200
    assert status(b.admin_url("/nope")) == 404
    assert status(b.admin_url("/metrics")) == 200
    request = urllib.request.Request(b.admin_url("/metrics"), method="POST", data=b"")
    try:
        urllib.request.urlopen(request, timeout=TIMEOUT)
        raise AssertionError("POST was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 405


async def test_ready_only_after_recovery(tmp_path, monkeypatch):
    """In process, with recovery held: live answers 200 and ready 503 until the
    logs are open and the listeners serve, then 200; 503 again once shutting down."""
    release = threading.Event()
    startup = LogManager.startup

    def held_startup(self, *args, **kwargs):
        assert release.wait(TIMEOUT)
        return startup(self, *args, **kwargs)

    monkeypatch.setattr(LogManager, "startup", held_startup)
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={},
                               cli={"host.name": "127.0.0.1", "port": "0", "kafka.port": "0", "admin.port": "0"})
    app = BrokerApp(config)
    loop = asyncio.get_running_loop()
    starting = loop.create_task(app.start())
    deadline = time.monotonic() + TIMEOUT
    while app.admin_address is None:
        assert time.monotonic() < deadline and not starting.done()
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{app.admin_address[1]}"

    async def get(path: str) -> int:
        return await loop.run_in_executor(None, status, base + path)

    assert await get("/health/live") == 200
    assert await get("/health/ready") == 503
    release.set()
    await asyncio.wait_for(starting, TIMEOUT)
    assert await get("/health/ready") == 200
    app.request_shutdown()
    assert await get("/health/ready") == 503
    await app.shutdown()


async def test_metrics_during_recovery_then_of_the_built_broker(tmp_path, monkeypatch):
    """In process, with recovery held: /metrics answers with the counters and zeros
    only (nothing of the logs, listeners or I/O threads yet), and with the broker's
    state once it is built."""
    release = threading.Event()
    startup = LogManager.startup

    def held_startup(self, *args, **kwargs):
        assert release.wait(TIMEOUT)
        return startup(self, *args, **kwargs)

    monkeypatch.setattr(LogManager, "startup", held_startup)
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={},
                               cli={"host.name": "127.0.0.1", "port": "0", "kafka.port": "0", "admin.port": "0"})
    app = BrokerApp(config)
    loop = asyncio.get_running_loop()
    starting = loop.create_task(app.start())
    deadline = time.monotonic() + TIMEOUT
    while app.admin_address is None:
        assert time.monotonic() < deadline and not starting.done()
        await asyncio.sleep(0.01)

    url = f"http://127.0.0.1:{app.admin_address[1]}/metrics"
    try:
        during = await loop.run_in_executor(None, scrape_url, url)
        assert during["kafka_log_logcleaner_cleanerruns_total"] == {(): 0.0}
        assert during["kafka_network_requestchannel_requestqueuesize"] == {(): 0.0}
        for name in ("kafka_log_logmanager_logdirectoryfreebytes", "kafka_server_kafkarequesthandlerpool_threads",
                     "kafka_network_socketserver_memorypoolused", "kafka_server_socketservermetrics_connection_count"):
            assert name not in during
    finally:
        release.set()
    await asyncio.wait_for(starting, TIMEOUT)
    try:
        built = await loop.run_in_executor(None, scrape_url, url)
        assert value(built, "kafka_log_logmanager_logdirectoryfreebytes", logdirectory=app.manager.data_dir) > 0
        assert value(built, "kafka_server_kafkarequesthandlerpool_threads") == config.num_io_threads
        assert value(built, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT",
                     protocol="kafka") == 0
    finally:
        await app.shutdown()


def test_admin_port_off(broker):
    b = broker(admin_port=None)
    first = b.log_events()[0]
    assert first["event"] == "strata_starting"
    assert not any(listener.startswith("http://") for listener in first["listeners"])
    started = [e for e in b.log_events() if e["event"] == "broker_started"][-1]
    assert started["admin_address"] is None


def test_admin_port_default_is_9644():
    config = BrokerConfig.load(environ={}, data_dir="/tmp/unused")
    assert config.admin_port == 9644
    with pytest.raises(Exception, match="admin.port"):
        BrokerConfig.load(environ={}, data_dir="/tmp/unused", overrides=["admin.port=-2"])


def test_first_line_names_version_listeners_and_data_dir(broker):
    b = broker()
    first = b.log_events()[0]
    assert first["event"] == "strata_starting"
    assert first["version"] and first["data_dir"] == b.data_dir
    assert [listener.split(" ")[0].split("://")[0] for listener in first["listeners"]] == ["native", "kafka", "http"]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_format(broker, fmt):
    b = broker("--set", f"log.format={fmt}")
    b.stop()
    lines = [line for line in b.stderr_text().splitlines() if line.strip()]
    assert "strata_starting" in lines[0]
    if fmt == "json":
        assert all(json.loads(line)["event"] for line in lines)
    else:
        assert not lines[0].lstrip().startswith("{")
        assert "data_dir=" in lines[0] and "version=" in lines[0]
