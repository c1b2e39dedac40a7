"""`strata topics alter NAME --partitions N`: Kafka's CreatePartitions from the command line."""

from client import Admin
from tests.cli.test_client_commands import ok, one_error_line, strata, usage_error
from tests.client.live_broker import unique


def test_alter_partitions_grows_the_topic(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    kafka = ("--kafka-bootstrap-server", live_broker.process.bootstrap)
    name = unique("cli-grow")
    ok(strata("topics", "create", name, "--partitions", 2, *server))
    assert ok(strata("topics", "alter", name, "--partitions", 4, "--config", "retention.ms=777", *kafka,
                     *server)) == (f"Completed increasing the partition count of topic {name} to 4.\n"
                                   f"Completed updating config for topic {name}.\n")
    described = ok(strata("topics", "describe", name, "--details", *kafka, *server)).splitlines()
    assert described[0] == f"Topic: {name}\tPartitionCount: 4"
    assert "\tretention.ms=777 (overridden)" in described
    with Admin(live_broker.address) as admin:
        assert admin.partition_count(name) == 4


def test_alter_partitions_errors_are_one_line(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    kafka = ("--kafka-bootstrap-server", live_broker.process.bootstrap)
    name = unique("cli-grow")
    ok(strata("topics", "create", name, "--partitions", 3, *server))
    err = one_error_line(strata("topics", "alter", name, "--partitions", 2, *kafka, *server))
    assert "INVALID_PARTITIONS" in err and "would not be an increase" in err
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_error_line(
        strata("topics", "alter", unique("nope"), "--partitions", 2, *kafka, *server))
    assert "at least 1" in one_error_line(strata("topics", "alter", name, "--partitions", 0, *kafka, *server))
    # No Kafka listener where the default points (the native port answers no Kafka request).
    err = one_error_line(strata("topics", "alter", name, "--partitions", 5,
                                "--kafka-bootstrap-server", "127.0.0.1:1", *server))
    assert "cannot reach the Kafka listener at 127.0.0.1:1" in err
    assert "goes with --partitions" in usage_error(
        strata("topics", "alter", name, "--config", "retention.ms=1", *kafka, *server), "topics alter")
    with Admin(live_broker.address) as admin:
        assert admin.partition_count(name) == 3
