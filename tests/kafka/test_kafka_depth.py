"""Issue 17's admin-API depth, end to end with confluent-kafka against the broker
process: committed leader epochs, MAX_TIMESTAMP offsets, authorized operations,
GROUP configs and the topic compression.type, cross-checked with the native protocol."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
)

from client import Admin as NativeAdmin
from client import Producer as NativeProducer
from kafka_format import iter_entries
from kafka_format.codecs import Codec
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import unique_name
from tests.kafka.test_cross_protocol import native_fetch_bytes

TIMEOUT = 30


def native_bootstrap(broker) -> str:
    return f"{broker.host}:{broker.port}"


def committed(bootstrap: str, group: str, partitions: list[TopicPartition]) -> list[TopicPartition]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed(partitions, timeout=TIMEOUT)
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, partitions: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=partitions, asynchronous=False)
    finally:
        consumer.close()


# ---- item 4: the committed leader epoch -------------------------------------------------------

def test_offset_fetch_answers_the_committed_leader_epoch(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        broker.start()
        with NativeAdmin(native_bootstrap(broker)) as native:
            native.create_topic("epochs", 3)
            native.commit("g-epoch", "epochs", 2, 9, "native")  # the native commit: no epoch
        commit(broker.bootstrap, "g-epoch", [TopicPartition("epochs", 0, 5, leader_epoch=7),
                                             TopicPartition("epochs", 1, 6)])
        asked = [TopicPartition("epochs", p) for p in range(3)]
        got = committed(broker.bootstrap, "g-epoch", asked)
        assert [(tp.offset, tp.leader_epoch) for tp in got] == [(5, 7), (6, None), (9, None)]

        broker.restart()  # the epoch is in the __consumer_offsets record, not only in memory
        got = committed(broker.bootstrap, "g-epoch", asked)
        assert [(tp.offset, tp.leader_epoch) for tp in got] == [(5, 7), (6, None), (9, None)]
        with NativeAdmin(native_bootstrap(broker)) as native:
            assert native.committed("g-epoch", "epochs", 0) == (5, "")  # one store for both protocols
            assert native.committed("g-epoch", "epochs", 2) == (9, "native")


# ---- item 6: ListOffsets MAX_TIMESTAMP ---------------------------------------------------------

def test_max_timestamp_is_the_record_not_its_batch_end(bootstrap, new_topic):
    topic = new_topic()
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "compression.type": "lz4"})
    for i, delta in enumerate([1, 5, 9, 2, 9, 3]):  # one batch: the largest, 9, first at offset 2
        producer.produce(topic, value=b"m%d" % i, timestamp=base + delta)
    producer.flush(TIMEOUT)
    producer.produce(topic, value=b"later", timestamp=base + 4)  # a later batch with a smaller timestamp
    producer.flush(TIMEOUT)
    tp = TopicPartition(topic, 0)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(TIMEOUT)
    assert (found.offset, found.timestamp) == (2, base + 9)
    latest = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(TIMEOUT)
    assert latest.offset == 7


# ---- item 5: authorized operations (KIP-430) ---------------------------------------------------

TOPIC_OPERATIONS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                    AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                    AclOperation.ALTER_CONFIGS}
CLUSTER_OPERATIONS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                      AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                      AclOperation.DESCRIBE}


def test_describe_cluster_and_topics_answer_authorized_operations(kafka_broker, new_topic):
    topic = new_topic(partitions=2)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert set(cluster.authorized_operations) == CLUSTER_OPERATIONS
    assert [(n.id, n.port) for n in cluster.nodes] == [(0, kafka_broker.kafka_port)]
    assert cluster.controller.id == 0 and len(cluster.cluster_id) == 22
    assert admin.describe_cluster().result(TIMEOUT).authorized_operations is None  # not asked

    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    found = described[topic].result(TIMEOUT)
    assert set(found.authorized_operations) == TOPIC_OPERATIONS and len(found.partitions) == 2
    plain = admin.describe_topics(TopicCollection([topic]))[topic].result(TIMEOUT)
    assert plain.authorized_operations is None

    group = unique_name("ops")
    commit(kafka_broker.bootstrap, group, [TopicPartition(topic, 0, 1)])
    described_group = admin.describe_consumer_groups([group], include_authorized_operations=True)[group]
    assert set(described_group.result(TIMEOUT).authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}  # Kafka 4.0's group operations


def test_describe_cluster_wire_versions_and_controller_endpoint(wire):
    from kio.schema.describe_cluster.v0.request import DescribeClusterRequest as V0
    from kio.schema.describe_cluster.v2.request import DescribeClusterRequest as V2

    conn = wire()
    for request in (V0(include_cluster_authorized_operations=False),
                    V2(include_cluster_authorized_operations=True, endpoint_type=1, include_fenced_brokers=True)):
        answer = conn.call(request)
        assert answer.error_code == 0 and [b.broker_id for b in answer.brokers] == [0]
    asked = conn.call(V2(include_cluster_authorized_operations=True, endpoint_type=1, include_fenced_brokers=False))
    assert asked.cluster_authorized_operations == sum(1 << int(op.value) for op in CLUSTER_OPERATIONS)
    controllers = conn.call(V2(include_cluster_authorized_operations=False, endpoint_type=2,
                               include_fenced_brokers=False))
    assert controllers.error_code == 114  # MISMATCHED_ENDPOINT_TYPE


def test_metadata_v9_answers_cluster_and_topic_operations(wire, new_topic):
    from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic

    topic = new_topic()
    conn = wire()
    answer = conn.call(MetadataRequest(topics=(MetadataRequestTopic(name=topic),), allow_auto_topic_creation=False,
                                       include_cluster_authorized_operations=True,
                                       include_topic_authorized_operations=True))
    assert answer.cluster_authorized_operations == sum(1 << int(op.value) for op in CLUSTER_OPERATIONS)
    assert answer.topics[0].topic_authorized_operations == sum(1 << int(op.value) for op in TOPIC_OPERATIONS)
    plain = conn.call(MetadataRequest(topics=(MetadataRequestTopic(name=topic),), allow_auto_topic_creation=False,
                                      include_cluster_authorized_operations=False,
                                      include_topic_authorized_operations=False))
    assert plain.cluster_authorized_operations == plain.topics[0].topic_authorized_operations == -2**31


# ---- item 7: GROUP configs ---------------------------------------------------------------------

def describe_group(admin: AdminClient, group: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.GROUP, group)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def alter_group(admin: AdminClient, group: str, *entries: tuple[str, str | None, AlterConfigOpType],
                validate_only: bool = False) -> None:
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries])
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(TIMEOUT)


def test_group_configs_default_alter_validate_and_survive_a_restart(tmp_path):
    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    with BrokerProcess(tmp_path / "data", "--set", "group.consumer.max.session.timeout.ms=90000") as broker:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        found = describe_group(admin, "g-conf")  # any group name, existing or not
        assert {k: (v.value, v.source) for k, v in found.items() if k.startswith("consumer.")} == {
            "consumer.session.timeout.ms": ("45000", ConfigSource.DEFAULT_CONFIG.value),
            "consumer.heartbeat.interval.ms": ("5000", ConfigSource.DEFAULT_CONFIG.value)}
        # the share-group keys (KIP-932) with the broker's group.share.* defaults
        assert (found["share.record.lock.duration.ms"].value, found["share.auto.offset.reset"].value) == \
            ("30000", "latest")

        alter_group(admin, "g-conf", ("consumer.session.timeout.ms", "80000", SET),
                    ("consumer.heartbeat.interval.ms", "7000", SET))
        alter_group(admin, "g-conf", ("consumer.session.timeout.ms", "50000", SET), validate_only=True)
        found = describe_group(admin, "g-conf")
        assert (found["consumer.session.timeout.ms"].value, found["consumer.session.timeout.ms"].source) == \
            ("80000", ConfigSource.GROUP_CONFIG.value)
        assert found["consumer.heartbeat.interval.ms"].value == "7000"
        assert describe_group(admin, "other")["consumer.session.timeout.ms"].value == "45000"

        for bad, words in ((("consumer.session.timeout.ms", "95000", SET), "less than or equal"),
                           (("consumer.heartbeat.interval.ms", "1000", SET), "greater than or equal"),
                           (("consumer.session.timeout.ms", "soon", SET), "Not a number"),
                           (("share.record.lock.duration.ms", "1000", SET), "not within"),
                           (("share.no.such.key", "1", SET), "Unknown group config"),
                           (("consumer.session.timeout.ms", "1", AlterConfigOpType.APPEND), "append is not allowed")):
            try:
                alter_group(admin, "g-conf", bad)
                raise AssertionError(f"{bad} was accepted")
            except KafkaException as e:
                assert e.args[0].code() == 40 and words in e.args[0].str(), e  # INVALID_CONFIG
        assert describe_group(admin, "g-conf")["consumer.session.timeout.ms"].value == "80000"  # unchanged

        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        found = describe_group(admin, "g-conf")
        assert (found["consumer.session.timeout.ms"].value, found["consumer.heartbeat.interval.ms"].value) == \
            ("80000", "7000")
        alter_group(admin, "g-conf", ("consumer.session.timeout.ms", None, DELETE))
        found = describe_group(admin, "g-conf")
        assert (found["consumer.session.timeout.ms"].value, found["consumer.session.timeout.ms"].source) == \
            ("45000", ConfigSource.DEFAULT_CONFIG.value)


def test_legacy_alter_configs_replaces_a_groups_overrides(wire, bootstrap):
    from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource

    conn = wire()

    def alter(*pairs):
        resource = AlterConfigsResource(resource_type=32, resource_name="g-legacy", configs=tuple(
            AlterableConfig(name=n, value=v) for n, v in pairs))
        return conn.call(AlterConfigsRequest(resources=(resource,), validate_only=False)).responses[0]

    assert alter(("consumer.session.timeout.ms", "50000"), ("consumer.heartbeat.interval.ms", "6000")).error_code == 0
    assert alter(("consumer.heartbeat.interval.ms", "8000")).error_code == 0
    found = describe_group(AdminClient({"bootstrap.servers": bootstrap}), "g-legacy")
    assert (found["consumer.session.timeout.ms"].value, found["consumer.heartbeat.interval.ms"].value) == \
        ("45000", "8000")  # the session timeout was not listed: back to the default
    bad = alter(("consumer.session.timeout.ms", "5"))
    assert bad.error_code == 40 and "greater than or equal" in bad.error_message



# ---- item 2: compression.type ------------------------------------------------------------------

def stored_codecs(broker, topic: str) -> list[int]:
    return [e.codec for e in iter_entries(native_fetch_bytes(broker, topic))]


def consume_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("c"),
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        while len(got) < count:
            msg = consumer.poll(TIMEOUT)
            assert msg is not None and msg.error() is None
            got.append(msg.value())
        return got
    finally:
        consumer.close()


def kafka_produce(bootstrap: str, topic: str, values: list[bytes], codec: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(TIMEOUT) == 0


def test_topic_compression_type_recompresses_on_both_protocols(kafka_broker, new_topic):
    SET = AlterConfigOpType.SET
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    topic = new_topic(configs={"compression.type": "gzip", "compression.gzip.level": "9"})
    lz4_values = [b"lz4-%d" % i + b"x" * 300 for i in range(3)]  # large enough for librdkafka to compress
    kafka_produce(kafka_broker.bootstrap, topic, lz4_values, "lz4")
    with NativeProducer(native_bootstrap(kafka_broker), compression="snappy") as native:
        native.send(topic, b"native-snappy", partition=0)
        native.flush()
    assert set(stored_codecs(kafka_broker, topic)) == {Codec.GZIP}

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "uncompressed", incremental_operation=SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    kafka_produce(kafka_broker.bootstrap, topic, [b"z" * 500], "zstd")
    assert stored_codecs(kafka_broker, topic)[-1] == Codec.NONE
    assert consume_values(kafka_broker.bootstrap, topic, 5) == [*lz4_values, b"native-snappy", b"z" * 500]
    with NativeAdmin(native_bootstrap(kafka_broker)) as native_admin:
        assert native_admin.describe_config(topic)["compression.type"] == "uncompressed"
        native_admin.alter_config(topic, {"compression.type": "producer"})
        with pytest.raises(Exception, match="INVALID_CONFIG"):
            native_admin.alter_config(topic, {"compression.type": "brotli"})
    kafka_produce(kafka_broker.bootstrap, topic, [b"s" * 500], "snappy")  # librdkafka skips codecs that do not pay
    assert stored_codecs(kafka_broker, topic)[-1] == Codec.SNAPPY
    found = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    configs = next(iter(found.values())).result(TIMEOUT)
    assert configs["compression.type"].value == "producer" and configs["compression.gzip.level"].value == "9"


def test_native_create_topic_with_compression_type(kafka_broker):
    topic = unique_name("nativecodec")
    with NativeAdmin(native_bootstrap(kafka_broker)) as native_admin:
        native_admin.create_topic(topic, 1, {"compression.type": "lz4", "compression.lz4.level": "12"})
        with pytest.raises(Exception, match="INVALID_CONFIG"):
            native_admin.create_topic(unique_name("nativecodec"), 1, {"compression.lz4.level": "99"})
    kafka_produce(kafka_broker.bootstrap, topic, [b"g" * 600], "gzip")
    assert stored_codecs(kafka_broker, topic) == [Codec.LZ4]
    assert consume_values(kafka_broker.bootstrap, topic, 1) == [b"g" * 600]


def test_create_topics_refuses_a_bad_compression_type(bootstrap):
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = unique_name("badcodec")
    futures = admin.create_topics([NewTopic(name, 1, 1, config={"compression.type": "brotli"})])
    with pytest.raises(KafkaException) as raised:
        futures[name].result(TIMEOUT)
    assert raised.value.args[0].code() == 40  # INVALID_CONFIG
    assert name not in admin.list_topics(timeout=TIMEOUT).topics


def test_broker_default_compression_type(tmp_path):
    with BrokerProcess(tmp_path / "data", "--set", "compression.type=zstd",
                       "--set", "compression.zstd.level=9") as broker:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from tests.kafka.conftest import create_topic
        topic = create_topic(broker.bootstrap, "zdefault")
        kafka_produce(broker.bootstrap, topic, [b"a" * 1000], "gzip")
        assert stored_codecs(broker, topic) == [Codec.ZSTD]
        configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        entry = next(iter(configs.values())).result(TIMEOUT)["compression.type"]
        assert (entry.value, entry.source) == ("zstd", ConfigSource.STATIC_BROKER_CONFIG.value)
        assert consume_values(broker.bootstrap, topic, 1) == [b"a" * 1000]
