"""The offsets topic cannot be emptied or un-compacted, on either protocol.

Against the real broker: groups commit offsets (native COMMIT_OFFSET and a
confluent-kafka consumer's OffsetCommit), then every call that would destroy
committed offsets is refused with Kafka's code and changes nothing:
DELETE_RECORDS / DeleteRecords on `__consumer_offsets` answer
INVALID_TOPIC_EXCEPTION (17); ALTER_CONFIG / AlterConfigs /
IncrementalAlterConfigs that would make its cleanup.policy anything but
`compact` answer INVALID_CONFIG (40). After a clean stop and a start every
committed offset is still there, and the topic is still compacted only.
"""

from __future__ import annotations

import pytest

from client import Admin
from client.errors import StrataClientError

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType  # noqa: E402

OFFSETS = "__consumer_offsets"
SERVE_ARGS = ("--set", "offsets.topic.num.partitions=1", "--set", "log.initial.task.delay.ms=0",
              "--set", "log.retention.check.interval.ms=100")
INVALID_TOPIC, INVALID_CONFIG = 17, 40


def kafka_commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False, "log_level": 0})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def kafka_committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False, "log_level": 0})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def config_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=10)
    return raised.value.args[0]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_offsets_topic_refuses_destructive_calls_on_both_protocols(broker, tmp_path):
    process = broker(*SERVE_ARGS, data_dir=tmp_path / "data")
    native = f"{process.host}:{process.port}"
    with Admin(native) as admin:
        admin.create_topic("events", partitions=1)
        admin.commit("native-group", "events", 0, 42, "meta")
    kafka_commit(process.bootstrap, "kafka-group", "events", 7)

    with Admin(native) as admin:
        with pytest.raises(StrataClientError) as raised:
            admin.delete_records(OFFSETS, 0, -1)
        assert raised.value.code == INVALID_TOPIC
        for configs in ({"cleanup.policy": "delete"}, {"cleanup.policy": "compact,delete"},
                        {"cleanup.policy": None}):
            with pytest.raises(StrataClientError) as raised:
                admin.alter_config(OFFSETS, configs)
            assert raised.value.code == INVALID_CONFIG, configs
        assert admin.describe_config(OFFSETS)["cleanup.policy"] == "compact"
        admin.alter_config(OFFSETS, {"retention.ms": "1"})  # harmless while compacted only

    kafka_admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for future in kafka_admin.delete_records([TopicPartition(OFFSETS, 0, -1)], request_timeout=10).values():
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=10)
        assert raised.value.args[0].code() == INVALID_TOPIC
    resource = ConfigResource(ResourceType.TOPIC, OFFSETS,
                              set_config={"cleanup.policy": "delete", "retention.ms": "1"})
    error = config_error(kafka_admin.alter_configs([resource])[resource])
    assert error.code() == INVALID_CONFIG and "compact" in error.str()
    resource = ConfigResource(ResourceType.TOPIC, OFFSETS, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    error = config_error(kafka_admin.incremental_alter_configs([resource])[resource])
    assert error.code() == INVALID_CONFIG
    resource = ConfigResource(ResourceType.TOPIC, OFFSETS, incremental_configs=[
        ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)])
    error = config_error(kafka_admin.incremental_alter_configs([resource])[resource])
    assert error.code() == INVALID_CONFIG

    assert process.stop() == 0
    process.restart()
    native = f"{process.host}:{process.port}"
    with Admin(native) as admin:
        assert admin.committed("native-group", "events", 0) == (42, "meta")
        assert admin.describe_config(OFFSETS)["cleanup.policy"] == "compact"
    assert kafka_committed(process.bootstrap, "kafka-group", "events") == 7
    assert not [e for e in process.log_events() if e.get("event") == "request_failed"]
