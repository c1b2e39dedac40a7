"""GroupConfigs: Kafka's GROUP config keys, defaults and bounds from the broker, one JSON file."""

import json

import pytest

from broker.config.broker_config import BrokerConfig
from broker.config.group_configs import CONFIG_FILE, GroupConfigs
from broker.state import json_files
from kafka_format.errors import InvalidConfigError, InvalidRequestError, KafkaStorageError


def broker_values(tmp_path, *overrides: str) -> dict:
    return BrokerConfig.load(overrides=list(overrides), data_dir=str(tmp_path)).values


def test_defaults_come_from_the_broker(tmp_path):
    configs = GroupConfigs.open(str(tmp_path), broker_values(tmp_path, "group.consumer.session.timeout.ms=50000"))
    described = configs.describe("g")
    assert [row for row in described if row[0].startswith("consumer.")] == [
        ("consumer.heartbeat.interval.ms", "5000", False), ("consumer.session.timeout.ms", "50000", False)]
    # the share-group keys, with the broker's group.share.* defaults
    assert ("share.record.lock.duration.ms", "30000", False) in described
    assert ("share.auto.offset.reset", "latest", False) in described
    assert configs.effective("g") == {"consumer.heartbeat.interval.ms": 5000, "consumer.session.timeout.ms": 50000}
    assert not (tmp_path / CONFIG_FILE).exists()  # nothing written until something is set


def test_alter_persists_and_replace_drops_unlisted(tmp_path):
    values = broker_values(tmp_path)
    configs = GroupConfigs.open(str(tmp_path), values)
    configs.alter("g", [("consumer.session.timeout.ms", "55000"), ("consumer.heartbeat.interval.ms", " 6000")])
    doc = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert doc == {"version": 1, "groups": {"g": {"consumer.heartbeat.interval.ms": "6000",
                                                  "consumer.session.timeout.ms": "55000"}}}
    again = GroupConfigs.open(str(tmp_path), values)
    assert again.effective("g")["consumer.session.timeout.ms"] == 55000
    again.alter("g", [("consumer.heartbeat.interval.ms", "7000")], replace=True)
    assert again.overrides("g") == {"consumer.heartbeat.interval.ms": "7000"}
    again.alter("g", [("consumer.heartbeat.interval.ms", None)])
    assert json.loads((tmp_path / CONFIG_FILE).read_text())["groups"] == {}


@pytest.mark.parametrize("changes, words", [
    ([("consumer.session.timeout.ms", "44999")], "greater than or equal to group.consumer.min.session"),
    ([("consumer.heartbeat.interval.ms", "15001")], "less than or equal to group.consumer.max.heartbeat"),
    ([("consumer.session.timeout.ms", "x")], "Not a number of type INT"),
    ([("consumer.session.timeout.ms", "0")], "at least 1"),
    ([("share.no.such.key", "45000")], "Unknown group config name"),
    ([("share.session.timeout.ms", "1000")], "not within"),
    ([("share.auto.offset.reset", "soon")], "share.auto.offset.reset"),
])
def test_bad_values_change_nothing(tmp_path, changes, words):
    configs = GroupConfigs.open(str(tmp_path), broker_values(tmp_path))
    with pytest.raises(InvalidConfigError, match=words):
        configs.alter("g", changes)
    assert configs.overrides("g") == {} and not (tmp_path / CONFIG_FILE).exists()


def test_session_must_stay_above_heartbeat(tmp_path):
    values = broker_values(tmp_path, "group.consumer.min.session.timeout.ms=6000",
                           "group.consumer.max.heartbeat.interval.ms=20000")
    configs = GroupConfigs.open(str(tmp_path), values)
    with pytest.raises(InvalidConfigError, match="must be greater than consumer.heartbeat.interval.ms"):
        configs.alter("g", [("consumer.session.timeout.ms", "10000"), ("consumer.heartbeat.interval.ms", "10000")])


def test_empty_group_name_and_failed_write(tmp_path, monkeypatch):
    configs = GroupConfigs.open(str(tmp_path), broker_values(tmp_path))
    with pytest.raises(InvalidRequestError):
        configs.describe("")

    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json_files, "atomic_write", full)
    with pytest.raises(KafkaStorageError, match="No space left"):
        configs.alter("g", [("consumer.session.timeout.ms", "50000")])
    assert configs.overrides("g") == {}


def test_unreadable_file_is_a_clear_error(tmp_path):
    (tmp_path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(InvalidConfigError, match="cannot read"):
        GroupConfigs.open(str(tmp_path), broker_values(tmp_path))


def test_broker_settings_are_checked_together(tmp_path):
    with pytest.raises(InvalidConfigError, match="group.consumer.session.timeout.ms: must be between"):
        broker_values(tmp_path, "group.consumer.session.timeout.ms=70000")
    with pytest.raises(InvalidConfigError, match="must be less than group.consumer.session.timeout.ms"):
        broker_values(tmp_path, "group.consumer.min.session.timeout.ms=1000", "group.consumer.session.timeout.ms=5000")
