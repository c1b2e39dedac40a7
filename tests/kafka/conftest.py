"""Fixtures for the Kafka-protocol tests: one broker process per module (each test
uses its own topics), its bootstrap address, topic creation, raw kio connections.

- `kafka_broker`: tests.broker_process.BrokerProcess with the Kafka listener on a
  free port (`.bootstrap` = "HOST:PORT" for clients, `.kafka_address`, and the
  native `.address`), auto.create.topics.enable=true, started once per module.
- `bootstrap`: its "HOST:PORT".
- `new_topic(partitions=1, configs=None)`: a fresh topic created through the
  Kafka protocol (confluent-kafka's AdminClient); returns the name.
- `wire()`: a tests.kafka.wire.KafkaWire to the Kafka listener, closed after the test.
- `app(*overrides)`: a broker.app.BrokerApp started in the test's own loop on free
  ports, data in tmp_path (offsets.topic.num.partitions=5, no rebalance delay, extra
  "key=value" overrides after those); every one started is shut down after the test.
"""

from __future__ import annotations

import itertools
import shutil

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.app import BrokerApp
from broker.config.broker_config import BrokerConfig
from tests.broker_process import BrokerProcess
from tests.kafka.wire import KafkaWire

_names = itertools.count()
requires_kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("kafka-broker"),
                            "--set", "auto.create.topics.enable=true",
                            "--set", "log.initial.task.delay.ms=0")
    try:
        yield process.start()
    finally:
        process.close()


@pytest.fixture
def bootstrap(kafka_broker) -> str:
    return kafka_broker.bootstrap


def app_settings(tmp_path, *extra) -> BrokerConfig:
    return BrokerConfig.load(
        overrides=["host.name=127.0.0.1", "port=0", "kafka.port=0", "admin.port=0",
                   "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=10",
                   "offsets.topic.num.partitions=5", "log.initial.task.delay.ms=600000", *extra],
        data_dir=str(tmp_path / "data"), environ={})


@pytest.fixture
async def app(tmp_path):
    started = []

    async def start(*extra):
        one = BrokerApp(app_settings(tmp_path, *extra))
        await one.start()
        started.append(one)
        return one

    yield start
    for one in started:
        await one.shutdown()


def unique_name(prefix: str = "k") -> str:
    return f"{prefix}{next(_names)}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=dict(configs or {}))],
                                  operation_timeout=10)
    futures[name].result(30)
    return name


@pytest.fixture
def new_topic(bootstrap):
    def _new_topic(partitions: int = 1, configs: dict | None = None, prefix: str = "k") -> str:
        return create_topic(bootstrap, unique_name(prefix), partitions, configs)

    return _new_topic


@pytest.fixture
def wire(kafka_broker):
    opened = []

    def _wire(timeout: float = 30.0) -> KafkaWire:
        conn = KafkaWire(*kafka_broker.kafka_address, timeout=timeout)
        opened.append(conn)
        return conn

    yield _wire
    for conn in opened:
        conn.close()


# A group's committed offsets through confluent-kafka (read and set), for the group tests.
OFFSETS_TIMEOUT = 30


def committed(bootstrap: str, group: str, partitions: list[TopicPartition]) -> list[TopicPartition]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed(partitions, timeout=OFFSETS_TIMEOUT)
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, partitions: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=partitions, asynchronous=False)
    finally:
        consumer.close()
