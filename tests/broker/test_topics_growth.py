"""TopicRegistry.add_partitions (Kafka's CreatePartitions) against a real LogManager:
checks, whole-or-nothing on failure, and a crash after the commit point."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os

import pytest

import broker.state.json_files as json_files
from broker.state.topic_registry import MAX_PARTITIONS, OFFSETS_TOPIC, REGISTRY_FILE, TopicRegistry
from kafka_format.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    KafkaStorageError,
    StrataError,
    UnknownTopicOrPartitionError,
)
from storage.config import LogConfig
from storage.manager import LogManager

REAL_WRITE = json_files.atomic_write


def registered(tmp_path, name: str) -> int:
    return json.loads((tmp_path / REGISTRY_FILE).read_text())["topics"][name]["partitions"]


def directories(tmp_path, name: str) -> list[str]:
    return sorted(n for n in os.listdir(tmp_path) if n.rpartition("-")[0] == name)


def test_grow_creates_logs_and_survives_a_restart(open_registry, tmp_path):
    registry, manager = open_registry()
    registry.create("t", 2, [("retention.ms", "5")])
    first_id = registry.topic_id("t")
    grown = registry.add_partitions("t", 4)
    assert grown.partitions == 4 and registry.partitions("t") == 4 and registered(tmp_path, "t") == 4
    assert sorted(manager.topics()["t"]) == [0, 1, 2, 3]
    assert manager.get_log("t", 3).config.retention_ms == 5  # the topic's config
    registry, manager = open_registry()
    assert registry.partitions("t") == 4 and registry.topic_id("t") == first_id
    assert manager.get_log("t", 3) is not None


def test_checks_change_nothing(open_registry, tmp_path):
    registry, manager = open_registry()
    registry.create("t", 3, [])
    cases = [(("t", 3), InvalidPartitionsError), (("t", 2), InvalidPartitionsError),
             (("t", MAX_PARTITIONS + 1), InvalidPartitionsError),
             (("missing", 5), UnknownTopicOrPartitionError), ((OFFSETS_TOPIC, 5), InvalidRequestError)]
    for args, error in cases:
        with pytest.raises(error):
            registry.add_partitions(*args)
    assert registry.add_partitions("t", 5, validate_only=True).partitions == 5
    assert registry.partitions("t") == 3 and registered(tmp_path, "t") == 3
    assert directories(tmp_path, "t") == ["t-0", "t-1", "t-2"]

    class Refused(StrataError):
        code = 39

    def refuse(topic):
        assert topic.partitions == 3
        raise Refused("no")

    with pytest.raises(Refused):
        registry.add_partitions("t", 5, check=refuse)
    assert registry.partitions("t") == 3


def test_a_failed_log_creation_leaves_nothing_behind(open_registry, tmp_path, monkeypatch):
    registry, manager = open_registry()
    registry.create("t", 1, [])
    real = manager.get_or_create_log

    def fail_at_partition_3(topic, partition, config=None):
        if partition == 3:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(topic, partition, config)

    monkeypatch.setattr(manager, "get_or_create_log", fail_at_partition_3)
    with pytest.raises(KafkaStorageError) as raised:
        registry.add_partitions("t", 5)
    assert raised.value.code == 56
    assert registry.partitions("t") == 1 and registered(tmp_path, "t") == 1
    assert directories(tmp_path, "t") == ["t-0"] and sorted(manager.topics()["t"]) == [0]


def test_a_failed_registry_write_changes_nothing(open_registry, tmp_path, monkeypatch):
    registry, manager = open_registry()
    registry.create("t", 1, [])

    def failing_write(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(json_files, "atomic_write", failing_write)
    with pytest.raises(KafkaStorageError):
        registry.add_partitions("t", 3)
    assert registry.partitions("t") == 1 and directories(tmp_path, "t") == ["t-0"]


def _grow_and_die(data_dir: str) -> None:
    """In a child process: grow "t" to 3 and die when its first new log is created."""
    registry = TopicRegistry(data_dir, LogConfig())
    registry.load()
    manager = LogManager(data_dir, config_for=registry.log_config)
    manager.startup(registry.owns)
    registry.reconcile(manager)

    def die(topic, partition, config=None):
        os._exit(3)

    manager.get_or_create_log = die  # type: ignore[method-assign]
    registry.add_partitions("t", 3)
    os._exit(0)


def test_a_crash_after_the_registry_write_is_finished_at_the_next_start(open_registry, tmp_path):
    registry, manager = open_registry()
    registry.create("t", 1, [])
    manager.shutdown()
    child = multiprocessing.get_context("spawn").Process(target=_grow_and_die, args=(str(tmp_path),))
    child.start()
    child.join(60)
    assert child.exitcode == 3
    assert registered(tmp_path, "t") == 3 and directories(tmp_path, "t") == ["t-0"]
    registry, manager = open_registry()
    assert registry.partitions("t") == 3
    assert sorted(manager.topics()["t"]) == [0, 1, 2] and directories(tmp_path, "t") == ["t-0", "t-1", "t-2"]
