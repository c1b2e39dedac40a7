"""`strata topics`, `produce` and `consume` through the real command line."""

import re
import selectors
import signal
import subprocess
import sys
import time

import pytest

from client import Admin, Producer, partition_for_key
from tests.client.live_broker import REPO, unique


def strata(*args, input=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "broker", *map(str, args)], input=input,
                          capture_output=True, cwd=REPO, timeout=timeout)


PROCESSED = re.compile(rb"Processed a total of \d+ messages\n")


def ok(result):
    """stdout of a run that succeeded and said nothing on stderr but the console
    consumer's closing count."""
    assert result.returncode == 0, result.stderr.decode()
    assert PROCESSED.sub(b"", result.stderr, count=1) == b"", result.stderr.decode()
    return result.stdout.decode()


def usage_error(result, subcommand: str):
    """The message of a usage error: the subcommand's usage, then the error, exit 2."""
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.startswith(f"usage: strata {subcommand} ") and "Traceback" not in err, err
    return err.splitlines()[-1]


def one_error_line(result):
    assert result.returncode != 0
    err = result.stderr.decode()
    assert "Traceback" not in err
    assert err.startswith("strata: ") and err.count("\n") == 1, err
    return err


def test_topics_create_list_describe_alter_delete(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    kafka = ("--kafka-bootstrap-server", live_broker.process.bootstrap)
    name = unique("cli-topic")
    assert ok(strata("topics", "create", name, "--partitions", 3, "--config", "retention.ms=60000",
                     "--config", "cleanup.policy=compact", *server)) == f"Created topic {name}.\n"
    assert name in ok(strata("topics", "list", *server)).splitlines()

    described = ok(strata("topics", "describe", name, "--details", *kafka, *server)).splitlines()
    assert described[0] == f"Topic: {name}\tPartitionCount: 3"
    assert described[1:4] == [f"\tPartition: {p}\tLogStartOffset: 0\tLogEndOffset: 0"
                              for p in range(3)]
    assert described[4] == "Configs:"
    configs = dict(line.strip().split("=", 1) for line in described[5:])
    assert configs["retention.ms"] == "60000 (overridden)" and configs["cleanup.policy"] == "compact (overridden)"
    assert configs["segment.bytes"] == "1073741824" and len(configs) > 5

    assert ok(strata("topics", "alter", name, "--config", "retention.ms=1234", "--config",
                     "cleanup.policy=", *server)) == \
        f"Completed updating config for topic {name}.\n"
    described = ok(strata("topics", "describe", name, "--details", *kafka, *server))
    assert "\tretention.ms=1234 (overridden)\n" in described and "\tcleanup.policy=delete\n" in described
    ok(strata("topics", "alter", name, "--delete-config", "retention.ms", *server))
    assert "\tretention.ms=604800000\n" in ok(strata("topics", "describe", name, "--details", *kafka, *server))

    assert ok(strata("topics", "delete", name, *server)) == f"Deleted topic {name}.\n"
    assert name not in ok(strata("topics", "list", *server)).splitlines()


def test_topics_errors_are_one_line(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("dup")
    ok(strata("topics", "create", name, *server))
    assert "TOPIC_ALREADY_EXISTS" in one_error_line(strata("topics", "create", name, *server))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_error_line(
        strata("topics", "describe", unique("nope"), *server))
    assert "INVALID_CONFIG" in one_error_line(
        strata("topics", "alter", name, "--config", "retention.ms=x", *server))
    assert "KEY=VALUE" in one_error_line(strata("topics", "create", unique("x"), "--config",
                                                "novalue", *server))


def test_produce_then_consume_from_beginning(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("cli-pc")
    ok(strata("topics", "create", name, "--partitions", 1, *server))
    lines = [f"message {i}" for i in range(200)] + ["", "tab\there"]
    ok(strata("produce", name, *server, input=("\n".join(lines) + "\n").encode()))
    out = ok(strata("consume", name, *server, "--from-beginning", "--max-messages", len(lines)))
    assert out.split("\n")[:-1] == lines
    # --max-messages stops early; --timeout-ms stops when the topic runs dry.
    out = ok(strata("consume", name, *server, "--from-beginning", "--max-messages", 3))
    assert out == "message 0\nmessage 1\nmessage 2\n"
    out = ok(strata("consume", name, *server, "--from-beginning", "--timeout-ms", 700))
    assert len(out.split("\n")) - 1 == len(lines)


def test_print_key_with_key_separator(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("cli-keys")
    ok(strata("topics", "create", name, "--partitions", 4, *server))
    stdin = "".join(f"user{i}:clicked {i}\n" for i in range(40)) + "k:v:with:colons\r\n"
    ok(strata("produce", name, *server, "--key-separator", ":", input=stdin.encode()))
    out = ok(strata("consume", name, *server, "--from-beginning", "--max-messages", 41,
                    "--print-key"))
    got = sorted(line.split("\t") for line in out.splitlines())
    assert got == sorted([[f"user{i}", f"clicked {i}"] for i in range(40)] + [["k", "v:with:colons"]])
    # The keys went where murmur2 puts them.
    with Admin(live_broker.address) as admin:
        ends = [p.log_end_offset for p in admin.describe_topic(name).partitions]
    expected = [0] * 4
    for key in [f"user{i}".encode() for i in range(40)] + [b"k"]:
        expected[partition_for_key(key, 4)] += 1
    assert ends == expected
    # One partition only, keyless values print null keys.
    ok(strata("produce", name, *server, "--partition", 2, input=b"no key\n"))
    out = ok(strata("consume", name, *server, "--partition", 2, "--from-beginning", "--print-key",
                    "--timeout-ms", 500))
    assert out.splitlines()[-1] == "null\tno key"
    assert len(out.splitlines()) == expected[2] + 1


def test_missing_key_separator_stops_with_one_line(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("cli-sep")
    ok(strata("topics", "create", name, *server))
    result = strata("produce", name, *server, "--key-separator", "=",
                    input=b"a=1\nb=2\nno separator here\nc=3\n")
    assert "line 3: no key separator '='" in one_error_line(result)
    out = ok(strata("consume", name, *server, "--from-beginning", "--timeout-ms", 500))
    assert out == "1\n2\n"  # the lines before it were delivered


def test_group_resumes_where_it_stopped(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("cli-group")
    group = unique("cli-g")
    ok(strata("topics", "create", name, "--partitions", 2, *server))
    ok(strata("produce", name, *server, input=b"".join(b"m%d\n" % i for i in range(10))))
    first = ok(strata("consume", name, *server, "--group", group, "--from-beginning",
                      "--max-messages", 4)).splitlines()
    rest = ok(strata("consume", name, *server, "--group", group, "--from-beginning",
                     "--timeout-ms", 700)).splitlines()
    assert len(first) == 4 and len(rest) == 6
    assert sorted(first + rest) == sorted(f"m{i}" for i in range(10))


def test_consume_without_from_beginning_starts_at_the_end(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("cli-end")
    ok(strata("topics", "create", name, *server))
    ok(strata("produce", name, *server, input=b"before\n"))
    assert ok(strata("consume", name, *server, "--timeout-ms", 400)) == ""


def test_ctrl_c_exits_zero_quietly_and_commits(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name, group = unique("cli-int"), unique("cli-int-group")
    ok(strata("topics", "create", name, *server))
    process = subprocess.Popen([sys.executable, "-m", "broker", "consume", name, *server,
                                "--group", group],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Interrupt only once it is surely consuming: it starts at the log end, so a
        # message it prints was produced after it started polling. Message i has offset i.
        with Producer(live_broker.address) as producer, selectors.DefaultSelector() as sel:
            sel.register(process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + 60
            sent = 0
            while not sel.select(0.2):
                assert time.monotonic() < deadline and process.poll() is None
                assert producer.send_and_wait(name, b"ping-%d" % sent).offset == sent
                sent += 1
        first = process.stdout.readline()
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err.decode()
    printed = (first + rest).decode().split()
    assert err == b"Processed a total of %d messages\n" % len(printed)
    assert printed and printed == [f"ping-{i}" for i in range(sent - len(printed), sent)]
    with Admin(live_broker.address) as admin:  # what it printed was committed on the way out
        assert admin.committed(group, name, 0)[0] == sent


@pytest.mark.parametrize("command", [
    ["topics", "list"],
    ["topics", "create", "x", "--partitions", "1"],
    ["produce", "x"],
    ["consume", "x", "--timeout-ms", "100"],
])
def test_unreachable_broker_is_one_line(command):
    result = strata(*command, "--bootstrap-server", "127.0.0.1:1", input=b"hello\n")
    assert "cannot reach broker at 127.0.0.1:1" in one_error_line(result)
    assert result.stdout == b""


@pytest.mark.parametrize("command", [
    ["consume", "--timeout-ms", "100"], ["consume", "--partition", "0"],
    ["topics", "describe"], ["topics", "delete"],
])
def test_unknown_topic_is_one_line(live_broker, command):
    name = unique("missing")
    args = [command[0], *command[1:2 if command[0] == "topics" else 1], name,
            *command[2 if command[0] == "topics" else 1:]]
    result = strata(*args, "--bootstrap-server", live_broker.address, input=b"x\n")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_error_line(result)


def test_bad_bootstrap_address_is_one_line():
    assert "HOST:PORT" in one_error_line(strata("topics", "list", "--bootstrap-server", "nohost"))
