"""TopicRegistry when writes fail, and its rules for the internal offsets topic.

Every registry change writes the new file first and changes memory only after:
a failed write (EIO, or ENOSPC beyond the space reserve) leaves memory, the
file and the directories as they were, and answers KAFKA_STORAGE_ERROR (56).
Deleting a topic on a full disk uses the space reserve. Reconciling at startup
never fails the start. The offsets topic keeps cleanup.policy=compact
(broker/state/internal_topics.py).
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from broker.state import json_files
from broker.state.internal_topics import OFFSETS_TOPIC, check_delete_records
from broker.state.topic_registry import REGISTRY_FILE, TopicRegistry
from kafka_format.errors import InvalidConfigError, InvalidTopicError, KafkaStorageError, TopicAlreadyExistsError
from storage.config import LogConfig
from storage.manager import LogManager
from storage.names import special_dir_name
from storage.space_reserve import RESERVE_FILE

REAL_WRITE = json_files.atomic_write


def failing_write(error=errno.EIO):
    def write(path, data):
        raise OSError(error, os.strerror(error))
    return write


def registry_file(tmp_path) -> dict:
    return json.loads((tmp_path / REGISTRY_FILE).read_text())


def test_failed_registry_writes_change_nothing(open_registry, tmp_path, monkeypatch):
    registry, manager = open_registry()
    registry.create("keep", 2, [])
    before = registry_file(tmp_path)
    monkeypatch.setattr(json_files, "atomic_write", failing_write())

    with pytest.raises(KafkaStorageError) as raised:
        registry.create("new", 2, [])
    assert raised.value.code == 56
    assert registry.get("new") is None and "new" not in manager.topics()
    assert not [n for n in os.listdir(tmp_path) if n.startswith("new-")]

    with pytest.raises(KafkaStorageError):
        registry.alter("keep", [("retention.ms", "5")])
    assert "retention.ms" not in registry.get("keep").configs

    with pytest.raises(KafkaStorageError):
        registry.delete("keep")
    assert registry.partitions("keep") == 2 and sorted(manager.topics()["keep"]) == [0, 1]
    assert (tmp_path / "keep-0").is_dir()
    assert registry_file(tmp_path) == before

    monkeypatch.setattr(json_files, "atomic_write", REAL_WRITE)
    registry.delete("keep")
    assert registry.get("keep") is None and registry_file(tmp_path)["deleting"] == []


def test_delete_on_a_full_disk_uses_the_space_reserve(open_registry, tmp_path, monkeypatch):
    registry, manager = open_registry()
    registry.create("big", 1, [])
    assert (tmp_path / RESERVE_FILE).exists()

    def full_until_reserve_released(path, data):
        if os.path.exists(tmp_path / RESERVE_FILE):
            raise OSError(errno.ENOSPC, "No space left on device")
        REAL_WRITE(path, data)

    monkeypatch.setattr(json_files, "atomic_write", full_until_reserve_released)
    registry.delete("big")
    assert registry.get("big") is None and "big" not in registry_file(tmp_path)["topics"]
    assert not (tmp_path / "big-0").exists()


def test_a_249_character_topic_is_deleted_and_the_broker_restarts(open_registry, tmp_path):
    registry, manager = open_registry()
    name = "z" * 249
    registry.create(name, 3, [])
    registry.delete(name)
    registry, manager = open_registry()
    assert registry.get(name) is None
    assert not [n for n in os.listdir(tmp_path) if n.startswith("zzz")]


def test_reconcile_never_fails_the_start(open_registry, tmp_path, monkeypatch):
    registry, manager = open_registry()
    registry.create("a", 1, [])
    manager.shutdown()
    # A crash half-way through a deletion, a leftover -delete directory.
    doc = registry_file(tmp_path)
    del doc["topics"]["a"]
    doc["deleting"] = ["a"]
    (tmp_path / REGISTRY_FILE).write_text(json.dumps(doc))
    (tmp_path / special_dir_name("old", 0, "-delete")).mkdir()
    registry = TopicRegistry(str(tmp_path), LogConfig())
    registry.load()
    manager = LogManager(str(tmp_path), config_for=registry.log_config)
    manager.startup(registry.owns)
    monkeypatch.setattr(json_files, "atomic_write", failing_write(errno.ENOSPC))
    registry.reconcile(manager)  # cannot write the registry: logged, the start goes on
    assert registry.get("a") is None and "a" not in manager.topics()
    assert not [n for n in os.listdir(tmp_path) if n.endswith("-delete") or n.startswith("a-")]
    monkeypatch.setattr(json_files, "atomic_write", REAL_WRITE)
    manager.shutdown()


def test_a_name_being_deleted_is_not_created_again_until_its_directories_are_gone(
        open_registry, tmp_path, monkeypatch):
    registry, manager = open_registry()
    registry.create("d", 1, [])
    real_rename = os.rename

    def stuck(source, target):  # the rename to `-delete` fails after the log was closed
        if str(target).endswith("-delete"):
            raise OSError(errno.EIO, "I/O error")
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", stuck)
    registry.delete("d")  # committed: the topic is gone, its directory stays for now
    assert registry.get("d") is None and registry_file(tmp_path)["deleting"] == ["d"]
    assert (tmp_path / "d-0").is_dir() and manager.get_log("d", 0) is None
    with pytest.raises(TopicAlreadyExistsError) as raised:
        registry.create("d", 1, [])
    assert raised.value.code == 36 and "marked for deletion" in str(raised.value)
    monkeypatch.setattr(os, "rename", real_rename)
    registry, manager = open_registry()  # the next start finishes the deletion
    assert registry_file(tmp_path)["deleting"] == [] and not (tmp_path / "d-0").exists()
    registry.create("d", 1, [])


# ---- the internal offsets topic --------------------------------------------------------------

@pytest.mark.parametrize("changes", [
    [("cleanup.policy", "delete")],
    [("cleanup.policy", "compact,delete")],
    [("cleanup.policy", None)],  # back to the broker default, delete
])
def test_offsets_topic_keeps_compaction(open_registry, tmp_path, changes):
    registry, manager = open_registry()
    before = registry_file(tmp_path)
    with pytest.raises(InvalidConfigError) as raised:
        registry.alter(OFFSETS_TOPIC, changes)
    assert raised.value.code == 40 and "compact" in str(raised.value)
    assert registry.get(OFFSETS_TOPIC).log_config.cleanup_policy == ("compact",)
    assert registry_file(tmp_path) == before


def test_offsets_topic_accepts_harmless_changes(open_registry):
    registry, manager = open_registry()
    registry.alter(OFFSETS_TOPIC, [("retention.ms", "1000"), ("segment.bytes", "1048576")])
    assert registry.get(OFFSETS_TOPIC).log_config.segment_bytes == 1048576


def test_delete_records_of_an_internal_topic_is_refused():
    with pytest.raises(InvalidTopicError) as raised:
        check_delete_records(OFFSETS_TOPIC)
    assert raised.value.code == 17
    check_delete_records("orders")
