"""format("strata-segments"): the broker's segment files read directly, no broker."""

from __future__ import annotations

import os
import shutil

import pytest

from client import Admin
from tests.pipeline.conftest import fill, unique

SMALL_SEGMENTS = {"segment.bytes": "4096"}


def segments(spark, *paths, **options):
    reader = spark.read.format("strata-segments")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(list(paths) if len(paths) > 1 else paths[0])


def rows_of(df) -> list[tuple]:
    return sorted((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value),
                   r.timestamp, r.timestampType, tuple((h.key, h.value) for h in r.headers))
                  for r in df.collect())


def log_files(data_dir, topic):
    return sorted(os.path.join(data_dir, d, f) for d in os.listdir(data_dir)
                  if d.startswith(f"{topic}-") for f in os.listdir(os.path.join(data_dir, d))
                  if f.endswith(".log"))


def test_segments_after_graceful_stop_and_on_a_copy(spark, broker, tmp_path):
    b = broker()
    address = f"{b.host}:{b.port}"
    topic, other = unique("seg"), unique("other")
    fill(address, topic, 600, partitions=2, headers=True, configs=SMALL_SEGMENTS,
         max_batch_bytes=1024)
    fill(address, other, 5)
    with Admin(address) as admin:
        admin.delete_records(topic, 0, 100)  # the log now starts at 100 in partition 0
    live = rows_of(spark.read.format("strata").option("bootstrap.servers", address)
                   .option("subscribePattern", f"{topic}|{other}").option("includeHeaders", "true")
                   .load())
    assert len(live) == 505
    assert b.stop() == 0

    data_dir = b.data_dir
    files = log_files(data_dir, topic)
    assert len(files) > 4  # small segments: several per partition
    df = segments(spark, data_dir, includeHeaders="true")
    assert df.schema == spark.read.format("strata").option("bootstrap.servers", address) \
        .option("subscribe", topic).option("includeHeaders", "true").load().schema
    assert rows_of(df) == live  # what a consumer sees: nothing below the log start
    # One task per segment (segments wholly below the log start are not planned).
    assert df.rdd.getNumPartitions() <= len(files) + 1

    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    assert rows_of(segments(spark, str(copy), includeHeaders="true", subscribe=topic)) == [
        r for r in live if r[0] == topic]
    # A partition directory on its own (its log start is read next to it).
    part1 = segments(spark, str(copy / f"{topic}-1"))
    assert part1.count() == 300 and part1.rdd.getNumPartitions() == len(
        [f for f in files if f"{topic}-1" in f])
    part0 = segments(spark, str(copy / f"{topic}-0"), str(copy / f"{other}-0"))
    rows = part0.select("topic", "offset").collect()
    assert sorted(r.offset for r in rows if r.topic == topic) == list(range(100, 300))
    assert len(rows) == 205


def test_torn_tail_and_corruption(spark, broker, tmp_path):
    b = broker()
    address = f"{b.host}:{b.port}"
    topic = unique("torn")
    fill(address, topic, 50, max_batch_bytes=64)  # a few records per entry
    assert b.stop() == 0
    copy = tmp_path / "copy"
    shutil.copytree(b.data_dir, copy)
    [log] = log_files(copy, topic)
    with open(log, "rb") as f:
        data = f.read()
    with open(log, "ab") as f:
        f.write(data[:40])  # half an entry: a copy taken while the broker was writing
    assert segments(spark, str(copy), subscribe=topic).count() == 50
    with open(log, "r+b") as f:
        f.seek(len(data) - 1)
        f.write(bytes([data[-1] ^ 0xFF]))  # the last real entry fails its CRC
    with pytest.raises(Exception, match="corrupt entry"):
        segments(spark, str(copy), subscribe=topic).count()
    assert 0 < segments(spark, str(copy), subscribe=topic, failOnDataLoss="false").count() < 50


def test_segment_path_errors(spark, tmp_path):
    with pytest.raises(Exception, match="no partition directories"):
        segments(spark, str(tmp_path)).count()
    with pytest.raises(Exception, match="is not a directory"):
        segments(spark, str(tmp_path / "absent")).count()
