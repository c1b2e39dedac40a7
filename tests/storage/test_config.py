import pytest

from kafka_format.errors import InvalidConfigError
from storage.config import LONG_MAX, LogConfig, broker_log_defaults


def test_defaults_are_kafkas():
    props = LogConfig().to_props()
    assert props["retention.ms"] == "604800000"
    assert props["retention.bytes"] == "-1"
    assert props["segment.bytes"] == "1073741824"
    assert props["segment.ms"] == "604800000"
    assert props["segment.jitter.ms"] == "0"
    assert props["segment.index.bytes"] == "10485760"
    assert props["index.interval.bytes"] == "4096"
    assert props["file.delete.delay.ms"] == "60000"
    assert props["flush.messages"] == str(LONG_MAX)
    assert props["flush.ms"] == str(LONG_MAX)
    assert props["max.message.bytes"] == "1048588"
    assert props["min.compaction.lag.ms"] == "0"
    assert props["max.compaction.lag.ms"] == str(LONG_MAX)
    assert props["delete.retention.ms"] == "86400000"
    assert props["min.cleanable.dirty.ratio"] == "0.5"
    assert props["cleanup.policy"] == "delete"
    assert props["message.timestamp.type"] == "CreateTime"


def test_overrides_parse_strings_and_keep_the_rest():
    config = LogConfig.from_props({"segment.bytes": "1048576", "cleanup.policy": "compact,delete"})
    assert config.segment_bytes == 1048576
    assert config.cleanup_policy == ("delete", "compact")
    assert config.compact and config.delete
    assert config.retention_ms == 604_800_000


def test_overrides_layer_on_given_defaults():
    base = LogConfig.from_props({"retention.ms": 1000})
    config = LogConfig.from_props({"segment.ms": 5}, base)
    assert (config.retention_ms, config.segment_ms) == (1000, 5)


@pytest.mark.parametrize("name,value,words", [
    ("segment.bytes", "13", "at least 14"),
    ("segment.bytes", "abc", "not a valid int"),
    ("segment.bytes", "99999999999", "not a valid int"),
    ("retention.ms", "-2", "at least -1"),
    ("min.cleanable.dirty.ratio", "1.5", "between"),
    ("cleanup.policy", "shred", "unknown policy"),
    ("cleanup.policy", "", "at least one"),
    ("message.timestamp.type", "WallTime", "CreateTime"),
    ("flush.messages", "0", "at least 1"),
    ("no.such.config", "1", "unknown topic config"),
])
def test_bad_values_are_refused_with_the_key_named(name, value, words):
    with pytest.raises(InvalidConfigError) as err:
        LogConfig.from_props({name: value})
    assert words in str(err.value)
    assert name in str(err.value)


def test_min_lag_above_max_lag_is_refused():
    with pytest.raises(InvalidConfigError):
        LogConfig.from_props({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5})


def test_broker_names_map_to_topic_defaults():
    config = broker_log_defaults({
        "log.segment.bytes": "1048576",
        "log.roll.hours": "1",
        "log.retention.minutes": "2",
        "message.max.bytes": "2000",
        "log.segment.delete.delay.ms": "10",
        "log.index.size.max.bytes": "4096",
        "unrelated.setting": "x",
    })
    assert config.segment_bytes == 1048576
    assert config.segment_ms == 3_600_000
    assert config.retention_ms == 120_000
    assert config.max_message_bytes == 2000
    assert config.file_delete_delay_ms == 10
    assert config.segment_index_bytes == 4096


def test_broker_ms_beats_minutes_and_hours():
    config = broker_log_defaults({"log.retention.hours": "1", "log.retention.minutes": "1",
                                  "log.retention.ms": "5"})
    assert config.retention_ms == 5
    assert broker_log_defaults({"log.roll.ms": "7", "log.roll.hours": "1"}).segment_ms == 7


def test_bad_broker_value_names_the_broker_setting():
    with pytest.raises(InvalidConfigError, match="log.segment.bytes"):
        broker_log_defaults({"log.segment.bytes": "1"})
    with pytest.raises(InvalidConfigError, match="log.retention.hours"):
        broker_log_defaults({"log.retention.hours": "soon"})


def test_round_trip_through_props():
    config = LogConfig.from_props({"cleanup.policy": "compact", "retention.bytes": 5})
    assert LogConfig.from_props(config.to_props()) == config
