"""`ssl.principal.mapping.rules` against the real broker process: an mTLS client
certificate's subject mapped to a principal by Kafka's rules, ACLs on the mapped
principal deciding a confluent-kafka produce, and a certificate no rule maps
failing authentication while the broker serves everyone else."""

from __future__ import annotations

import pytest

from tests.tls_certs import CertificateAuthority

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
RULES = "RULE:^CN=(.*?),OU=(.*?)$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    return {"ca_pem": ca.write_pem(d / "ca.pem"), "server_pem": ca.issue("localhost").write_pem(d / "server.pem"),
            "alice": ca.issue("Alice", server=False, ou="Payments").write_split(d, "alice"),
            "bob": ca.issue("Bob", server=False, ou="Payments").write_split(d, "bob"),
            "dave": ca.issue("dave", server=False, ou=None).write_split(d, "dave")}


def conf(b, pki, listener, who):
    host, port = b.addresses["kafka", listener]
    cert, key = pki[who]
    return {"bootstrap.servers": f"{host}:{port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca_pem"]), "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key), "socket.timeout.ms": 5000, "message.timeout.ms": 5000}


def produce_error(config, topic="pay"):
    """None when the record is delivered, else the delivery error."""
    producer = ck.Producer(config)
    errors = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors, "no delivery report"
    return errors[0]


def test_mapped_principals_decide_a_produce(broker, pki):
    b = broker("--set", "listeners=PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,STRICT://127.0.0.1:0",
               "--set", "native.listeners=PLAINTEXT://127.0.0.1:0",
               "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,MTLS:SSL,STRICT:SSL",
               "--set", "ssl.keystore.type=PEM", "--set", f"ssl.keystore.location={pki['server_pem']}",
               "--set", "ssl.truststore.type=PEM", "--set", f"ssl.truststore.location={pki['ca_pem']}",
               "--set", "ssl.client.auth=required",
               "--set", f"ssl.principal.mapping.rules={RULES}",
               # this listener's rules have no DEFAULT: a subject they do not match has no principal
               "--set", "listener.name.strict.ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=(.*?)$/$1/L",
               "--set", f"authorizer.class.name={AUTHORIZER}", "--set", "super.users=User:ANONYMOUS",
               kafka_port=None)
    b.addresses = b.read_listeners(4)
    host, port = b.addresses["kafka", "PLAINTEXT"]
    admin = AdminClient({"bootstrap.servers": f"{host}:{port}"})
    admin.create_topics([NewTopic("pay", 1)])["pay"].result(10)
    every, mapped_bob = "User:*", "User:bob"  # bob: CN=Bob,OU=Payments mapped and lower-cased
    bindings = [AclBinding(ResourceType.TOPIC, "pay", ResourcePatternType.LITERAL, principal, "*",
                           AclOperation.WRITE, permission)
                for principal, permission in ((every, AclPermissionType.ALLOW), (mapped_bob, AclPermissionType.DENY))]
    for future in admin.create_acls(bindings).values():
        future.result(10)

    assert produce_error(conf(b, pki, "MTLS", "alice")) is None  # User:alice, allowed by User:*
    denied = produce_error(conf(b, pki, "MTLS", "bob"))
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(conf(b, pki, "MTLS", "dave")) is None  # DEFAULT: User:CN=dave

    # The mapped principals are the ones the broker sees (DescribeAcls by principal is exact).
    described = admin.describe_acls(ck.admin.AclBindingFilter(
        ResourceType.TOPIC, "pay", ResourcePatternType.LITERAL, mapped_bob, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(10)
    assert [a.principal for a in described] == [mapped_bob]

    # No rule maps dave's subject on STRICT: the connection fails authentication (Kafka closes
    # it), the broker logs it with the client's address and keeps serving the others.
    failed = produce_error(conf(b, pki, "STRICT", "dave"))
    assert failed is not None and failed.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT)
    assert produce_error(conf(b, pki, "STRICT", "alice")) is None
    events = [e for e in b.log_events() if e.get("event") == "authentication_failed"]
    assert events and "No rules apply to CN=dave" in events[0]["reason"] and events[0]["peer"]
