"""Streaming reads: micro-batches, checkpointed offsets, maxOffsetsPerTrigger,
Trigger.AvailableNow, restarts, and data lost to DELETE_RECORDS."""

from __future__ import annotations

import json
import os

import pytest

from client import Admin
from tests.pipeline.conftest import fill, unique


def stream(spark, address: str, topic: str, **options):
    reader = (spark.readStream.format("strata").option("bootstrap.servers", address)
              .option("subscribe", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(df, checkpoint, seen: list) -> None:
    """Run to the end of the backlog; `seen` gets (batch id, rows) per micro-batch."""
    def batch(frame, batch_id):
        rows = frame.select("partition", "offset", "value").collect()
        seen.append((batch_id, sorted((r.partition, r.offset, bytes(r.value)) for r in rows)))

    query = (df.writeStream.foreachBatch(batch).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    if query.exception() is not None:
        raise query.exception()


def test_available_now_spreads_backlog_and_restarts_from_checkpoint(spark, strata, tmp_path):
    topic = unique("stream")
    fill(strata.address, topic, 300, partitions=2)
    checkpoint = tmp_path / "ckpt"
    seen: list = []
    df = stream(spark, strata.address, topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="100")
    run_available_now(df, checkpoint, seen)
    assert [len(rows) for _, rows in seen] == [100, 100, 100]
    everything = sorted(r for _, rows in seen for r in rows)
    assert everything == sorted((i % 2, i // 2, b"v%d" % i) for i in range(300))
    # The offsets Spark checkpointed are the source's JSON: the next offset per partition.
    with open(os.path.join(checkpoint, "offsets", "0")) as f:
        assert json.loads(f.read().splitlines()[-1]) == {topic: {"0": 50, "1": 50}}

    fill(strata.address, topic, 30, partitions=2, start=300, create=False)
    seen.clear()
    run_available_now(df, checkpoint, seen)  # a restart: only what came since
    assert [len(rows) for _, rows in seen] == [30]
    assert sorted(r[2] for r in seen[0][1]) == sorted(b"v%d" % i for i in range(300, 330))


def test_default_trigger_from_latest_with_process_all_available(spark, strata, tmp_path):
    topic = unique("live")
    fill(strata.address, topic, 10)  # before the query: not read (startingOffsets latest)
    query = (stream(spark, strata.address, topic).selectExpr("CAST(value AS STRING) AS v")
             .writeStream.format("memory").queryName("live_" + topic.replace("-", "_"))
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        query.processAllAvailable()
        fill(strata.address, topic, 20, start=10, create=False)
        query.processAllAvailable()
        got = spark.sql(f"SELECT v FROM live_{topic.replace('-', '_')}").collect()
        assert sorted(r.v for r in got) == sorted(f"v{i}" for i in range(10, 30))
        assert query.lastProgress["sources"][0]["latestOffset"] == json.dumps({topic: {"0": 30}})
    finally:
        query.stop()


def test_data_lost_to_delete_records(spark, strata, tmp_path):
    topic = unique("gone")
    fill(strata.address, topic, 100)
    checkpoint = tmp_path / "ckpt"
    seen: list = []
    run_available_now(stream(spark, strata.address, topic, startingOffsets="earliest"),
                      checkpoint, seen)
    assert sum(len(rows) for _, rows in seen) == 100
    fill(strata.address, topic, 100, start=100, create=False)
    with Admin(strata.address) as admin:
        admin.delete_records(topic, 0, 150)  # 100..149 go before the query reads them

    seen.clear()
    with pytest.raises(Exception, match="Cannot fetch offset 100 .*failOnDataLoss"):
        run_available_now(stream(spark, strata.address, topic), checkpoint, seen)
    assert seen == []
    run_available_now(stream(spark, strata.address, topic, failOnDataLoss="false"), checkpoint,
                      seen)
    assert [r[2] for _, rows in seen for r in rows] == [b"v%d" % i for i in range(150, 200)]


def test_pattern_picks_up_new_topics_and_reports_deleted_ones(spark, strata, tmp_path):
    prefix = unique("pattern")
    first, second = f"{prefix}-a", f"{prefix}-b"
    fill(strata.address, first, 10)
    checkpoint = tmp_path / "ckpt"
    seen: list = []

    def pattern_stream(**options):
        return (spark.readStream.format("strata").option("bootstrap.servers", strata.address)
                .option("subscribePattern", f"{prefix}-.*").option("startingOffsets", "earliest")
                .options(**options).load())

    run_available_now(pattern_stream(), checkpoint, seen)
    assert sum(len(rows) for _, rows in seen) == 10
    fill(strata.address, second, 5)  # a new topic matching the pattern: read from its start
    with Admin(strata.address) as admin:
        admin.delete_topic(first)
    seen.clear()
    with pytest.raises(Exception, match=f"{first}-0 are gone"):
        run_available_now(pattern_stream(), checkpoint, seen)
    run_available_now(pattern_stream(failOnDataLoss="false"), checkpoint, seen)
    assert sorted(r[2] for _, rows in seen for r in rows) == [b"v%d" % i for i in range(5)]
