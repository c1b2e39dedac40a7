"""Manifests: what offline readers (storage/remote/catalog.py) see of a store follows
the remote log metadata: a segment is listed only while it is COPY_SEGMENT_FINISHED."""

from __future__ import annotations

import obstore
import pytest

from storage.remote.catalog import list_segments, open_store, split_object_url, topic_of_directory
from storage.remote.copier import RemotePartition
from storage.remote.errors import RemoteStorageError
from storage.remote.metadata import SegmentState
from storage.remote.store import MANIFEST_SUFFIX, object_key
from tests.storage.remote.helpers import LOG_TP, tiered_config
from tests.storage.remote.test_copier import clock, tiered  # noqa: F401  (fixtures)


def listed(partition) -> list[tuple[int, int]]:
    return [(m.start_offset, m.end_offset) for m in list_segments(partition.rsm).get(LOG_TP, [])]


def test_each_finished_copy_has_a_manifest_and_deleted_ones_have_none(tiered):  # noqa: F811
    partition, _ = tiered(tiered_config(local_retention_bytes=0))
    assert listed(partition) == []
    partition.copy_pass()
    assert listed(partition) == [(0, 49), (50, 99), (100, 149), (150, 199)]
    finished = list_segments(partition.rsm)[LOG_TP]
    assert [m.segment_id for m in finished] == [m.segment_id for m in partition.metadata.readable_segments(LOG_TP)]
    assert all(m.state == SegmentState.COPY_SEGMENT_FINISHED for m in finished)
    size = finished[0].segment_size_in_bytes
    partition.log.update_config(tiered_config(local_retention_bytes=0, retention_bytes=2 * size))
    assert [m.start_offset for m in partition.remote_retention_pass()] == [0, 50]
    assert listed(partition) == [(100, 149), (150, 199)]


def test_a_manifest_whose_put_failed_is_put_by_the_next_pass(tiered, clock):  # noqa: F811
    partition, _ = tiered()
    real = partition.rsm.write_manifest
    calls = []

    def failing(metadata):
        calls.append(metadata.start_offset)
        if len(calls) == 2:
            raise RemoteStorageError("remote store: put failed: connection reset")
        real(metadata)

    partition.rsm.write_manifest = failing
    first = partition.copy_pass()
    assert "connection reset" in first.error
    # The second segment is finished in the metadata, but not listed without its manifest.
    assert [m.start_offset for m in partition.metadata.readable_segments(LOG_TP)] == [0, 50]
    assert listed(partition) == [(0, 49)]
    clock.advance(1000)
    partition.copy_pass()
    assert listed(partition) == [(0, 49), (50, 99), (100, 149), (150, 199)]


def test_a_restarted_copier_puts_the_manifests_a_crash_left_out(tiered):  # noqa: F811
    partition, _ = tiered()
    partition.copy_pass()
    for m in partition.metadata.readable_segments(LOG_TP)[1:3]:
        obstore.delete(partition.rsm.store, object_key(m, MANIFEST_SUFFIX))
    assert listed(partition) == [(0, 49), (150, 199)]
    partition.copy_pass()
    assert listed(partition) == [(0, 49), (150, 199)]  # this copier put every manifest it knew of
    restarted = RemotePartition(partition.log, LOG_TP, partition.rsm, partition.metadata)  # as after a restart
    restarted.copy_pass()
    assert listed(partition) == [(0, 49), (50, 99), (100, 149), (150, 199)]


def test_a_corrupt_manifest_is_named(tiered):  # noqa: F811
    partition, _ = tiered()
    partition.copy_pass()
    key = object_key(partition.metadata.readable_segments(LOG_TP)[0], MANIFEST_SUFFIX)
    obstore.put(partition.rsm.store, key, b"\x07garbage")
    with pytest.raises(RemoteStorageError, match=f"remote manifest .*{key}.*corrupt"):
        list_segments(partition.rsm)


def test_object_urls_and_topic_directories():
    assert topic_of_directory("my-topic-Dz6MGn0rTFWOEVqdPCsfAA") == "my-topic"
    assert topic_of_directory("my-topic") is None
    assert split_object_url("s3://b/p/q/t-Dz6MGn0rTFWOEVqdPCsfAA/3/00000000000000000050-x.log") == (
        "s3://b/p/q", "t-Dz6MGn0rTFWOEVqdPCsfAA/3/00000000000000000050-x.log")
    with pytest.raises(RemoteStorageError, match="not the URL of a remote segment object"):
        split_object_url("s3://b/00000000000000000050-x.log")
    with pytest.raises(Exception, match="must start with s3:// or file://"):
        open_store("gs://bucket")
