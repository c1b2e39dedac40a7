"""`strata acls add|remove --producer / --consumer` (kafka-acls' role shortcuts): the
ACLs they create, their argument rules, and a real SASL client doing what the roles
allow, against the real broker process."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')


def strata(*args):
    return subprocess.run([sys.executable, "-m", "broker", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def entries(output: str) -> set[tuple[str, str]]:
    """{(resource pattern, ACL line)} from kafka-acls-style output."""
    found, resource = set(), None
    for line in output.splitlines():
        if line.endswith(": ") and "ResourcePattern(" in line:
            resource = line[line.index("ResourcePattern("):line.rindex("`")]
        elif line.startswith(" \t("):
            found.add((resource, line.strip()))
    return found


def acl(principal, operation):
    return f"(principal={principal}, host=*, operation={operation}, permissionType=ALLOW)"


def pattern(kind, name):
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType=LITERAL)"


@pytest.fixture
def role_broker(broker):
    b = broker("--set", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
               "--set", "native.listeners=PLAINTEXT://127.0.0.1:0",
               "--set", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
               "--set", f"authorizer.class.name={AUTHORIZER}", "--set", "super.users=User:ANONYMOUS",
               kafka_port=None)
    b.addresses = b.read_listeners(3)
    return b


def server(b):
    host, port = b.addresses["native", "PLAINTEXT"]
    return ("--bootstrap-server", f"{host}:{port}")


def alice_conf(b, **extra):
    host, port = b.addresses["kafka", "SASL_PLAINTEXT"]
    return {"bootstrap.servers": f"{host}:{port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-secret", "socket.timeout.ms": 5000,
            "message.timeout.ms": 5000, **extra}


def test_producer_and_consumer_roles(role_broker):
    b = role_broker
    host, port = b.addresses["kafka", "PLAINTEXT"]
    admin = AdminClient({"bootstrap.servers": f"{host}:{port}"})  # kept: its futures fail once it is gone
    admin.create_topics([NewTopic("orders", 1)])["orders"].result(10)
    alice = "User:alice"

    added = strata("acls", "add", "--allow-principal", alice, "--producer", "--idempotent", "--topic", "orders",
                   "--transactional-id", "tx-1", *server(b))
    assert added.returncode == 0, added.stderr
    assert entries(added.stdout) == {
        (pattern("TOPIC", "orders"), acl(alice, op)) for op in ("WRITE", "DESCRIBE", "CREATE")} | {
        (pattern("TRANSACTIONAL_ID", "tx-1"), acl(alice, op)) for op in ("WRITE", "DESCRIBE")} | {
        (pattern("CLUSTER", "kafka-cluster"), acl(alice, "IDEMPOTENT_WRITE"))}
    added = strata("acls", "add", "--allow-principal", alice, "--consumer", "--topic", "orders", "--group", "g1",
                   *server(b))
    assert added.returncode == 0, added.stderr
    assert entries(added.stdout) == {(pattern("TOPIC", "orders"), acl(alice, op)) for op in ("READ", "DESCRIBE")} | {
        (pattern("GROUP", "g1"), acl(alice, "READ"))}
    assert len(entries(strata("acls", "list", *server(b)).stdout)) == 8  # DESCRIBE on the topic once

    # What the roles allow, for a real client authenticated as alice.
    producer = ck.Producer(alice_conf(b, **{"transactional.id": "tx-1"}))
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("orders", b"placed")
    producer.commit_transaction(10)
    consumer = ck.Consumer(alice_conf(b, **{"group.id": "g1", "auto.offset.reset": "earliest",
                                            "isolation.level": "read_committed"}))
    consumer.subscribe(["orders"])
    got = None
    for _ in range(40):
        got = consumer.poll(0.5)
        if got is not None:
            break
    assert got is not None and got.error() is None and got.value() == b"placed"
    consumer.commit(got, asynchronous=False)
    consumer.close()
    with pytest.raises(ck.KafkaException) as denied:  # another transactional id: not in the role
        ck.Producer(alice_conf(b, **{"transactional.id": "tx-2"})).init_transactions(10)
    assert denied.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    # remove --producer takes away exactly the producer's ACLs (DESCRIBE on the topic included).
    removed = strata("acls", "remove", "--allow-principal", alice, "--producer", "--idempotent", "--topic", "orders",
                     "--transactional-id", "tx-1", "--force", *server(b))
    assert removed.returncode == 0, removed.stderr
    assert len(entries(removed.stdout)) == 6
    assert entries(strata("acls", "list", *server(b)).stdout) == {
        (pattern("TOPIC", "orders"), acl(alice, "READ")), (pattern("GROUP", "g1"), acl(alice, "READ"))}


@pytest.mark.parametrize("args, message", [
    (("--producer", "--operation", "Read", "--topic", "t"), "--operation does not go with it"),
    (("--consumer", "--deny-principal", "User:bob", "--topic", "t", "--group", "g"), "--deny-principal"),
    (("--producer", "--group", "g"), "with --producer you must specify a --topic"),
    (("--consumer", "--topic", "t"), "with --consumer you must specify a --topic and a --group"),
    (("--consumer", "--topic", "t", "--group", "g", "--cluster"), "no --cluster or --transactional-id"),
    (("--idempotent", "--operation", "Write", "--topic", "t"), "only available if --producer is set"),
])
def test_role_argument_rules(args, message):
    """kafka-acls' rules; checked before any connection is made."""
    result = strata("acls", "add", "--allow-principal", "User:alice", *args, "--bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
