"""CREATE_TOPIC that runs out of file descriptors half-way, against the real broker.

The broker runs under a tiny RLIMIT_NOFILE with `log.max.open.files` set far above
it, so the open-file budget never closes anything in time and creating a topic of
many partitions hits EMFILE part of the way through. The request must answer
KAFKA_STORAGE_ERROR (56) on both protocols, not UNKNOWN_SERVER_ERROR, leave no partition directory
behind and leave the registry as it was; the broker then keeps serving, and a
restart (which would adopt half-made directories) succeeds.
"""

from __future__ import annotations

import os

import pytest

from client import Admin
from client.errors import StrataClientError
from tests.broker_process import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

LIMIT = (48, 48)  # the broker itself takes about 16 descriptors
ARGS = ("--set", "log.max.open.files=100000")
TOPIC = "too-many"
PARTITIONS = 200
KAFKA_STORAGE_ERROR = 56


def create(admin: AdminClient, name: str, partitions: int) -> int:
    """The error code CreateTopics answered (0 when created)."""
    future = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)[name]
    try:
        future.result(timeout=60)
    except confluent_kafka.KafkaException as e:
        return e.args[0].code()
    return 0


def partition_dirs(data_dir: str, topic: str) -> list[str]:
    return sorted(n for n in os.listdir(data_dir) if n.startswith(topic))


@pytest.fixture
def limited_broker(tmp_path):
    process = BrokerProcess(tmp_path / "data", *ARGS, open_files_limit=LIMIT)
    process.start()
    yield process
    process.close()


def test_create_topic_out_of_descriptors_leaves_nothing(limited_broker):
    admin = AdminClient({"bootstrap.servers": limited_broker.bootstrap})
    assert create(admin, TOPIC, PARTITIONS) == KAFKA_STORAGE_ERROR
    assert partition_dirs(limited_broker.data_dir, TOPIC) == []
    assert TOPIC not in admin.list_topics(timeout=30).topics
    assert '"error_code": -1' not in limited_broker.stderr_text()
    with Admin(f"{limited_broker.host}:{limited_broker.port}", retries=0) as native:  # the native protocol too
        with pytest.raises(StrataClientError) as failed:
            native.create_topic(TOPIC, partitions=PARTITIONS)
        assert failed.value.code == KAFKA_STORAGE_ERROR
    assert partition_dirs(limited_broker.data_dir, TOPIC) == []
    assert create(admin, "small", 1) == 0  # the broker still serves

    limited_broker.restart()
    admin = AdminClient({"bootstrap.servers": limited_broker.bootstrap})
    topics = admin.list_topics(timeout=30).topics
    assert TOPIC not in topics and "small" in topics
    assert partition_dirs(limited_broker.data_dir, TOPIC) == []
