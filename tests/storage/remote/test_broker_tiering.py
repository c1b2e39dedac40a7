"""Tiered storage through the real broker process: a tiered topic with small
segments and small local retention copies its rolled segments to the store (a
directory, or moto's S3 server on loopback), deletes them locally, and serves
them again to confluent-kafka (Kafka listener) and the native client; ListOffsets
-2 answers the remote start and -4 the local one."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from client import Admin, Consumer, Producer
from client.errors import StrataClientError
from tests.broker_process import BrokerProcess

from .conftest import S3Server

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "1",
                 "retention.ms": "-1", "retention.bytes": "-1"}
VALUES = [b"record-%05d-" % i + b"x" * 200 for i in range(200)]
WAIT_S = 90.0  # a guard against hangs, not a speed assumption


def tiered_broker(data_dir, store_args: list[str], env: dict[str, str] | None = None, *,
                  interval_ms: int = 100) -> BrokerProcess:
    return BrokerProcess(data_dir, "--set", "remote.log.storage.system.enable=true",
                         "--set", f"remote.log.manager.task.interval.ms={interval_ms}",
                         "--set", "remote.log.manager.task.retry.backoff.ms=100",
                         "--set", "remote.log.manager.task.retry.backoff.max.ms=500",
                         "--set", "log.initial.task.delay.ms=0", *store_args, env=env)


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path):
    """(serve arguments, environment, the S3 server or None) of a fresh store."""
    if request.param == "file":
        yield ["--set", f"rsm.config.url=file://{tmp_path / 'store'}"], None, None
        return
    server = request.getfixturevalue("s3_server")
    if server.process is None:
        server.start()
    bucket = f"tier-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    yield ["--set", f"rsm.config.url=s3://{bucket}/cluster", "--set", f"rsm.config.s3.endpoint={server.endpoint}",
           "--set", "rsm.config.s3.region=us-east-1"], env, server


def native(broker: BrokerProcess) -> str:
    """The native listener's "host:port" for the client."""
    return f"{broker.host}:{broker.port}"


def produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    with Producer(native(broker), linger_ms=0) as producer:
        for value in values:
            producer.send_and_wait(topic, value)


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def offsets(broker: BrokerProcess, topic: str) -> tuple[int, int, int]:
    """(log start, local log start, log end): native OFFSETS -2 and -1, the local
    start from the first local segment's base offset."""
    with Admin(native(broker)) as admin:
        start, end = admin.offsets(topic, 0, -2)[0], admin.offsets(topic, 0, -1)[0]
    return start, int(local_segments(broker, topic)[0].split(".")[0]), end


def consume_native(broker: BrokerProcess, topic: str, count: int) -> list[tuple[int, bytes]]:
    got: list = []
    with Consumer(native(broker), auto_offset_reset="earliest") as consumer:
        consumer.assign(topic, [0])
        consumer.seek(topic, 0, 0)
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            got += consumer.poll(500)
    return [(r.offset, r.value) for r in got]


def consume_kafka(broker: BrokerProcess, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
        return got
    finally:
        consumer.close()


def kafka_list_offsets(broker: BrokerProcess, topic: str) -> dict[int, int]:
    """ListOffsets v9 over the wire (kio) for -1, -2, -4 and -5: librdkafka refuses
    to send -4 itself."""
    from kio.schema.list_offsets.v9 import request as lo
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    from tests.kafka.wire import KafkaWire

    out = {}
    with KafkaWire(*broker.kafka_address) as conn:
        for code in (-1, -2, -4, -5):
            request = lo.ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
                lo.ListOffsetsTopic(name=TopicName(topic), partitions=(
                    lo.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(code)),)),))
            response = conn.call(request)
            partition = response.topics[0].partitions[0]
            assert partition.error_code == 0, partition
            out[code] = partition.offset
    return out


def local_segments(broker: BrokerProcess, topic: str) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(broker.data_dir, f"{topic}-0")) if n.endswith(".log"))


def test_tiered_topic_is_copied_deleted_locally_and_read_back_on_both_protocols(tmp_path, store):
    args, env, server = store
    topic = f"tiered-{uuid.uuid4().hex[:8]}"
    with tiered_broker(tmp_path / "data", args, env).start() as broker:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        produce(broker, topic, VALUES)
        # local.retention.bytes=1: every rolled segment goes once copied; the active one stays.
        wait_for(lambda: len(local_segments(broker, topic)) == 1, "copy and local deletion")
        remote_start, local_start, end = offsets(broker, topic)
        assert remote_start == 0 and end == len(VALUES) and local_start > 0
        expected = list(enumerate(VALUES))
        assert consume_native(broker, topic, len(VALUES)) == expected
        assert consume_kafka(broker, topic, len(VALUES)) == expected
        listed = kafka_list_offsets(broker, topic)
        assert listed[-2] == 0 and listed[-1] == len(VALUES) and listed[-4] == local_start
        assert local_start - 1 <= listed[-5] < len(VALUES)  # the highest copied offset
        # The metadata directory is not taken for a partition (no topic of that name).
        with Admin(native(broker)) as admin:
            assert "__remote_log_metadata" not in admin.list_topics()
        # After a restart the remote data is found again through the metadata.
        broker.stop()
        broker.restart()
        assert offsets(broker, topic)[0] == 0
        assert consume_native(broker, topic, len(VALUES)) == expected
        # Deleting the topic deletes its remote segments.
        with Admin(native(broker)) as admin:
            admin.delete_topic(topic)
        if server is None:
            def remote_logs():
                return [name for _, _, names in os.walk(tmp_path / "store") for name in names
                        if name.endswith((".log", ".manifest"))]

            wait_for(lambda: not remote_logs(), "the remote segments deleted")


def test_tiering_needs_the_broker_setting(tmp_path):
    with BrokerProcess(tmp_path / "data").start() as broker, Admin(native(broker)) as admin:
        with pytest.raises(Exception, match="remote.log.storage.system.enable|remote log storage"):
            admin.create_topic("t-refused", 1, {"remote.storage.enable": "true"})
        admin.create_topic("t-plain", 1)
        with pytest.raises(Exception, match="remote log storage"):
            admin.alter_config("t-plain", {"remote.storage.enable": "true"})


def test_store_down_at_start_serves_local_data_and_deletes_nothing(tmp_path, s3_server):
    if s3_server.process is None:
        s3_server.start()
    bucket = f"tier-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    # An S3 endpoint where nothing listens: the store is down.
    down = S3Server(str(tmp_path / "unused.log"))
    args = ["--set", f"rsm.config.url=s3://{bucket}/c", "--set", f"rsm.config.s3.endpoint={down.endpoint}"]
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    topic = f"down-{uuid.uuid4().hex[:8]}"
    with tiered_broker(tmp_path / "data", args, env).start() as broker:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        produce(broker, topic, VALUES)
        segments = local_segments(broker, topic)
        assert len(segments) > 2
        import urllib.request

        def lag_reported():
            with urllib.request.urlopen(broker.admin_url("/metrics"), timeout=10) as response:
                text = response.read().decode()
            lines = [line for line in text.splitlines()
                     if line.startswith("kafka_server_brokertopicmetrics_remotecopylagbytes{")]
            return lines and float(lines[0].split()[-1]) > 0 and text

        wait_for(lag_reported, "copy lag in metrics")
        def ready_detail():
            with urllib.request.urlopen(broker.admin_url("/health/ready"), timeout=10) as response:
                return response.read().decode()

        detail = wait_for(lambda: "failing_partitions=1" in (d := ready_detail()) and d, "the failure in /health/ready")
        assert "copy_lag_bytes=" in detail and "last_error=" in detail
        assert local_segments(broker, topic) == segments  # nothing deleted that is not in the store
        assert offsets(broker, topic)[:2] == (0, 0)
        assert consume_native(broker, topic, len(VALUES)) == list(enumerate(VALUES))


def test_kill_during_copy_then_restart_loses_nothing(tmp_path, store):
    args, env, _server = store
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    broker = tiered_broker(tmp_path / "data", args, env).start()
    try:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        produce(broker, topic, VALUES)
        wait_for(lambda: offsets(broker, topic)[1] > 0, "a first copy")
        broker.stop(signal.SIGKILL)
        broker.restart()
        produce(broker, topic, [b"after-%d" % i for i in range(50)])
        expected = list(enumerate(VALUES + [b"after-%d" % i for i in range(50)]))
        assert consume_native(broker, topic, len(expected)) == expected
        assert consume_kafka(broker, topic, len(expected)) == expected
    finally:
        broker.close()


def test_a_missing_remote_object_is_a_clear_fetch_error(tmp_path):
    store_dir = tmp_path / "store"
    topic = f"gone-{uuid.uuid4().hex[:8]}"
    with tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{store_dir}"]).start() as broker:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        produce(broker, topic, VALUES)
        wait_for(lambda: offsets(broker, topic)[1] > 0, "copy and local deletion")
        removed = [os.path.join(root, name) for root, _, names in os.walk(store_dir) for name in names
                   if name.endswith(".log")]
        assert removed
        for path in removed:
            os.remove(path)
        # The Kafka listener: Fetch v4 over the wire answers KAFKA_STORAGE_ERROR (56).
        import datetime

        from kio.schema.fetch.v4 import request as fetch
        from kio.schema.types import TopicName
        from kio.static.primitive import i32, i32Timedelta, i64

        from tests.kafka.wire import KafkaWire

        with KafkaWire(*broker.kafka_address) as conn:
            response = conn.call(fetch.FetchRequest(
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)), min_bytes=i32(1), topics=(
                    fetch.FetchTopic(topic=TopicName(topic), partitions=(fetch.FetchPartition(
                        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),)),)))
            assert response.responses[0].partitions[0].error_code == 56
        # The native client: the fetch's error names the problem.
        with Consumer(native(broker), auto_offset_reset="none") as reader:
            reader.assign(topic, [0])
            reader.seek(topic, 0, 0)
            with pytest.raises(StrataClientError) as caught:
                deadline = time.monotonic() + WAIT_S
                while time.monotonic() < deadline:
                    reader.poll(500)
        assert caught.value.code == 56, caught.value
        assert "is missing" in str(caught.value)
        assert broker.running


def test_turning_tiering_off_needs_delete_on_disable_and_deletes_the_remote_data(tmp_path):
    store_dir = tmp_path / "store"
    topic = f"off-{uuid.uuid4().hex[:8]}"
    with tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{store_dir}"]).start() as broker:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        produce(broker, topic, VALUES)
        wait_for(lambda: len(local_segments(broker, topic)) == 1, "copy and local deletion")
        local_start = offsets(broker, topic)[1]
        with Admin(native(broker)) as admin:
            with pytest.raises(Exception, match="remote.log.delete.on.disable"):
                admin.alter_config(topic, {"remote.storage.enable": "false"})
            admin.alter_config(topic, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        assert not [name for _, _, names in os.walk(store_dir) for name in names if name.endswith(".log")]
        assert offsets(broker, topic)[0] == local_start  # the log starts locally again
        assert kafka_list_offsets(broker, topic)[-2] == local_start


def test_read_committed_from_the_store_drops_aborted_transactions(tmp_path):
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    with tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{tmp_path / 'store'}"]).start() as broker:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tiered-txn",
                                             "batch.num.messages": 4, "linger.ms": 0})  # batches under segment.bytes
        producer.init_transactions(30)
        kept = []
        for round_ in range(6):
            producer.begin_transaction()
            values = [b"t%d-%03d-" % (round_, i) + b"y" * 200 for i in range(20)]
            for value in values:
                producer.produce(topic, value=value)
            producer.flush(30)
            if round_ % 2:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                kept += values
        produce(broker, topic, VALUES[:40])  # the last transaction's segment rolls and is copied
        kept += VALUES[:40]
        wait_for(lambda: len(local_segments(broker, topic)) == 1, "copy and local deletion")
        assert offsets(broker, topic)[0] == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-txn",
                                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
            got = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < len(kept) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None:
                    assert message.error() is None, message.error()
                    got.append(message.value())
            time.sleep(0.5)
            extra = consumer.poll(0.5)
        finally:
            consumer.close()
        assert got == kept
        assert extra is None


@pytest.mark.parametrize(("settings", "message"), [
    (["remote.log.storage.system.enable=true"], "rsm.config.url must be set when remote.log.storage.system.enable"),
    (["remote.log.storage.system.enable=true", "rsm.config.url=ftp://x"], "must start with s3:// or file://"),
    (["remote.log.manager.task.interval.ms=0"], "remote.log.manager.task.interval.ms"),
])
def test_bad_tiered_storage_settings_fail_the_start_with_one_line(tmp_path, settings, message):
    from tests.broker_process import run_serve

    args = ["--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", "0", "--kafka-port", "0",
            "--admin-port", "-1"]
    for setting in settings:
        args += ["--set", setting]
    code, _out, err = run_serve(*args)
    assert code != 0
    assert message in err and "Traceback" not in err


def stored_files(root) -> list[str]:
    return sorted(os.path.join(path, name) for path, _, names in os.walk(root) for name in names)


def metric(broker: BrokerProcess, name: str) -> float | None:
    """The value of an unlabelled metric in /metrics, None when absent."""
    import urllib.request

    with urllib.request.urlopen(broker.admin_url("/metrics"), timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return None


def test_a_failed_remote_deletion_is_retried_and_survives_a_kill(tmp_path):
    store_dir = tmp_path / "store"
    topic = f"undead-{uuid.uuid4().hex[:8]}"
    broker = tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{store_dir}"]).start()
    try:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        produce(broker, topic, VALUES)
        wait_for(lambda: len(local_segments(broker, topic)) == 1, "copy and local deletion")
        # A directory in the place of one segment's .log object: the store cannot delete it.
        victim = next(path for path in stored_files(store_dir) if path.endswith(".log"))
        os.remove(victim)
        os.mkdir(victim)
        with open(os.path.join(victim, "blocker"), "w") as f:
            f.write("x")
        with Admin(native(broker)) as admin:
            admin.delete_topic(topic)

        def failures() -> int:
            return sum(1 for event in broker.log_events() if event.get("event") == "remote_partition_delete_failed")

        wait_for(lambda: failures() >= 2, "the failed deletion retried")
        assert metric(broker, "strata_tiered_pending_partition_deletions") == 1
        assert any(path.endswith(".log") and path != victim for path in stored_files(store_dir))
        # Killed while the deletion is pending; the store heals; the restarted broker finishes it.
        broker.stop(signal.SIGKILL)
        import shutil

        shutil.rmtree(victim)
        broker.restart()
        wait_for(lambda: not stored_files(store_dir), "the remote data deleted after the restart")
        wait_for(lambda: metric(broker, "strata_tiered_pending_partition_deletions") == 0, "no deletion pending")
    finally:
        broker.close()


def kafka_fetch(broker: BrokerProcess, topic: str, offset: int) -> tuple[int, int]:
    """(error code, log start offset) of a Fetch v5 at `offset` over the wire."""
    import datetime

    from kio.schema.fetch.v5 import request as fetch
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    from tests.kafka.wire import KafkaWire

    with KafkaWire(*broker.kafka_address) as conn:
        response = conn.call(fetch.FetchRequest(
            replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
            min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), topics=(
                fetch.FetchTopic(topic=TopicName(topic), partitions=(fetch.FetchPartition(
                    partition=i32(0), fetch_offset=i64(offset), log_start_offset=i64(-1),
                    partition_max_bytes=i32(1 << 20)),)),)))
    partition = response.responses[0].partitions[0]
    return partition.error_code, partition.log_start_offset


@pytest.mark.parametrize("stop", ["kill", "clean"])
def test_the_log_start_total_retention_moved_survives_a_restart(tmp_path, stop):
    store_dir = tmp_path / "store"
    topic = f"expire-{uuid.uuid4().hex[:8]}"
    configs = dict(TOPIC_CONFIGS, **{"retention.bytes": "12000"})
    broker = tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{store_dir}"]).start()
    try:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, configs)
        produce(broker, topic, VALUES)
        # Total retention deletes the oldest remote segments; the log start follows.
        def within_retention() -> bool:
            """Kafka's size rule is met: dropping the oldest remote segment would
            take the log below retention.bytes."""
            local = local_segments(broker, topic)
            remote = sorted(p for p in stored_files(store_dir) if p.endswith(".log"))
            if len(local) != 1 or not remote:
                return False
            size = os.path.getsize(os.path.join(broker.data_dir, f"{topic}-0", local[0]))
            size += sum(os.path.getsize(p) for p in remote)
            return size - 12000 < os.path.getsize(remote[0])

        wait_for(within_retention, "remote segments deleted by retention.bytes")
        start = kafka_list_offsets(broker, topic)[-2]
        assert start > 0
        assert kafka_fetch(broker, topic, start - 1)[0] == 1  # OFFSET_OUT_OF_RANGE
        assert kafka_fetch(broker, topic, start) == (0, start)
        broker.stop(signal.SIGKILL if stop == "kill" else signal.SIGTERM)
        broker.close()
        # Restarted with passes far apart: what the broker answers before its first pass.
        broker = tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{store_dir}",
                                                   "--set", "log.initial.task.delay.ms=3600000"],
                               interval_ms=3_600_000).start()
        assert kafka_fetch(broker, topic, len(VALUES)) == (0, start)  # a consumer at the end
        assert kafka_list_offsets(broker, topic)[-2] == start
        assert offsets(broker, topic)[0] == start
        assert kafka_fetch(broker, topic, start - 1)[0] == 1
        assert kafka_fetch(broker, topic, start) == (0, start)
        expected = list(enumerate(VALUES))[start:]
        assert consume_kafka(broker, topic, len(expected)) == expected
    finally:
        broker.close()


def test_describe_log_dirs_and_the_cli_show_local_and_remote_sizes(tmp_path):
    import json

    from kafka.admin import KafkaAdminClient

    from tests.cli.test_client_commands import ok, strata

    store_dir = tmp_path / "store"
    topic = f"sizes-{uuid.uuid4().hex[:8]}"
    with tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{store_dir}"]).start() as broker:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
            admin.create_topic(f"{topic}-plain", 1)
        produce(broker, topic, VALUES)
        wait_for(lambda: len(local_segments(broker, topic)) == 1, "copy and local deletion")
        local_bytes = os.path.getsize(os.path.join(broker.data_dir, f"{topic}-0", local_segments(broker, topic)[0]))
        remote_bytes = sum(os.path.getsize(p) for p in stored_files(store_dir) if p.endswith(".log"))
        admin_client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            (answer,) = admin_client.describe_log_dirs()
        finally:
            admin_client.close()
        by_dir = {d["log_dir"]: d for d in answer["log_dirs"]}
        local, remote = by_dir[os.path.realpath(broker.data_dir)], by_dir[f"file://{store_dir}"]
        assert len(by_dir) == 2 and local["error_code"] == remote["error_code"] == 0

        def sizes(log_dir) -> dict[tuple[str, int], int]:
            return {(t["name"], p["partition_index"]): p["partition_size"]
                    for t in log_dir["topics"] for p in t["partitions"]}

        assert sizes(local)[(topic, 0)] == local_bytes
        assert sizes(remote) == {(topic, 0): remote_bytes}  # only tiered partitions, with their store bytes
        assert remote["total_bytes"] == remote["usable_bytes"] == -1
        # strata log-dirs describe prints both log dirs, kafka-log-dirs' JSON.
        printed = ok(strata("log-dirs", "describe", "--topic-list", topic, "--bootstrap-server", native(broker),
                            "--kafka-bootstrap-server", broker.bootstrap)).splitlines()
        dirs = {d["logDir"]: d for d in json.loads(printed[2])["brokers"][0]["logDirs"]}
        assert [(p["partition"], p["size"]) for p in dirs[os.path.realpath(broker.data_dir)]["partitions"]] == [
            (f"{topic}-0", local_bytes)]
        assert [(p["partition"], p["size"]) for p in dirs[f"file://{store_dir}"]["partitions"]] == [
            (f"{topic}-0", remote_bytes)]


def test_delete_records_into_the_remote_data_moves_the_log_start_durably(tmp_path):
    store_dir = tmp_path / "store"
    topic = f"dr-{uuid.uuid4().hex[:8]}"
    broker = tiered_broker(tmp_path / "data", ["--set", f"rsm.config.url=file://{store_dir}"]).start()

    def remote_starts() -> list[int]:
        return sorted(int(os.path.basename(p).split("-")[0]) for p in stored_files(store_dir) if p.endswith(".log"))

    try:
        with Admin(native(broker)) as admin:
            admin.create_topic(topic, 1, TOPIC_CONFIGS)
        produce(broker, topic, VALUES)
        wait_for(lambda: len(local_segments(broker, topic)) == 1, "copy and local deletion")
        first, second = remote_starts()[:2]
        target = second + 1  # inside the second remote segment: the first one goes whole
        with Admin(native(broker)) as admin:
            assert admin.delete_records(topic, 0, target) == target
        # Kafka's DeleteRecords through the Kafka listener answers the same low watermark.
        from confluent_kafka.admin import AdminClient

        kafka_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        (future,) = kafka_admin.delete_records([confluent_kafka.TopicPartition(topic, 0, first)]).values()
        assert future.result(WAIT_S).low_watermark == target  # never back

        def answers_the_start() -> None:
            assert kafka_list_offsets(broker, topic)[-2] == target
            # by timestamp: the first record from the log start, not one below it
            consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times"})
            try:
                (found,) = consumer.offsets_for_times([confluent_kafka.TopicPartition(topic, 0, 0)], WAIT_S)
            finally:
                consumer.close()
            assert found.offset == target
            assert offsets(broker, topic)[0] == target
            assert kafka_fetch(broker, topic, target - 1)[0] == 1  # OFFSET_OUT_OF_RANGE
            assert kafka_fetch(broker, topic, target) == (0, target)
            expected = list(enumerate(VALUES))[target:]
            assert consume_kafka(broker, topic, len(expected)) == expected

        answers_the_start()
        wait_for(lambda: remote_starts()[0] == second, "the remote segment below the log start deleted")
        broker.stop(signal.SIGKILL)
        broker.restart()
        answers_the_start()
    finally:
        broker.close()
