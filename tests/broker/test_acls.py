"""ACLs against the real broker process and real clients, on both protocols: principals
are mTLS client certificates (User:CN=...), the PLAINTEXT listeners' User:ANONYMOUS,
and User:CN=admin a super user. confluent-kafka's AdminClient manages the ACLs."""

from __future__ import annotations

import time

import pytest

from client import Admin, Consumer, Producer
from client.errors import StrataClientError
from protocol import AclBinding as AclBinding_
from protocol import AclBindingFilter as AclBindingFilter_
from tests.tls_certs import CertificateAuthority

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    return {"ca_pem": ca.write_pem(d / "ca.pem"), "server_pem": ca.issue("localhost").write_pem(d / "server.pem"),
            **{cn: ca.issue(cn, server=False).write_split(d, cn) for cn in ("admin", "alice", "bob")}}


def acl_broker(broker, pki, *extra, data_dir=None):
    b = broker("--set", "listeners=PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0",
               "--set", "native.listeners=PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0",
               "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,MTLS:SSL",
               "--set", "ssl.keystore.type=PEM", "--set", f"ssl.keystore.location={pki['server_pem']}",
               "--set", "ssl.truststore.type=PEM", "--set", f"ssl.truststore.location={pki['ca_pem']}",
               "--set", "listener.name.mtls.ssl.client.auth=required",
               "--set", f"authorizer.class.name={AUTHORIZER}", "--set", "super.users=User:CN=admin,OU=tests",
               *extra, kafka_port=None, data_dir=data_dir)
    b.addresses = b.read_listeners(4)
    return b


def address(b, protocol, name):
    host, port = b.addresses[protocol, name]
    return f"{host}:{port}"


def kconf(b, who=None, **extra):
    """confluent-kafka settings for `who`'s certificate on MTLS, or anonymous on PLAINTEXT."""
    conf = {"socket.timeout.ms": 5000, "message.timeout.ms": 5000, **extra}
    if who is None:
        return {"bootstrap.servers": address(b, "kafka", "PLAINTEXT"), **conf}
    cert, key = b.pki[who]
    return {"bootstrap.servers": address(b, "kafka", "MTLS"), "security.protocol": "SSL",
            "ssl.ca.location": str(b.pki["ca_pem"]), "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key), **conf}


def native(b, who=None):
    if who is None:
        return address(b, "native", "PLAINTEXT"), {}
    cert, key = b.pki[who]
    return address(b, "native", "MTLS"), {"security": {
        "security.protocol": "SSL", "ssl.ca.location": str(b.pki["ca_pem"]),
        "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}}


def allow(principal, rtype, name, op, pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW):
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def create_acls(admin, bindings):
    for future in admin.create_acls(bindings).values():
        future.result(10)


def produce_error(conf, topic) -> KafkaError | None:
    producer = confluent_kafka.Producer(conf)
    errors = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    return errors[0] if errors else None


def consume(conf, topic, group, count, timeout=20.0):
    consumer = confluent_kafka.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, error = [], None
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline and error is None:
        m = consumer.poll(0.5)
        if m is None:
            continue
        if m.error():
            error = m.error()
        else:
            got.append(m.value())
    consumer.close()
    return got, error


def test_acl_matrix_kafka_and_native(broker, pki, tmp_path):
    b = acl_broker(broker, pki)
    b.pki = pki
    admin = AdminClient(kconf(b, "admin"))
    for name in ("alice-orders", "secret"):
        admin.create_topics([NewTopic(name, 1)])[name].result(10)
    alice, bob = "User:CN=alice,OU=tests", "User:CN=bob,OU=tests"
    T, G = ResourceType.TOPIC, ResourceType.GROUP
    create_acls(admin, [
        allow(alice, T, "alice-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        allow(alice, T, "alice-", AclOperation.READ, ResourcePatternType.PREFIXED),
        allow(alice, G, "g-alice", AclOperation.READ),
        allow(bob, T, "alice-orders", AclOperation.ALL),
        allow(bob, T, "alice-orders", AclOperation.WRITE, permission=AclPermissionType.DENY),
    ])
    # Kafka: DescribeAcls answers what was created; only the admin (cluster ALTER) may change ACLs.
    described = admin.describe_acls(AclBindingFilter(T, None, ResourcePatternType.ANY, None, None,
                                                     AclOperation.ANY, AclPermissionType.ANY)).result(10)
    assert len(described) == 4  # the group binding is not a TOPIC one
    alice_admin = AdminClient(kconf(b, "alice"))  # kept: its futures fail when it is destroyed
    # Refused with CLUSTER_AUTHORIZATION_FAILED; librdkafka drops DescribeAcls' error code and
    # reports an empty listing (rd_kafka_DescribeAclsResponse_parse).
    assert alice_admin.describe_acls(AclBindingFilter(
        T, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)).result(10) == []
    with pytest.raises(KafkaException) as denied:
        create_acls(alice_admin, [allow(alice, T, "secret", AclOperation.ALL)])
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # Produce: WRITE (prefixed); DENY wins for bob; anonymous is refused.
    assert produce_error(kconf(b, "alice"), "alice-orders") is None
    assert produce_error(kconf(b, "alice"), "secret").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(kconf(b, "bob"), "alice-orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(kconf(b), "alice-orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Metadata: topics the principal may not DESCRIBE are hidden; named ones are refused.
    assert set(AdminClient(kconf(b, "alice")).list_topics(timeout=10).topics) == {"alice-orders"}
    assert AdminClient(kconf(b)).list_topics(timeout=10).topics == {}
    named = AdminClient(kconf(b, "alice")).list_topics("secret", timeout=10).topics["secret"]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(admin.list_topics(timeout=10).topics) >= {"alice-orders", "secret"}  # super user
    # Consume: READ on the topic and the group.
    got, error = consume(kconf(b, "alice"), "alice-orders", "g-alice", 1)
    assert got == [b"v"] and error is None
    got, error = consume(kconf(b, "alice"), "alice-orders", "g-other", 1, timeout=10)
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # CreateTopics needs CREATE; DeleteTopics DELETE.
    with pytest.raises(KafkaException) as denied:
        alice_admin.create_topics([NewTopic("alice-new", 1)])["alice-new"].result(10)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as denied:
        alice_admin.delete_topics(["alice-orders"])["alice-orders"].result(10)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # DescribeConfigs needs DESCRIBE_CONFIGS; KIP-430 operations come from the ACLs.
    with pytest.raises(KafkaException) as denied:
        list(alice_admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "secret")]).values())[0].result(10)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert AclOperation.ALTER in admin.describe_cluster(include_authorized_operations=True).result(10) \
        .authorized_operations
    assert not alice_admin.describe_cluster(include_authorized_operations=True).result(10).authorized_operations

    # The native protocol makes the same checks.
    bootstrap, options = native(b, "alice")
    with Producer(bootstrap, linger_ms=0, **options) as producer:
        producer.send_and_wait("alice-orders", b"native")
    with Admin(bootstrap, **options) as native_admin:
        assert native_admin.list_topics() == ["alice-orders"]
        with pytest.raises(StrataClientError) as refused:
            native_admin.create_topic("alice-native", 1)
        assert refused.value.code == 29
        with pytest.raises(StrataClientError) as refused:
            native_admin.commit("g-other", "alice-orders", 0, 1)
        assert refused.value.code == 30
        native_admin.commit("g-alice", "alice-orders", 0, 1)
    with Consumer(bootstrap, auto_offset_reset="earliest", **options) as consumer:
        consumer.assign("alice-orders", [0])
        assert [r.value for r in consumer.poll(5000)] == [b"v", b"native"]
    anonymous, _ = native(b)
    with Admin(anonymous) as native_admin:
        assert native_admin.list_topics() == []
        with pytest.raises(StrataClientError) as refused:
            native_admin.delete_records("alice-orders", 0)
        assert refused.value.code == 29
    with Producer(anonymous, linger_ms=0) as producer, pytest.raises(StrataClientError) as refused:
        producer.send_and_wait("alice-orders", b"x")
    assert refused.value.code == 29

    # The native ACL requests (project extensions): the super user manages, alice may not.
    admin_bootstrap, admin_options = native(b, "admin")
    with Admin(admin_bootstrap, **admin_options) as native_admin:
        binding = AclBinding_(3, "g-native", 3, alice, "*", 3, 3)  # GROUP g-native LITERAL, READ ALLOW
        native_admin.create_acls([binding])
        assert binding in native_admin.describe_acls(AclBindingFilter_(resource_type=3))
        assert native_admin.delete_acls([AclBindingFilter_(resource_type=3, name="g-native")]) == [[binding]]
        with pytest.raises(StrataClientError) as refused:
            native_admin.create_acls([AclBinding_(2, "t", 1, alice, "*", 3, 3)])  # pattern ANY
        assert refused.value.code == 42
    with Admin(bootstrap, **options) as native_admin, pytest.raises(StrataClientError) as refused:
        native_admin.describe_acls()
    assert refused.value.code == 31

    # DeleteAcls applies at once: alice can no longer write.
    deleted = admin.delete_acls([AclBindingFilter(T, "alice-", ResourcePatternType.PREFIXED, alice, None,
                                                  AclOperation.WRITE, AclPermissionType.ALLOW)])
    assert len(list(deleted.values())[0].result(10)) == 1
    assert produce_error(kconf(b, "alice"), "alice-orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # A wildcard: everyone may DESCRIBE every topic.
    create_acls(admin, [allow("User:*", T, "*", AclOperation.DESCRIBE)])
    assert set(AdminClient(kconf(b)).list_topics(timeout=10).topics) >= {"alice-orders", "secret"}

    # ACLs persist across a restart.
    b.restart()
    b.addresses = b.read_listeners(4)
    admin = AdminClient(kconf(b, "admin"))
    assert len(admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(10)) == 5
    assert produce_error(kconf(b, "bob"), "alice-orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_allow_everyone_if_no_acl_found(broker, pki):
    b = acl_broker(broker, pki, "--set", "allow.everyone.if.no.acl.found=true")
    b.pki = pki
    admin = AdminClient(kconf(b, "admin"))
    for name in ("open", "guarded"):
        admin.create_topics([NewTopic(name, 1)])[name].result(10)
    create_acls(admin, [allow("User:CN=alice,OU=tests", ResourceType.TOPIC, "guarded", AclOperation.WRITE)])
    assert produce_error(kconf(b), "open") is None
    assert produce_error(kconf(b), "guarded").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(kconf(b, "alice"), "guarded") is None


def strata(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "broker", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def test_strata_acls_cli(broker):
    b = broker("--set", f"authorizer.class.name={AUTHORIZER}", "--set", "super.users=User:ANONYMOUS")
    server = ("--bootstrap-server", f"{b.host}:{b.port}")
    added = strata("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                   "--operation", "DescribeConfigs", "--topic", "logs-", "--resource-pattern-type", "prefixed",
                   *server)
    assert added.returncode == 0, added.stderr
    assert added.stdout.splitlines()[:3] == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=logs-, patternType=PREFIXED)`: ",
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        " \t(principal=User:alice, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)"]
    assert strata("acls", "add", "--deny-principal", "User:bob", "--operation", "All", "--group", "g", "--cluster",
                  *server).returncode == 0
    listed = strata("acls", "list", *server).stdout
    assert listed.count("Current ACLs for resource") == 3 and "permissionType=DENY" in listed
    only = strata("acls", "list", "--topic", "logs-app", "--resource-pattern-type", "match", *server).stdout
    assert "name=logs-" in only and "GROUP" not in only
    removed = strata("acls", "remove", "--deny-principal", "User:bob", "--operation", "All", "--cluster",
                     "--force", *server)
    assert removed.returncode == 0 and "CLUSTER" in removed.stdout, removed.stderr
    assert strata("acls", "list", *server).stdout.count("Current ACLs for resource") == 2
    bad = strata("acls", "add", "--allow-principal", "User:alice", "--operation", "Fly", "--topic", "t", *server)
    assert bad.returncode == 2 and "unknown operation 'Fly'" in bad.stderr
    off = broker()  # no authorizer: the broker says so
    result = strata("acls", "list", "--bootstrap-server", f"{off.host}:{off.port}")
    assert result.returncode == 1 and "SECURITY_DISABLED" in result.stderr and "Traceback" not in result.stderr
