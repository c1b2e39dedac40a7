"""GROUP config resources: defaults, alter, validation, a restart, and the legacy
AlterConfigs replacing a group's overrides, against the broker process."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from tests.broker_process import BrokerProcess

TIMEOUT = 30


# ---- GROUP configs ---------------------------------------------------------------------------

def describe_group(admin: AdminClient, group: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.GROUP, group)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def alter_group(admin: AdminClient, group: str, *entries: tuple[str, str | None, AlterConfigOpType],
                validate_only: bool = False) -> None:
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries])
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(TIMEOUT)


def test_group_configs_default_alter_validate_and_survive_a_restart(tmp_path):
    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    with BrokerProcess(tmp_path / "data", "--set", "group.consumer.max.session.timeout.ms=90000") as broker:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        found = describe_group(admin, "g-conf")  # any group name, existing or not
        assert {k: (v.value, v.source) for k, v in found.items() if k.startswith("consumer.")} == {
            "consumer.session.timeout.ms": ("45000", ConfigSource.DEFAULT_CONFIG.value),
            "consumer.heartbeat.interval.ms": ("5000", ConfigSource.DEFAULT_CONFIG.value)}
        # the share-group keys (KIP-932) with the broker's group.share.* defaults
        assert (found["share.record.lock.duration.ms"].value, found["share.auto.offset.reset"].value) == \
            ("30000", "latest")

        alter_group(admin, "g-conf", ("consumer.session.timeout.ms", "80000", SET),
                    ("consumer.heartbeat.interval.ms", "7000", SET))
        alter_group(admin, "g-conf", ("consumer.session.timeout.ms", "50000", SET), validate_only=True)
        found = describe_group(admin, "g-conf")
        assert (found["consumer.session.timeout.ms"].value, found["consumer.session.timeout.ms"].source) == \
            ("80000", ConfigSource.GROUP_CONFIG.value)
        assert found["consumer.heartbeat.interval.ms"].value == "7000"
        assert describe_group(admin, "other")["consumer.session.timeout.ms"].value == "45000"

        for bad, words in ((("consumer.session.timeout.ms", "95000", SET), "less than or equal"),
                           (("consumer.heartbeat.interval.ms", "1000", SET), "greater than or equal"),
                           (("consumer.session.timeout.ms", "soon", SET), "Not a number"),
                           (("share.record.lock.duration.ms", "1000", SET), "not within"),
                           (("share.no.such.key", "1", SET), "Unknown group config"),
                           (("consumer.session.timeout.ms", "1", AlterConfigOpType.APPEND), "append is not allowed")):
            try:
                alter_group(admin, "g-conf", bad)
                raise AssertionError(f"{bad} was accepted")
            except KafkaException as e:
                assert e.args[0].code() == 40 and words in e.args[0].str(), e  # INVALID_CONFIG
        assert describe_group(admin, "g-conf")["consumer.session.timeout.ms"].value == "80000"  # unchanged

        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        found = describe_group(admin, "g-conf")
        assert (found["consumer.session.timeout.ms"].value, found["consumer.heartbeat.interval.ms"].value) == \
            ("80000", "7000")
        alter_group(admin, "g-conf", ("consumer.session.timeout.ms", None, DELETE))
        found = describe_group(admin, "g-conf")
        assert (found["consumer.session.timeout.ms"].value, found["consumer.session.timeout.ms"].source) == \
            ("45000", ConfigSource.DEFAULT_CONFIG.value)


def test_legacy_alter_configs_replaces_a_groups_overrides(wire, bootstrap):
    from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource

    conn = wire()

    def alter(*pairs):
        resource = AlterConfigsResource(resource_type=32, resource_name="g-legacy", configs=tuple(
            AlterableConfig(name=n, value=v) for n, v in pairs))
        return conn.call(AlterConfigsRequest(resources=(resource,), validate_only=False)).responses[0]

    assert alter(("consumer.session.timeout.ms", "50000"), ("consumer.heartbeat.interval.ms", "6000")).error_code == 0
    assert alter(("consumer.heartbeat.interval.ms", "8000")).error_code == 0
    found = describe_group(AdminClient({"bootstrap.servers": bootstrap}), "g-legacy")
    assert (found["consumer.session.timeout.ms"].value, found["consumer.heartbeat.interval.ms"].value) == \
        ("45000", "8000")  # the session timeout was not listed: back to the default
    bad = alter(("consumer.session.timeout.ms", "5"))
    assert bad.error_code == 40 and "greater than or equal" in bad.error_message
