"""DescribeConfigs describes every key Kafka 4.0 describes (broker/config/kafka_keys.py), with
Strata's value and source, read-only where Strata cannot change the key at runtime; tools read
keys that mean little on one node (KafkaJS's createTopics reads default.replication.factor)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource
from kio.index import load_request_schema

from broker.config.kafka_keys import BROKER_KEYS, TOPIC_KEYS
from broker.kafka.codec import make, nested
from storage.config import KEYS as STRATA_TOPIC_KEYS
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.wire import KafkaWire

TIMEOUT = 30
DEFAULT, STATIC, TOPIC = (ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value,
                          ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def describe(bootstrap: str, kind: ConfigResource.Type, name: str) -> dict:
    client = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(kind, name)
    return client.describe_configs([resource])[resource].result(TIMEOUT)


def raw_describe(broker, kind: int, name: str, documented: bool) -> dict:
    """DescribeConfigs v4 over the wire: {name: entry} of one resource."""
    request_class = load_request_schema(32, 4)
    resource_class = nested(request_class, "resources")
    wire = KafkaWire(*broker.kafka_address)
    try:
        answer = wire.call(make(request_class, include_synonyms=True, include_documentation=documented,
                                resources=(make(resource_class, resource_type=kind, resource_name=name,
                                                configuration_keys=None),)))
    finally:
        wire.close()
    (result,) = answer.results
    return {entry.name: entry for entry in result.configs}


def test_a_topic_describes_every_log_config_key(kafka_broker):
    topic = create_topic(kafka_broker.bootstrap, unique_name("every"), configs={"retention.ms": "5000"})
    configs = describe(kafka_broker.bootstrap, ConfigResource.Type.TOPIC, topic)
    expected = {k.name for k in STRATA_TOPIC_KEYS} | set(TOPIC_KEYS)
    assert expected <= set(configs)
    assert "message.downconversion.enable" not in configs and "message.format.version" not in configs
    for name in ("min.insync.replicas", "unclean.leader.election.enable", "preallocate",
                 "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                 "remote.storage.enable", "local.retention.ms"):
        entry = configs[name]
        assert entry.is_read_only and entry.source == DEFAULT, name
    assert (configs["min.insync.replicas"].value, configs["unclean.leader.election.enable"].value,
            configs["preallocate"].value, configs["leader.replication.throttled.replicas"].value,
            configs["local.retention.ms"].value) == ("1", "false", "false", "", "-2")
    assert [(s.name, s.value) for s in configs["preallocate"].synonyms.values()] == [("log.preallocate", "false")]
    retention = configs["retention.ms"]
    assert (retention.value, retention.source, retention.is_read_only) == ("5000", TOPIC, False)
    assert not configs["segment.bytes"].is_read_only
    documented = raw_describe(kafka_broker, 2, topic, True)
    assert documented["segment.bytes"].documentation and documented["preallocate"].documentation
    assert documented["preallocate"].config_type == 1 and documented["cleanup.policy"].config_type == 7
    assert raw_describe(kafka_broker, 2, topic, False)["segment.bytes"].documentation is None


def test_the_broker_describes_every_kafka_broker_key(kafka_broker):
    configs = describe(kafka_broker.bootstrap, ConfigResource.Type.BROKER, "0")
    missing = sorted(set(BROKER_KEYS) - set(configs))
    assert not missing
    assert not any(k.startswith("zookeeper.") for k in configs)
    for name, value in (("default.replication.factor", "1"), ("min.insync.replicas", "1"),
                        ("unclean.leader.election.enable", "false"), ("offsets.topic.replication.factor", "1"),
                        ("transaction.state.log.replication.factor", "1"), ("broker.id", "0"),
                        ("node.id", "0"), ("log.preallocate", "false"), ("num.partitions", "1")):
        entry = configs[name]
        assert (entry.value, entry.source, entry.is_read_only) == (value, DEFAULT, True), name
    # the keys Strata takes at runtime are writable; the log.* defaults too
    for name in ("background.threads", "metric.reporters", "log.retention.ms", "log.cleanup.policy"):
        assert not configs[name].is_read_only, name
    assert configs["log.retention.ms"].value is None  # Kafka's: no default of its own (log.retention.hours)
    assert configs["log.retention.hours"].value == "168" and configs["log.retention.hours"].is_read_only
    assert configs["ssl.keystore.password"].is_sensitive and configs["ssl.keystore.password"].value is None
    documented = raw_describe(kafka_broker, 4, "0", True)
    assert documented["default.replication.factor"].documentation
    assert documented["num.partitions"].documentation
    types = {name: documented[name].config_type for name in
             ("default.replication.factor", "offsets.topic.replication.factor", "log.cleaner.io.buffer.load.factor",
              "principal.builder.class", "ssl.key.password", "log.retention.ms")}
    assert types == {"default.replication.factor": 3, "offsets.topic.replication.factor": 4,
                     "log.cleaner.io.buffer.load.factor": 6, "principal.builder.class": 8,
                     "ssl.key.password": 9, "log.retention.ms": 5}


def test_static_settings_of_keys_strata_does_not_read_are_described_as_static(tmp_path):
    with BrokerProcess(tmp_path / "data", "--set", "min.insync.replicas=1", "--set", "default.replication.factor=1",
                       "--set", "ssl.keystore.password=secret", "--set", "num.network.threads=5") as broker:
        broker.start()
        configs = describe(broker.bootstrap, ConfigResource.Type.BROKER, "0")
        for name, value in (("min.insync.replicas", "1"), ("default.replication.factor", "1"),
                            ("num.network.threads", "5")):
            assert (configs[name].value, configs[name].source) == (value, STATIC), name
        password = configs["ssl.keystore.password"]
        assert (password.value, password.source, password.is_sensitive) == (None, STATIC, True)
        assert all(s.value is None for s in password.synonyms.values())
        topic = create_topic(broker.bootstrap, "t")
        entry = describe(broker.bootstrap, ConfigResource.Type.TOPIC, topic)["min.insync.replicas"]
        assert (entry.value, entry.source) == ("1", STATIC)
