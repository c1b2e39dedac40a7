"""AlterConfigs / IncrementalAlterConfigs on the BROKER resource (broker/config/dynamic_broker_configs.py):
Kafka's dynamic keys that do nothing on one node are kept and described; the keys Strata reads
stay static (INVALID_REQUEST naming the restart). librdkafka's 0081_admin alters
sasl.kerberos.min.time.before.relogin on broker "0" and expects success."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kio.index import load_request_schema
from structlog.testing import capture_logs

from broker.config.dynamic_broker_configs import _log_changes
from broker.kafka.codec import make, nested
from tests.broker_process import run_serve
from tests.kafka.wire import KafkaWire

TIMEOUT = 30
BROKER, SET, DELETE, APPEND = 4, 0, 1, 2
INVALID_REQUEST = 42


def incremental(bootstrap: str, name: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    client = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in ops])
    return client.incremental_alter_configs([resource])[resource].result(TIMEOUT)


def described(bootstrap: str) -> dict:
    client = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    return client.describe_configs([resource])[resource].result(TIMEOUT)


def raw_alter(broker, name: str, *configs: tuple[str, int, str | None]):
    """IncrementalAlterConfigs v1 on one BROKER resource: (error code, message)."""
    request_class = load_request_schema(44, 1)
    resource_class = nested(request_class, "resources")
    config_class = nested(resource_class, "configs")
    wire = KafkaWire(*broker.kafka_address)
    try:
        answer = wire.call(make(request_class, validate_only=False, resources=(
            make(resource_class, resource_type=BROKER, resource_name=name,
                 configs=tuple(make(config_class, name=k, config_operation=op, value=v)
                               for k, op, v in configs)),)))
    finally:
        wire.close()
    (result,) = answer.responses
    return result.error_code.value, result.error_message


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_of_a_kerberos_key_on_this_broker_is_kept_and_described(kafka_broker):
    client = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0",
                              set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    assert client.alter_configs([resource])[resource].result(TIMEOUT) is None
    entry = described(kafka_broker.bootstrap)["sasl.kerberos.min.time.before.relogin"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    # a static key next to it stays read-only and static
    assert described(kafka_broker.bootstrap)["num.partitions"].is_read_only


def test_incremental_set_append_delete_and_keys_strata_reads_stay_static(kafka_broker):
    bootstrap = kafka_broker.bootstrap
    incremental(bootstrap, "0", ("background.threads", "9", AlterConfigOpType.SET),
                ("metric.reporters", "a,b", AlterConfigOpType.APPEND))
    incremental(bootstrap, "0", ("metric.reporters", "c,a", AlterConfigOpType.APPEND))
    configs = described(bootstrap)
    assert configs["background.threads"].value == "9"
    assert configs["metric.reporters"].value == "a,b,c"

    for key, value in (("num.io.threads", "3"), ("log.retention.hours", "1")):
        with pytest.raises(KafkaException, match=f"INVALID_REQUEST.*Cannot update these configs "
                                                 f"dynamically: {key} \\(Strata reads them at start"):
            incremental(bootstrap, "0", (key, value, AlterConfigOpType.SET))
    with pytest.raises(KafkaException, match="INVALID_REQUEST.*dynamically: no.such.key"):
        incremental(bootstrap, "0", ("no.such.key", "1", AlterConfigOpType.SET))
    # a bad value refuses the whole resource: the good key next to it is not applied
    with pytest.raises(KafkaException, match="INVALID_REQUEST.*background.threads: Value must be at least 1"):
        incremental(bootstrap, "0", ("background.threads", "0", AlterConfigOpType.SET),
                    ("metric.reporters", "z", AlterConfigOpType.SET))
    configs = described(bootstrap)
    assert (configs["background.threads"].value, configs["metric.reporters"].value) == ("9", "a,b,c")

    incremental(bootstrap, "0", ("metric.reporters", None, AlterConfigOpType.DELETE))
    # the override is gone: the key is described as every Kafka key is, with Kafka's default
    entry = described(bootstrap)["metric.reporters"]
    assert (entry.value, entry.source) == ("org.apache.kafka.common.metrics.JmxReporter",
                                           ConfigSource.DEFAULT_CONFIG.value)


def test_cluster_default_takes_cluster_wide_keys_and_survives_a_restart(kafka_broker):
    code, message = raw_alter(kafka_broker, "", ("sasl.kerberos.kinit.cmd", SET, "kinit"))
    assert code == INVALID_REQUEST and "broker id must be specified: sasl.kerberos.kinit.cmd" in message
    assert raw_alter(kafka_broker, "7", ("background.threads", SET, "2")) == (
        INVALID_REQUEST, "Unexpected broker id, expected 0, but received 7")
    assert raw_alter(kafka_broker, "", ("num.replica.fetchers", SET, "3")) == (0, None)
    # APPEND extends the resource's own list: broker 0's override is not merged with the default's
    assert raw_alter(kafka_broker, "", ("metric.reporters", SET, "d")) == (0, None)
    assert raw_alter(kafka_broker, "0", ("metric.reporters", APPEND, "e")) == (0, None)
    entry = described(kafka_broker.bootstrap)["metric.reporters"]
    assert (entry.value, entry.source) == ("e", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    kafka_broker.restart()
    entry = described(kafka_broker.bootstrap)["num.replica.fetchers"]
    assert (entry.value, entry.source) == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert raw_alter(kafka_broker, "", ("num.replica.fetchers", DELETE, None)) == (0, None)
    entry = described(kafka_broker.bootstrap)["num.replica.fetchers"]
    assert (entry.value, entry.source) == ("1", ConfigSource.DEFAULT_CONFIG.value)


def test_a_damaged_file_stops_the_start_with_one_line_naming_it(tmp_path):
    (tmp_path / "broker-configs.json").write_text("{not json")
    code, _, stderr = run_serve("--data-dir", str(tmp_path))
    assert code != 0
    assert "cannot read dynamic broker configs" in stderr and "broker-configs.json" in stderr
    assert "Traceback" not in stderr


def test_a_change_of_a_secret_key_is_logged_without_its_values():
    with capture_logs() as events:
        _log_changes("0", {"listener.name.x.ssl.keystore.password": "old-secret", "metric.reporters": "a"},
                     {"listener.name.x.ssl.keystore.password": "new-secret", "metric.reporters": "a"})
        _log_changes("", {}, {"sasl.jaas.config": "secret"})
    assert [(e["resource"], e["key"], e["old"], e["new"]) for e in events] == [
        ("broker 0", "listener.name.x.ssl.keystore.password", "[hidden]", "[hidden]"),
        ("cluster default", "sasl.jaas.config", None, "[hidden]")]
