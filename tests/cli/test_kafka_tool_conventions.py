"""Kafka's tool conventions, against the real broker process, checked against the output
shapes of Kafka 4.0's tools: kafka-console-consumer's DefaultMessageFormatter
(`--property print.*`), kafka-console-producer's LineMessageReader (`--property
parse.key` ...), the console consumer's --partition/--offset, and kafka-topics' flag
form and --describe lines (TopicCommand's TopicDescription and PartitionDescription)."""

from __future__ import annotations

import re

import pytest

from client import Admin, Consumer, Producer
from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata, usage_error
from tests.client.live_broker import unique

TOPIC_ID = r"[A-Za-z0-9_-]{22}"  # Kafka's Uuid.toString: URL-safe base64 of 16 bytes, no padding


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker whose log.segment.bytes is set in its configuration (a static broker default)."""
    process = BrokerProcess(tmp_path_factory.mktemp("conventions"), "--set", "log.segment.bytes=2097152")
    try:
        yield process.start()
    finally:
        process.close()


def server(broker) -> tuple[str, str]:
    return ("--bootstrap-server", f"{broker.host}:{broker.port}")


def topic_with(broker, records: list[tuple[bytes | None, bytes | None, list]], partitions: int = 2) -> str:
    name = unique("conv")
    ok(strata("topics", "create", name, "--partitions", partitions, *server(broker)))
    with Producer(f"{broker.host}:{broker.port}") as producer:
        for key, value, headers in records:
            producer.send(name, value, key, partition=1, headers=headers).result(30)
    return name


# ---- the console consumer ------------------------------------------------------------------

def test_consumer_properties_print_as_kafkas_default_message_formatter(broker):
    name = topic_with(broker, [(b"k1", b"v1", [("h1", b"x"), ("h2", None)]), (None, b"v2", [])])
    out = ok(strata("consume", name, "--from-beginning", "--max-messages", 2, *server(broker),
                    "--property", "print.timestamp=true", "--property", "print.partition=true",
                    "--property", "print.offset=true", "--property", "print.headers=true",
                    "--property", "print.key=true"))
    lines = out.splitlines()
    assert re.fullmatch(r"CreateTime:\d+\tPartition:1\tOffset:0\th1:x,h2:null\tk1\tv1", lines[0]), lines
    assert re.fullmatch(r"CreateTime:\d+\tPartition:1\tOffset:1\tNO_HEADERS\tnull\tv2", lines[1]), lines
    # key.separator between the fields, print.value=false, null.literal, case-insensitive booleans
    out = ok(strata("consume", name, "--from-beginning", "--max-messages", 2, *server(broker),
                    "--property", "print.key=TRUE", "--property", "key.separator= => ",
                    "--property", "print.offset=true", "--property", "null.literal=<none>"))
    assert out == "Offset:0 => k1 => v1\nOffset:1 => <none> => v2\n"
    out = ok(strata("consume", name, "--from-beginning", "--max-messages", 2, *server(broker),
                    "--property", "print.key=true", "--property", "print.value=false"))
    assert out == "k1\nnull\n"
    # --print-key is print.key=true
    assert ok(strata("consume", name, "--from-beginning", "--max-messages", 1, "--print-key",
                     *server(broker))) == "k1\tv1\n"


def test_an_unknown_consumer_property_is_noted_and_ignored(broker):
    name = topic_with(broker, [(None, b"v", [])])
    result = strata("consume", name, "--from-beginning", "--max-messages", 1, *server(broker),
                    "--property", "print.keys=true", "--property", "value.deserializer=x.StringDeserializer")
    assert result.returncode == 0 and result.stdout == b"v\n"
    assert result.stderr.decode().splitlines()[0] == \
        "strata: --property print.keys: not a console consumer property; ignored"


def test_partition_and_offset(broker):
    name = topic_with(broker, [(None, f"m{i}".encode(), []) for i in range(5)])
    args = ("consume", name, "--partition", 1, "--timeout-ms", 1000, *server(broker))
    assert ok(strata(*args, "--offset", 3)) == "m3\nm4\n"
    assert ok(strata(*args, "--offset", "earliest", "--max-messages", 2)) == "m0\nm1\n"
    assert ok(strata(*args, "--offset", "LATEST")) == ""
    assert ok(strata(*args, "--from-beginning", "--max-messages", 1)) == "m0\n"
    assert "The partition is required when offset is specified." in usage_error(
        strata("consume", name, "--offset", 1, *server(broker)), "consume")
    assert "Options from-beginning and offset cannot be specified together." in usage_error(
        strata(*args, "--offset", 1, "--from-beginning"), "consume")
    assert "The provided offset value '-1' is incorrect" in usage_error(strata(*args, "--offset=-1"), "consume")
    assert "has no partition 7" in one_error_line(
        strata("consume", name, "--partition", 7, "--offset", 0, *server(broker)))


# ---- the console producer ------------------------------------------------------------------

def consumed(broker, name: str, count: int):
    with Consumer(f"{broker.host}:{broker.port}", auto_offset_reset="earliest") as consumer:
        consumer.assign(name, [0])
        records = []
        while len(records) < count:
            records += consumer.poll(1000)
    return records


def test_producer_properties_read_lines_as_kafkas_line_message_reader(broker):
    name = unique("reader")
    ok(strata("topics", "create", name, "--partitions", 1, *server(broker)))
    lines = b"a:1\nb:x:y\n:empty-key\nNULL:nothing\n"
    ok(strata("produce", name, *server(broker), "--property", "parse.key=true", "--property", "key.separator=:",
              "--property", "null.marker=NULL", input=lines))
    assert [(r.key, r.value) for r in consumed(broker, name, 4)] == [
        (b"a", b"1"), (b"b", b"x:y"), (b"", b"empty-key"), (None, b"nothing")]
    # The default key.separator is a tab; ignore.error sends a line without one, keyless.
    ok(strata("produce", name, *server(broker), "--property", "parse.key=true", "--property", "ignore.error=true",
              input=b"k\tv\nno separator\n"))
    assert [(r.key, r.value) for r in consumed(broker, name, 6)[4:]] == [(b"k", b"v"), (None, b"no separator")]
    # Headers first, up to headers.delimiter (a tab), pairs split at ',' and ':'.
    ok(strata("produce", name, *server(broker), "--property", "parse.headers=true", "--property", "parse.key=true",
              input=b"h1:a,h2:b\tkey\tvalue\n"))
    record = consumed(broker, name, 7)[6]
    assert (record.headers, record.key, record.value) == ((("h1", b"a"), ("h2", b"b")), b"key", b"value")


def test_producer_property_errors(broker):
    name = unique("reader-err")
    ok(strata("topics", "create", name, "--partitions", 1, *server(broker)))
    err = one_error_line(strata("produce", name, *server(broker), "--property", "parse.key=true", input=b"a\tb\nc\n"))
    assert err.startswith("strata: line 2: no key separator '\\t'")
    assert "headers.delimiter and headers.separator may not be equal" in usage_error(
        strata("produce", name, *server(broker), "--property", "headers.separator=\t"), "produce")
    assert "null.marker and key.separator may not be equal" in usage_error(
        strata("produce", name, *server(broker), "--property", "null.marker=\t"), "produce")


# ---- kafka-topics ----------------------------------------------------------------------------

def kafka_topic_line(name: str, partitions: int, configs: str) -> str:
    return (rf"Topic: {re.escape(name)}\tTopicId: {TOPIC_ID}\tPartitionCount: {partitions}"
            rf"\tReplicationFactor: 1\tConfigs: {re.escape(configs)}")


def kafka_partition_line(name: str, partition: int) -> str:
    return f"\tTopic: {name}\tPartition: {partition}\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: \tLastKnownElr: "


def test_describe_prints_kafka_topics_lines(broker):
    name = unique("kt")
    ok(strata("topics", "create", name, "--partitions", 2, "--config", "retention.ms=5000",
              "--config", "cleanup.policy=compact", *server(broker)))
    lines = ok(strata("topics", "describe", name, *server(broker))).splitlines()
    # Kafka lists every setting whose source is not Kafka's default: the topic's own and the
    # broker's static log.segment.bytes (as segment.bytes), sorted here by name.
    assert re.fullmatch(kafka_topic_line(name, 2, "cleanup.policy=compact,retention.ms=5000,segment.bytes=2097152"),
                        lines[0]), lines[0]
    assert lines[1:] == [kafka_partition_line(name, 0), kafka_partition_line(name, 1)]
    with Admin(f"{broker.host}:{broker.port}") as admin:
        assert admin.describe_topic(name).partitions  # the same topic the native protocol knows
    flagged = ok(strata("topics", "--describe", "--topic", name, *server(broker))).splitlines()
    assert flagged == lines


def test_describe_without_the_kafka_listener(tmp_path):
    process = BrokerProcess(tmp_path, kafka_port=None)
    process.start()
    try:
        native = ("--bootstrap-server", f"{process.host}:{process.port}")
        name = unique("nokafka")
        ok(strata("topics", "create", name, "--partitions", 1, *native))
        result = strata("topics", "describe", name, *native)
        assert result.returncode == 0
        assert result.stdout.decode().splitlines() == [
            f"Topic: {name}\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: ", kafka_partition_line(name, 0)]
        assert result.stderr.decode().startswith("strata: topic ids and settings are not shown: ")
    finally:
        process.close()


def test_kafka_topics_flag_form(broker):
    name, other = unique("flags"), unique("flags-other")
    assert ok(strata("topics", "--create", "--topic", name, "--partitions", 2, "--replication-factor", 1,
                     "--config", "retention.ms=1000", *server(broker))) == f"Created topic {name}.\n"
    ok(strata("topics", "--create", "--topic", other, "--if-not-exists", *server(broker)))
    assert ok(strata("topics", "--create", "--topic", other, "--if-not-exists", *server(broker))) == ""
    listed = ok(strata("topics", "--list", *server(broker))).splitlines()
    assert name in listed and other in listed and listed == sorted(listed)
    # --topic of --list and --describe is a regular expression over the whole name, as kafka-topics'
    assert ok(strata("topics", "--list", "--topic", name, *server(broker))) == f"{name}\n"
    assert ok(strata("topics", "--list", "--topic", f"{name},{other}", *server(broker))).splitlines() == \
        sorted([name, other])
    assert ok(strata("topics", "--list", "--topic", "lags-.*", *server(broker))) == ""  # a whole-name match
    described = ok(strata("topics", "--describe", "--topic", f"{re.escape(name)}|{re.escape(other)}",
                          *server(broker))).splitlines()
    assert [line.split("\t")[0] for line in described if line.startswith("Topic: ")] == \
        sorted([f"Topic: {name}", f"Topic: {other}"])
    only = ok(strata("topics", "--describe", "--topics-with-overrides", "--topic", name, *server(broker)))
    assert re.fullmatch(kafka_topic_line(name, 2, "retention.ms=1000,segment.bytes=2097152") + "\n", only)
    # --alter grows the partitions and --delete deletes, printing nothing, as kafka-topics
    assert ok(strata("topics", "--alter", "--topic", name, "--partitions", 3, *server(broker))) == ""
    assert "PartitionCount: 3\t" in ok(strata("topics", "--describe", "--topic", name, *server(broker)))
    assert ok(strata("topics", "--delete", "--topic", name, *server(broker))) == ""
    assert name not in ok(strata("topics", "--list", *server(broker))).splitlines()
    assert one_error_line(strata("topics", "--describe", "--topic", name, *server(broker))) == \
        f"strata: Topic '{name}' does not exist as expected\n"
    assert ok(strata("topics", "--describe", "--topic", name, "--if-exists", *server(broker))) == ""


def test_kafka_topics_flag_form_usage(broker):
    assert "give an ACTION" in usage_error(strata("topics", *server(broker)), "topics")
    assert "not both" in usage_error(strata("topics", "--list", "list", *server(broker)), "topics list")
    assert "the topic is missing" in usage_error(strata("topics", "--delete", *server(broker)), "topics")
    assert "--alter needs --partitions" in usage_error(strata("topics", "--alter", "--topic", "x", *server(broker)),
                                                       "topics")
    assert "not allowed with argument" in usage_error(strata("topics", "--list", "--delete", *server(broker)),
                                                      "topics")
