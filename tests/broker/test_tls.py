"""Listeners and TLS against the real broker process and real clients: several
listeners of each protocol, per-listener advertised addresses, PEM and PKCS12
keystores, mTLS (ssl.client.auth=required), wrong-protocol clients, certificate reload.
Certificates are made in the tests (tests/tls_certs.py)."""

from __future__ import annotations

import socket
import ssl
import time

import pytest

from broker.config.broker_config import BrokerConfig
from client import Admin, Consumer, Producer
from client.errors import BrokerUnreachable
from kafka_format.errors import InvalidConfigError
from tests.tls_certs import CertificateAuthority

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# ---- configuration ----------------------------------------------------------------------

def load(tmp_path, *sets, environ=None):
    return BrokerConfig.load(data_dir=str(tmp_path), environ=environ or {}, overrides=list(sets))


def test_listener_configuration(tmp_path):
    config = load(tmp_path)
    assert [(s.protocol, s.name, s.host, s.port, s.security_protocol) for s in config.listeners] == [
        ("kafka", "PLAINTEXT", "0.0.0.0", 9092, "PLAINTEXT"), ("native", "PLAINTEXT", "0.0.0.0", 9000, "PLAINTEXT")]
    config = load(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0,ssl://:9093,INTERNAL://[::1]:9094",
                  "native.listeners=LOCAL://127.0.0.1:0,SSL://:9001",
                  "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL,LOCAL:PLAINTEXT",
                  "advertised.listeners=SSL://kafka.example:443",
                  "listener.name.INTERNAL.ssl.client.auth=required")
    specs = {(s.protocol, s.name): s for s in config.listeners}
    assert specs["kafka", "SSL"].tls and specs["kafka", "SSL"].advertised == ("kafka.example", 443)
    assert specs["kafka", "INTERNAL"].host == "::1" and specs["kafka", "INTERNAL"].advertised is None
    assert not specs["native", "LOCAL"].tls and specs["native", "SSL"].port == 9001
    # Kafka lowercases the listener name in listener.name.<name>.* keys.
    assert config["listener.name.internal.ssl.client.auth"] == "required"
    env = load(tmp_path, environ={"STRATA_LISTENER_NAME_SASL_SSL_SSL_KEYSTORE_TYPE": "PEM"})
    assert env["listener.name.sasl_ssl.ssl.keystore.type"] == "PEM"
    for bad, key in [("listeners=OUTSIDE://:1", "listener.security.protocol.map"),
                     ("listeners=PLAINTEXT://:1,PLAINTEXT://:2", "listeners"),
                     ("advertised.listeners=SSL://h:1", "advertised.listeners"),
                     ("listener.security.protocol.map=A:TLS", "listener.security.protocol.map"),
                     ("ssl.client.auth=maybe", "ssl.client.auth"),
                     ("listener.name.ssl.ssl.client.auth=maybe", "ssl.client.auth")]:
        with pytest.raises(InvalidConfigError, match=key):
            load(tmp_path, bad)


# ---- the real broker ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost")
    client = ca.issue("alice", server=False)
    stranger = CertificateAuthority("Someone else").issue("mallory", server=False)
    return {
        "dir": d, "ca": ca, "ca_pem": ca.write_pem(d / "ca.pem"),
        "server_pem": server.write_pem(d / "server.pem", b"keypass"),
        "server_p12": server.write_pkcs12(d / "server.p12", b"storepass"),
        "client": client.write_split(d, "alice"), "stranger": stranger.write_split(d, "mallory"),
    }


def tls_broker(broker, pki, *extra):
    """Kafka: PLAINTEXT, SSL (PEM keystore), MTLS (PKCS12, client auth required);
    native: PLAINTEXT and SSL."""
    b = broker("--set", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
               "--set", "native.listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
               "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
               "--set", "ssl.keystore.type=PEM", "--set", f"ssl.keystore.location={pki['server_pem']}",
               "--set", "ssl.key.password=keypass",
               "--set", "listener.name.mtls.ssl.keystore.type=PKCS12",
               "--set", f"listener.name.mtls.ssl.keystore.location={pki['server_p12']}",
               "--set", "listener.name.mtls.ssl.keystore.password=storepass",
               "--set", "listener.name.mtls.ssl.truststore.type=PEM",
               "--set", f"listener.name.mtls.ssl.truststore.location={pki['ca_pem']}",
               "--set", "listener.name.mtls.ssl.client.auth=required", *extra, kafka_port=None)
    b.addresses = b.read_listeners(5)
    return b


def bootstrap(b, protocol, name):
    host, port = b.addresses[protocol, name]
    return f"{host}:{port}"


def confluent(b, name, **extra):
    conf = {"bootstrap.servers": bootstrap(b, "kafka", name), "socket.timeout.ms": 5000,
            "message.timeout.ms": 5000, **extra}
    return conf


def test_listeners_tls_and_real_clients(broker, pki):
    pytest.importorskip("confluent_kafka")
    import confluent_kafka.admin
    b = tls_broker(broker, pki)
    ssl_conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki["ca_pem"])}
    # Metadata on each listener advertises that listener's address (as Kafka).
    for name, extra in [("PLAINTEXT", {}), ("SSL", ssl_conf)]:
        admin = confluent_kafka.admin.AdminClient(confluent(b, name, **extra))
        brokers = admin.list_topics(timeout=10).brokers
        assert [(m.host, m.port) for m in brokers.values()] == [b.addresses["kafka", name]]
        admin.create_topics([confluent_kafka.admin.NewTopic(f"t-{name.lower()}", 1)])[f"t-{name.lower()}"].result(10)

    producer = confluent_kafka.Producer(confluent(b, "SSL", **ssl_conf))
    for i in range(20):
        producer.produce("t-ssl", b"v%d" % i)
    assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer(confluent(b, "SSL", **ssl_conf, **{"group.id": "g",
                                                                          "auto.offset.reset": "earliest"}))
    consumer.subscribe(["t-ssl"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == [b"v%d" % i for i in range(20)]

    # mTLS: without a client certificate the handshake fails; with one it works.
    mtls = {**ssl_conf}
    no_cert = confluent_kafka.admin.AdminClient(confluent(b, "MTLS", **mtls))
    with pytest.raises(confluent_kafka.KafkaException):
        no_cert.list_topics(timeout=3)
    cert, key = pki["client"]
    with_cert = confluent_kafka.admin.AdminClient(confluent(b, "MTLS", **mtls, **{
        "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}))
    assert "t-ssl" in with_cert.list_topics(timeout=10).topics
    stranger_cert, stranger_key = pki["stranger"]
    untrusted = confluent_kafka.admin.AdminClient(confluent(b, "MTLS", **mtls, **{
        "ssl.certificate.location": str(stranger_cert), "ssl.key.location": str(stranger_key)}))
    with pytest.raises(confluent_kafka.KafkaException):
        untrusted.list_topics(timeout=3)

    # kafka-python over SSL.
    kafka = pytest.importorskip("kafka")
    kp = kafka.KafkaProducer(bootstrap_servers=bootstrap(b, "kafka", "SSL"), security_protocol="SSL",
                             ssl_cafile=str(pki["ca_pem"]))
    kp.send("t-ssl", b"from kafka-python").get(timeout=10)
    kp.close()
    kc = kafka.KafkaConsumer("t-ssl", bootstrap_servers=bootstrap(b, "kafka", "SSL"), security_protocol="SSL",
                             ssl_cafile=str(pki["ca_pem"]), auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    values = [m.value for m in kc]
    kc.close()
    assert values[-1] == b"from kafka-python" and len(values) == 21

    # The project's native client over TLS (fetches go through the TLS layer, not sendfile).
    security = {"security.protocol": "SSL", "ssl.ca.location": str(pki["ca_pem"])}
    native_ssl = bootstrap(b, "native", "SSL")
    with Admin(native_ssl, security=security) as admin:
        admin.create_topic("native-tls", 1)
    with Producer(native_ssl, linger_ms=0, security=security) as producer:
        for i in range(5):
            producer.send_and_wait("native-tls", b"n%d" % i)
    with Consumer(native_ssl, auto_offset_reset="earliest", security=security) as consumer:
        consumer.assign("native-tls", [0])
        assert [r.value for r in consumer.poll(5000)] == [b"n%d" % i for i in range(5)]
    # ... and the same records over the plaintext native listener, by sendfile.
    with Consumer(bootstrap(b, "native", "PLAINTEXT"), auto_offset_reset="earliest") as consumer:
        consumer.assign("native-tls", [0])
        assert len(consumer.poll(5000)) == 5

    # Wrong protocol: a TLS client on a plaintext port, a plaintext client on a TLS port.
    with pytest.raises(BrokerUnreachable, match="TLS|reset|lost|closed"), \
            Admin(bootstrap(b, "native", "PLAINTEXT"), security=security, retries=0,
                  request_timeout_ms=5000) as admin:
        admin.list_topics()
    with pytest.raises(BrokerUnreachable), Admin(native_ssl, retries=0, request_timeout_ms=3000) as admin:
        admin.list_topics()
    with socket.create_connection(b.addresses["kafka", "SSL"], timeout=5) as raw:  # Kafka ApiVersions v0
        raw.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
        assert raw.recv(100) == b""  # no TLS handshake: closed
    # The broker still serves everyone else.
    with Admin(native_ssl, security=security) as admin:
        assert "native-tls" in admin.list_topics()
    assert b.running
    b.stop()
    assert "Traceback" not in b.stderr_text()
    stopped = [e for e in b.log_events() if e.get("event") == "broker_stopped"][-1]
    assert stopped["sendfile"]["copied_bytes"] > 0  # TLS fetches were copied through the transport
    failed = [e for e in b.log_events() if e.get("event") == "tls_handshake_failed"]
    assert ("SSL", "WRONG_VERSION_NUMBER") in {(e["listener"], e["reason"]) for e in failed}  # plaintext client
    assert {e["listener"] for e in failed} >= {"MTLS"}  # no or untrusted client certificate
    started = [e for e in b.log_events() if e.get("event") == "broker_started"][-1]
    assert started["settings"]["ssl.key.password"] == "[hidden]"


def test_peer_certificate_subject_on_the_connection(tmp_path, pki):
    """mTLS: the connection context carries the client certificate's subject."""
    import asyncio

    from broker.net.listeners import ConnectionContext, Listener, ListenerSpec
    from broker.net.tls import ServerTls, peer_certificate_subject, settings_for

    values = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["server_pem"]),
              "ssl.key.password": "keypass", "ssl.truststore.type": "PEM",
              "ssl.truststore.location": str(pki["ca_pem"]), "ssl.client.auth": "requested",
              "ssl.enabled.protocols": "TLSv1.2,TLSv1.3", "ssl.cipher.suites": ""}
    tls = ServerTls(settings_for(values, "SSL"), "test")
    listener = Listener(ListenerSpec("kafka", "SSL", "127.0.0.1", 0, "SSL"), tls)
    seen: list[ConnectionContext] = []

    async def main():
        async def serve(reader, writer):
            seen.append(ConnectionContext(listener, writer.get_extra_info("peername"),
                                          peer_certificate_subject(writer.transport)))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls.context)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(pki["ca_pem"]))
        client.load_cert_chain(*map(str, pki["client"]))
        _, w = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        await asyncio.sleep(0.2)
        w.close()
        plain = ssl.create_default_context(cafile=str(pki["ca_pem"]))
        _, w = await asyncio.open_connection("127.0.0.1", port, ssl=plain, server_hostname="localhost")
        await asyncio.sleep(0.2)
        w.close()
        server.close()

    asyncio.run(main())
    assert seen[0].peer_certificate_subject == "CN=alice,OU=tests"
    assert seen[0].security_protocol == "SSL" and seen[0].listener_name == "SSL"
    assert seen[1].peer_certificate_subject is None


def test_certificates_reload_without_restart(broker, pki, tmp_path):
    keystore = tmp_path / "server.pem"
    pki["ca"].issue("localhost").write_pem(keystore)
    b = broker("--set", "native.listeners=SSL://127.0.0.1:0", "--set", "ssl.keystore.type=PEM",
               "--set", f"ssl.keystore.location={keystore}", "--set", "ssl.reload.interval.ms=100",
               kafka_port=None)
    b.addresses = b.read_listeners(1)
    old = {"security.protocol": "SSL", "ssl.ca.location": str(pki["ca_pem"])}
    with Admin(bootstrap(b, "native", "SSL"), security=old) as admin:
        admin.list_topics()
    other = CertificateAuthority("Rotated CA")
    (tmp_path / "new.pem").write_bytes(b"")
    other.issue("localhost").write_pem(tmp_path / "new.pem")
    (tmp_path / "new.pem").replace(keystore)
    new = {"security.protocol": "SSL", "ssl.ca.pem": other.cert_pem().decode()}
    deadline = time.monotonic() + 20
    while True:
        try:
            with Admin(bootstrap(b, "native", "SSL"), security=new, retries=0) as admin:
                admin.list_topics()
            break
        except BrokerUnreachable:
            assert time.monotonic() < deadline, "the new certificate was never served"
            time.sleep(0.1)
    with pytest.raises(BrokerUnreachable), \
            Admin(bootstrap(b, "native", "SSL"), security=old, retries=0) as admin:  # the old CA no longer fits
        admin.list_topics()
    assert any(e.get("event") == "tls_reloaded" for e in b.log_events())


def test_bad_keystore_fails_the_start_in_one_line(tmp_path):
    from tests.broker_process import run_serve

    code, _, err = run_serve("--data-dir", str(tmp_path / "d"), "--port", "0",
                             "--set", "native.listeners=SSL://127.0.0.1:0", "--set", "ssl.keystore.type=PEM",
                             "--set", f"ssl.keystore.location={tmp_path / 'missing.pem'}")
    assert code != 0
    assert "ssl.keystore.location" in err and "Traceback" not in err


def test_server_context_settings(tmp_path, pki):
    """Inline PEM keystore and truststore, PKCS12 truststore, protocols and Kafka's
    (IANA) cipher suite names; bad input names the key."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    from broker.net.tls import build_server_context, openssl_cipher_name, settings_for

    issued = pki["ca"].issue("localhost")
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": issued.cert_pem().decode(),
            "ssl.keystore.key": issued.key_pem().decode(), "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": pki["ca"].cert_pem().decode(), "ssl.client.auth": "required",
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.3", "ssl.cipher.suites": ""}
    def build(values):
        return build_server_context(settings_for(values, "X"), "test")

    context = build(base)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384") == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    context = build({**base, "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2  # no TLS 1.3 suite listed
    context = build({**base, "ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"})
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    context = build({**base, "ssl.enabled.protocols": "TLSv1.3"})
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    trust = tmp_path / "trust.p12"
    trust.write_bytes(pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(pki["ca"].cert, b"ca")], BestAvailableEncryption(b"trustpass")))
    build({**base, "ssl.truststore.certificates": None, "ssl.truststore.type": "PKCS12",
                          "ssl.truststore.location": str(trust), "ssl.truststore.password": "trustpass"})
    for change, key in [({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
                        ({"ssl.keystore.key": issued.key_pem(b"secret").decode()}, "ssl.key.password"),
                        ({"ssl.keystore.key": issued.key_pem(b"secret").decode(), "ssl.key.password": "no"},
                         "ssl.key.password"),
                        ({"ssl.truststore.certificates": None}, "ssl.client.auth"),
                        ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
                        ({"ssl.cipher.suites": "TLS_NOT_A_SUITE_WITH_NOTHING"}, "ssl.cipher.suites"),
                        ({"ssl.keystore.certificate.chain": pki["ca"].cert_pem().decode()}, "ssl.keystore")]:
        with pytest.raises(InvalidConfigError, match=key):
            build({**base, **change})
