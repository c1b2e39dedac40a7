"""`strata quotas --describe|--alter` (kafka-configs --entity-type users|clients|ips)
through the real command line against the real broker process, cross-checked
with DescribeClientQuotas on the wire and with the throttling the quotas cause."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from types import SimpleNamespace

from broker.cli import main
from tests.client.live_broker import REPO
from tests.kafka.test_client_quotas import describe_request, described
from tests.kafka.wire import KafkaWire


def command_line(*args):
    """`strata ...` as its own process."""
    return subprocess.run([sys.executable, "-m", "broker", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def strata(*args):
    """`strata ...` in this process (its main, exit code and output), which is quicker."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = int(e.code or 0)
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def ok(result) -> str:
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout


def error_line(result) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_alter_and_describe_like_kafka_configs(broker, tmp_path):
    server = broker()
    kafka = ["--kafka-bootstrap-server", "{}:{}".format(*server.kafka_address)]
    assert ok(command_line("quotas", "--alter", "--entity-type", "clients", "--entity-name", "c1",
                           "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048", *kafka)) == \
        "Completed updating config for client c1.\n"
    assert ok(strata("quotas", "--alter", "--entity-type", "users", "--entity-name", "alice",
                     "--entity-type", "clients", "--entity-default", "--add-config", "request_percentage=50",
                     *kafka)) == "Completed updating config for user alice.\n"
    assert ok(strata("quotas", "--alter", "--client-defaults", "--add-config", "producer_byte_rate=4096",
                     *kafka)) == "Completed updating default config for clients in the cluster.\n"
    assert ok(strata("quotas", "--alter", "--entity-type", "ips", "--entity-name", "10.1.2.3",
                     "--add-config", "connection_creation_rate=5", *kafka)) == \
        "Completed updating config for ip 10.1.2.3.\n"

    # What the broker stores, as DescribeClientQuotas answers it.
    with KafkaWire(*server.kafka_address) as conn:
        assert described(conn.call(describe_request([]))) == {
            (("client-id", "c1"),): {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0},
            (("client-id", None), ("user", "alice")): {"request_percentage": 50.0},
            (("client-id", None),): {"producer_byte_rate": 4096.0},
            (("ip", "10.1.2.3"),): {"connection_creation_rate": 5.0},
        }

    assert ok(command_line("quotas", "--describe", "--entity-type", "clients", "--entity-name", "c1", *kafka)) == \
        "Quota configs for client-id 'c1' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0\n"
    assert ok(strata("quotas", "--describe", "--user", "alice", "--client-defaults", *kafka)) == \
        "Quota configs for user-principal 'alice', the default client-id are request_percentage=50.0\n"
    assert ok(strata("quotas", "--describe", "--entity-type", "clients", "--entity-default", *kafka)) == \
        "Quota configs for the default client-id are producer_byte_rate=4096.0\n"
    assert ok(strata("quotas", "--describe", "--entity-type", "ips", *kafka)) == \
        "Quota configs for ip '10.1.2.3' are connection_creation_rate=5.0\n"
    assert len(ok(strata("quotas", "--describe", *kafka)).splitlines()) == 4

    # --delete-config drops keys; an entity left with none is gone.
    assert ok(strata("quotas", "--alter", "--client", "c1", "--delete-config", "producer_byte_rate", *kafka))
    assert ok(strata("quotas", "--describe", "--client", "c1", *kafka)) == \
        "Quota configs for client-id 'c1' are consumer_byte_rate=2048.0\n"
    assert ok(strata("quotas", "--alter", "--client", "c1", "--delete-config", "consumer_byte_rate", *kafka))
    assert ok(strata("quotas", "--describe", "--client", "c1", *kafka)) == ""

    # --command-config applies (a PLAINTEXT one here; SASL_SSL in tests/security/test_sasl_cli.py).
    plain = tmp_path / "plain.properties"
    plain.write_text("security.protocol=PLAINTEXT\n")
    assert "request_percentage=50.0" in ok(strata("quotas", "--describe", "--user", "alice", "--client-defaults",
                                                  "--command-config", plain, *kafka))


def test_bad_input_is_one_line_and_changes_nothing(broker):
    server = broker()
    kafka = ["--kafka-bootstrap-server", "{}:{}".format(*server.kafka_address)]
    assert "INVALID_REQUEST" in error_line(strata("quotas", "--alter", "--client", "c", "--add-config",
                                                  "no_such_quota=1", *kafka))
    assert "must be positive" in error_line(strata("quotas", "--alter", "--client", "c", "--add-config",
                                                   "producer_byte_rate=-5", *kafka))
    assert "Cannot parse quota configuration value for producer_byte_rate: lots" in error_line(
        strata("quotas", "--alter", "--client", "c", "--add-config", "producer_byte_rate=lots", *kafka))
    assert "not a quota of ip" in error_line(strata("quotas", "--alter", "--ip-defaults", "--add-config",
                                                    "producer_byte_rate=5", *kafka))
    assert "Invalid config(s): consumer_byte_rate" in error_line(
        strata("quotas", "--alter", "--client", "c", "--delete-config", "consumer_byte_rate", *kafka))
    usage = strata("quotas", "--alter", "--entity-type", "clients", "--add-config", "producer_byte_rate=1", *kafka)
    assert usage.returncode == 2 and "--entity-name or --entity-default" in usage.stderr
    assert strata("quotas", "--alter", "--client", "c", *kafka).returncode == 2
    assert strata("quotas", "--describe", "--alter", *kafka).returncode == 2
    assert strata("quotas", "--describe", "--client", "a", "--entity-type", "clients", "--entity-name", "b",
                  *kafka).returncode == 2
    assert ok(strata("quotas", "--describe", *kafka)) == ""
