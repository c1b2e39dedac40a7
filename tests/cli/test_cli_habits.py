"""What Kafka's command-line users expect of `strata`: --version, a default
--bootstrap-server from the environment, num.partitions, --if-(not-)exists,
--replication-factor, --topic, the console consumer's closing count, produce's
--on-error, and usage errors that show the subcommand's usage.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from client import Admin
from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata, usage_error
from tests.client.live_broker import REPO, unique


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker whose num.partitions is 3."""
    process = BrokerProcess(tmp_path_factory.mktemp("habits"), "--set", "num.partitions=3")
    try:
        yield process.start()
    finally:
        process.close()


def strata_env(env: dict[str, str], *args, input=None):
    return subprocess.run([sys.executable, "-m", "broker", *map(str, args)], input=input, capture_output=True,
                          cwd=REPO, timeout=60, env={**os.environ, **env})


def test_version():
    from importlib.metadata import version

    assert ok(strata("--version")) == f"strata {version('strata')}\n"


def test_bootstrap_server_from_the_environment(broker):
    name = unique("env")
    env = {"STRATA_BOOTSTRAP_SERVER": f"{broker.host}:{broker.port}", "STRATA_KAFKA_BOOTSTRAP_SERVER": broker.bootstrap}
    assert ok(strata_env(env, "topics", "create", name)) == f"Created topic {name}.\n"
    assert name in ok(strata_env(env, "topics", "list")).splitlines()
    ok(strata_env(env, "produce", "--topic", name, "--partition", 1, input=b"a\nb\n"))
    assert ok(strata_env(env, "consume", name, "--from-beginning", "--timeout-ms", 500)) == "a\nb\n"
    assert "Topic: " + name in ok(strata_env(env, "topics", "describe", name))


def test_bootstrap_server_default_as_parsed(monkeypatch):
    from broker.cli import build_parser

    monkeypatch.delenv("STRATA_BOOTSTRAP_SERVER", raising=False)
    assert build_parser().parse_args(["topics", "list"]).bootstrap_server == "localhost:9000"
    monkeypatch.setenv("STRATA_BOOTSTRAP_SERVER", "example:1234")
    assert build_parser().parse_args(["groups", "list"]).bootstrap_server == "example:1234"


def test_bootstrap_server_default():
    """Without the variable the default is localhost:9000."""
    try:
        socket.create_connection(("localhost", 9000), timeout=1).close()
    except OSError:
        pass
    else:
        pytest.skip("something listens on localhost:9000")
    result = strata_env({"STRATA_BOOTSTRAP_SERVER": ""}, "topics", "list")
    assert "cannot reach broker at localhost:9000" in one_error_line(result)


def test_create_uses_num_partitions_and_replication_factor_1(broker):
    server = ("--bootstrap-server", f"{broker.host}:{broker.port}")
    name = unique("np")
    ok(strata("topics", "create", "--topic", name, "--replication-factor", 1, *server))
    ok(strata("topics", "create", unique("np2"), "--partitions", 2, *server))
    with Admin(f"{broker.host}:{broker.port}") as admin:
        assert admin.partition_count(name) == 3
    err = one_error_line(strata("topics", "create", unique("rf"), "--replication-factor", 3, *server))
    assert "INVALID_REPLICATION_FACTOR" in err and "single node" in err
    assert "at least 1" in one_error_line(strata("topics", "create", unique("p0"), "--partitions", 0, *server))


def test_if_exists_and_if_not_exists(broker):
    native = ("--bootstrap-server", f"{broker.host}:{broker.port}")
    server = (*native, "--kafka-bootstrap-server", broker.bootstrap)
    name, missing = unique("ife"), unique("missing")
    ok(strata("topics", "create", name, *native))
    assert "TOPIC_ALREADY_EXISTS" in one_error_line(strata("topics", "create", name, *native))
    assert ok(strata("topics", "create", name, "--if-not-exists", *native)) == ""
    assert ok(strata("topics", "delete", missing, "--if-exists", *native)) == ""
    assert ok(strata("topics", "describe", missing, "--if-exists", *server)) == ""
    assert ok(strata("topics", "alter", missing, "--config", "retention.ms=1", "--if-exists", *native)) == ""
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_error_line(strata("topics", "delete", missing, *native))
    assert ok(strata("topics", "delete", "--topic", name, "--if-exists", *native)) == f"Deleted topic {name}.\n"


def test_describe_every_topic_marks_overrides(broker):
    native = ("--bootstrap-server", f"{broker.host}:{broker.port}")
    server = (*native, "--kafka-bootstrap-server", broker.bootstrap)
    name = unique("all")
    ok(strata("topics", "create", name, "--config", "retention.ms=5000", *native))
    out = ok(strata("topics", "describe", "--details", *server))
    assert f"Topic: {name}\tPartitionCount: 3" in out
    block = out[out.index(f"Topic: {name}"):]
    block = block[:block.index("\nTopic: ")] if "\nTopic: " in block else block
    assert "\tretention.ms=5000 (overridden)\n" in block and "\tsegment.bytes=1073741824\n" in block
    # Without a Kafka listener to ask, the settings are printed unmarked, with a note.
    result = strata("topics", "describe", name, "--details", "--bootstrap-server", f"{broker.host}:{broker.port}",
                    "--kafka-bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 0 and "\tretention.ms=5000\n" in result.stdout.decode()
    assert result.stderr.decode().startswith("strata: overridden settings are not marked: cannot reach")


def test_consume_prints_the_count_and_produce_on_error(broker):
    server = ("--bootstrap-server", f"{broker.host}:{broker.port}")
    name = unique("onerr")
    ok(strata("topics", "create", name, "--partitions", 1, *server))
    lines = b"a=1\nbroken\nb=2\nalso broken\nc=3\n"
    result = strata("produce", "--topic", name, "--key-separator", "=", "--on-error", "continue", *server,
                    input=lines)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "strata: line 2: no key separator '=': b'broken'",
        "strata: line 4: no key separator '=': b'also broken'",
        "strata: 2 of 5 lines were not sent"]
    result = strata("consume", name, "--from-beginning", "--timeout-ms", 500, *server)
    assert result.stdout == b"1\n2\n3\n" and result.stderr == b"Processed a total of 3 messages\n"
    # --on-error stop (the default): the first failed line ends the run.
    assert "line 2: no key separator" in one_error_line(
        strata("produce", name, "--key-separator", "=", *server, input=lines))
    result = strata("consume", name, "--from-beginning", "--max-messages", 4, *server)
    assert result.stdout == b"1\n2\n3\n1\n" and result.stderr == b"Processed a total of 4 messages\n"


@pytest.mark.parametrize(("args", "subcommand", "message"), [
    (["topics", "create"], "topics create", "the topic is missing"),
    (["topics", "delete", "a", "--topic", "b"], "topics delete", "two different topics"),
    (["topics", "alter", "a"], "topics alter", "nothing to alter"),
    (["consume", "t", "--max-messages", "-1"], "consume", "--max-messages must be at least 0"),
    (["produce", "t", "--key-separator", ""], "produce", "--key-separator must not be empty"),
    (["produce", "t", "--on-error", "maybe"], "produce", "invalid choice: 'maybe'"),
    (["groups", "describe"], "groups describe", "the group is missing"),
    (["topics", "list", "--no-such-option"], "topics list", "unrecognized arguments: --no-such-option"),
])
def test_usage_errors_show_the_subcommands_usage(args, subcommand, message):
    assert message in usage_error(strata(*args, "--bootstrap-server", "127.0.0.1:1"), subcommand)


def test_produce_names_the_line_the_broker_refused(broker):
    """A line larger than batch.size travels alone, so the broker's refusal names it only."""
    server = ("--bootstrap-server", f"{broker.host}:{broker.port}")
    name = unique("big")
    ok(strata("topics", "create", name, "--partitions", 1, "--config", "max.message.bytes=20000", *server))
    lines = b"first\n" + b"x" * 30000 + b"\nthird\n"
    result = strata("produce", name, "--on-error", "continue", *server, input=lines)
    assert result.returncode == 1
    err = result.stderr.decode().splitlines()
    assert len(err) == 2 and err[0].startswith("strata: line 2 (") and "MESSAGE_TOO_LARGE" in err[0]
    assert err[1] == "strata: 1 of 3 lines were not sent"
    result = strata("consume", name, "--from-beginning", "--timeout-ms", 500, *server)
    assert result.stdout == b"first\nthird\n"
    err = one_error_line(strata("produce", name, *server, input=lines))
    assert err.startswith("strata: line 2 (") and "MESSAGE_TOO_LARGE" in err


def test_produce_names_only_the_oversized_line_of_a_batch(broker):
    """Lines batched together past the topic's max.message.bytes: the producer splits
    the refused batch, so only the line too large by itself fails."""
    server = ("--bootstrap-server", f"{broker.host}:{broker.port}")
    name = unique("split")
    ok(strata("topics", "create", name, "--partitions", 1, "--config", "max.message.bytes=1000", *server))
    lines = [b"a" * 400, b"b" * 400, b"x" * 3000, b"c" * 400, b"d" * 400]
    result = strata("produce", name, "--on-error", "continue", "--linger-ms", 60000, *server,
                    input=b"\n".join(lines) + b"\n")
    assert result.returncode == 1
    err = result.stderr.decode().splitlines()
    assert len(err) == 2 and err[0].startswith("strata: line 3 (3000 bytes)") and "MESSAGE_TOO_LARGE" in err[0]
    assert err[1] == "strata: 1 of 5 lines were not sent"
    result = strata("consume", name, "--from-beginning", "--timeout-ms", 500, *server)
    assert result.stdout == b"".join(line + b"\n" for line in lines if not line.startswith(b"x"))


def test_kafka_listener_address_defaults(monkeypatch):
    from broker.cli import build_parser
    from broker.cli.addresses import kafka_address

    monkeypatch.delenv("STRATA_KAFKA_BOOTSTRAP_SERVER", raising=False)
    args = build_parser().parse_args(["groups", "list", "--bootstrap-server", "example:1234"])
    assert kafka_address(args) == "example:9092"
    args = build_parser().parse_args(["groups", "list", "--bootstrap-server", "[::1]:1234"])
    assert kafka_address(args) == "[::1]:9092"
    monkeypatch.setenv("STRATA_KAFKA_BOOTSTRAP_SERVER", "kafka-host:19092")
    assert kafka_address(build_parser().parse_args(["log-dirs", "describe"])) == "kafka-host:19092"
    args = build_parser().parse_args(["configs", "describe", "--broker", "--kafka-bootstrap-server", "k:1"])
    assert kafka_address(args) == "k:1"
