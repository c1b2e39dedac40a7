"""BrokerConfig: Java properties syntax, precedence of sources, validation."""

import pytest

from broker.config.broker_config import BrokerConfig
from broker.config.keys import DEFAULT_PORT
from broker.config.properties import parse_properties
from kafka_format.errors import InvalidConfigError
from storage.config import LONG_MAX


def load(tmp_path, text=None, overrides=(), cli=None, environ=None, data_dir="data"):
    config_file = None
    if text is not None:
        config_file = tmp_path / "server.properties"
        config_file.write_text(text)
    return BrokerConfig.load(config_file=str(config_file) if config_file else None, overrides=overrides,
                             cli=cli, environ=environ or {},
                             data_dir=str(tmp_path / data_dir) if data_dir else None)


def test_java_properties_syntax():
    text = "\n".join([
        "# a comment",
        "! another comment",
        "   ",
        "a=1",
        "b : 2",
        "c 3",
        "  d=  spaced value  ",
        "e=one \\",
        "   two \\",
        "   three",
        "f=tab\\there\\u0041\\=",
        "g\\=h=key with equals",
        "i=",
        "a=last wins",
        "j=ends with continuation\\",
    ])
    props = parse_properties(text)
    assert props == {"a": "last wins", "b": "2", "c": "3", "d": "spaced value  ",
                     "e": "one two three", "f": "tab\thereA=", "g=h": "key with equals", "i": "",
                     "j": "ends with continuation"}


def test_even_backslashes_do_not_continue():
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_defaults(tmp_path):
    config = load(tmp_path)
    assert config.port == DEFAULT_PORT == 9000
    assert config.host == "0.0.0.0"
    assert config.num_partitions == 1
    assert config.socket_request_max_bytes == 104_857_600
    assert config.auto_create_topics is True
    assert config.checkpoint_interval_ms == 60_000
    assert config["log.flush.scheduler.interval.ms"] == LONG_MAX
    assert config.flush_interval_ms == 1000  # at least every second
    assert config.initial_task_delay_ms == 30_000
    assert config["log.retention.check.interval.ms"] == 300_000
    assert config.offsets_topic_num_partitions == 50
    assert config.log_defaults.segment_bytes == 1_073_741_824
    assert config.data_dir == str(tmp_path / "data")


def test_precedence_cli_over_env_over_file(tmp_path):
    text = "num.partitions=2\nport=1111\nlog.segment.bytes=5000\nmessage.max.bytes=777\n"
    env = {"STRATA_NUM_PARTITIONS": "3", "STRATA_PORT": "2222", "STRATA_LOG_SEGMENT_BYTES": "6000"}
    config = load(tmp_path, text, overrides=["num.partitions=4"], cli={"port": "3333", "host.name": None},
                  environ=env)
    assert config.num_partitions == 4 and config.source("num.partitions") == "--set"
    assert config.port == 3333 and config.source("port") == "command line"
    assert config.log_defaults.segment_bytes == 6000
    assert config.source("log.segment.bytes") == "environment STRATA_LOG_SEGMENT_BYTES"
    assert config.log_defaults.max_message_bytes == 777
    assert config.host == "0.0.0.0" and config.source("host.name") == "default"


def test_broker_log_names_map_to_topic_defaults(tmp_path):
    config = load(tmp_path, overrides=["log.retention.hours=2", "log.cleanup.policy=compact",
                                       "log.roll.ms=1234"])
    assert config.log_defaults.retention_ms == 2 * 3_600_000
    assert config.log_defaults.cleanup_policy == ("compact",)
    assert config.log_defaults.segment_ms == 1234


def test_data_dir_sources(tmp_path):
    assert load(tmp_path, "log.dir=/x/y\n", data_dir=None).data_dir == "/x/y"
    assert load(tmp_path, "log.dir=/x/y\nlog.dirs=/a/b\n", data_dir=None).data_dir == "/a/b"
    assert load(tmp_path, "log.dirs=/a/b\n").data_dir == str(tmp_path / "data")  # --data-dir wins
    with pytest.raises(InvalidConfigError, match="no data directory"):
        load(tmp_path, data_dir=None)
    with pytest.raises(InvalidConfigError, match="exactly one data directory"):
        load(tmp_path, "log.dirs=/a,/b\n", data_dir=None)


@pytest.mark.parametrize("kwargs, message", [
    (dict(overrides=["novalue"]), "--set expects KEY=VALUE"),
    (dict(overrides=["port=abc"]), r"port: 'abc' is not a valid int \(--set\)"),
    (dict(overrides=["port=70000"]), "port: 70000 must be between 0 and 65535"),
    (dict(overrides=["num.partitions=0"]), "num.partitions: 0 must be at least 1"),
    (dict(overrides=["auto.create.topics.enable=maybe"]), "not a valid boolean"),
    (dict(overrides=["log.format=xml"]), "must be one of auto, text, json, console"),
    (dict(overrides=["log.segment.bytes=abc"]), r"log.segment.bytes: .*abc.* \(--set\)"),
    (dict(overrides=["log.segment.bytes=1"]), "log.segment.bytes"),
    (dict(environ={"STRATA_NUM_PARTITIONS": "x"}), r"environment STRATA_NUM_PARTITIONS"),
])
def test_bad_settings_are_one_clear_error(tmp_path, kwargs, message):
    with pytest.raises(InvalidConfigError, match=message) as info:
        load(tmp_path, **kwargs)
    assert "\n" not in str(info.value)


def test_unknown_environment_variables_are_reported_not_fatal(tmp_path):
    config = load(tmp_path, environ={"STRATA_BOOTSTRAP": "x", "STRATA_LOG_FORMAT": "json", "OTHER": "1"})
    assert config.ignored_env == ("STRATA_BOOTSTRAP",)
    assert config.log_format == "json"


def test_missing_config_file(tmp_path):
    with pytest.raises(InvalidConfigError, match="cannot read config file"):
        BrokerConfig.load(config_file=str(tmp_path / "nope.properties"), data_dir=str(tmp_path), environ={})
