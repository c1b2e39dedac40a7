"""Deleting a tiered topic's remote data (broker/core/tiering.py) against a real
LogManager, partition log, metadata store and file store: the deletion waits for
a copy that is running, so no upload outlives it; remote data of a topic deleted
before a crash is deleted by the first pass; a damaged remote log starts file
(DeleteRecords below the local start) is refused with an error naming it."""

from __future__ import annotations

import os
import threading

from storage.manager import LogManager
from storage.remote.copier import RemotePartition
from storage.remote.metadata import PartitionDeleteState, RemoteLogMetadataStore, SegmentState
from tests.storage.remote.conftest import open_rsm
from tests.storage.remote.helpers import LOG_TP, fill, tiered_config

WAIT_S = 60.0  # a guard against hangs, not a speed assumption


class GatedStore:
    """A remote storage manager whose first copy waits until `release` is set."""

    def __init__(self, rsm):
        self.rsm = rsm
        self.copying = threading.Event()
        self.release = threading.Event()

    def copy_log_segment_data(self, metadata, data):
        self.copying.set()
        assert self.release.wait(WAIT_S)
        return self.rsm.copy_log_segment_data(metadata, data)

    def delete_log_segment_data(self, metadata):
        self.release.set()  # a deletion that does not wait for the copy runs alongside it
        return self.rsm.delete_log_segment_data(metadata)

    def __getattr__(self, name):
        return getattr(self.rsm, name)


def stored_files(root) -> list[str]:
    return sorted(name for _, _, names in os.walk(root) for name in names)


def test_topic_delete_waits_for_a_running_copy_and_leaves_no_object(tmp_path, file_config, monkeypatch):
    from broker.core.tiering import Tiering

    manager = LogManager(str(tmp_path / "data"), config_for=lambda topic: tiered_config())
    manager.startup()
    partition_log = manager.get_or_create_log(LOG_TP.topic, LOG_TP.partition)
    fill(partition_log, 2)
    metadata = RemoteLogMetadataStore(str(tmp_path / "data" / "__remote_log_metadata-0"))
    store = GatedStore(open_rsm(file_config))
    topic_ids = {LOG_TP.topic: str(LOG_TP.topic_id)}  # the registry's
    tiering = Tiering(file_config, manager, topic_ids.get, store, metadata)
    stop = getattr(RemotePartition, "stop", lambda self: None)

    def stopping(self):
        store.release.set()  # the deleter is at the stop: let the copy go on
        stop(self)

    monkeypatch.setattr(RemotePartition, "stop", stopping, raising=False)
    try:
        copier = threading.Thread(target=tiering.run_pass)
        copier.start()
        assert store.copying.wait(WAIT_S)
        del topic_ids[LOG_TP.topic]  # the registry forgets the topic before its remote data goes
        deleter = threading.Thread(target=tiering.delete_topic, args=(LOG_TP.topic, str(LOG_TP.topic_id), 1))
        deleter.start()
        copier.join(WAIT_S)
        deleter.join(WAIT_S)
        assert not copier.is_alive() and not deleter.is_alive()
        assert stored_files(file_config.location.prefix) == []
        segments = metadata.segments(LOG_TP)
        assert segments and {m.state for m in segments} == {SegmentState.DELETE_SEGMENT_FINISHED}
        event = metadata.partition_delete(LOG_TP)
        assert event is not None and event.state == PartitionDeleteState.DELETE_PARTITION_FINISHED
        # No later pass copies the deleted topic's partition again.
        tiering.run_pass()
        assert stored_files(file_config.location.prefix) == []
    finally:
        manager.shutdown()
        tiering.close()


def test_remote_data_of_a_topic_deleted_before_a_crash_is_deleted_by_the_first_pass(tmp_path, file_config):
    """A topic deleted just before a crash: the registry no longer has it, the metadata
    holds its copied segments and no deletion. The first pass after the start deletes them."""
    from broker.core.tiering import Tiering

    data = tmp_path / "data"
    manager = LogManager(str(data), config_for=lambda topic: tiered_config())
    manager.startup()
    partition_log = manager.get_or_create_log(LOG_TP.topic, LOG_TP.partition)
    fill(partition_log, 2)
    topic_ids = {LOG_TP.topic: str(LOG_TP.topic_id)}
    metadata = RemoteLogMetadataStore(str(data / "__remote_log_metadata-0"))
    tiering = Tiering(file_config, manager, topic_ids.get, open_rsm(file_config), metadata)
    tiering.run_pass()
    assert len(metadata.readable_segments(LOG_TP)) == 2 and stored_files(file_config.location.prefix)
    tiering.close()
    manager.delete_log(LOG_TP.topic, LOG_TP.partition)  # the topic's deletion, then the crash
    del topic_ids[LOG_TP.topic]
    manager.shutdown()

    manager = LogManager(str(data), config_for=lambda topic: tiered_config())
    manager.startup()
    metadata = RemoteLogMetadataStore(str(data / "__remote_log_metadata-0"))
    tiering = Tiering(file_config, manager, topic_ids.get, open_rsm(file_config), metadata)
    try:
        tiering.run_pass()
        assert stored_files(file_config.location.prefix) == []
        assert {m.state for m in metadata.segments(LOG_TP)} == {SegmentState.DELETE_SEGMENT_FINISHED}
        event = metadata.partition_delete(LOG_TP)
        assert event is not None and event.state == PartitionDeleteState.DELETE_PARTITION_FINISHED
    finally:
        manager.shutdown()
        tiering.close()


def test_a_damaged_remote_log_starts_file_is_a_clear_error(tmp_path, file_config):
    import pytest

    from broker.core.tiering import LOG_STARTS_FILE, Tiering
    from kafka_format.errors import InvalidConfigError

    data = tmp_path / "data"
    manager = LogManager(str(data), config_for=lambda topic: tiered_config())
    manager.startup()
    (data / LOG_STARTS_FILE).write_text('{"version": 1, "partitions": [{"topic": "clicks"}]}')
    metadata = RemoteLogMetadataStore(str(data / "__remote_log_metadata-0"))
    try:
        with pytest.raises(InvalidConfigError, match=LOG_STARTS_FILE) as caught:
            Tiering(file_config, manager, lambda topic: None, open_rsm(file_config), metadata)
        assert "remote log starts" in str(caught.value)
    finally:
        metadata.close()
        manager.shutdown()
