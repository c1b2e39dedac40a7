"""format("strata-segments") over a tiered topic's remote store (moto's S3 server on
loopback, and a file store): every remote segment is a task, read straight from the
store, with the local reader's rows and schema; offsets; read_committed; only
finished, undeleted segments; clear errors."""

from __future__ import annotations

import json

import obstore
import pytest

from storage.config import LogConfig
from storage.log import Log
from storage.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage.remote.store import MANIFEST_SUFFIX, SEGMENT_SUFFIX, LogSegmentData, leader_epoch_checkpoint, object_key
from tests.pipeline.remote_store import rows, tier
from tests.pipeline.test_transactions import plain, txn
from tests.storage.remote.conftest import file_config, remote_config, s3_config, s3_server  # noqa: F401
from tests.storage.remote.helpers import fill, open_tiered_log, tiered_config


def remote(spark, config, **options):
    reader = spark.read.format("strata-segments")
    if config.s3_endpoint:
        reader = reader.option("s3.endpoint", config.s3_endpoint)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(config.location))


@pytest.fixture
def tiered(tmp_path, remote_config):  # noqa: F811
    """clicks-0: four copied segments (offsets 0-199) and a local tail (200-249)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    log = open_tiered_log(data_dir / "clicks-0")
    fill(log, 4)
    partition = tier(data_dir, remote_config, log)
    fill(log, 1)
    yield remote_config, data_dir, partition
    log.close()
    partition.metadata.close()


def test_remote_segments_are_the_local_readers_rows(spark, tiered):
    config, data_dir, _ = tiered
    df = remote(spark, config, includeHeaders="true")
    assert df.rdd.getNumPartitions() == 4  # one task per remote segment
    local = spark.read.format("strata-segments").option("includeHeaders", "true").load(str(data_dir))
    assert df.schema == local.schema
    got = rows(df)
    assert [r[2] for r in got] == list(range(200))
    assert got == [r for r in rows(local) if r[2] < 200]
    assert remote(spark, config).schema == spark.read.format("strata-segments").load(str(data_dir)).schema


def test_offsets_options(spark, tiered):
    config, data_dir, _ = tiered
    ranged = remote(spark, config, startingOffsets=json.dumps({"clicks": {"0": 73}}),
                    endingOffsets=json.dumps({"clicks": {"0": 120}}))
    assert ranged.rdd.getNumPartitions() == 2
    assert sorted(r.offset for r in ranged.collect()) == list(range(73, 120))
    assert sorted(r.offset for r in remote(spark, config, startingOffsets='{"clicks":{"0":-2}}',
                                           endingOffsets='{"clicks":{"0":-1}}').collect()) == list(range(200))
    assert remote(spark, config, startingOffsets="latest").count() == 0
    split = remote(spark, config, minPartitions="8")
    assert split.rdd.getNumPartitions() == 8 and sorted(r.offset for r in split.collect()) == list(range(200))
    split = remote(spark, config, maxRecordsPerPartition="20", startingOffsets='{"clicks":{"0":10}}')
    assert split.rdd.getNumPartitions() == 2 + 3 * 3  # 40 records, then three segments of 50
    assert sorted(r.offset for r in split.collect()) == list(range(10, 200))
    assert remote(spark, config, subscribe="other").count() == 0
    assert remote(spark, config, assign='{"clicks":[0]}').count() == 200
    # The same options over the data directory.
    local = spark.read.format("strata-segments").option("startingOffsets", json.dumps({"clicks": {"0": 73}})) \
        .option("endingOffsets", json.dumps({"clicks": {"0": 220}})).load(str(data_dir))
    assert sorted(r.offset for r in local.collect()) == list(range(73, 220))
    with pytest.raises(Exception, match="needs the broker's time index"):
        remote(spark, config, startingTimestamp="1000").count()
    with pytest.raises(Exception, match="ending offset not valid in batch queries: earliest"):
        remote(spark, config, endingOffsets="earliest").count()


def test_only_finished_and_undeleted_segments_are_read(spark, tiered):
    config, _, partition = tiered
    rsm, log = partition.rsm, partition.log
    # A copy that never finished: every object in the store, metadata COPY_SEGMENT_STARTED.
    segment = log.segments.snapshot().segments[4]
    started = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(partition.tp), segment.base_offset,
                                       segment.base_offset + 49, segment.max_timestamp_so_far, 0, 0, segment.size,
                                       ((0, segment.base_offset),))
    partition.metadata.add_segment(started)
    rsm.copy_log_segment_data(started, LogSegmentData(
        segment.log.path, segment.size, segment.offset_index.path, segment.offset_index.size_in_bytes,
        segment.time_index.path, segment.time_index.size_in_bytes, None, None, leader_epoch_checkpoint(())))
    assert any(k.endswith(object_key(started, SEGMENT_SUFFIX).rsplit("/", 1)[1]) for k in rsm.list_keys())
    assert remote(spark, config).count() == 200
    # Total retention deletes the two oldest: they are not read any more.
    size = partition.metadata.readable_segments(partition.tp)[0].segment_size_in_bytes
    only_local = sum(s.size for s in log.segments.snapshot().segments if s.base_offset >= 200)
    log.update_config(tiered_config(retention_bytes=2 * size + only_local))
    assert [m.start_offset for m in partition.remote_retention_pass()] == [0, 50]
    df = remote(spark, config)
    assert df.rdd.getNumPartitions() == 2
    assert sorted(r.offset for r in df.collect()) == list(range(100, 200))


def test_a_missing_or_corrupt_remote_object_fails_clearly(spark, tiered):
    config, _, partition = tiered
    finished = partition.metadata.readable_segments(partition.tp)
    rsm = partition.rsm
    obstore.delete(rsm.store, object_key(finished[1], SEGMENT_SUFFIX))
    with pytest.raises(Exception, match=r"remote object .*00000000000000000050-.*\.log is missing"):
        remote(spark, config).count()
    obstore.put(rsm.store, object_key(finished[1], SEGMENT_SUFFIX), b"\x00" * 8 + b"\x00\x00\x00\x01" + b"\x00" * 60)
    with pytest.raises(Exception, match="set failOnDataLoss to false"):
        remote(spark, config).count()
    assert remote(spark, config, failOnDataLoss="false").count() == 150
    obstore.put(rsm.store, object_key(finished[0], MANIFEST_SUFFIX), b"junk")
    with pytest.raises(Exception, match=r"remote manifest .*\.manifest is corrupt"):
        remote(spark, config).count()


def test_store_location_errors(spark, tmp_path):
    with pytest.raises(Exception, match="must start with s3:// or file://|must be file:///absolute/path"):
        spark.read.format("strata-segments").load("file://relative/x").count()
    with pytest.raises(Exception, match="must be an http:// or https:// URL"):
        spark.read.format("strata-segments").option("s3.endpoint", "127.0.0.1:1").load("s3://b/p").count()
    empty = tmp_path / "empty-store"
    with pytest.raises(Exception, match=f"remote store file://{empty}: no such directory"):
        spark.read.format("strata-segments").load(f"file://{empty}").count()
    assert not empty.exists()
    empty.mkdir()
    assert spark.read.format("strata-segments").load(f"file://{empty}").count() == 0


def test_a_topic_under_two_topic_ids_is_refused(spark, tmp_path, file_config):  # noqa: F811
    import uuid
    for i, topic_id in enumerate((uuid.uuid4(), uuid.uuid4())):
        data_dir = tmp_path / f"data{i}"
        data_dir.mkdir()
        log = open_tiered_log(data_dir / "clicks-0")
        fill(log, 1)
        partition = tier(data_dir, file_config, log, topic_id)
        log.close()
        partition.metadata.close()
    with pytest.raises(Exception, match="holds topic 'clicks' under 2 topic ids"):
        spark.read.format("strata-segments").load(str(file_config.location)).count()


def write_txn_partition(directory) -> Log:
    """As test_transactions.write_partition, on a tiered topic: committed, aborted
    (its marker a segment after its data), plain, then a transaction left open."""
    config = LogConfig.from_props({"segment.bytes": "300", "remote.storage.enable": "true"})
    log = Log.open(str(directory / "topic-0"), "topic", 0, config)
    pad = b"x" * 80
    log.append(txn(1, 0, b"c1" + pad))  # 0
    log.append(txn(2, 0, b"a1" + pad))  # 1: aborted below
    log.append(plain(b"p1" + pad))  # 2
    log.append_txn_marker(1, 0, 0, commit=True)  # 3
    log.append(txn(2, 1, b"a2" + pad))  # 4
    log.append(plain(b"p2" + pad))  # 5
    log.append_txn_marker(2, 0, 0, commit=False)  # 6
    log.append(txn(2, 2, b"c2" + pad))  # 7
    log.append_txn_marker(2, 0, 0, commit=True)  # 8
    log.append(plain(b"p3" + pad))  # 9
    log.append(txn(3, 0, b"o1" + pad))  # 10: open
    log.append(plain(b"p4" + pad))  # 11
    log.roll()
    return log


def test_read_committed_from_the_remote_txnindex_and_snapshot(spark, tmp_path, remote_config):  # noqa: F811
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    log = write_txn_partition(data_dir)
    partition = tier(data_dir, remote_config, log)
    try:
        copied = partition.metadata.readable_segments(partition.tp)
        assert copied[-1].end_offset == 9  # the open transaction's records stay local
        values = sorted(bytes(r.value)[:2] for r in remote(spark, remote_config).collect())
        assert values == sorted([b"c1", b"a1", b"p1", b"a2", b"p2", b"c2", b"p3"])
        committed = remote(spark, remote_config, **{"isolation.level": "read_committed"})
        assert sorted(bytes(r.value)[:2] for r in committed.collect()) == sorted([b"c1", b"p1", b"p2", b"c2", b"p3"])
        # From inside the aborted transaction on, and with the snapshots gone (headers are read).
        ranged = remote(spark, remote_config, **{"isolation.level": "read_committed",
                                                 "startingOffsets": '{"topic":{"0":4}}'})
        assert sorted(bytes(r.value)[:2] for r in ranged.collect()) == sorted([b"p2", b"c2", b"p3"])
    finally:
        log.close()
        partition.metadata.close()


def test_read_committed_view_of_a_transaction_open_across_segments(spark, tmp_path, remote_config):  # noqa: F811
    """A transaction open when a segment rolled and aborted in the next: read_committed
    drops it; the first segment alone (its `.snapshot` shows the transaction open, or,
    without snapshots, its headers do) ends at the transaction's first offset."""
    from pipeline.remote_segments import NO_END, remote_committed_view
    from storage.remote.catalog import list_segments

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    config = LogConfig.from_props({"remote.storage.enable": "true"})
    log = Log.open(str(data_dir / "topic-0"), "topic", 0, config)
    pad = b"x" * 80
    for i in range(4):
        log.append(plain(b"p%d" % i + pad))  # 0-3
    log.append(txn(5, 0, b"t1" + pad))  # 4: open across the roll
    log.roll()
    log.append(plain(b"q1" + pad))  # 5
    log.append_txn_marker(5, 0, 0, commit=False)  # 6: aborted
    log.roll()
    partition = tier(data_dir, remote_config, log)
    try:
        segments = list_segments(partition.rsm)[partition.tp]
        assert [(m.start_offset, m.end_offset) for m in segments] == [(0, 4), (5, 6)]
        stable_end, aborted = remote_committed_view(partition.rsm, segments, segments[0])
        assert stable_end == NO_END and [(t.producer_id, t.first_offset) for t in aborted] == [(5, 4)]
        committed = remote(spark, remote_config, **{"isolation.level": "read_committed"})
        assert sorted(r.offset for r in committed.collect()) == [0, 1, 2, 3, 5]
        assert remote_committed_view(partition.rsm, segments[:1], segments[0])[0] == 4
        for m in segments:  # no snapshots: the headers are read
            obstore.put(partition.rsm.store, object_key(m, ".snapshot"), b"")
        assert remote_committed_view(partition.rsm, segments[:1], segments[0])[0] == 4
        assert remote_committed_view(partition.rsm, segments, segments[0])[0] == NO_END
    finally:
        log.close()
        partition.metadata.close()


def test_include_local_tail_reads_above_the_store_from_the_broker(spark, broker, tmp_path, remote_config):  # noqa: F811
    """The broker's partition copied to the store up to its rolled segments, then more
    records produced: includeLocalTail gives every offset once, the broker source's rows."""
    import shutil

    from tests.pipeline.conftest import fill as produce
    from tests.pipeline.conftest import unique

    b = broker()
    address = f"{b.host}:{b.port}"
    topic = unique("tiered")
    produce(address, topic, 300, partitions=2, headers=True, configs={"segment.bytes": "2048"},
            max_batch_bytes=512)
    assert b.stop() == 0
    copy = tmp_path / "copy"
    shutil.copytree(b.data_dir, copy)
    b.restart()
    address = f"{b.host}:{b.port}"  # a new port
    covered = {}
    for partition in (0, 1):
        log = Log.open(str(copy / f"{topic}-{partition}"), topic, partition,
                       LogConfig.from_props({"remote.storage.enable": "true"}))
        tiered = tier(copy, remote_config, log)
        covered[partition] = tiered.metadata.highest_copied_offset(tiered.tp) + 1
        log.close()
        tiered.metadata.close()
    assert all(0 < end < 150 for end in covered.values())  # rolled segments only: a tail stays local
    produce(address, topic, 100, partitions=2, start=300, create=False, headers=True)

    live = spark.read.format("strata").option("bootstrap.servers", address).option("subscribe", topic) \
        .option("includeHeaders", "true").load()
    df = remote(spark, remote_config, includeLocalTail="true", subscribe=topic, includeHeaders="true",
                **{"kafka.bootstrap.servers": address})
    assert df.schema == live.schema
    got = rows(df)
    assert [r[2] for r in got if r[1] == 0] == list(range(200)) and [r[2] for r in got if r[1] == 1] == list(range(200))
    assert got == rows(live)
    ranged = remote(spark, remote_config, includeLocalTail="true", subscribe=topic,
                    startingOffsets=json.dumps({topic: {"0": covered[0] - 3, "1": 120}}),
                    endingOffsets=json.dumps({topic: {"0": covered[0] + 5, "1": -1}}),
                    **{"kafka.bootstrap.servers": address})
    by_partition = {p: sorted(r.offset for r in ranged.collect() if r.partition == p) for p in (0, 1)}
    assert by_partition == {0: list(range(covered[0] - 3, covered[0] + 5)), 1: list(range(120, 200))}
    with pytest.raises(Exception, match="includeLocalTail needs subscribe"):
        remote(spark, remote_config, includeLocalTail="true", **{"kafka.bootstrap.servers": address}).count()
    with pytest.raises(Exception, match="bootstrap.servers"):
        remote(spark, remote_config, includeLocalTail="true", subscribe=topic).count()


def test_ranged_reads_from_an_index_position(tiered):
    """An executor's reads: from the index entry at or below the first offset, in
    chunks (the next one read ahead), through the segment's end; decoded as a file."""
    from pipeline.remote_segments import plan_remote, read_remote_chunks, store_of
    from pipeline.segments import decode_chunks

    config, _, partition = tiered
    environ = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    store = store_of(str(config.location), {"s3.endpoint": config.s3_endpoint}, environ)
    parts, covered = plan_remote(store, None, {None: 77}, {None: -1}, False)
    assert covered == {("clicks", 0): 200} and [(p.first, p.end) for p in parts] == [(77, 100), (100, 150),
                                                                                   (150, 200)]
    position, chunks = read_remote_chunks(parts[0], 1000)
    data = b"".join(chunks)
    whole = bytes(obstore.get(partition.rsm.store, parts[0].key).bytes())
    assert 0 < position < len(whole) and data == whole[position:]
    _, chunks = read_remote_chunks(parts[0], 1000)
    batches = list(decode_chunks(parts[0].name, chunks, position, parts[0].first, parts[0].end, None, "clicks", 0,
                                 False, True))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(77, 100))
