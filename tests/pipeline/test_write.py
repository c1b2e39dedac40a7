"""Batch and streaming writes through format("strata"), read back through the source."""

from __future__ import annotations

import pytest

from client import Admin
from tests.broker_process import BrokerProcess
from tests.pipeline.conftest import fill, read, unique, values


def create(address: str, *topics: str, partitions: int = 2) -> None:
    with Admin(address) as admin:
        for topic in topics:
            admin.create_topic(topic, partitions)


def write(df, address: str, mode: str = "append", **options):
    writer = df.write.format("strata").mode(mode).option("bootstrap.servers", address)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_batch_write_all_columns_then_read_back(spark, strata):
    topic = unique("write")
    create(strata.address, topic)
    df = spark.createDataFrame(
        [(f"value-{i}", f"key-{i}".encode(), i % 2, [("h", b"%d" % i)]) for i in range(50)]
        + [(None, None, None, None)],
        "value string, key binary, partition int, headers array<struct<key:string,value:binary>>")
    write(df.withColumn("ignored", df.value), strata.address, topic=topic)
    back = read(spark, strata.address, subscribe=topic, includeHeaders="true").collect()
    assert len(back) == 51
    by_key = {bytes(r.key) if r.key is not None else None: r for r in back}
    r = by_key[b"key-7"]
    assert (bytes(r.value), r.partition, [(h.key, h.value) for h in r.headers]) == (
        b"value-7", 1, [("h", b"7")])
    assert by_key[None].value is None  # a tombstone stays a null value
    assert sorted(r.partition for r in back if r.key is not None) == [0] * 25 + [1] * 25


def test_topic_column_and_topic_option(spark, strata):
    a, b, c = unique("col-a"), unique("col-b"), unique("opt-c")
    create(strata.address, a, b, c, partitions=1)
    df = spark.createDataFrame([(a, "1"), (b, "2"), (a, "3")], "topic string, value string")
    write(df, strata.address)
    assert values(read(spark, strata.address, subscribe=a)) == [b"1", b"3"]
    assert values(read(spark, strata.address, subscribe=b)) == [b"2"]
    write(df, strata.address, topic=c)  # the option wins over the column
    assert values(read(spark, strata.address, subscribe=c)) == [b"1", b"2", b"3"]


def test_write_refuses_bad_frames(spark, strata):
    topic = unique("bad")
    create(strata.address, topic, partitions=1)
    cases = [
        (spark.createDataFrame([("k",)], "key string"), {"topic": topic},
         "Required attribute 'value' not found"),
        (spark.createDataFrame([(1, "v")], "key int, value string"), {"topic": topic},
         "key attribute type must be a string or binary"),
        (spark.createDataFrame([("v",)], "value string"), {}, "topic option required"),
        (spark.createDataFrame([("v", 1)], "value string, partition long"), {"topic": topic},
         "partition attribute type must be an int"),
        (spark.createDataFrame([(None, "v")], "topic string, value string"), {},
         "null topic present in the data"),
    ]
    for df, options, message in cases:
        with pytest.raises(Exception, match=message):
            write(df, strata.address, **options)
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="overwrite not allowed"):
        write(df, strata.address, mode="overwrite", topic=topic)
    # Spark refuses errorifexists (the default mode) for every Python data source.
    with pytest.raises(Exception, match="ErrorIfExists"):
        write(df, strata.address, mode="errorifexists", topic=topic)


def test_writing_to_a_new_topic_creates_it_with_the_broker_defaults(spark, strata):
    option_topic, column_topic = unique("new-opt"), unique("new-col")
    write(spark.createDataFrame([("1",), ("2",)], "value string"), strata.address, topic=option_topic)
    assert values(read(spark, strata.address, subscribe=option_topic)) == [b"1", b"2"]
    write(spark.createDataFrame([(column_topic, "3")], "topic string, value string"), strata.address)
    assert values(read(spark, strata.address, subscribe=column_topic)) == [b"3"]
    with Admin(strata.address) as admin:
        assert admin.partition_count(option_topic) == 1  # num.partitions


def test_without_auto_creation_the_write_stops_naming_the_topic(spark, tmp_path):
    broker = BrokerProcess(tmp_path, "--set", "auto.create.topics.enable=false", kafka_port=None).start()
    try:
        address = f"{broker.host}:{broker.port}"
        missing = unique("nowhere")
        df = spark.createDataFrame([("v",)], "value string")
        with pytest.raises(Exception, match=f"topic '{missing}' does not exist.*auto.create.topics.enable"):
            write(df, address, topic=missing)
        with Admin(address) as admin:
            assert missing not in admin.list_topics()
    finally:
        broker.close()


def test_streaming_write_from_a_topic_to_another(spark, strata, tmp_path):
    source, sink = unique("s-in"), unique("s-out")
    fill(strata.address, source, 200, partitions=2)
    create(strata.address, sink, partitions=1)
    stream = (spark.readStream.format("strata").option("bootstrap.servers", strata.address)
              .option("subscribe", source).option("startingOffsets", "earliest").load())
    query = (stream.selectExpr("key", "upper(cast(value AS STRING)) AS value")
             .writeStream.format("strata").option("bootstrap.servers", strata.address)
             .option("topic", sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert values(read(spark, strata.address, subscribe=sink)) == sorted(
        b"V%d" % i for i in range(200))
