"""The Kafka listener's pieces: the records splice, configuration, producer ids and
topic ids across restarts, the zero-copy path (in-process broker), startup and
shutdown."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

import broker.net.server as server_module
from broker.config.broker_config import BrokerConfig
from broker.kafka import codec
from broker.kafka.state import PRODUCER_ID_BLOCK_SIZE, STATE_FILE, KafkaState
from kafka_format import build_batch
from kafka_format.errors import InvalidConfigError
from tests.broker.inprocess import InProcessBroker
from tests.broker_process import BrokerProcess, run_serve
from tests.kafka.conftest import create_topic
from tests.kafka.test_wire import fetch_request, metadata, only_partition, produce_request, request
from tests.kafka.wire import KafkaWire, decode


class FakeSlice:
    def __init__(self, data: bytes):
        self.data, self.length, self.released = data, len(data), False

    def release(self):
        self.released = True


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_spliced_response_decodes_like_a_plain_one(version):
    R = load_response_schema(1, version)
    T, P = codec.nested(R, "responses"), codec.nested(codec.nested(R, "responses"), "partitions")
    payloads = [b"A" * 10, b"", b"B" * 300, b"C" * 70000]
    splicer = codec.RecordsSplicer()
    parts = []
    for i, data in enumerate(payloads):
        records = splicer.marker(FakeSlice(data)) if data else b""
        parts.append(codec.make(P, partition_index=i, error_code=0, high_watermark=i, records=records))
    response = codec.make(R, throttle_time=0, error_code=0,
                          responses=(codec.make(T, topic="t", partitions=tuple(parts)),))
    framed = codec.encode_spliced(7, response, splicer)
    wire = b"".join(p.data if isinstance(p, FakeSlice) else p for p in framed)
    size = int.from_bytes(wire[:4], "big", signed=True)
    assert size == len(wire) - 4
    correlation_id, decoded = decode(R, wire[4:])
    assert correlation_id == 7
    assert [p.records or b"" for p in decoded.responses[0].partitions] == payloads
    assert sum(isinstance(p, FakeSlice) for p in framed) == 3  # the slices themselves, not copies


def test_make_fills_and_drops_fields():
    R = load_response_schema(3, 0)
    response = codec.make(R, brokers=(), topics=(), cluster_id="dropped in v0", throttle_time=5)
    assert response.brokers == () and not hasattr(response, "cluster_id")
    error = codec.error_response(load_response_schema(22, 4), 42)
    assert error.error_code == ErrorCode.invalid_request


def test_config_keys(tmp_path):
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={})
    assert config.kafka_port == 9092
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={"STRATA_KAFKA_PORT": "-1"})
    assert config.kafka_port == -1
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={},
                               overrides=["advertised.listeners=PLAINTEXT://kafka.example:0"])
    assert config.kafka_advertised("0.0.0.0", 19092) == ("kafka.example", 19092)
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={},
                               overrides=["advertised.listeners=PLAINTEXT://[::1]:9093"])
    assert config.kafka_advertised("0.0.0.0", 19092) == ("::1", 9093)
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={})
    assert config.kafka_advertised("127.0.0.1", 5) == ("127.0.0.1", 5)
    assert config.kafka_advertised("0.0.0.0", 5) == (socket.getfqdn(), 5)
    for bad in ("SSL://h:1", "PLAINTEXT://h", "PLAINTEXT://a:1,PLAINTEXT://b:2", "h:9092"):
        with pytest.raises(InvalidConfigError, match="advertised.listeners"):
            BrokerConfig.load(data_dir=str(tmp_path), environ={}, overrides=[f"advertised.listeners={bad}"])
    with pytest.raises(InvalidConfigError, match="kafka.port"):
        BrokerConfig.load(data_dir=str(tmp_path), environ={}, overrides=["kafka.port=70000"])


def test_producer_id_blocks_survive_restarts(tmp_path):
    state = KafkaState.open(str(tmp_path))
    cluster_id = state.cluster_id
    assert state.next_producer_id() is None  # no block claimed yet
    state.claim_block()
    ids = [state.next_producer_id() for _ in range(3)]
    assert ids == [0, 1, 2]
    again = KafkaState.open(str(tmp_path))  # a restart (or crash) skips the rest of the block
    assert again.cluster_id == cluster_id
    again.claim_block()
    assert again.next_producer_id() == PRODUCER_ID_BLOCK_SIZE
    doc = json.loads((tmp_path / STATE_FILE).read_text())
    assert doc["producer_id_block_end"] == 2 * PRODUCER_ID_BLOCK_SIZE


def test_ids_stay_stable_across_broker_restarts(tmp_path):
    process = BrokerProcess(tmp_path / "data")
    try:
        process.start()
        create_topic(process.bootstrap, "stable", 2)
        with KafkaWire(*process.kafka_address) as conn:
            first = metadata(conn, 12, ["stable"])
            pids = {conn.call(request(22, 4, transactional_id=None, transaction_timeout=1000)).producer_id
                    for _ in range(3)}
        process.restart()
        with KafkaWire(*process.kafka_address) as conn:
            second = metadata(conn, 12, ["stable"])
            pid = conn.call(request(22, 4, transactional_id=None, transaction_timeout=1000)).producer_id
        assert second.cluster_id == first.cluster_id
        assert second.topics[0].topic_id == first.topics[0].topic_id
        assert pid > max(pids)
    finally:
        process.close()


def test_registry_without_topic_ids_gets_them(tmp_path):
    data = tmp_path / "data"
    process = BrokerProcess(data)
    try:
        process.start()
        create_topic(process.bootstrap, "legacy")
        process.stop()
        registry = data / "strata-topics.json"
        doc = json.loads(registry.read_text())
        for entry in doc["topics"].values():
            entry.pop("id", None)
        registry.write_text(json.dumps(doc))
        process.restart()
        with KafkaWire(*process.kafka_address) as conn:
            topic = metadata(conn, 12, ["legacy"]).topics[0]
        assert topic.error_code == ErrorCode.none and topic.topic_id is not None
        assert all(e.get("id") for e in json.loads(registry.read_text())["topics"].values())
    finally:
        process.close()


def test_kafka_fetch_goes_through_sendfile(tmp_path):
    broker = InProcessBroker(tmp_path, "auto.create.topics.enable=true").start()
    try:
        host, port = broker.app.kafka_address
        create_topic(f"{host}:{port}", "zc")  # a produce never creates a topic, as in Kafka
        with KafkaWire(host, port) as conn:
            batch = build_batch([(None, b"s" * 200_000)])
            for _ in range(5):
                conn.call(produce_request(9, "zc", 0, batch))
            before = server_module.sendfile_stats.bytes + server_module.sendfile_stats.copied_bytes
            part = only_partition(conn.call(fetch_request(12, [("zc", 0, 0, 10 << 20)])))
            after = server_module.sendfile_stats.bytes + server_module.sendfile_stats.copied_bytes
        assert len(part.records) == 5 * len(batch)
        assert after - before == 5 * len(batch)  # every record byte went the file path
    finally:
        broker.stop()


def test_kafka_produce_and_fetch_share_the_native_inline_policy_and_fast_path(tmp_path):
    """Kafka Produce appends inline on the loop and a Fetch with data is answered
    in the socket callback, as native ones; an fsync due sends the append to the
    executor, and a long poll still waits for the next append (either protocol)."""
    broker = InProcessBroker(tmp_path).start()
    try:
        host, port = broker.app.kafka_address
        create_topic(f"{host}:{port}", "fast")
        create_topic(f"{host}:{port}", "synced", configs={"flush.messages": "1"})
        appends = broker.app.partitions.append_stats
        stats = broker.app.kafka_server.stats
        batch = build_batch([(None, b"v" * 100)])
        with KafkaWire(host, port) as conn:
            inline, at_once = appends.inline, stats.answered_at_once
            assert only_partition_of(conn.call(produce_request(9, "fast", 0, batch))).base_offset == 0
            assert (appends.inline, stats.answered_at_once) == (inline + 1, at_once + 1)
            part = only_partition(conn.call(fetch_request(12, [("fast", 0, 0, 1 << 20)])))
            assert len(part.records) == len(batch) and stats.answered_at_once == at_once + 2
            executor = appends.executor
            assert only_partition_of(conn.call(produce_request(9, "synced", 0, batch))).base_offset == 0
            assert appends.executor == executor + 1
            # A long poll at the log end: declined by the fast path, then waits in the task.
            conn.send(fetch_request(12, [("fast", 0, 1, 1 << 20)], max_wait_ms=20_000))
            time.sleep(0.2)
            with KafkaWire(host, port) as other:
                assert only_partition_of(other.call(produce_request(9, "fast", 0, batch))).base_offset == 1
            part = only_partition(conn.recv())
            assert part.records is not None and len(part.records) == len(batch)
    finally:
        broker.stop()


def only_partition_of(produce_response):
    (topic,) = produce_response.responses
    (part,) = topic.partition_responses
    assert part.error_code == ErrorCode.none
    return part


def test_kafka_port_in_use_fails_the_start(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = run_serve("--data-dir", str(tmp_path), "--host", "127.0.0.1", "--port", "0",
                                   "--kafka-port", str(port))
    assert code != 0 and f"cannot listen on 127.0.0.1:{port}" in err


def test_no_kafka_listener(tmp_path):
    process = BrokerProcess(tmp_path / "data", kafka_port=None)
    try:
        process.start()
        assert process.kafka_port is None
    finally:
        process.close()


def test_shutdown_answers_a_long_poll(tmp_path):
    process = BrokerProcess(tmp_path / "data", "--set", "auto.create.topics.enable=true")
    try:
        process.start()
        create_topic("{}:{}".format(*process.kafka_address), "lp")
        conn = KafkaWire(*process.kafka_address)
        conn.call(produce_request(9, "lp", 0, build_batch([(None, b"x")])))
        result = {}

        def poll():
            try:
                result["response"] = conn.call(fetch_request(12, [("lp", 0, 1, 1000)], max_wait_ms=60_000))
            except Exception as e:  # noqa: BLE001
                result["error"] = e

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert process.stop() == 0
        thread.join(30)
        assert time.monotonic() - started < 20
        assert only_partition(result["response"]).error_code == ErrorCode.none
        conn.close()
    finally:
        process.close()
