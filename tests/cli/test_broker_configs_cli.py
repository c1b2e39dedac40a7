"""`strata configs describe|alter --broker` against the real broker process: kafka-configs'
flags, reading of --add-config and output, the dynamic log.* defaults reaching a topic without
an override, and a refused change that is one line and changes nothing."""

from __future__ import annotations

import pytest

from broker.cli.configs import parse_add_config
from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata, usage_error
from tests.client.live_broker import unique

STATIC_MS = "86400000"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("configs-cli"), "--set", f"log.retention.ms={STATIC_MS}")
    try:
        yield process.start()
    finally:
        process.close()


def cli(broker, *args):
    return strata(*args, "--bootstrap-server", f"{broker.host}:{broker.port}",
                  "--kafka-bootstrap-server", broker.bootstrap)


def line_of(described: str, key: str) -> str:
    (line,) = [line for line in described.splitlines() if line.startswith(f"  {key}=")]
    return line


def topic_configs(broker, topic: str) -> dict[str, str]:
    described = ok(cli(broker, "topics", "describe", topic, "--details")).splitlines()
    start = described.index("Configs:") + 1
    return dict(line.strip().split("=", 1) for line in described[start:])


def test_add_config_is_read_as_kafka_configs_reads_it():
    assert parse_add_config("a=1, b = [x,y] ,c=") == {"a": "1", "b": "x,y", "c": ""}
    assert parse_add_config("k=[p=1,q=2],z=3,") == {"k": "p=1,q=2", "z": "3"}
    assert parse_add_config(None) == {}


def test_defaults_then_per_broker_then_delete_falls_back(broker):
    topic = unique("cfg")
    ok(strata("topics", "create", topic, "--bootstrap-server", f"{broker.host}:{broker.port}"))

    assert ok(cli(broker, "configs", "alter", "--broker", "--entity-default",
                  "--add-config", "log.retention.ms=7200000,log.cleanup.policy=[delete,compact]")) == \
        "Completed updating default config for brokers in the cluster.\n"
    assert ok(cli(broker, "configs", "alter", "--broker", "--add-config", "log.retention.ms=3600000")) == \
        "Completed updating config for broker 0.\n"

    described = ok(cli(broker, "configs", "describe", "--broker"))
    assert described.splitlines()[0] == "All configs for broker 0 are:"
    assert line_of(described, "log.retention.ms") == (
        "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000, "
        f"STATIC_BROKER_CONFIG:log.retention.ms={STATIC_MS}, DEFAULT_CONFIG:log.retention.hours=168}}")
    assert line_of(described, "log.cleanup.policy") == (
        "  log.cleanup.policy=delete,compact sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleanup.policy=delete,compact, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}")
    assert "  num.partitions=1 sensitive=false synonyms={DEFAULT_CONFIG:num.partitions=1}" in described.splitlines()

    defaults = ok(cli(broker, "configs", "describe", "--broker", "--entity-default")).splitlines()
    assert defaults[0] == "Default configs for brokers in the cluster are:"
    assert defaults[1:] == [
        "  log.cleanup.policy=delete,compact sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleanup.policy=delete,compact, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000, "
        f"STATIC_BROKER_CONFIG:log.retention.ms={STATIC_MS}, DEFAULT_CONFIG:log.retention.hours=168}}"]

    configs = topic_configs(broker, topic)  # no override: the topic follows the broker's dynamic defaults
    assert configs["retention.ms"] == "3600000" and configs["cleanup.policy"] == "delete,compact"

    assert ok(cli(broker, "configs", "alter", "--broker", "--delete-config", "log.retention.ms")) == \
        "Completed updating config for broker 0.\n"
    assert line_of(ok(cli(broker, "configs", "describe", "--broker")), "log.retention.ms").startswith(
        "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:")
    assert topic_configs(broker, topic)["retention.ms"] == "7200000"

    ok(cli(broker, "configs", "alter", "--broker", "--entity-default",
           "--delete-config", "log.retention.ms,log.cleanup.policy"))
    assert line_of(ok(cli(broker, "configs", "describe", "--broker")), "log.retention.ms") == (
        f"  log.retention.ms={STATIC_MS} sensitive=false synonyms={{STATIC_BROKER_CONFIG:log.retention.ms={STATIC_MS}, "
        "DEFAULT_CONFIG:log.retention.hours=168}")
    assert ok(cli(broker, "configs", "describe", "--broker", "--entity-default")) == \
        "Default configs for brokers in the cluster are:\n"
    configs = topic_configs(broker, topic)
    assert configs["retention.ms"] == STATIC_MS and configs["cleanup.policy"] == "delete"


def test_refused_changes_are_one_line_and_change_nothing(broker):
    ok(cli(broker, "configs", "alter", "--broker", "--add-config", "log.retention.ms=3600000"))
    before = ok(cli(broker, "configs", "describe", "--broker"))

    err = one_error_line(cli(broker, "configs", "alter", "--broker",
                             "--add-config", "log.retention.ms=5000,log.segment.bytes=lots"))
    assert "log.segment.bytes" in err and "lots" in err, err
    err = one_error_line(cli(broker, "configs", "alter", "--broker",
                             "--add-config", "log.retention.ms=1,no.such.key=1"))
    assert "no.such.key" in err, err
    err = one_error_line(cli(broker, "configs", "alter", "--broker", "--entity-default",
                             "--delete-config", "log.retention.ms"))
    assert err == "strata: Invalid config(s): log.retention.ms\n"
    assert ok(cli(broker, "configs", "describe", "--broker")) == before

    assert "key=val" in usage_error(cli(broker, "configs", "alter", "--broker", "--add-config", "novalue"),
                                    "configs alter")
    assert "valid integer broker id" in usage_error(
        cli(broker, "configs", "describe", "--broker", "--entity-name", "x"), "configs describe")
    assert "--add-config or --delete-config" in usage_error(cli(broker, "configs", "alter", "--broker"),
                                                            "configs alter")
    ok(cli(broker, "configs", "alter", "--broker", "--delete-config", "log.retention.ms"))
