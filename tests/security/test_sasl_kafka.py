"""SASL on the Kafka listener against the real broker process and real clients:
PLAIN (JAAS users) and SCRAM-SHA-256/512 (credentials created with confluent-kafka's
AdminClient.alter_user_scram_credentials), SASL_PLAINTEXT and SASL_SSL, wrong
passwords, re-authentication, a flood of bad logins."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time

import pytest

from tests.tls_certs import CertificateAuthority

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    return {"ca_pem": ca.write_pem(d / "ca.pem"), "server_pem": ca.issue("localhost").write_pem(d / "server.pem")}


def sasl_broker(broker, pki, *extra):
    """Kafka: PLAINTEXT, SASL_PLAINTEXT, SASL_SSL; native: PLAINTEXT, SASL_PLAINTEXT."""
    b = broker("--set", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
               "--set", "native.listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
               "--set", "ssl.keystore.type=PEM", "--set", f"ssl.keystore.location={pki['server_pem']}",
               "--set", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
               "--set", f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
               *extra, kafka_port=None)
    b.addresses = b.read_listeners(5)
    return b


def conf(b, name, **extra):
    host, port = b.addresses["kafka", name]
    return {"bootstrap.servers": f"{host}:{port}", "socket.timeout.ms": 5000, "message.timeout.ms": 5000,
            **extra}


def sasl(mechanism, user, password, protocol="SASL_PLAINTEXT", **extra):
    return {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password, **extra}


def authentication_error(config) -> str:
    """The error a client with `config` reports (error_cb), waiting for one."""
    errors = []
    producer = ck.Producer({**config, "error_cb": lambda e: errors.append(e)})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    assert errors[0].code() == ck.KafkaError._AUTHENTICATION, errors[0]
    return errors[0].str()


def produce_and_consume(config, topic, n=5):
    producer = ck.Producer(config)
    for i in range(n):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(10) == 0
    consumer = ck.Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == [b"v%d" % i for i in range(n)]


def test_confluent_plain_scram_and_credentials(broker, pki):
    b = sasl_broker(broker, pki)
    plain = conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "admin", "admin-secret"))
    admin = AdminClient(plain)
    admin.create_topics([NewTopic("t1", 1)])["t1"].result(10)
    produce_and_consume(plain, "t1")

    # SCRAM credentials through AlterUserScramCredentials, then log in with them.
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-pw"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-pw"),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4000), b"x"),
    ])
    futures["bob"].result(10)
    with pytest.raises(ck.KafkaException, match="(?i)iterations"):
        futures["carol"].result(10)
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(10)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]
    with pytest.raises(ck.KafkaException, match="RESOURCE_NOT_FOUND|does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(10)
    # Without names (confluent-kafka sends an empty list): every user with a credential, as Kafka.
    everyone = admin.describe_user_scram_credentials().result(10)
    assert "bob" in everyone and "carol" not in everyone
    with open(f"{b.data_dir}/scram-credentials.json") as f:
        stored = f.read()
    assert "bob-pw" not in stored and "stored_key" in stored

    produce_and_consume(conf(b, "SASL_PLAINTEXT", **sasl("SCRAM-SHA-512", "bob", "bob-pw")), "t2")
    produce_and_consume(conf(b, "SASL_SSL", **sasl("SCRAM-SHA-256", "bob", "bob-pw", "SASL_SSL",
                                                   **{"ssl.ca.location": str(pki["ca_pem"])})), "t3")
    produce_and_consume(conf(b, "SASL_SSL", **sasl("PLAIN", "alice", "alice-secret", "SASL_SSL",
                                                   **{"ssl.ca.location": str(pki["ca_pem"])})), "t4")

    # Wrong password: a clear authentication error; the broker keeps serving others.
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in authentication_error(
        conf(b, "SASL_PLAINTEXT", **sasl("SCRAM-SHA-512", "bob", "nope")))
    assert "Invalid username or password" in authentication_error(
        conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "alice", "nope")))
    assert "t1" in admin.list_topics(timeout=10).topics

    # Deleting the credential: the login fails afterwards.
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)])[
        "bob"].result(10)
    with pytest.raises(ck.KafkaException, match="RESOURCE_NOT_FOUND|does not exist"):
        admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)])[
            "bob"].result(10)
    authentication_error(conf(b, "SASL_PLAINTEXT", **sasl("SCRAM-SHA-512", "bob", "bob-pw")))

    # The credentials survive a restart.
    b.restart()
    b.addresses = b.read_listeners(5)
    again = AdminClient(conf(b, "SASL_PLAINTEXT", **sasl("SCRAM-SHA-256", "bob", "bob-pw")))
    assert "t1" in again.list_topics(timeout=10).topics


def test_unauthenticated_requests_close_and_flood(broker, pki):
    b = sasl_broker(broker, pki, "--set", "connection.failed.authentication.delay.ms=20")
    host, port = b.addresses["kafka", "SASL_PLAINTEXT"]
    # A Metadata request (api 3, v1) before authenticating: the connection is closed.
    with socket.create_connection((host, port), timeout=5) as s:
        body = b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x01c\xff\xff\xff\xff"
        s.sendall(len(body).to_bytes(4, "big") + body)
        assert s.recv(100) == b""
    # A flood of 200 bad logins at once: each is answered SASL_AUTHENTICATION_FAILED and
    # closed, and the broker keeps serving.
    codes = asyncio.run(flood(host, port, 200))
    assert codes == [58] * 200
    authentication_error(conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "alice", "bad")))
    good = AdminClient(conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "alice", "alice-secret")))
    assert good.list_topics(timeout=10).brokers
    assert b.running
    failed = [e for e in b.log_events() if e.get("event") == "sasl_authentication_failed"]
    assert failed and failed[0]["peer"][0] == "127.0.0.1"
    assert len(failed) <= 40  # rate-limited


def frame(api_key: int, version: int, body: bytes) -> bytes:
    data = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + (7).to_bytes(4, "big") + b"\x00\x01c" + body
    return len(data).to_bytes(4, "big") + data


async def bad_login(host: str, port: int) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(frame(17, 1, b"\x00\x05PLAIN"))
        size = int.from_bytes(await reader.readexactly(4), "big")
        await reader.readexactly(size)
        token = b"\x00alice\x00wrong"
        writer.write(frame(36, 0, len(token).to_bytes(4, "big") + token))
        size = int.from_bytes(await reader.readexactly(4), "big")
        answer = await reader.readexactly(size)
        assert await reader.read() == b""  # closed after the answer
        return int.from_bytes(answer[4:6], "big", signed=True)
    finally:
        writer.close()


async def flood(host: str, port: int, n: int) -> list[int]:
    return list(await asyncio.gather(*(bad_login(host, port) for _ in range(n))))


def test_kafka_python_aiokafka_and_kcat(broker, pki):
    b = sasl_broker(broker, pki)
    admin = AdminClient(conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "admin", "admin-secret")))
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-pw")])["bob"].result(10)
    admin.create_topics([NewTopic("k1", 1)])["k1"].result(10)
    host, port = b.addresses["kafka", "SASL_SSL"]
    ssl_address = f"{host}:{port}"

    import kafka
    for mechanism, user, password in [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "bob", "bob-pw")]:
        producer = kafka.KafkaProducer(bootstrap_servers=ssl_address, security_protocol="SASL_SSL",
                                       sasl_mechanism=mechanism, sasl_plain_username=user,
                                       sasl_plain_password=password, ssl_cafile=str(pki["ca_pem"]))
        producer.send("k1", b"kp-" + mechanism.encode()).get(timeout=10)
        producer.close()
    with pytest.raises(kafka.errors.KafkaError):
        refused = kafka.KafkaProducer(bootstrap_servers=ssl_address, security_protocol="SASL_SSL",
                                      sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="bad",
                                      ssl_cafile=str(pki["ca_pem"]), max_block_ms=3000)
        try:
            refused.send("k1", b"x").get(timeout=5)
        finally:
            refused.close(timeout=1)

    import aiokafka
    from aiokafka.helpers import create_ssl_context

    async def aio(mechanism, user, password):
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=ssl_address, security_protocol="SASL_SSL",
                                             sasl_mechanism=mechanism, sasl_plain_username=user,
                                             sasl_plain_password=password,
                                             ssl_context=create_ssl_context(cafile=str(pki["ca_pem"])))
        await producer.start()
        try:
            await producer.send_and_wait("k1", b"aio-" + mechanism.encode())
        finally:
            await producer.stop()

    asyncio.run(aio("PLAIN", "alice", "alice-secret"))
    asyncio.run(aio("SCRAM-SHA-512", "bob", "bob-pw"))
    with pytest.raises(Exception, match="(?i)authentication|unable to bootstrap"):
        asyncio.run(aio("SCRAM-SHA-512", "bob", "bad"))

    consumer = ck.Consumer(conf(b, "SASL_PLAINTEXT", **sasl("SCRAM-SHA-512", "bob", "bob-pw"),
                                **{"group.id": "k", "auto.offset.reset": "earliest"}))
    consumer.subscribe(["k1"])
    got = set()
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.add(m.value())
    consumer.close()
    assert got == {b"kp-PLAIN", b"kp-SCRAM-SHA-512", b"aio-PLAIN", b"aio-SCRAM-SHA-512"}

    kcat = shutil.which("kcat")
    if kcat is None:
        return
    host, port = b.addresses["kafka", "SASL_PLAINTEXT"]
    # PLAIN only: librdkafka before 2.6.1 (Debian's kcat bundles 2.0.2) repeats the client
    # nonce in its SCRAM client-final message, which the broker refuses as Kafka 4 does
    # (RFC 5802's nonce check; librdkafka#4895).
    for mechanism, user, password in [("PLAIN", "alice", "alice-secret")]:
        args = [kcat, "-b", f"{host}:{port}", "-X", "security.protocol=SASL_PLAINTEXT",
                "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
        produced = subprocess.run([*args, "-P", "-t", "k2"], input=b"kcat-" + mechanism.encode() + b"\n",
                                  capture_output=True, timeout=30)
        assert produced.returncode == 0, produced.stderr
        listed = subprocess.run([*args, "-L"], capture_output=True, timeout=30)
        assert b"k2" in listed.stdout, listed.stderr
    denied = subprocess.run([kcat, "-b", f"{host}:{port}", "-X", "security.protocol=SASL_PLAINTEXT",
                             "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=bad",
                             "-L", "-m", "3"], capture_output=True, timeout=30)
    assert denied.returncode != 0 and b"Authentication failed" in denied.stderr


def test_reauthentication_with_librdkafka(broker, pki):
    b = sasl_broker(broker, pki, "--set", "connections.max.reauth.ms=1500")
    config = conf(b, "SASL_PLAINTEXT", **sasl("SCRAM-SHA-512", "bob", "x"))
    admin = AdminClient(conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "admin", "admin-secret")))
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"x")])[
        "bob"].result(10)
    producer = ck.Producer(config)
    delivered = []
    deadline = time.monotonic() + 4.5  # three session lifetimes
    i = 0
    while time.monotonic() < deadline:
        producer.produce("r1", b"%d" % i, on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.1)
        i += 1
    assert producer.flush(10) == 0
    assert len(delivered) == i and not any(delivered)
    # librdkafka re-authenticated on its connections before each lifetime ended (KIP-368):
    # the broker never had to refuse an expired session.
    assert not [e for e in b.log_events() if "expired" in str(e.get("error", ""))]


def test_sasl_principals_meet_the_authorizer(broker, pki):
    """The SASL user is the principal the ACLs see: super.users may manage SCRAM
    credentials (ALTER/DESCRIBE on the cluster), another user may not."""
    b = sasl_broker(broker, pki,
                    "--set", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "--set", "super.users=User:admin")
    admin = AdminClient(conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "admin", "admin-secret")))
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-pw")])["bob"].result(10)
    alice = AdminClient(conf(b, "SASL_PLAINTEXT", **sasl("PLAIN", "alice", "alice-secret")))
    with pytest.raises(ck.KafkaException, match="(?i)CLUSTER_AUTHORIZATION_FAILED|authoriz"):
        alice.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "eve", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"x")])["eve"].result(10)
    with pytest.raises(ck.KafkaException, match="(?i)CLUSTER_AUTHORIZATION_FAILED|authoriz"):
        alice.describe_user_scram_credentials(["bob"])["bob"].result(10)
