"""`strata groups`, `log-dirs` and `configs` through the real command line, against a real
broker: Kafka-side groups made by confluent-kafka consumers, native groups by the native
client's commits (both land in `__consumer_offsets`).

Deadlines are failure guards, not speed assumptions.
"""

from __future__ import annotations

import json
import time

import pytest

from client import Admin, Producer
from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata, usage_error
from tests.client.live_broker import unique

GUARD = 60.0
HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
          "CLIENT-ID"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("groups-cli"), "--set", "group.initial.rebalance.delay.ms=0",
                            "--set", "group.min.session.timeout.ms=1000",
                            "--set", "group.consumer.min.heartbeat.interval.ms=100",
                            "--set", "group.consumer.heartbeat.interval.ms=500")
    try:
        yield process.start()
    finally:
        process.close()


def cli(broker, *args, **kwargs):
    return strata(*args, "--bootstrap-server", f"{broker.host}:{broker.port}",
                  "--kafka-bootstrap-server", broker.bootstrap, **kwargs)


def topic_with_records(broker, partitions: int, per_partition: int) -> str:
    name = unique("gt")
    address = f"{broker.host}:{broker.port}"
    with Admin(address) as admin:
        admin.create_topic(name, partitions, {})
    with Producer(address) as producer:
        for p in range(partitions):
            for i in range(per_partition):
                producer.send_and_wait(name, b"m%d" % i, partition=p)
    return name


def rows(out: str) -> list[list[str]]:
    """The table's rows after its header (split on whitespace)."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    start = next(i for i, cells in enumerate(lines) if cells[0] == "GROUP")
    return lines[start + 1:]


def native_commit(broker, group: str, topic: str, offsets: dict[int, int]) -> None:
    with Admin(f"{broker.host}:{broker.port}") as admin:
        for partition, offset in offsets.items():
            admin.commit(group, topic, partition, offset)


def test_native_group_list_describe_reset_delete(broker):
    topic = topic_with_records(broker, 2, 5)
    group = unique("native-g")
    native_commit(broker, group, topic, {0: 2, 1: 5})
    assert group in ok(cli(broker, "groups", "list")).splitlines()
    assert [group, "Empty"] in [line.split() for line in ok(cli(broker, "groups", "list", "--state")).splitlines()]

    out = ok(cli(broker, "groups", "describe", "--group", group))
    assert f"Consumer group '{group}' has no active members." in out
    assert [line.split() for line in out.splitlines() if line.startswith("GROUP")] == [HEADER]
    assert rows(out) == [[group, topic, "0", "2", "5", "3", "-", "-", "-"],
                         [group, topic, "1", "5", "5", "0", "-", "-", "-"]]

    # Dry run (the default) prints and commits nothing; --execute commits.
    result = cli(broker, "groups", "reset-offsets", group, "--to-earliest")
    assert result.returncode == 0 and b"--execute" in result.stderr
    assert rows(result.stdout.decode()) == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert ok(cli(broker, "groups", "reset-offsets", group, "--shift-by", "-1", "--dry-run")) \
        .split()[-8:] == [group, topic, "0", "1", group, topic, "1", "4"]
    with Admin(f"{broker.host}:{broker.port}") as admin:
        assert admin.committed(group, topic, 0)[0] == 2
        out = ok(cli(broker, "groups", "reset-offsets", group, "--to-offset", "4", "--topic", f"{topic}:0",
                     "--execute"))
        assert rows(out) == [[group, topic, "0", "4"]]
        assert admin.committed(group, topic, 0)[0] == 4
        assert admin.committed(group, topic, 1)[0] == 5
        # Targets stay within the log; a topic without partitions means all of them.
        ok(cli(broker, "groups", "reset-offsets", group, "--to-offset", "99", "--topic", topic, "--execute"))
        assert [admin.committed(group, topic, p)[0] for p in (0, 1)] == [5, 5]
        ok(cli(broker, "groups", "reset-offsets", group, "--shift-by", "-3", "--execute"))
        assert [admin.committed(group, topic, p)[0] for p in (0, 1)] == [2, 2]
        # A time before every record is the log start; one after them is the log end.
        ok(cli(broker, "groups", "reset-offsets", group, "--to-datetime", "2000-01-01T00:00:00", "--execute"))
        assert [admin.committed(group, topic, p)[0] for p in (0, 1)] == [0, 0]
        ok(cli(broker, "groups", "reset-offsets", group, "--to-datetime", "2999-01-01T00:00:00+00:00",
               "--execute"))
        assert [admin.committed(group, topic, p)[0] for p in (0, 1)] == [5, 5]
        ok(cli(broker, "groups", "reset-offsets", group, "--to-earliest", "--topic", f"{topic}:1", "--execute"))
        assert [admin.committed(group, topic, p)[0] for p in (0, 1)] == [5, 0]

    other = unique("native-other")
    native_commit(broker, other, topic, {0: 1})
    assert ok(cli(broker, "groups", "delete", group, "--group", other)) == \
        f"Deletion of requested consumer groups ('{group}', '{other}') was successful.\n"
    assert other not in ok(cli(broker, "groups", "list")).splitlines()
    assert group not in ok(cli(broker, "groups", "list")).splitlines()
    assert f"consumer group '{group}' does not exist" in one_error_line(cli(broker, "groups", "describe", group))


def wait_for_assignment(consumer, count: int) -> None:
    deadline = time.monotonic() + GUARD
    while len(consumer.assignment()) < count:
        assert time.monotonic() < deadline, "the consumer got no assignment"
        consumer.poll(0.2)


# group.protocol=consumer (KIP-848): the broker sets the session timeout and heartbeat interval
PROTOCOL_SETTINGS = {"classic": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 250},
                     "consumer": {"group.protocol": "consumer"}}


def wait_for_state(broker, group: str, state: str) -> None:
    deadline = time.monotonic() + GUARD
    while [group, state] not in [line.split() for line in ok(cli(broker, "groups", "list", "--state")).splitlines()]:
        assert time.monotonic() < deadline, f"group {group} did not reach {state}"
        time.sleep(0.1)


@pytest.mark.parametrize("protocol", sorted(PROTOCOL_SETTINGS))
def test_kafka_group_with_members_lag_and_refusals(broker, protocol):
    """Classic groups through DescribeGroups, consumer-protocol ones through
    ConsumerGroupDescribe: the same rows either way."""
    from confluent_kafka import Consumer, TopicPartition

    topic = topic_with_records(broker, 2, 4)
    group = unique(f"kafka-{protocol}-g")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "lag-reader",
                         **PROTOCOL_SETTINGS[protocol], "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        wait_for_assignment(consumer, 2)
        consumer.commit(offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 3)], asynchronous=False)
        wait_for_state(broker, group, "Stable")
        out = ok(cli(broker, "groups", "describe", group, "--offsets"))
        assert "no active members" not in out
        assert [group, "Stable"] in [line.split() for line in ok(cli(broker, "groups", "list", "--state")).splitlines()]
        described = rows(out)
        assert [r[:6] for r in described] == [[group, topic, "0", "1", "4", "3"], [group, topic, "1", "3", "4", "1"]]
        member_ids = {r[6] for r in described}
        assert len(member_ids) == 1 and member_ids != {"-"}
        assert all(r[7].startswith("/127.0.0.1") and r[8] == "lag-reader" for r in described)

        members = rows(ok(cli(broker, "groups", "describe", group, "--members")))
        assert members == [[group, described[0][6], described[0][7], "lag-reader", "2"]]

        # Kafka's rules: an active group is neither reset nor deleted.
        err = one_error_line(cli(broker, "groups", "reset-offsets", group, "--to-earliest", "--execute"))
        assert f"group '{group}' is inactive, but the current state is Stable" in err
        assert "NON_EMPTY_GROUP" in one_error_line(cli(broker, "groups", "delete", group))
    finally:
        consumer.close()

    wait_for_state(broker, group, "Empty")
    assert f"Consumer group '{group}' has no active members." in ok(cli(broker, "groups", "describe", group))
    ok(cli(broker, "groups", "reset-offsets", group, "--to-latest", "--execute"))
    committed = rows(ok(cli(broker, "groups", "describe", group)))
    assert [r[3:6] for r in committed] == [["4", "4", "0"], ["4", "4", "0"]]
    ok(cli(broker, "groups", "delete", group))
    assert group not in ok(cli(broker, "groups", "list")).splitlines()


def test_group_usage_errors(broker):
    group = unique("none")
    topic = topic_with_records(broker, 1, 1)
    assert "has no committed offsets" in one_error_line(cli(broker, "groups", "reset-offsets", group,
                                                            "--to-earliest"))
    assert "has no partition 3" in one_error_line(cli(broker, "groups", "reset-offsets", group, "--to-earliest",
                                                      "--topic", f"{topic}:3"))
    assert "bad --to-datetime" in one_error_line(cli(broker, "groups", "reset-offsets", group, "--to-datetime",
                                                     "yesterday", "--topic", topic))
    assert "no committed offset" in one_error_line(cli(broker, "groups", "reset-offsets", group, "--shift-by",
                                                       "1", "--topic", topic))
    assert "GROUP_ID_NOT_FOUND" in one_error_line(cli(broker, "groups", "delete", group))
    result = cli(broker, "groups", "reset-offsets", group)  # no target: argparse's usage, exit 2
    assert result.returncode == 2 and b"usage: strata groups reset-offsets" in result.stderr
    assert "one group at a time" in usage_error(cli(broker, "groups", "describe", "a", "--group", "b"),
                                                "groups describe")
    assert "the group is missing" in usage_error(cli(broker, "groups", "delete"), "groups delete")
    err = one_error_line(strata("groups", "list", "--kafka-bootstrap-server", "127.0.0.1:1"))
    assert "cannot reach the Kafka listener at 127.0.0.1:1" in err
    assert "--kafka-bootstrap-server or $STRATA_KAFKA_BOOTSTRAP_SERVER" in err  # how to point it elsewhere


def test_log_dirs_and_broker_configs(broker):
    topic = topic_with_records(broker, 2, 3)
    lines = ok(cli(broker, "log-dirs", "describe", "--topic-list", topic)).splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    (log_dir,) = json.loads(lines[2])["brokers"][0]["logDirs"]
    assert log_dir["logDir"] == str(broker.data_dir) and log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"} and all(size > 0 for size in sizes.values())
    everything = json.loads(ok(cli(broker, "log-dirs", "describe")).splitlines()[2])
    assert f"{topic}-1" in {p["partition"] for p in everything["brokers"][0]["logDirs"][0]["partitions"]}

    lines = ok(cli(broker, "configs", "describe", "--broker")).splitlines()
    assert lines[0] == "All configs for broker 0 are:"
    assert "  group.initial.rebalance.delay.ms=0 sensitive=false "\
           "synonyms={STATIC_BROKER_CONFIG:group.initial.rebalance.delay.ms=0, "\
           "DEFAULT_CONFIG:group.initial.rebalance.delay.ms=3000}" in lines
    assert "  num.partitions=1 sensitive=false synonyms={DEFAULT_CONFIG:num.partitions=1}" in lines
