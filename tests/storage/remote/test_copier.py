"""The remote log manager's passes on a real partition log and a real store
(a directory, and moto's S3 server process): copying in order and once, local
and total retention, the store failing, and reads from the remote segments."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kafka_format import iter_records
from kafka_format.errors import OffsetOutOfRangeError
from storage.clock import ManualClock
from storage.remote.config import RemoteLogConfig
from storage.remote.copier import Backoff, RemotePartition
from storage.remote.errors import RemoteResourceNotFoundError, RemoteStorageError
from storage.remote.metadata import RemoteLogMetadataStore, SegmentState
from storage.remote.reader import RemoteLogReader
from storage.remote.store import object_key
from tests.storage.remote.conftest import open_rsm
from tests.storage.remote.helpers import (
    BATCHES_PER_SEGMENT,
    LOG_TP,
    RECORDS_PER_BATCH,
    fill,
    open_tiered_log,
    tiered_config,
)

PER_SEGMENT = RECORDS_PER_BATCH * BATCHES_PER_SEGMENT


@pytest.fixture
def clock():
    return ManualClock(1_700_000_100_000)


@pytest.fixture
def tiered(tmp_path, remote_config, clock):
    """A tiered partition: log, metadata store, remote storage manager, copier, reader."""
    made = []

    def make(config=None, segments=4):
        log = open_tiered_log(tmp_path / "clicks-0", config, clock)
        fill(log, segments)
        metadata = RemoteLogMetadataStore(str(tmp_path / "__remote_log_metadata-0"))
        rsm = open_rsm(remote_config)
        settings = RemoteLogConfig(retry_backoff_ms=1000, retry_backoff_max_ms=8000, retry_jitter=0.0)
        partition = RemotePartition(log, LOG_TP, rsm, metadata, config=settings, clock=clock)
        reader = RemoteLogReader(rsm, metadata, cache_bytes=64 * 1024, chunk_bytes=4096)
        made.append((log, metadata))
        return partition, reader

    yield make
    for log, metadata in made:
        log.close()
        metadata.close()


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for r in iter_records(data)]


def test_rolled_segments_are_copied_in_order_and_once(tiered):
    partition, reader = tiered()
    log = partition.log
    assert partition.stats().copy_lag_segments == 4
    result = partition.copy_pass()
    assert [m.start_offset for m in result.copied] == [0, 50, 100, 150]
    assert [m.end_offset for m in result.copied] == [49, 99, 149, 199]
    assert all(m.state == SegmentState.COPY_SEGMENT_FINISHED for m in result.copied)
    assert partition.copy_pass().copied == []  # once
    stats = partition.stats()
    assert (stats.copy_lag_segments, stats.copy_lag_bytes, stats.highest_copied_offset) == (0, 0, 199)
    assert stats.remote_size_bytes == sum(s.size for s in log.segments.snapshot().segments)
    fill(log, 1)
    assert [m.start_offset for m in partition.copy_pass().copied] == [200]  # the active segment waits
    assert partition.stats().copy_lag_segments == 0


def test_remote_reads_match_the_local_log(tiered):
    partition, reader = tiered()
    log = partition.log
    partition.copy_pass()
    for offset in (0, 1, 9, 10, 49, 50, 123, 199):
        with log.read(offset, 3000, min_one_message=True) as found:
            local = found.read()
        assert reader.read(LOG_TP, offset, 3000) == local, offset
    assert reader.cache.size_bytes <= reader.cache.capacity
    everything = []
    offset = 0
    while offset < 200:
        data = reader.read(LOG_TP, offset, 1000)
        got = [o for o in offsets_in(data) if o >= offset]
        everything += got
        offset = got[-1] + 1
    assert everything == list(range(200))
    with pytest.raises(OffsetOutOfRangeError, match="in no remote segment"):
        reader.read(LOG_TP, 200, 1000)
    assert reader.read(LOG_TP, 0, 10, min_one_message=False) == b""


def test_local_retention_deletes_only_copied_segments(tiered):
    partition, _ = tiered(tiered_config(local_retention_bytes=0))
    log = partition.log
    assert partition.local_retention_pass().segments_deleted == 0  # nothing is in the store yet
    assert log.log_start_offset == 0
    partition.copy_pass()
    result = partition.local_retention_pass()
    assert result.segments_deleted == 4
    assert log.log_start_offset == 200 and partition.local_log_start_offset == 200
    assert partition.log_start_offset == 0  # the remote start


def test_local_retention_ms_waits_for_the_copy_and_for_the_age(tiered, clock):
    partition, _ = tiered(tiered_config(local_retention_ms=60_000, retention_ms=3_600_000))
    partition.copy_pass()
    assert partition.local_retention_pass(now_ms=1_700_000_000_000 + 60_000).segments_deleted == 0
    assert partition.local_retention_pass(now_ms=1_700_000_000_000 + 60_001).segments_deleted == 4


def test_total_retention_deletes_from_the_store_and_moves_the_log_start(tiered):
    segment_size = None
    partition, reader = tiered(tiered_config(local_retention_bytes=0))
    partition.copy_pass()
    partition.local_retention_pass()
    segment_size = partition.metadata.readable_segments(LOG_TP)[0].segment_size_in_bytes
    partition.log.update_config(tiered_config(local_retention_bytes=0, retention_bytes=2 * segment_size))
    deleted = partition.remote_retention_pass()
    assert [m.start_offset for m in deleted] == [0, 50]
    assert all(m.state == SegmentState.DELETE_SEGMENT_FINISHED for m in deleted)
    assert partition.metadata.remote_log_start_offset(LOG_TP) == 100
    assert partition.log_start_offset == 100
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(LOG_TP, 10, 1000)
    assert all(str(deleted[0].segment_id.id.hex) not in k for k in partition.rsm.list_keys())
    partition.log.update_config(tiered_config(local_retention_bytes=0, retention_ms=1000))
    assert [m.start_offset for m in partition.remote_retention_pass()] == [100, 150]


def test_total_retention_also_deletes_local_segments_below_the_new_start(tiered):
    partition, _ = tiered()
    partition.copy_pass()
    size = partition.metadata.readable_segments(LOG_TP)[0].segment_size_in_bytes
    partition.log.update_config(tiered_config(retention_bytes=2 * size))
    partition.remote_retention_pass()
    assert partition.log.log_start_offset == 100
    assert [s.base_offset for s in partition.log.segments.snapshot().segments] == [100, 150, 200]


def test_copy_disable_and_tiering_off_copy_nothing(tiered):
    partition, _ = tiered(tiered_config(remote_log_copy_disable="true"))
    assert partition.copy_pass().copied == []
    partition.log.update_config(tiered_config(remote_storage_enable="false"))
    assert partition.copy_pass().copied == []
    partition.log.update_config(tiered_config())
    assert len(partition.copy_pass().copied) == 4


def test_backoff_doubles_up_to_its_max():
    backoff = Backoff(500, 30_000, 0.0)
    assert [backoff.delay_ms(n) for n in (0, 1, 2, 3, 7, 100)] == [0, 500, 1000, 2000, 30_000, 30_000]
    jittered = Backoff(1000, 30_000, 0.2)
    assert all(800 <= jittered.delay_ms(1) <= 1200 for _ in range(50))


def test_a_store_that_fails_keeps_local_data_backs_off_and_recovers(tiered, clock, tmp_path):
    partition, _ = tiered(tiered_config(local_retention_bytes=0))
    real = partition.rsm

    class Down:
        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise RemoteStorageError("remote store s3://down: put failed: connection refused")
            return fail

    partition.rsm = Down()
    first = partition.copy_pass()
    assert first.copied == [] and "connection refused" in first.error
    stats = partition.stats()
    assert stats.failures == 1 and stats.copy_lag_segments == 4 and stats.copy_lag_bytes > 0
    assert "connection refused" in stats.last_error
    assert partition.copy_pass().skipped_for_backoff  # within the back-off: the store is left alone
    assert partition.local_retention_pass().segments_deleted == 0  # never a segment not in the store
    assert all(os.path.exists(s.log.path) for s in partition.log.segments.snapshot().segments)
    clock.advance(1000)
    assert partition.copy_pass().error is not None
    assert partition.stats().failures == 2
    assert partition.stats().retry_at_ms == clock.now_ms + 2000  # doubled
    partition.rsm = real
    clock.advance(2000)
    result = partition.copy_pass()
    # The first failed attempt left COPY_SEGMENT_STARTED metadata; the second failed while
    # cleaning it up (DELETE_SEGMENT_STARTED); this pass finishes that before copying.
    assert result.cleaned == 1 and [m.start_offset for m in result.copied] == [0, 50, 100, 150]
    assert partition.stats().failures == 0 and partition.stats().last_error is None
    assert partition.local_retention_pass().segments_deleted == 4


def test_an_unreachable_s3_server_is_survived(tmp_path, s3_config, s3_server, clock):
    log = open_tiered_log(tmp_path / "clicks-0", tiered_config(local_retention_bytes=0), clock)
    fill(log, 2)
    metadata = RemoteLogMetadataStore(str(tmp_path / "meta"))
    settings = RemoteLogConfig(retry_backoff_ms=100, retry_backoff_max_ms=100, retry_jitter=0.0)
    partition = RemotePartition(log, LOG_TP, open_rsm(s3_config), metadata, config=settings, clock=clock)
    s3_server.stop()
    try:
        result = partition.copy_pass()
        assert result.copied == [] and "failed" in result.error
        assert partition.local_retention_pass().segments_deleted == 0
        assert partition.stats().copy_lag_segments == 2
    finally:
        s3_server.start()  # moto keeps its buckets in memory: a restarted server has none
        s3_server.create_bucket(s3_config.location.bucket)
    clock.advance(100)
    assert len(partition.copy_pass().copied) == 2
    log.close()
    metadata.close()


class CountingStore:
    """A remote storage manager that counts the ranged reads of segment data (and
    can hold them at a gate, or fail them)."""

    def __init__(self, rsm):
        self.rsm = rsm
        self.reads: list[tuple[int, int, int]] = []  # (segment start offset, start, length)
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def read_log_segment_view(self, metadata, start, length):
        self.gate.wait(10)
        with self.lock:
            self.reads.append((metadata.start_offset, start, length))
        if self.fail:
            raise RemoteStorageError(f"remote segment {metadata.segment_id}: the store is failing")
        return self.rsm.read_log_segment_view(metadata, start, length)

    def __getattr__(self, name):
        return getattr(self.rsm, name)


def test_concurrent_reads_read_each_chunk_once_in_bounded_ranges(tiered):
    partition, _ = tiered()
    partition.copy_pass()
    store = CountingStore(partition.rsm)
    reader = RemoteLogReader(store, partition.metadata, cache_bytes=64 * 1024, chunk_bytes=4096,
                             readahead_bytes=0, threads=3)
    expected = reader.read(LOG_TP, 60, 9000)
    assert len(store.reads) == len({(s, start) for s, start, _ in store.reads}) >= 2
    reader.cache = type(reader.cache)(64 * 1024)  # cold again
    store.reads.clear()
    store.gate.clear()  # every reader finds the chunks in flight or reads them itself
    with ThreadPoolExecutor(8) as pool:
        results = [pool.submit(reader.read, LOG_TP, 60, 9000) for _ in range(8)]
        time.sleep(0.2)
        store.gate.set()
        assert all(r.result() == expected for r in results)
    assert len(store.reads) == len({(s, start) for s, start, _ in store.reads})  # no chunk read twice
    assert all(length == 4096 and start % 4096 == 0 for _, start, length in store.reads)
    reader.close()


def test_read_ahead_reads_the_next_segment_into_the_bounded_cache(tiered):
    partition, _ = tiered()
    copied = partition.copy_pass().copied
    store = CountingStore(partition.rsm)
    reader = RemoteLogReader(store, partition.metadata, cache_bytes=64 * 1024, chunk_bytes=4096,
                             readahead_bytes=1 << 20, threads=2)
    assert reader.readahead_bytes == 32 * 1024  # at most half the cache
    data, metadata, end = reader.read_with_end(LOG_TP, 40, 1 << 20)
    assert metadata.segment_id == copied[0].segment_id and end == metadata.segment_size_in_bytes
    assert offsets_in(data)[-1] == 49
    reader.read_ahead(LOG_TP, metadata, end)
    deadline = time.monotonic() + 30
    while reader.reads_in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.reads_in_flight() == 0
    ahead = [(segment, start) for segment, start, _ in store.reads if segment != 0]
    assert ahead and all(segment in (50, 100, 150) for segment, _ in ahead)
    assert reader.cache.size_bytes <= reader.cache.capacity
    store.reads.clear()
    assert offsets_in(reader.read(LOG_TP, 50, 3000))[0] == 50
    assert all(segment != 50 or start != 0 for segment, start, _ in store.reads)  # found in the cache
    reader.close()


def test_a_failed_read_ahead_is_dropped_and_the_fetch_meets_the_error(tiered):
    partition, _ = tiered()
    copied = partition.copy_pass().copied
    store = CountingStore(partition.rsm)
    reader = RemoteLogReader(store, partition.metadata, cache_bytes=64 * 1024, chunk_bytes=4096, threads=2)
    store.fail = True
    reader.read_ahead(LOG_TP, copied[0], 0)
    with pytest.raises(RemoteStorageError, match="the store is failing"):
        reader.read(LOG_TP, 10, 3000)
    store.fail = False
    assert offsets_in(reader.read(LOG_TP, 10, 3000))[0] <= 10
    reader.close()


def test_corrupt_and_missing_remote_objects_are_clear_errors(tiered, remote_config):
    partition, reader = tiered()
    copied = partition.copy_pass().copied
    rsm = partition.rsm
    import obstore

    obstore.put(rsm.store, object_key(copied[1], ".log"), b"\x00" * 8 + b"\xff\xff\xff\xff" + b"\x00" * 5000)
    with pytest.raises(RemoteStorageError, match="corrupt entry at position 0"):
        reader.read(LOG_TP, 60, 1000)
    obstore.put(rsm.store, object_key(copied[2], ".index"), b"\x00" * 7)
    with pytest.raises(RemoteStorageError, match="offset index of 7 bytes"):
        reader.read(LOG_TP, 120, 1000)
    obstore.delete(rsm.store, object_key(copied[3], ".log"))
    with pytest.raises(RemoteResourceNotFoundError, match=r"\.log is missing"):
        reader.read(LOG_TP, 160, 1000)
    assert reader.read(LOG_TP, 5, 1000)  # the healthy segment still reads


def test_offset_for_timestamp_from_remote_segments(tmp_path, file_config, clock):
    from kafka_format import build_batch

    log = open_tiered_log(tmp_path / "clicks-0", tiered_config(), clock)
    for segment in range(3):
        for batch in range(4):
            base = 1_000_000 + segment * 1000 + batch * 100
            log.append(build_batch([(None, b"v", base + i) for i in range(5)]))
        log.roll()
    metadata = RemoteLogMetadataStore(str(tmp_path / "meta"))
    rsm = open_rsm(file_config)
    RemotePartition(log, LOG_TP, rsm, metadata, clock=clock).copy_pass()
    reader = RemoteLogReader(rsm, metadata, chunk_bytes=4096)
    for target in (0, 1_000_000, 1_000_003, 1_000_150, 1_001_000, 1_002_304):
        assert reader.offset_for_timestamp(LOG_TP, target) == log.offset_for_timestamp(target), target
    assert reader.offset_for_timestamp(LOG_TP, 1_002_305) is None
    assert reader.offset_for_timestamp(LOG_TP, 0, starting_offset=42) == (1_002_002, 42)
    log.close()
    metadata.close()
