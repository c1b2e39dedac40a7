"""TopicRegistry against a real LogManager: validation, persistence, crash repair."""

import json
import os

import pytest

from broker.state.topic_registry import OFFSETS_TOPIC, REGISTRY_FILE, TopicRegistry
from kafka_format.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from storage.config import LogConfig
from storage.manager import LogManager

DEFAULTS = LogConfig.from_props({"retention.ms": "1000"})


@pytest.fixture
def open_registry(tmp_path):
    opened = []

    def _open(num_partitions=3):
        if opened:
            opened[-1][1].shutdown()
        registry = TopicRegistry(str(tmp_path), DEFAULTS, num_partitions=num_partitions)
        registry.load()
        manager = LogManager(str(tmp_path), config_for=registry.log_config)
        manager.startup()
        registry.reconcile(manager)
        registry.ensure_internal_topic(5)
        opened.append((registry, manager))
        return registry, manager

    yield _open
    if opened:
        opened[-1][1].shutdown()


def test_create_validates_everything(open_registry):
    registry, manager = open_registry()
    registry.create("orders", -1, [("retention.ms", "5")])  # -1: num.partitions
    assert registry.partitions("orders") == 3
    assert sorted(manager.topics()["orders"]) == [0, 1, 2]
    assert manager.get_log("orders", 1).config.retention_ms == 5
    cases = [
        (("orders", 1, []), TopicAlreadyExistsError),
        (("bad/name", 1, []), InvalidTopicError),
        (("..", 1, []), InvalidTopicError),
        (("x" * 250, 1, []), InvalidTopicError),
        (("p0", 0, []), InvalidPartitionsError),
        (("p0", -2, []), InvalidPartitionsError),
        (("p0", 1, [("retention.ms", "soon")]), InvalidConfigError),
        (("p0", 1, [("no.such.config", "1")]), InvalidConfigError),
        (("p0", 1, [("retention.ms", None)]), InvalidConfigError),
        (("p0", 1, [("retention.ms", "1"), ("retention.ms", "2")]), InvalidRequestError),
    ]
    for args, error in cases:
        with pytest.raises(error):
            registry.create(*args)
    assert "p0" not in manager.topics()


def test_dot_underscore_collision_is_invalid_topic(open_registry):
    registry, _ = open_registry()
    registry.create("a.b", 1, [])
    with pytest.raises(InvalidTopicError, match="collides"):
        registry.create("a_b", 1, [])
    with pytest.raises(InvalidTopicError, match="collides"):
        registry.create("__consumer.offsets", 1, [])


def test_alter_and_reset_reach_live_logs(open_registry):
    registry, manager = open_registry()
    registry.create("t", 2, [("segment.bytes", "1000")])
    registry.alter("t", [("segment.bytes", None), ("flush.messages", "7")])
    for partition in (0, 1):
        config = manager.get_log("t", partition).config
        assert config.segment_bytes == LogConfig().segment_bytes and config.flush_messages == 7
        assert config.retention_ms == 1000  # the broker default still applies
    assert registry.describe("t")["flush.messages"] == "7"
    with pytest.raises(InvalidConfigError):
        registry.alter("t", [("segment.bytes", "1")])
    with pytest.raises(UnknownTopicOrPartitionError):
        registry.alter("nope", [])


def test_delete_and_internal_topic(open_registry, tmp_path):
    registry, manager = open_registry()
    registry.create("t", 2, [])
    registry.delete("t")
    assert registry.get("t") is None and "t" not in manager.topics()
    assert not any(name.startswith("t-") for name in os.listdir(tmp_path))
    with pytest.raises(UnknownTopicOrPartitionError):
        registry.delete("t")
    with pytest.raises(InvalidRequestError):
        registry.delete(OFFSETS_TOPIC)
    assert registry.get(OFFSETS_TOPIC).log_config.compact
    assert OFFSETS_TOPIC not in registry.names()
    assert OFFSETS_TOPIC in registry.names(include_internal=True)


def test_state_survives_reopen(open_registry):
    registry, _ = open_registry()
    registry.create("keep", 2, [("cleanup.policy", "compact")])
    registry.alter("keep", [("retention.ms", "99")])
    registry, manager = open_registry(num_partitions=1)
    assert registry.partitions("keep") == 2
    assert registry.describe("keep")["cleanup.policy"] == "compact"
    assert manager.get_log("keep", 1).config.retention_ms == 99
    assert registry.partitions(OFFSETS_TOPIC) == 5


def test_reconcile_finishes_deletion_and_adopts_orphans(open_registry, tmp_path):
    registry, manager = open_registry()
    registry.create("doomed", 1, [])
    registry.create("kept", 1, [])
    manager.get_or_create_log("orphan", 1)  # as if a crash hit create before the registry write
    manager.shutdown()
    path = tmp_path / REGISTRY_FILE
    doc = json.loads(path.read_text())
    del doc["topics"]["doomed"]
    doc["deleting"] = ["doomed"]  # as if a crash hit delete after its commit point
    path.write_text(json.dumps(doc))
    registry = TopicRegistry(str(tmp_path), DEFAULTS)
    registry.load()
    manager = LogManager(str(tmp_path), config_for=registry.log_config)
    manager.startup()
    try:
        registry.reconcile(manager)
        assert registry.get("doomed") is None and "doomed" not in manager.topics()
        assert registry.partitions("orphan") == 2  # partitions 0..1, 0 created
        assert manager.get_log("orphan", 0) is not None
        assert registry.partitions("kept") == 1
        assert json.loads(path.read_text())["deleting"] == []
    finally:
        manager.shutdown()
