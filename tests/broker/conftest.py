"""Fixtures for the broker tests: one shared broker process per module (each test
uses its own topics), a client factory, and message-set builders."""

from __future__ import annotations

import itertools

import pytest

from broker.state.topic_registry import TopicRegistry
from kafka_format import build_batch
from protocol import CreateTopicRequest, ErrorCode
from storage.config import LogConfig
from storage.manager import LogManager
from tests.broker.wire import NativeClient
from tests.broker_process import BrokerProcess

_names = itertools.count()
SHARED_MAX_FRAME = 4 << 20  # socket.request.max.bytes of the shared broker


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("shared-broker"),
                            "--set", "log.initial.task.delay.ms=0",
                            "--set", f"socket.request.max.bytes={SHARED_MAX_FRAME}")
    try:
        yield process.start()
    finally:
        process.close()


@pytest.fixture
def connect(shared_broker):
    """connect(broker=None) -> NativeClient to the shared (or given) broker; closed after the test."""
    opened = []

    def _connect(broker=None, timeout: float = 30.0):
        target = broker or shared_broker
        client = NativeClient(target.host, target.port, timeout=timeout)
        opened.append(client)
        return client

    yield _connect
    for client in opened:
        client.close()


@pytest.fixture
def new_topic(connect):
    """new_topic(partitions=1, **configs) -> a fresh topic name on the shared broker."""

    def _new_topic(partitions: int = 1, configs=(), client=None) -> str:
        name = f"t{next(_names)}"
        client = client or connect()
        response = client.call(CreateTopicRequest(name, partitions, tuple(configs)))
        assert response.error == ErrorCode.NONE
        return name

    return _new_topic


def batch(*values: bytes, timestamp: int | None = None) -> bytes:
    return build_batch([(None, v) if timestamp is None else (None, v, timestamp) for v in values])


@pytest.fixture
def open_registry(tmp_path):
    """`open_registry()` opens the topic registry and log manager on tmp_path as the
    broker does at start (closing the ones opened before): a restart in-process."""
    opened = []

    def _open():
        if opened:
            opened[-1][1].shutdown()
        registry = TopicRegistry(str(tmp_path), LogConfig())
        registry.load()
        manager = LogManager(str(tmp_path), config_for=registry.log_config)
        manager.startup(registry.owns)
        registry.reconcile(manager)
        registry.ensure_internal_topic(1)
        opened.append((registry, manager))
        return registry, manager

    yield _open
    if opened:
        opened[-1][1].shutdown()
