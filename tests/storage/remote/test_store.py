"""The remote storage manager against the file store and moto's S3 server: the
object layout, ranged and chunked reads, indexes, deletes, and clear errors for
missing or short objects."""

from __future__ import annotations

import os

import pytest

from storage.remote.errors import RemoteResourceNotFoundError, RemoteStorageError
from storage.remote.metadata import uuid_string
from storage.remote.store import IndexType, LogSegmentData, leader_epoch_checkpoint, object_key
from tests.storage.remote.helpers import TP, segment_metadata


def write_segment_files(directory, size: int, *, txn: bool = True) -> LogSegmentData:
    os.makedirs(directory, exist_ok=True)
    log = os.path.join(directory, "00000000000000000100.log")
    data = bytes(i % 251 for i in range(size))
    with open(log, "wb") as f:
        f.write(data + b"\xff" * 100)  # bytes past the committed size are not copied
    index = os.path.join(directory, "00000000000000000100.index")
    with open(index, "wb") as f:
        f.write(b"I" * 16 + b"\0" * 64)  # two entries, then preallocated zeros
    timeindex = os.path.join(directory, "00000000000000000100.timeindex")
    with open(timeindex, "wb") as f:
        f.write(b"T" * 12)
    txnindex = os.path.join(directory, "00000000000000000100.txnindex")
    if txn:
        with open(txnindex, "wb") as f:
            f.write(b"X" * 34)
    snapshot = os.path.join(directory, "00000000000000000200.snapshot")
    with open(snapshot, "wb") as f:
        f.write(b"S" * 20)
    return LogSegmentData(log, size, index, 16, timeindex, 12, txnindex if txn else None, snapshot,
                          leader_epoch_checkpoint(((0, 100),)))


def test_copy_then_read_ranges_chunks_and_indexes(rsm, tmp_path):
    size = 3 * 1024 * 1024 + 17
    data = write_segment_files(tmp_path / "local", size)
    metadata = segment_metadata(100, 199, size)
    assert rsm.copy_log_segment_data(metadata, data) is None
    prefix = f"events-{uuid_string(TP.topic_id)}/3/"
    stem = f"{prefix}00000000000000000100-{uuid_string(metadata.segment_id.id)}"
    assert sorted(rsm.list_keys(prefix)) == sorted(stem + s for s in (
        ".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint"))
    expected = bytes(i % 251 for i in range(size))
    assert rsm.read_log_segment(metadata, 1000, 5000) == expected[1000:6000]
    assert rsm.read_log_segment(metadata, size - 10, 5000) == expected[-10:]  # cut at the segment's size
    rsm.chunk_bytes = 1024 * 1024
    chunks = list(rsm.fetch_log_segment(metadata, 10, size - 7))
    assert [len(c) for c in chunks] == [1024 * 1024] * 3  # 3 MiB from 10 to size - 7
    assert b"".join(chunks) == expected[10:size - 7]
    assert [len(c) for c in rsm.fetch_log_segment(metadata, 0)] == [1024 * 1024] * 3 + [17]
    assert rsm.fetch_index(metadata, IndexType.OFFSET) == b"I" * 16
    assert rsm.fetch_index(metadata, IndexType.TIMESTAMP) == b"T" * 12
    assert rsm.fetch_index(metadata, IndexType.TRANSACTION) == b"X" * 34
    assert rsm.fetch_index(metadata, IndexType.PRODUCER_SNAPSHOT) == b"S" * 20
    assert rsm.fetch_index(metadata, IndexType.LEADER_EPOCH) == b"0\n1\n0 100\n"


def test_a_segment_without_a_transaction_index_gets_an_empty_one(rsm, tmp_path):
    data = write_segment_files(tmp_path / "local", 1000, txn=False)
    metadata = segment_metadata(100, 199, 1000)
    rsm.copy_log_segment_data(metadata, data)
    assert rsm.fetch_index(metadata, IndexType.TRANSACTION) == b""


def test_delete_removes_every_object_and_tolerates_missing_ones(rsm, tmp_path):
    data = write_segment_files(tmp_path / "local", 1000)
    kept, doomed = segment_metadata(0, 99, 1000), segment_metadata(100, 199, 1000)
    rsm.copy_log_segment_data(kept, data)
    rsm.copy_log_segment_data(doomed, data)
    rsm.delete_log_segment_data(doomed)
    rsm.delete_log_segment_data(doomed)  # again: nothing left, no error
    keys = rsm.list_keys()
    assert len(keys) == 6 and all(uuid_string(kept.segment_id.id) in k for k in keys)
    with pytest.raises(RemoteResourceNotFoundError, match=r"remote object .*\.log is missing"):
        rsm.read_log_segment(doomed, 0, 10)


def test_missing_and_short_objects_raise_clear_storage_errors(rsm, tmp_path):
    data = write_segment_files(tmp_path / "local", 1000)
    metadata = segment_metadata(100, 199, 1000)
    with pytest.raises(RemoteResourceNotFoundError, match=r"\.index is missing"):
        rsm.fetch_index(metadata, IndexType.OFFSET)
    rsm.copy_log_segment_data(metadata, data)
    lying = segment_metadata(100, 199, 5000)
    lying = type(lying)(metadata.segment_id, 100, 199, 0, 0, 0, 5000, ((0, 100),))
    with pytest.raises(RemoteStorageError, match="shorter than its metadata says"):
        rsm.read_log_segment(lying, 900, 500)
    with pytest.raises(RemoteStorageError, match="outside its 1000 bytes"):
        rsm.read_log_segment(metadata, 1001, 1)
    assert RemoteStorageError.code == 56  # KAFKA_STORAGE_ERROR on a fetch


def test_an_unreachable_s3_store_is_a_storage_error(s3_config, s3_server, tmp_path):
    from tests.storage.remote.conftest import open_rsm
    rsm = open_rsm(s3_config)
    data = write_segment_files(tmp_path / "local", 1000)
    s3_server.stop()
    try:
        with pytest.raises(RemoteStorageError, match="put .* failed"):
            rsm.copy_log_segment_data(segment_metadata(0, 9, 1000), data)
    finally:
        s3_server.start()


def test_object_keys_name_topic_id_partition_offset_and_segment_uuid():
    metadata = segment_metadata(12345, 20000, 1)
    key = object_key(metadata, ".log")
    assert key == (f"events-{uuid_string(TP.topic_id)}/3/00000000000000012345-"
                   f"{uuid_string(metadata.segment_id.id)}.log")
