"""A full disk while each state file of the data directory is being replaced.

The real broker on a small tmpfs (tests/robust/test_disk_full.py's `small_disk`;
skipped where a tmpfs cannot be mounted) first writes every state file once;
then a filler file takes the disk's last page, and each request that replaces a
file is answered with Kafka's code, leaving the file as it was and no `.tmp`
behind: CreateAcls (and the native CREATE_ACLS), DeleteAcls,
AlterUserScramCredentials, AlterClientQuotas, IncrementalAlterConfigs of a group
and of a topic answer KAFKA_STORAGE_ERROR (56); InitProducerId, which must claim a producer id block
in `strata-kafka.json`, answers COORDINATOR_LOAD_IN_PROGRESS (14, Kafka's answer
while it has no block; clients retry). The broker keeps serving reads meanwhile.
Once the filler is gone the same requests succeed, and after a clean stop and a
start every change made is there and nothing refused is.
"""

from __future__ import annotations

import datetime
import errno
import os

import pytest
from kio.index import load_request_schema

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from broker.kafka.codec import make  # noqa: E402
from client import Admin  # noqa: E402
from client.errors import StrataClientError  # noqa: E402
from protocol import AclBinding as NativeAclBinding  # noqa: E402
from tests.kafka.test_client_quotas import alter as alter_quotas  # noqa: E402
from tests.kafka.wire import KafkaWire  # noqa: E402
from tests.robust.state_seed import ANY_ACL, GUARD_S, SERVE_ARGS, admin  # noqa: E402
from tests.robust.test_disk_full import small_disk  # noqa: E402, F401 (the fixture)

STORAGE_ERROR, LOAD_IN_PROGRESS, NOT_COORDINATOR = 56, 14, 16
STATE_FILES = ("acls.json", "scram-credentials.json", "client-quotas.json", "group-configs.json",
               "strata-kafka.json", "strata-topics.json")


def topic_acl(principal: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, "events", ResourcePatternType.LITERAL, principal, "*",
                      AclOperation.READ, AclPermissionType.ALLOW)


def user(name: str) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                        name.encode() + b"-secret")


def group_config(group: str, timeout_ms: int) -> ConfigResource:
    return ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", str(timeout_ms), incremental_operation=AlterConfigOpType.SET)])


def topic_config(retention_ms: int) -> ConfigResource:
    return ConfigResource(ResourceType.TOPIC, "events", incremental_configs=[
        ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET)])


def failure(futures) -> int:
    """The Kafka error code every future of an AdminClient call failed with."""
    codes = set()
    for future in futures.values():
        with pytest.raises(KafkaException) as raised:
            future.result(GUARD_S)
        codes.add(raised.value.args[0].code())
    assert len(codes) == 1, codes
    return codes.pop()


def users(client, *names: str) -> dict[str, bool]:
    """Whether each user has a SCRAM credential."""
    out = {}
    for name, future in client.describe_user_scram_credentials(list(names)).items():
        try:
            out[name] = bool(future.result(GUARD_S).scram_credential_infos)
        except KafkaException:  # RESOURCE_NOT_FOUND
            out[name] = False
    return out


def succeed(futures) -> None:
    for future in futures.values():
        future.result(GUARD_S)


TIMEOUT = datetime.timedelta(seconds=60)


def init_producer_id(process) -> tuple[int, int]:
    request = make(load_request_schema(22, 4), transactional_id=None, transaction_timeout=TIMEOUT,
                   producer_id=-1, producer_epoch=-1)
    with KafkaWire(*process.kafka_address) as conn:
        response = conn.call(request)
    return response.error_code, response.producer_id


def fill(path) -> None:
    """Write `path` until the filesystem has not one page left."""
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            while True:
                try:
                    f.write(chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break


def snapshot(data_dir) -> dict[str, bytes]:
    out = {}
    for name in STATE_FILES:
        with open(data_dir / name, "rb") as f:
            out[name] = f.read()
    return out


def test_each_state_writer_on_a_full_disk_answers_its_code_and_changes_nothing(small_disk, broker):  # noqa: F811
    data_dir = small_disk / "data"
    process = broker(*SERVE_ARGS, data_dir=data_dir)
    client = admin(process.bootstrap)
    succeed(client.create_topics([NewTopic("events", 1)]))
    succeed(client.create_acls([topic_acl("User:alice")]))
    succeed(client.alter_user_scram_credentials([user("alice")]))
    succeed(client.incremental_alter_configs([group_config("g1", 50000)]))
    assert alter_quotas(process, [({"client-id": "c1"}, {"producer_byte_rate": 1048576})]) == [(0, None)]
    before = snapshot(data_dir)

    filler = small_disk / "filler"
    fill(filler)
    try:
        with pytest.raises(OSError) as raised, open(data_dir / "probe", "wb") as f:  # full to its last page
            f.write(b"x")
            f.flush()
        assert raised.value.errno == errno.ENOSPC
        os.unlink(data_dir / "probe")

        assert failure(client.create_acls([topic_acl("User:bob")])) == STORAGE_ERROR
        with Admin(f"{process.host}:{process.port}") as native, pytest.raises(StrataClientError) as refused:
            native.create_acls([NativeAclBinding(2, "events", 3, "User:bob", "*", 3, 3)])  # TOPIC LITERAL READ ALLOW
        assert refused.value.code == STORAGE_ERROR
        assert failure(client.delete_acls([ANY_ACL])) == STORAGE_ERROR
        assert failure(client.alter_user_scram_credentials([user("bob")])) == STORAGE_ERROR
        assert failure(client.incremental_alter_configs([group_config("g2", 55000)])) == STORAGE_ERROR
        assert failure(client.incremental_alter_configs([topic_config(3600000)])) == STORAGE_ERROR
        [(code, message)] = alter_quotas(process, [({"client-id": "c2"}, {"producer_byte_rate": 2048})])
        assert code == STORAGE_ERROR and "client-quotas.json" in message
        assert init_producer_id(process) == (LOAD_IN_PROGRESS, -1)

        assert snapshot(data_dir) == before
        assert not [name for name in os.listdir(data_dir) if name.endswith(".tmp")]
        assert client.describe_acls(ANY_ACL).result(GUARD_S) == [topic_acl("User:alice")]
        assert users(client, "alice", "bob") == {"alice": True, "bob": False}
    finally:
        os.unlink(filler)

    succeed(client.create_acls([topic_acl("User:bob")]))
    succeed(client.alter_user_scram_credentials([user("bob")]))
    succeed(client.incremental_alter_configs([group_config("g2", 55000)]))
    succeed(client.incremental_alter_configs([topic_config(3600000)]))
    assert alter_quotas(process, [({"client-id": "c2"}, {"producer_byte_rate": 2048})]) == [(0, None)]
    code, producer_id = init_producer_id(process)
    assert code == 0 and producer_id >= 0

    assert process.stop() == 0
    process.restart()
    client = admin(process.bootstrap)
    assert sorted(a.principal for a in client.describe_acls(ANY_ACL).result(GUARD_S)) == ["User:alice", "User:bob"]
    assert users(client, "alice", "bob") == {"alice": True, "bob": True}
    described = client.describe_configs([ConfigResource(ResourceType.TOPIC, "events")])
    [configs] = [f.result(GUARD_S) for f in described.values()]
    assert configs["retention.ms"].value == "3600000"
    code, later_id = init_producer_id(process)
    assert code == 0 and later_id > producer_id
    assert "Traceback" not in process.stderr_text()


def init_transactional(process, transactional_id: str) -> tuple[int, int, int]:
    request = make(load_request_schema(22, 4), transactional_id=transactional_id, transaction_timeout=TIMEOUT,
                   producer_id=-1, producer_epoch=-1)
    with KafkaWire(*process.kafka_address) as conn:
        response = conn.call(request)
    return response.error_code, response.producer_id, response.producer_epoch


def test_a_transaction_state_write_on_a_full_disk_answers_not_coordinator(small_disk, broker):  # noqa: F811
    """`__transaction_state` appends: new transactional ids are registered until an
    append needs a page the disk does not have; that InitProducerId answers
    NOT_COORDINATOR (Kafka's TransactionStateManager for KAFKA_STORAGE_ERROR),
    never UNKNOWN_SERVER_ERROR; once there is room it succeeds, and every id
    registered is known after a restart."""
    process = broker(*SERVE_ARGS, data_dir=small_disk / "data")
    assert init_transactional(process, "tx-0")[0] == 0  # the topic and a producer id block exist
    filler = small_disk / "filler"
    fill(filler)
    registered = {}
    try:
        for i in range(1, 500):
            code, producer_id, epoch = init_transactional(process, f"tx-{i}")
            if code:
                break
            registered[f"tx-{i}"] = producer_id
        else:
            raise AssertionError("no __transaction_state append failed on the full disk")
        assert code == NOT_COORDINATOR, code
        refused = f"tx-{i}"
    finally:
        os.unlink(filler)
    code, producer_id, epoch = init_transactional(process, refused)
    assert (code, epoch) == (0, 0)
    registered[refused] = producer_id
    assert process.stop() == 0
    process.restart()
    for transactional_id, producer_id in registered.items():
        assert init_transactional(process, transactional_id) == (0, producer_id, 1)
    assert "Traceback" not in process.stderr_text()
