"""Tiered storage's settings: the topic's (storage/config.py) and the broker's
(storage/remote/config.py), with Kafka's defaults, validation and error texts."""

import pytest

from kafka_format.errors import InvalidConfigError
from storage.config import LogConfig, check_remote_storage_change
from storage.remote.config import RemoteLogConfig, StoreLocation


def test_topic_defaults_are_kafkas():
    props = LogConfig().to_props()
    assert props["remote.storage.enable"] == "false"
    assert props["local.retention.ms"] == "-2"
    assert props["local.retention.bytes"] == "-2"
    assert props["remote.log.copy.disable"] == "false"
    assert props["remote.log.delete.on.disable"] == "false"


def test_local_retention_minus_two_follows_total_retention():
    config = LogConfig.from_props({"remote.storage.enable": "true", "retention.ms": "1000",
                                   "retention.bytes": "5000"})
    assert config.effective_local_retention_ms == 1000
    assert config.effective_local_retention_bytes == 5000
    config = LogConfig.from_props({"remote.storage.enable": "true", "local.retention.ms": "10",
                                   "local.retention.bytes": "20"})
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (10, 20)


def test_local_retention_below_minus_two_is_refused():
    with pytest.raises(InvalidConfigError, match="local.retention.ms: -3 must be at least -2"):
        LogConfig.from_props({"local.retention.ms": "-3"})


@pytest.mark.parametrize("props, message", [
    ({"retention.ms": "1000", "local.retention.ms": "2000"},
     "Invalid value 2000 for configuration local.retention.ms: Value must not be more than retention.ms "
     "property value: 1000"),
    ({"retention.ms": "1000", "local.retention.ms": "-1"},
     "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value is "
     "set as 1000."),
    ({"retention.bytes": "1000", "local.retention.bytes": "2000"},
     "Invalid value 2000 for configuration local.retention.bytes: Value must not be more than retention.bytes "
     "property value: 1000"),
    ({"retention.bytes": "1000", "local.retention.bytes": "-1"},
     "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as retention.bytes value "
     "is set as 1000."),
    ({"cleanup.policy": "compact"}, "Remote log storage is unsupported for the compacted topics"),
    ({"remote.log.copy.disable": "true", "retention.ms": "1000", "local.retention.ms": "500"},
     "When `remote.log.copy.disable` is set to true, the `local.retention.ms` and `retention.ms` must be set "
     "to the identical value"),
])
def test_tiered_topic_rules_with_kafkas_texts(props, message):
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_props({"remote.storage.enable": "true", **props})
    assert str(raised.value).startswith(message)
    # The same values on a topic that is not tiered are not checked (as Kafka).
    LogConfig.from_props(props)


def test_local_retention_within_total_and_forever_totals_are_accepted():
    LogConfig.from_props({"remote.storage.enable": "true", "retention.ms": "-1", "local.retention.ms": "-1",
                          "retention.bytes": "-1", "local.retention.bytes": "123"})
    LogConfig.from_props({"remote.storage.enable": "true", "retention.ms": "1000", "local.retention.ms": "1000",
                          "remote.log.copy.disable": "true"})


def test_the_broker_must_allow_tiering_and_turning_it_off_must_delete():
    tiered = LogConfig.from_props({"remote.storage.enable": "true"})
    with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled in the broker"):
        check_remote_storage_change(tiered, system_enabled=False, was_enabled=False)
    check_remote_storage_change(tiered, system_enabled=True, was_enabled=True)
    off = LogConfig.from_props({"remote.storage.enable": "false"})
    with pytest.raises(InvalidConfigError, match="It is invalid to disable remote storage without deleting"):
        check_remote_storage_change(off, system_enabled=True, was_enabled=True)
    check_remote_storage_change(LogConfig.from_props({"remote.log.delete.on.disable": "true"}),
                                system_enabled=True, was_enabled=True)
    check_remote_storage_change(off, system_enabled=False, was_enabled=False)


def test_broker_defaults_are_kafkas():
    config = RemoteLogConfig.from_props({}, environ={})
    assert not config.system_enable
    assert config.task_interval_ms == 30_000
    assert (config.retry_backoff_ms, config.retry_backoff_max_ms, config.retry_jitter) == (500, 30_000, 0.2)
    assert config.location is None
    assert config.s3_region == "us-east-1"
    assert (config.fetch_chunk_bytes, config.cache_bytes) == (8 << 20, 64 << 20)
    assert (config.fetch_readahead_bytes, config.fetch_threads) == (32 << 20, 4)
    config = RemoteLogConfig.from_props({"rsm.config.fetch.readahead.bytes": "0", "rsm.config.fetch.threads": "16"},
                                        environ={})
    assert (config.fetch_readahead_bytes, config.fetch_threads) == (0, 16)


def test_broker_settings_and_aws_environment():
    config = RemoteLogConfig.from_props(
        {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "250",
         "rsm.config.url": "s3://bucket/some/prefix/", "rsm.config.s3.endpoint": "http://127.0.0.1:9000",
         "log.retention.ms": "5"},
        environ={"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "eu-west-1"})
    assert config.system_enable and config.task_interval_ms == 250
    assert config.location == StoreLocation("s3", "bucket", "some/prefix")
    assert config.s3_endpoint == "http://127.0.0.1:9000" and config.s3_region == "eu-west-1"
    assert config.credentials.access_key_id == "id" and config.credentials.secret_access_key == "secret"
    assert "'secret'" not in repr(config)
    config = RemoteLogConfig.from_props({"rsm.config.url": "file:///var/tier", "rsm.config.s3.region": "x"},
                                        environ={"AWS_REGION": "eu-west-1"})
    assert config.location == StoreLocation("file", "", "/var/tier") and config.s3_region == "x"


@pytest.mark.parametrize("props, message", [
    ({"remote.log.storage.system.enable": "yes"}, "remote.log.storage.system.enable: 'yes' is not a valid boolean"),
    ({"remote.log.manager.task.interval.ms": "0"}, "remote.log.manager.task.interval.ms: 0 must be at least 1"),
    ({"remote.log.manager.task.interval.ms": "soon"}, "remote.log.manager.task.interval.ms: 'soon' is not a valid"),
    ({"remote.log.storage.system.enable": "true"}, "rsm.config.url must be set"),
    ({"rsm.config.url": "gs://bucket"}, "must start with s3:// or file://"),
    ({"rsm.config.url": "file://relative/path"}, "must be file:///absolute/path"),
    ({"rsm.config.url": "s3:///prefix"}, "names no bucket"),
    ({"rsm.config.s3.endpoint": "127.0.0.1:9000"}, "must be an http:// or https:// URL"),
    ({"remote.log.manager.task.retry.jitter": "0.9"}, "must be between 0.0 and 0.5"),
    ({"rsm.config.fetch.threads": "0"}, "rsm.config.fetch.threads: 0 must be at least 1"),
    ({"rsm.config.fetch.readahead.bytes": "-1"}, "rsm.config.fetch.readahead.bytes: -1 must be at least 0"),
    ({"rsm.config.fetch.readahead.bytes": "lots"}, "rsm.config.fetch.readahead.bytes: 'lots' is not a valid long"),
])
def test_bad_broker_settings_name_the_setting(props, message):
    with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RemoteLogConfig.from_props(props, environ={})
