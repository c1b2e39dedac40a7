"""The pure parts, without Spark or a broker: options, offsets JSON, range planning,
rate limiting, and decoding log entries into Arrow columns."""

from __future__ import annotations

import re

import pytest

from kafka_format import build_batch, build_classic
from kafka_format.codecs import Codec
from pipeline.decode import CorruptRecordError, decode_into
from pipeline.offsets import OptionError, offsets_from_json, offsets_to_json, parse_assign, parse_partition_offsets
from pipeline.options import read_options, write_options
from pipeline.planning import OffsetRange, rate_limit, split_ranges
from pipeline.schema import Columns, arrow_schema, spark_schema

B = {"bootstrap.servers": "h:1"}


# ---- options ---------------------------------------------------------------------------

def test_exactly_one_subscription():
    with pytest.raises(OptionError, match="One of the following options must be specified"):
        read_options(B, streaming=False)
    with pytest.raises(OptionError, match="Only one of the following options"):
        read_options({**B, "subscribe": "a", "assign": '{"a":[0]}'}, streaming=False)
    with pytest.raises(OptionError, match="No topics to subscribe"):
        read_options({**B, "subscribe": " , "}, streaming=False)
    with pytest.raises(OptionError, match="bootstrap.servers"):
        read_options({"subscribe": "a"}, streaming=False)


def test_option_names_are_case_insensitive_and_kafka_prefix_is_optional():
    o = read_options({"kafka.bootstrap.servers": "h:1", "SUBSCRIBEPATTERN": "ev.*",
                      "IncludeHeaders": "TRUE", "minpartitions": "3"}, streaming=False)
    assert (o.bootstrap, o.strategy, o.pattern, o.include_headers, o.min_partitions) == (
        "h:1", "subscribePattern", "ev.*", True, 3)
    assert o.matches("events") and o.matches("ev-2") and not o.matches("xevents")
    assert not o.matches("__consumer_offsets")


def test_batch_offset_rules_follow_spark():
    with pytest.raises(OptionError, match="can't be latest for batch"):
        read_options({**B, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OptionError, match="startingOffsets for a-0 can't be latest"):
        read_options({**B, "subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, streaming=False)
    with pytest.raises(OptionError, match="ending offset can't be earliest"):
        read_options({**B, "subscribe": "a", "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match="ending offset for a-1 can't be earliest"):
        read_options({**B, "subscribe": "a", "endingOffsets": '{"a":{"1":-2}}'}, streaming=False)
    with pytest.raises(OptionError, match="ending offset not valid in streaming"):
        read_options({**B, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    assert read_options({**B, "subscribe": "a"}, streaming=True).starting.kind == "latest"
    assert read_options({**B, "subscribe": "a"}, streaming=False).starting.kind == "earliest"
    assert read_options({**B, "subscribe": "a"}, streaming=False).ending.kind == "latest"


def test_timestamp_options_take_precedence():
    o = read_options({**B, "subscribe": "a", "startingOffsets": "earliest",
                      "startingTimestamp": "1000", "endingOffsetsByTimestamp": '{"a":{"0":5}}',
                      "endingTimestamp": "9"}, streaming=False)
    assert (o.starting.kind, o.starting.timestamp) == ("timestamp", 1000)
    assert (o.ending.kind, o.ending.per_partition) == ("timestamps", {("a", 0): 5})
    with pytest.raises(OptionError, match="startingTimestamp"):
        read_options({**B, "subscribe": "a", "startingTimestamp": "soon"}, streaming=False)
    with pytest.raises(OptionError, match="startingOffsetsByTimestampStrategy"):
        read_options({**B, "subscribe": "a", "startingOffsetsByTimestampStrategy": "maybe"},
                     streaming=False)


def test_bad_values_are_refused_never_ignored():
    for key, value in (("minPartitions", "0"), ("maxOffsetsPerTrigger", "-5"),
                       ("failOnDataLoss", "yes"), ("includeHeaders", "1")):
        with pytest.raises(OptionError, match=key):
            read_options({**B, "subscribe": "a", key: value}, streaming=True)
    for key, value in (("minOffsetsPerTrigger", "0"), ("maxTriggerDelay", "soon")):
        with pytest.raises(OptionError, match=key):
            read_options({**B, "subscribe": "a", key: value}, streaming=True)
    with pytest.raises(OptionError, match="isolation.level: String must be one of: read_committed, read_uncommitted"):
        read_options({**B, "subscribe": "a", "kafka.isolation.level": "serializable"},
                     streaming=False)
    assert read_options({**B, "subscribe": "a", "kafka.isolation.level": "read_committed"},
                        streaming=False).read_committed
    assert not read_options({**B, "subscribe": "a"}, streaming=False).read_committed
    with pytest.raises(OptionError, match="bad regular expression"):
        read_options({**B, "subscribePattern": "("}, streaming=True)


def test_min_offsets_and_max_trigger_delay():
    o = read_options({**B, "subscribe": "a", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "30s"},
                     streaming=True)
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (5, 30_000)
    assert read_options({**B, "subscribe": "a"}, streaming=True).max_trigger_delay_ms == 15 * 60_000
    for text, ms in (("100", 100), ("250ms", 250), ("2m", 120_000), ("1h", 3_600_000), ("1d", 86_400_000)):
        assert read_options({**B, "subscribe": "a", "maxTriggerDelay": text}, streaming=True) \
            .max_trigger_delay_ms == ms
    with pytest.raises(OptionError, match=r"minOffsetPerTrigger\(9\) is higher than the maxOffsetsPerTrigger\(5\)"):
        read_options({**B, "subscribe": "a", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
                     streaming=True)


@pytest.mark.parametrize("name", ["groupIdPrefix", "kafka.group.id", "kafka.auto.offset.reset",
                                  "kafka.key.deserializer", "kafka.interceptor.classes",
                                  "kafka.sasl.kerberos.service.name", "subscrbe"])
def test_every_other_option_is_refused_by_its_name(name):
    with pytest.raises(OptionError, match=f"option '{re.escape(name)}' is not supported"):
        read_options({**B, "subscribe": "a", name: "x"}, streaming=True)


def test_every_kafka_source_option_is_known_or_refused():
    """The options of spark-sql-kafka's documentation (read side), each honoured or refused."""
    from pipeline.options import READ_OPTIONS, UNSUPPORTED
    spark_kafka = ["assign", "subscribe", "subscribePattern", "kafka.bootstrap.servers", "startingTimestamp",
                   "startingOffsetsByTimestamp", "startingOffsets", "endingTimestamp",
                   "endingOffsetsByTimestamp", "endingOffsets", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs",
                   "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "maxOffsetsPerTrigger",
                   "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions", "maxRecordsPerPartition",
                   "groupIdPrefix", "kafka.group.id", "includeHeaders", "startingOffsetsByTimestampStrategy"]
    for name in spark_kafka:
        key = name.lower().removeprefix("kafka.")
        assert key in READ_OPTIONS or key in UNSUPPORTED, name


def test_write_refuses_unknown_options_by_name():
    with pytest.raises(OptionError, match="option 'kafka.acks' is not supported by the Strata sink"):
        write_options({**B, "topic": "t", "kafka.acks": "all"})
    write_options({**B, "topic": "t", "checkpointLocation": "/x"})


def test_write_options():
    o = write_options({"kafka.bootstrap.servers": "h:1", "topic": "t",
                       "kafka.compression.type": "LZ4", "linger.ms": "0"})
    assert (o.topic, o.compression, o.linger_ms) == ("t", "lz4", 0)
    with pytest.raises(OptionError, match="compression.type"):
        write_options({**B, "compression.type": "brotli"})


# ---- offsets JSON ------------------------------------------------------------------------

def test_offsets_json_round_trip_and_errors():
    parsed = parse_partition_offsets('{"b":{"1":-1,"0":23},"a":{"0":-2}}')
    assert parsed == {("b", 1): -1, ("b", 0): 23, ("a", 0): -2}
    assert offsets_to_json(parsed) == {"a": {"0": -2}, "b": {"0": 23, "1": -1}}
    assert offsets_from_json(offsets_to_json(parsed)) == parsed
    assert offsets_from_json('{"a":{"3":7}}') == {("a", 3): 7}
    for bad in ("[]", '{"a":[0]}', '{"a":{"x":1}}', '{"a":{"0":"1"}}', "nope", '{"a":{"-1":3}}'):
        with pytest.raises(OptionError, match="startingOffsets"):
            parse_partition_offsets(bad)
    assert parse_assign('{"a":[0,1],"b":[2]}') == [("a", 0), ("a", 1), ("b", 2)]
    for bad in ("{}", '{"a":0}', '{"a":["x"]}'):
        with pytest.raises(OptionError, match="assign"):
            parse_assign(bad)


# ---- planning ------------------------------------------------------------------------------

def R(p, start, end, topic="t"):
    return OffsetRange(topic, p, start, end)


def test_ranges_one_per_partition_without_min_partitions():
    assert split_ranges([R(0, 0, 10), R(1, 5, 5), R(2, 0, 3)], None) == [R(0, 0, 10), R(2, 0, 3)]
    assert split_ranges([R(0, 0, 10), R(1, 0, 3)], 2) == [R(0, 0, 10), R(1, 0, 3)]


def test_min_partitions_splits_large_ranges_only():
    # Spark's KafkaOffsetRangeCalculator: the small range stays whole.
    out = split_ranges([R(0, 0, 1000), R(1, 0, 10)], 4)
    assert out == [R(0, 0, 333), R(0, 333, 666), R(0, 666, 1000), R(1, 0, 10)]
    out = split_ranges([R(0, 100, 110)], 3)
    assert out == [R(0, 100, 103), R(0, 103, 106), R(0, 106, 110)]
    assert sum(r.size for r in split_ranges([R(0, 0, 7), R(1, 0, 9)], 5)) == 16
    assert split_ranges([R(0, 0, 10)], None, max_records=4) == [R(0, 0, 3), R(0, 3, 6),
                                                                R(0, 6, 10)]


def test_rate_limit_shares_by_backlog():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    end = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}
    assert rate_limit(40, start, end) == {("t", 0): 30, ("t", 1): 110, ("t", 2): 50}
    assert rate_limit(1, start, end) == {("t", 0): 1, ("t", 1): 101, ("t", 2): 50}  # ceil < 1
    assert rate_limit(10_000, start, end) == end


# ---- decoding ------------------------------------------------------------------------------

def decode(buf, start=0, end=2**63 - 1, headers=False):
    columns = Columns(headers)
    walked = decode_into(buf, start, end, columns)
    return columns, walked


def test_decode_batches_plain_and_compressed_with_headers():
    recs = [(b"k%d" % i, b"v%d" % i * 50, 1000 + i, [("h", b"x"), ("n", None)]) for i in range(5)]
    buf = (build_batch(recs[:2], base_offset=0) + build_batch(recs[2:], base_offset=2,
                                                               codec=Codec.LZ4)
           + build_batch([(None, None, 7)], base_offset=5, codec=Codec.ZSTD))
    columns, walked = decode(buf, headers=True)
    assert columns.offsets == [0, 1, 2, 3, 4, 5]
    assert columns.keys == [b"k0", b"k1", b"k2", b"k3", b"k4", None]
    assert columns.values[:2] == [b"v0" * 50, b"v1" * 50] and columns.values[5] is None
    assert columns.timestamps == [1000, 1001, 1002, 1003, 1004, 7]
    assert columns.headers[0] == [("h", b"x"), ("n", None)] and columns.headers[5] == []
    assert (walked.next_offset, walked.whole_entries, walked.stop) == (6, 3, len(buf))
    batch = columns.to_batch("t", 3)
    assert batch.schema == arrow_schema(True) and batch.num_rows == 6
    assert batch.column("partition").to_pylist() == [3] * 6
    assert str(batch.column("timestamp")[0].as_py()) == "1970-01-01 00:00:01+00:00"
    assert len(columns) == 0  # emptied


def test_decode_range_bounds_inside_entries_and_partial_tail():
    buf = build_batch([(None, b"a"), (None, b"b"), (None, b"c")], base_offset=10,
                      codec=Codec.GZIP) + build_batch([(None, b"d")], base_offset=13)
    columns, walked = decode(buf + buf[:30], start=11, end=13)
    assert columns.values == [b"b", b"c"] and walked.done and walked.next_offset == 13
    columns, walked = decode(buf + build_batch([(None, b"e")], base_offset=14)[:40], start=11)
    assert columns.values == [b"b", b"c", b"d"] and not walked.done
    assert (walked.next_offset, walked.stop) == (14, len(buf))


def test_decode_skips_control_batches_and_reads_classic_messages():
    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=3,
                          is_control=True, is_transactional=True)
    buf = (build_classic([(b"a", b"1"), (None, b"2")], magic=0, base_offset=0)
           + build_classic([(b"c", b"3", 5000)], magic=1, base_offset=2, codec=Codec.SNAPPY)
           + control + build_batch([(None, b"5", 6000)], base_offset=4, timestamp_type=1))
    columns, walked = decode(buf)
    assert columns.offsets == [0, 1, 2, 4]
    assert columns.values == [b"1", b"2", b"3", b"5"]
    assert columns.timestamps[:3] == [-1, -1, 5000]
    assert columns.timestamp_types == [0, 0, 0, 1]
    assert walked.next_offset == 5


def test_decode_refuses_corruption():
    buf = bytearray(build_batch([(None, b"hello")], base_offset=0))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        decode(bytes(buf))


def test_schema_is_spark_kafka_schema():
    assert spark_schema(False).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    assert spark_schema(True).fields[-1].dataType.simpleString() == (
        "array<struct<key:string,value:binary>>")
