"""Kafka's DynamicLogConfig on one node (broker/config/dynamic_broker_configs.py LOG_KEYS): log.* topic
defaults set at runtime on the BROKER resource ("" = cluster default, "0" = this broker, which
wins) apply at once to every topic without an override, are described with their source on the
broker and on the topics (both protocols show the same value), survive a restart, and fall back
to the static setting when deleted."""

from __future__ import annotations

import os
import pathlib
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kio.index import load_request_schema

from broker.kafka.codec import make, nested
from client import Admin as NativeAdmin
from tests.broker_process import BrokerProcess, run_serve
from tests.kafka.test_dynamic_broker_configs import INVALID_REQUEST, raw_alter
from tests.kafka.wire import KafkaWire

TIMEOUT = 30
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("dyn-log"), "--set", "log.initial.task.delay.ms=0",
                            "--set", "log.retention.check.interval.ms=100",
                            "--set", "log.segment.bytes=1048576")
    try:
        yield process.start()
    finally:
        process.close()


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter(broker, name: str, *ops: tuple[str, str | None, AlterConfigOpType]) -> None:
    """IncrementalAlterConfigs: confluent-kafka's AdminClient for broker "0", the raw request for the
    cluster default "" (the client refuses an empty resource name); an error is KafkaException."""
    if name == "":
        code, message = raw_alter(broker, "", *((key, op.value, value) for key, value, op in ops))
        if code:
            raise KafkaException(f"{'INVALID_REQUEST' if code == INVALID_REQUEST else code}: {message}")
        return
    resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in ops])
    client = admin(broker)
    client.incremental_alter_configs([resource])[resource].result(TIMEOUT)


def describe(broker, kind: ConfigResource.Type, name: str) -> dict:
    resource = ConfigResource(kind, name)
    client = admin(broker)
    return client.describe_configs([resource])[resource].result(TIMEOUT)


def entry(broker, kind: ConfigResource.Type, name: str, key: str) -> tuple[str, int]:
    found = describe(broker, kind, name)[key]
    return found.value, found.source


def raw_describe(broker, name: str, keys: tuple[str, ...] | None) -> list:
    """DescribeConfigs v1 of broker `name` with include_synonyms (confluent-kafka refuses the
    name "", and its ConfigEntry keeps one synonym per name): the configs answered."""
    request_class = load_request_schema(32, 1)
    resource_class = nested(request_class, "resources")
    wire = KafkaWire(*broker.kafka_address)
    try:
        answer = wire.call(make(request_class, include_synonyms=True, resources=(
            make(resource_class, resource_type=4, resource_name=name, configuration_keys=keys),)))
    finally:
        wire.close()
    (result,) = answer.results
    return list(result.configs)


def raw_synonyms(broker, name: str, key: str) -> list[tuple[str, str, int]]:
    """The key's synonyms (name, value, source) as DescribeConfigs v1 answers them."""
    (config,) = raw_describe(broker, name, (key,))
    return [(s.name, s.value, s.source.value if hasattr(s.source, "value") else s.source)
            for s in config.synonyms]


def create(broker, name: str, configs: dict[str, str]) -> None:
    client = admin(broker)
    client.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(TIMEOUT)


def produce(broker, topic: str, count: int, size: int, timestamp: int = 0) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for _ in range(count):
        producer.produce(topic, b"x" * size, timestamp=timestamp)
        producer.flush(TIMEOUT)


def log_start(broker, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)[0]
    finally:
        consumer.close()


def segments(broker, topic: str) -> int:
    return len([f for f in os.listdir(os.path.join(broker.data_dir, f"{topic}-0")) if f.endswith(".log")])


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


BROKER, TOPIC = ConfigResource.Type.BROKER, ConfigResource.Type.TOPIC


def test_retention_default_applies_to_topics_without_override_and_survives_a_restart(broker):
    create(broker, "plain", {"segment.bytes": "1024"})
    create(broker, "kept", {"segment.bytes": "1024", "retention.ms": "-1"})
    old = int(time.time() * 1000) - 2 * DAY_MS
    for topic in ("plain", "kept"):
        produce(broker, topic, 12, 300, old)
    # this broker's own value wins over the cluster default
    alter(broker, "", ("log.retention.ms", "3600000", AlterConfigOpType.SET))
    alter(broker, "0", ("log.retention.ms", "-1", AlterConfigOpType.SET))
    assert entry(broker, TOPIC, "plain", "retention.ms") == ("-1", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert entry(broker, TOPIC, "kept", "retention.ms") == ("-1", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    found = describe(broker, BROKER, "0")["log.retention.ms"]
    assert (found.value, found.source, found.is_read_only) == ("-1", ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                                                               False)
    assert raw_synonyms(broker, "0", "log.retention.ms") == [
        ("log.retention.ms", "-1", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
        ("log.retention.ms", "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]  # Kafka's order: by source
    # the cluster default resource lists only what is set there, without this broker's layer
    assert [c.name for c in raw_describe(broker, "", None)] == ["log.retention.ms"]
    assert raw_synonyms(broker, "", "log.retention.ms") == [
        ("log.retention.ms", "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]
    with NativeAdmin(f"{broker.host}:{broker.port}") as native:
        assert native.describe_config("plain")["retention.ms"] == "-1"

    alter(broker, "0", ("log.retention.ms", None, AlterConfigOpType.DELETE))
    assert entry(broker, TOPIC, "plain", "retention.ms") == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    wait_until(lambda: log_start(broker, "plain") > 0, "the old segments of 'plain' are deleted")
    assert log_start(broker, "kept") == 0  # its own retention.ms=-1 wins
    assert segments(broker, "kept") > 1

    broker.restart()
    assert entry(broker, TOPIC, "plain", "retention.ms") == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    with NativeAdmin(f"{broker.host}:{broker.port}") as native:
        assert native.describe_config("plain")["retention.ms"] == "3600000"
    alter(broker, "", ("log.retention.ms", None, AlterConfigOpType.DELETE))
    assert entry(broker, TOPIC, "plain", "retention.ms") == (str(7 * DAY_MS), ConfigSource.DEFAULT_CONFIG.value)


def test_segment_bytes_default_rolls_at_the_new_size_and_deleting_falls_back_to_static(broker):
    create(broker, "rolled", {})
    produce(broker, "rolled", 4, 300)
    assert segments(broker, "rolled") == 1
    alter(broker, "", ("log.segment.bytes", "1024", AlterConfigOpType.SET))
    produce(broker, "rolled", 12, 300)
    assert segments(broker, "rolled") >= 3
    assert entry(broker, TOPIC, "rolled", "segment.bytes") == (
        "1024", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    found = describe(broker, BROKER, "0")["log.segment.bytes"]
    assert (found.value, found.source) == ("1024", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert raw_synonyms(broker, "0", "log.segment.bytes") == [
        ("log.segment.bytes", "1024", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ("log.segment.bytes", "1048576", ConfigSource.STATIC_BROKER_CONFIG.value),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG.value)]

    alter(broker, "", ("log.segment.bytes", None, AlterConfigOpType.DELETE))
    assert entry(broker, TOPIC, "rolled", "segment.bytes") == ("1048576", ConfigSource.STATIC_BROKER_CONFIG.value)
    before = segments(broker, "rolled")
    produce(broker, "rolled", 12, 300)
    assert segments(broker, "rolled") == before  # 1 MiB segments again: no roll


def test_a_bad_value_or_a_static_synonym_changes_nothing(broker):
    create(broker, "untouched", {})
    cases = (
        (("log.segment.bytes", "5"), "INVALID_REQUEST.*Invalid value 5 for configuration log.segment.bytes"),
        (("log.cleanup.policy", "shred"), "INVALID_REQUEST.*log.cleanup.policy"),
        (("log.retention.ms", "soon"), "INVALID_REQUEST.*log.retention.ms"),
        (("log.retention.ms", "-5"), "INVALID_REQUEST.*-5 must be at least -1"),
        # Kafka keeps the later synonyms static: only the first (log.retention.ms) is dynamic
        (("log.retention.hours", "1"), "INVALID_REQUEST.*Cannot update these configs dynamically: "
                                       "log.retention.hours"),
    )
    for (key, value), error in cases:
        with pytest.raises(KafkaException, match=error):
            alter(broker, "", (key, value, AlterConfigOpType.SET),
                  ("log.flush.interval.messages", "7", AlterConfigOpType.SET))
    # keys checked together: min.compaction.lag.ms above max.compaction.lag.ms
    with pytest.raises(KafkaException, match="INVALID_REQUEST.*min.compaction.lag.ms"):
        alter(broker, "0", ("log.cleaner.min.compaction.lag.ms", "10", AlterConfigOpType.SET),
              ("log.cleaner.max.compaction.lag.ms", "5", AlterConfigOpType.SET))
    configs = describe(broker, TOPIC, "untouched")
    assert configs["flush.messages"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["min.compaction.lag.ms"].value == "0"
    assert describe(broker, BROKER, "0")["log.flush.interval.messages"].source == ConfigSource.DEFAULT_CONFIG.value
    stored = pathlib.Path(broker.data_dir, "broker-configs.json")
    assert not stored.exists() or "flush" not in stored.read_text()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_configs_replaces_the_brokers_log_defaults(broker):
    create(broker, "legacy", {})
    client = admin(broker)
    resource = ConfigResource(BROKER, "0", set_config={"log.retention.bytes": "1000000"})
    assert client.alter_configs([resource])[resource].result(TIMEOUT) is None
    assert entry(broker, TOPIC, "legacy", "retention.bytes") == (
        "1000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # the listed configs replace all of broker 0's: retention.bytes is gone
    resource = ConfigResource(BROKER, "0", set_config={"log.index.interval.bytes": "8192"})
    assert client.alter_configs([resource])[resource].result(TIMEOUT) is None
    configs = describe(broker, TOPIC, "legacy")
    assert (configs["retention.bytes"].value, configs["retention.bytes"].source) == (
        "-1", ConfigSource.DEFAULT_CONFIG.value)
    assert (configs["index.interval.bytes"].value, configs["index.interval.bytes"].source) == (
        "8192", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    resource = ConfigResource(BROKER, "0", set_config={})
    assert client.alter_configs([resource])[resource].result(TIMEOUT) is None
    assert entry(broker, TOPIC, "legacy", "index.interval.bytes") == ("4096", ConfigSource.DEFAULT_CONFIG.value)


def test_a_stored_default_that_is_no_longer_valid_stops_the_start_naming_the_file(tmp_path):
    (tmp_path / "broker-configs.json").write_text(
        '{"version": 1, "brokers": {"": {"log.cleaner.min.compaction.lag.ms": "10"}}}')
    code, _, stderr = run_serve("--data-dir", str(tmp_path), "--set", "log.cleaner.max.compaction.lag.ms=5")
    assert code != 0
    assert "broker-configs.json" in stderr and "min.compaction.lag.ms" in stderr
    assert "Traceback" not in stderr


def produce_keyless(broker, topic: str) -> list:
    """Three records without a key (a compacted topic refuses them): the delivery errors."""
    errors: list = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for _ in range(3):
        producer.produce(topic, b"no key", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(TIMEOUT) == 0
    return [e for e in errors if e is not None]


def changes_logged(broker, key: str) -> list[tuple[str, str | None, str | None]]:
    return [(e["resource"], e["old"], e["new"]) for e in broker.log_events()
            if e.get("event") == "broker_config_changed" and e.get("key") == key]


def test_append_then_subtract_on_this_broker_start_from_kafkas_default(broker):
    """librdkafka's 0081_admin: APPEND then SUBTRACT of `compact` on broker "0", which does not set
    log.cleanup.policy, works on Kafka's default `delete` (as Kafka's controller) and leaves topics
    created afterwards deleting, not compacting."""
    alter(broker, "0", ("background.threads", "9", AlterConfigOpType.SET),
          ("log.cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert entry(broker, BROKER, "0", "log.cleanup.policy") == (
        "delete,compact", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    alter(broker, "0", ("background.threads", None, AlterConfigOpType.DELETE),
          ("log.cleanup.policy", "compact", AlterConfigOpType.SUBTRACT))
    assert entry(broker, BROKER, "0", "log.cleanup.policy") == (
        "delete", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    create(broker, "after-subtract", {})
    assert entry(broker, TOPIC, "after-subtract", "cleanup.policy")[0] == "delete"
    assert produce_keyless(broker, "after-subtract") == []

    # every change is logged, naming the resource, the key and both values
    assert changes_logged(broker, "log.cleanup.policy")[-2:] == [
        ("broker 0", None, "delete,compact"), ("broker 0", "delete,compact", "delete")]
    assert changes_logged(broker, "background.threads")[-2:] == [("broker 0", None, "9"), ("broker 0", "9", None)]
    alter(broker, "0", ("log.cleanup.policy", None, AlterConfigOpType.DELETE))
    assert changes_logged(broker, "log.cleanup.policy")[-1] == ("broker 0", "delete", None)


def test_append_starts_from_the_resources_own_value_else_kafkas_default(broker):
    """Kafka's ConfigurationControlManager.getParts: the cluster default "" and topics too; the
    value a resource inherits (the cluster default's, a broker default) is not where they start."""
    alter(broker, "", ("log.cleanup.policy", "compact", AlterConfigOpType.APPEND))
    assert raw_synonyms(broker, "", "log.cleanup.policy")[0] == (
        "log.cleanup.policy", "delete,compact", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    alter(broker, "", ("log.cleanup.policy", "compact", AlterConfigOpType.SET))
    # broker "0" sets nothing: its APPEND starts from Kafka's default, not the cluster default's value
    alter(broker, "0", ("log.cleanup.policy", "delete", AlterConfigOpType.APPEND))
    assert entry(broker, BROKER, "0", "log.cleanup.policy") == ("delete", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    alter(broker, "0", ("log.cleanup.policy", None, AlterConfigOpType.DELETE))

    # a topic without its own policy, compacted by the cluster default: APPEND starts from `delete`
    create(broker, "inherits-compact", {})
    assert entry(broker, TOPIC, "inherits-compact", "cleanup.policy")[0] == "compact"
    resource = ConfigResource(TOPIC, "inherits-compact", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    client = admin(broker)
    client.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert entry(broker, TOPIC, "inherits-compact", "cleanup.policy") == (
        "delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    alter(broker, "", ("log.cleanup.policy", None, AlterConfigOpType.DELETE))
    assert changes_logged(broker, "log.cleanup.policy")[-1] == ("cluster default", "compact", None)
