"""A Kafka server.properties loads: single-node keys ignored (logged once), unknown keys
warned about and ignored (refused with --strict), multi-node values refused by name."""

import re
from pathlib import Path

import pytest

from broker.config.broker_config import BrokerConfig
from kafka_format.errors import InvalidConfigError
from tests.broker_process import BrokerProcess, run_serve

KAFKA_CONFIGS = Path(__file__).parent / "kafka_configs"


def kafka_file(tmp_path: Path, name: str, **replace: str) -> Path:
    """A copy of Kafka's stock file with log.dirs (and `replace`d keys) adapted."""
    text = (KAFKA_CONFIGS / name).read_text()
    for key, value in {"log.dirs": str(tmp_path / "data"), **replace}.items():
        text, n = re.subn(rf"(?m)^{re.escape(key)}=.*$", f"{key}={value}", text)
        assert n == 1, key
    path = tmp_path / name
    path.write_text(text)
    return path


def load(path: Path, **kwargs) -> BrokerConfig:
    return BrokerConfig.load(config_file=str(path), environ={}, **kwargs)


def test_stock_zookeeper_server_properties_loads(tmp_path):
    config = load(kafka_file(tmp_path, "server.properties"))
    assert config.data_dir == str(tmp_path / "data")
    assert config.num_partitions == 1
    assert config["group.initial.rebalance.delay.ms"] == 0
    assert config.log_defaults.retention_ms == 168 * 3_600_000
    ignored = {key for key, _, _ in config.ignored}
    assert {"broker.id", "num.network.threads", "socket.send.buffer.bytes", "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
            "zookeeper.connect", "zookeeper.connection.timeout.ms"} <= ignored
    assert config.unknown == ()
    assert all(origin.endswith("server.properties") and reason for _, origin, reason in config.ignored)


def test_stock_kraft_server_properties_loads(tmp_path):
    config = load(kafka_file(tmp_path, "kraft-server.properties", **{"node.id": "0"}), strict=True)
    ignored = {key for key, _, _ in config.ignored}
    assert {"process.roles", "node.id", "controller.quorum.voters", "controller.listener.names",
            "inter.broker.listener.name", "share.coordinator.state.topic.replication.factor"} <= ignored
    # listeners / listener.security.protocol.map: accepted (read where the broker implements them)
    assert {"listeners", "listener.security.protocol.map"} <= ignored | set(config.values)
    # the controller's listener is neither bound nor advertised; the PLAINTEXT one is what clients get
    assert config["listeners"] == "PLAINTEXT://:9092"
    assert {"listeners CONTROLLER://:9093", "advertised.listeners CONTROLLER://localhost:9093"} <= ignored
    assert config.kafka_advertised("0.0.0.0", 9092) == ("localhost", 9092)
    assert config.unknown == ()


def test_stock_kraft_node_id_1_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidConfigError, match=r"node.id: 1 is not supported: .* must be 0 \(.*properties\)"):
        load(kafka_file(tmp_path, "kraft-server.properties"))


@pytest.mark.parametrize("line, message", [
    ("broker.id=3", "broker.id: 3 is not supported: Strata is a single node with id 0"),
    ("default.replication.factor=3", "default.replication.factor: 3 is not supported: .* must be 1"),
    ("offsets.topic.replication.factor=2", "offsets.topic.replication.factor: 2 is not supported"),
    ("min.insync.replicas=2", "min.insync.replicas: 2 is not supported"),
    ("broker.id=x", "broker.id: 'x' is not a valid int"),
])
def test_more_than_one_node_is_refused_by_name(tmp_path, line, message):
    path = tmp_path / "s.properties"
    path.write_text(line + "\n")
    with pytest.raises(InvalidConfigError, match=message):
        load(path, data_dir=str(tmp_path))


def test_unknown_keys_are_ignored_unless_strict(tmp_path):
    path = tmp_path / "s.properties"
    path.write_text("no.such.key=1\nnum.partitions=4\n")
    config = load(path, data_dir=str(tmp_path), overrides=["bogus=2"])
    assert config.unknown == (("no.such.key", str(path)), ("bogus", "--set"))
    assert config.num_partitions == 4
    with pytest.raises(InvalidConfigError, match=r"unknown setting 'no.such.key' \(.*; refused by --strict\)"):
        load(path, data_dir=str(tmp_path), strict=True)
    # ignored (known) keys pass --strict
    path.write_text("broker.id=0\nprocess.roles=broker,controller\n")
    assert load(path, data_dir=str(tmp_path), strict=True).unknown == ()


def test_serve_logs_ignored_and_unknown_keys_once(tmp_path):
    path = kafka_file(tmp_path, "server.properties")
    with path.open("a") as f:
        f.write("made.up.key=1\n")
    broker = BrokerProcess(tmp_path / "data", "--config", str(path))
    try:
        broker.start()
        assert broker.stop() == 0
        log = broker.stderr_text()
    finally:
        broker.close()
    assert log.count("broker.id") == 1 and "config_ignored" in log
    assert log.count("made.up.key") == 1 and "unknown_setting_ignored" in log


def test_serve_strict_refuses_unknown_key(tmp_path):
    path = tmp_path / "s.properties"
    path.write_text("made.up.key=1\n")
    code, _, stderr = run_serve("--data-dir", str(tmp_path / "d"), "--config", str(path), "--strict")
    assert code == 2
    assert stderr.strip().splitlines() == [
        f"strata: invalid configuration: unknown setting 'made.up.key' ({path}; refused by --strict)"]


def test_permission_error_names_uids_and_owner(tmp_path):
    """A data directory the broker cannot write (a root-owned bind mount) says who is who."""
    import os

    from broker.app import ownership_hint

    hint = ownership_hint(str(tmp_path), PermissionError(13, "Permission denied"))
    st = os.stat(tmp_path)
    assert hint == (f" (the broker runs as uid {os.geteuid()}; the directory is owned by uid {st.st_uid}, "
                    f"gid {st.st_gid}, mode {st.st_mode & 0o7777:o})")
    assert ownership_hint(str(tmp_path), FileNotFoundError(2, "No such file")) == ""


def test_environment_takes_the_ignored_kafka_keys_too(tmp_path):
    config = BrokerConfig.load(environ={"STRATA_BROKER_ID": "0", "STRATA_OTHER_THING": "1"}, data_dir=str(tmp_path))
    assert config.ignored == (("broker.id", "environment STRATA_BROKER_ID", "one node: Strata is node 0"),)
    assert config.ignored_env == ("STRATA_OTHER_THING",)
    with pytest.raises(InvalidConfigError, match=r"default.replication.factor: 3 .*STRATA_DEFAULT_REPLICATION_FACTOR"):
        BrokerConfig.load(environ={"STRATA_DEFAULT_REPLICATION_FACTOR": "3"}, data_dir=str(tmp_path))
