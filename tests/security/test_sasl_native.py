"""SASL on the native protocol against the real broker process: the project's client
(PLAIN, SCRAM-SHA-512 with a credential made through the Kafka listener), the gate
before authentication (NATIVE-PROTOCOL.md "Version 2"), wrong passwords, session
expiry and re-authentication (connections.max.reauth.ms)."""

from __future__ import annotations

import time

import pytest

from client import Admin, Consumer, Producer
from client.errors import AuthenticationFailed
from protocol import ErrorCode, HandshakeRequest, MetadataRequest
from protocol.requests import SaslAuthenticateRequest
from tests.broker.wire import NativeClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret";')


def native_sasl_broker(broker, *extra):
    b = broker("--set", "listeners=PLAINTEXT://127.0.0.1:0",
               "--set", "native.listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
               "--set", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
               "--set", "connection.failed.authentication.delay.ms=10", *extra, kafka_port=None)
    b.addresses = b.read_listeners(3)
    return b


def bootstrap(b, name="SASL_PLAINTEXT"):
    host, port = b.addresses["native", name]
    return f"{host}:{port}"


def plain(user, password, mechanism="PLAIN"):
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def test_native_client_plain_and_scram(broker):
    b = native_sasl_broker(broker)
    with Admin(bootstrap(b), security=plain("alice", "alice-secret")) as admin:
        admin.create_topic("n1", partitions=1)
    with Producer(bootstrap(b), linger_ms=0, security=plain("alice", "alice-secret")) as producer:
        for i in range(5):
            producer.send_and_wait("n1", b"v%d" % i)
    with Consumer(bootstrap(b), auto_offset_reset="earliest", security=plain("alice", "alice-secret")) as consumer:
        consumer.assign("n1", [0])
        assert [r.value for r in consumer.poll(5000)] == [b"v%d" % i for i in range(5)]

    with (pytest.raises(AuthenticationFailed, match="Invalid username or password"),
          Admin(bootstrap(b), security=plain("alice", "wrong")) as admin):
        admin.list_topics()
    with pytest.raises(AuthenticationFailed, match="requires SASL"), Admin(bootstrap(b)) as admin:
        admin.list_topics()

    # SCRAM-SHA-512: the credential made on the Kafka listener serves the native one too.
    ck_admin = pytest.importorskip("confluent_kafka.admin")
    host, port = b.addresses["kafka", "PLAINTEXT"]
    kafka_admin = ck_admin.AdminClient({"bootstrap.servers": f"{host}:{port}"})
    kafka_admin.alter_user_scram_credentials([ck_admin.UserScramCredentialUpsertion(
        "bob", ck_admin.ScramCredentialInfo(ck_admin.ScramMechanism.SCRAM_SHA_512, 4096), b"bob-pw")])[
        "bob"].result(10)
    with Admin(bootstrap(b), security=plain("bob", "bob-pw", "SCRAM-SHA-512")) as admin:
        assert "n1" in admin.list_topics()
    with (pytest.raises(AuthenticationFailed, match="invalid credentials"),
          Admin(bootstrap(b), security=plain("bob", "nope", "SCRAM-SHA-512")) as admin):
        admin.list_topics()


def test_the_gate_before_authentication(broker):
    b = native_sasl_broker(broker)
    host, port = b.addresses["native", "SASL_PLAINTEXT"]
    c = NativeClient(host, port)
    assert c.handshake(2).mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    refused = c.call(MetadataRequest())
    assert refused.error == ErrorCode.SASL_AUTHENTICATION_FAILED and "requires SASL" in refused.message
    assert c.at_eof()
    # A failed authentication: SASL_AUTHENTICATION_FAILED with its reason, then closed.
    c = NativeClient(host, port)
    c.handshake(2)
    failed = c.call(SaslAuthenticateRequest("PLAIN", b"\0alice\0nope"))
    assert failed.error == ErrorCode.SASL_AUTHENTICATION_FAILED and "Invalid username" in failed.message
    assert c.at_eof()
    c = NativeClient(host, port)
    c.handshake(2)
    unknown = c.call(SaslAuthenticateRequest("GSSAPI", b""))
    assert unknown.error == ErrorCode.SASL_AUTHENTICATION_FAILED and "GSSAPI" in unknown.message
    assert c.at_eof()
    # Success: then everything is served; no re-authentication by default (lifetime 0).
    c = NativeClient(host, port)
    c.handshake(2)
    ok = c.call(SaslAuthenticateRequest("PLAIN", b"\0alice\0alice-secret"))
    assert ok.error == ErrorCode.NONE and ok.session_lifetime_ms == 0
    assert c.call(MetadataRequest()).error == ErrorCode.NONE
    # The PLAINTEXT native listener needs none.
    host, port = b.addresses["native", "PLAINTEXT"]
    c = NativeClient(host, port)
    assert c.handshake(2).mechanisms == ()
    assert c.call(MetadataRequest()).error == ErrorCode.NONE
    assert c.call(HandshakeRequest(2, "x")).error == ErrorCode.INVALID_REQUEST


def test_session_expiry_and_reauthentication(broker):
    b = native_sasl_broker(broker, "--set", "listener.name.sasl_plaintext.connections.max.reauth.ms=1000")
    host, port = b.addresses["native", "SASL_PLAINTEXT"]
    c = NativeClient(host, port)
    c.handshake(2)
    ok = c.call(SaslAuthenticateRequest("PLAIN", b"\0alice\0alice-secret"))
    assert ok.error == ErrorCode.NONE and ok.session_lifetime_ms == 1000
    # Re-authentication on the same connection renews the session.
    time.sleep(0.6)
    assert c.call(SaslAuthenticateRequest("PLAIN", b"\0alice\0alice-secret")).session_lifetime_ms == 1000
    time.sleep(0.6)
    assert c.call(MetadataRequest()).error == ErrorCode.NONE
    # Re-authenticating as someone else is refused.
    other = c.call(SaslAuthenticateRequest("PLAIN", b"\0admin\0admin-secret"))
    assert other.error == ErrorCode.SASL_AUTHENTICATION_FAILED and "principal" in other.message
    # Past its lifetime without re-authenticating: the next request is refused and closed.
    c = NativeClient(host, port)
    c.handshake(2)
    c.call(SaslAuthenticateRequest("PLAIN", b"\0alice\0alice-secret"))
    time.sleep(1.3)
    expired = c.call(MetadataRequest())
    assert expired.error == ErrorCode.SASL_AUTHENTICATION_FAILED and "expired" in expired.message
    assert c.at_eof()
    # The project's client re-authenticates by itself and keeps working past the lifetime.
    with Admin(bootstrap(b), security=plain("alice", "alice-secret")) as admin:
        for _ in range(5):
            admin.list_topics()
            time.sleep(0.5)


def test_spark_source_options_and_fetcher_over_sasl(broker):
    from pipeline.fetcher import read_range
    from pipeline.options import OptionError, read_options, write_options

    b = native_sasl_broker(broker)
    with Producer(bootstrap(b), linger_ms=0, security=plain("alice", "alice-secret")) as producer:
        for i in range(7):
            producer.send_and_wait("spark", b"s%d" % i)
    options = {"kafka.bootstrap.servers": bootstrap(b), "subscribe": "spark",
               "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
               "kafka.sasl.username": "alice", "kafka.sasl.password": "alice-secret"}
    read = read_options(options, streaming=False)
    rows = sum(batch.num_rows for batch in read_range(read, "spark", 0, 2, 7))
    assert rows == 5
    sink = {k: v for k, v in options.items() if k != "subscribe"}
    assert dict(write_options({**sink, "topic": "spark"}).security)["sasl.username"] == "alice"
    wrong = read_options({**options, "kafka.sasl.password": "nope"}, streaming=False)
    with pytest.raises(AuthenticationFailed, match="Invalid username or password"):
        list(read_range(wrong, "spark", 0, 0, 7))
    with pytest.raises(OptionError, match="sasl.mechanism"):
        read_options({**options, "kafka.sasl.mechanism": "GSSAPI"}, streaming=False)
