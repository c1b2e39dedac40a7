"""Authorized operations (KIP-430) in DescribeCluster, DescribeTopics and Metadata,
end to end with confluent-kafka and on the wire against the broker process."""

from __future__ import annotations

from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
)

from tests.kafka.conftest import commit, unique_name

TIMEOUT = 30


# ---- authorized operations (KIP-430) -----------------------------------------------------------

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
