"""Batch reads through format("strata") against the real broker."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from client import Admin
from tests.pipeline.conftest import fill, read, unique, values

T0 = 1_600_000_000_000


def test_rows_schema_and_headers(spark, strata):
    topic = unique("batch")
    fill(strata.address, topic, 90, partitions=3, headers=True, timestamp=lambda i: T0 + i)
    df = read(spark, strata.address, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset",
                                                  "timestamp", "timestampType", "headers"]
    rows = df.collect()
    assert len(rows) == 90
    by_value = {bytes(r.value): r for r in rows}
    r = by_value[b"v31"]
    assert (bytes(r.key), r.topic, r.partition, r.offset, r.timestampType) == (b"k31", topic, 1,
                                                                                10, 0)
    assert r.timestamp == dt.datetime(2020, 9, 13, 12, 26, 40, 31000)
    assert [(h.key, h.value) for h in r.headers] == [("n", b"31"), ("null", None)]
    for p in range(3):
        assert sorted(x.offset for x in rows if x.partition == p) == list(range(30))
    # Without includeHeaders the column is not there at all.
    assert "headers" not in read(spark, strata.address, subscribe=topic).columns


def test_starting_and_ending_offsets_json(spark, strata):
    topic = unique("offsets")
    fill(strata.address, topic, 60, partitions=3)
    df = read(spark, strata.address, subscribe=topic,
              startingOffsets=json.dumps({topic: {"0": 5, "1": -2, "2": -2}}),
              endingOffsets=json.dumps({topic: {"0": 15, "1": -1, "2": 3}}))
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == ([(0, o) for o in range(5, 15)] + [(1, o) for o in range(20)]
                   + [(2, o) for o in range(3)])


def test_timestamps_select_offsets(spark, strata):
    topic = unique("times")
    fill(strata.address, topic, 40, partitions=2, timestamp=lambda i: T0 + 1000 * i)
    # Partition p holds i = 2k + p at T0 + 1000 i: [T0+10000, T0+30000) is i in 10..29.
    df = read(spark, strata.address, subscribe=topic, startingTimestamp=str(T0 + 10_000),
              endingTimestamp=str(T0 + 30_000))
    assert values(df) == sorted(b"v%d" % i for i in range(10, 30))
    by_partition = json.dumps({topic: {"0": T0 + 35_000, "1": T0}})
    df = read(spark, strata.address, subscribe=topic, startingOffsetsByTimestamp=by_partition)
    assert values(df) == sorted([b"v36", b"v38"] + [b"v%d" % i for i in range(1, 40, 2)])
    # No offset at or after the timestamp: an error by default, the log end with "latest".
    late = str(T0 + 10**9)
    with pytest.raises(Exception, match="No offset matched from request of topic-partition"):
        read(spark, strata.address, subscribe=topic, startingTimestamp=late).count()
    assert read(spark, strata.address, subscribe=topic, startingTimestamp=late,
                startingOffsetsByTimestampStrategy="latest").count() == 0
    # An ending timestamp with no match means the log end.
    assert read(spark, strata.address, subscribe=topic, endingTimestamp=late).count() == 40


def test_subscribe_pattern_and_assign(spark, strata):
    prefix = unique("pat")
    fill(strata.address, f"{prefix}-a", 6, partitions=2)
    fill(strata.address, f"{prefix}-b", 4, partitions=1)
    fill(strata.address, f"x{prefix}-c", 3)
    df = read(spark, strata.address, subscribePattern=f"{prefix}-.*")
    assert sorted(r.topic for r in df.select("topic").distinct().collect()) == [
        f"{prefix}-a", f"{prefix}-b"]
    assert df.count() == 10
    df = read(spark, strata.address, assign=json.dumps({f"{prefix}-a": [1], f"{prefix}-b": [0]}))
    assert sorted((r.topic, r.partition) for r in df.select("topic", "partition").collect()) == (
        [(f"{prefix}-a", 1)] * 3 + [(f"{prefix}-b", 0)] * 4)


def test_min_partitions_splits_into_tasks_reading_exact_ranges(spark, strata):
    topic = unique("split")
    fill(strata.address, topic, 1000, partitions=2, linger_ms=50)
    df = read(spark, strata.address, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    rows = df.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        (p, o) for p in range(2) for o in range(500))
    assert read(spark, strata.address, subscribe=topic).rdd.getNumPartitions() == 2


def test_large_and_compressed_entries(spark, strata):
    topic = unique("big")
    with Admin(strata.address) as admin:
        admin.create_topic(topic, 1, {"max.message.bytes": str(4 * 1024 * 1024)})
    fill(strata.address, topic, 50, create=False, compression="zstd")
    from client import Producer
    with Producer(strata.address, max_batch_bytes=4 * 1024 * 1024) as producer:
        producer.send(topic, b"x" * (3 * 1024 * 1024), partition=0).result()
    df = read(spark, strata.address, subscribe=topic, **{"max.partition.fetch.bytes": "65536"})
    rows = df.selectExpr("offset", "length(value) AS n").orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(51))
    assert rows[-1].n == 3 * 1024 * 1024


def test_batch_data_loss(spark, strata):
    topic = unique("loss")
    fill(strata.address, topic, 100)
    with Admin(strata.address) as admin:
        assert admin.delete_records(topic, 0, 60) == 60
    start = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception, match='Cannot fetch offset 10 .*failOnDataLoss'):
        read(spark, strata.address, subscribe=topic, startingOffsets=start).count()
    df = read(spark, strata.address, subscribe=topic, startingOffsets=start,
              failOnDataLoss="false")
    assert values(df) == sorted(b"v%d" % i for i in range(60, 100))
    # earliest is the log start: nothing is lost.
    assert read(spark, strata.address, subscribe=topic).count() == 40


def test_planning_errors_are_clear(spark, strata):
    topic = unique("errors")
    fill(strata.address, topic, 10, partitions=2)
    cases = [
        ({"subscribe": unique("missing")}, "does not exist"),
        ({"subscribe": topic, "startingOffsets": json.dumps({topic: {"0": 1}})},
         "you must specify all TopicPartitions"),
        ({"subscribe": topic, "startingOffsets": json.dumps({topic: {"0": 4, "1": 0}}),
          "endingOffsets": json.dumps({topic: {"0": 2, "1": -1}})},
         "Beginning offset 4 is after the ending offset 2"),
        ({"subscribe": topic, "startingOffsets": "latest"}, "can't be latest for batch"),
        ({"assign": json.dumps({topic: [7]})}, "does not exist"),
        ({}, "One of the following options must be specified"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            read(spark, strata.address, **options).count()
    with pytest.raises(Exception, match="fixed schema"):
        (spark.read.format("strata").schema("value string").option("bootstrap.servers",
                                                                    strata.address)
         .option("subscribe", topic).load().count())


def test_empty_ranges_give_no_rows(spark, strata):
    topic = unique("empty")
    fill(strata.address, topic, 0, partitions=2)
    df = read(spark, strata.address, subscribe=topic)
    assert df.count() == 0 and df.columns[:2] == ["key", "value"]
