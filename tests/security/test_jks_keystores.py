"""Kafka's TLS files as Kafka users have them: JKS keystores and truststores (Kafka's default
ssl.*.type) made with the JDK's keytool, served by the real broker to a real client over TLS with
a client certificate; Kafka's password rules (the key password falls back to the keystore
password); a wrong password or a damaged file stops the start with one line naming the file. A TLS
client session leaves nothing but JSON lines on the broker's stderr."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from broker.net.tls import build_server_context, settings_for
from kafka_format.errors import InvalidConfigError
from tests.broker_process import BrokerProcess, run_serve
from tests.tls_certs import CertificateAuthority

pytestmark = pytest.mark.skipif(shutil.which("keytool") is None, reason="keytool (a JDK) is not installed")
TIMEOUT = 30


def keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, the broker's JKS keystore (store password storepass, key password keypass), a JKS
    truststore holding the CA (trustpass), a JKS keystore whose key shares the store password,
    and a client certificate."""
    d = tmp_path_factory.mktemp("jks")
    ca = CertificateAuthority()
    server = ca.issue("localhost")
    p12 = server.write_pkcs12(d / "server.p12", b"storepass")
    keytool("-importkeystore", "-noprompt", "-srckeystore", str(p12), "-srcstoretype", "PKCS12",
            "-srcstorepass", "storepass", "-destkeystore", str(d / "server.jks"), "-deststoretype", "JKS",
            "-deststorepass", "storepass", "-destkeypass", "keypass", "-srcalias", "strata",
            "-destalias", "broker")
    keytool("-importkeystore", "-noprompt", "-srckeystore", str(p12), "-srcstoretype", "PKCS12",
            "-srcstorepass", "storepass", "-destkeystore", str(d / "same.jks"), "-deststoretype", "JKS",
            "-deststorepass", "storepass")
    ca_pem = ca.write_pem(d / "ca.pem")
    keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem), "-keystore",
            str(d / "trust.jks"), "-storetype", "JKS", "-storepass", "trustpass")
    return {"dir": d, "ca": ca, "ca_pem": ca_pem, "jks": d / "server.jks", "same": d / "same.jks",
            "trust": d / "trust.jks", "p12": p12,
            "client": ca.issue("alice", server=False).write_split(d, "alice")}


def jks_settings(pki, **changes) -> dict:
    values = {"ssl.keystore.location": str(pki["jks"]), "ssl.keystore.password": "storepass",
              "ssl.key.password": "keypass", "ssl.truststore.location": str(pki["trust"]),
              "ssl.truststore.password": "trustpass", "ssl.client.auth": "required",
              "ssl.enabled.protocols": "TLSv1.2,TLSv1.3", "ssl.cipher.suites": "",
              "ssl.keystore.type": "JKS", "ssl.truststore.type": "JKS"}
    values.update(changes)
    return settings_for(values, "SSL")


def test_jks_keystores_load_with_kafkas_password_rules(pki):
    assert build_server_context(jks_settings(pki), "SSL listener").verify_mode.name == "CERT_REQUIRED"
    # the key password falls back to the keystore password, as Kafka
    build_server_context(jks_settings(pki, **{"ssl.keystore.location": str(pki["same"]),
                                              "ssl.key.password": None}), "SSL listener")
    # a truststore without a password is read without the integrity check (Java's rule)
    build_server_context(jks_settings(pki, **{"ssl.truststore.password": None}), "SSL listener")
    # a JKS-typed file that is PKCS12 (keytool's default format) is read, as Java does
    build_server_context(jks_settings(pki, **{"ssl.keystore.location": str(pki["p12"]),
                                              "ssl.key.password": None}), "SSL listener")


@pytest.mark.parametrize("changes, key, complaint", [
    ({"ssl.keystore.password": "wrong"}, "ssl.keystore.password", "wrong password for the JKS keystore"),
    ({"ssl.key.password": "wrong"}, "ssl.key.password", "cannot decrypt the private key 'broker'"),
    ({"ssl.key.password": None}, "ssl.key.password", "with ssl.keystore.password"),
    ({"ssl.keystore.password": None}, "ssl.keystore.password", "needs its password"),
    ({"ssl.truststore.password": "wrong"}, "ssl.truststore.password", "wrong password for the JKS truststore"),
])
def test_a_wrong_password_names_the_key_and_the_file(pki, changes, key, complaint):
    with pytest.raises(InvalidConfigError) as raised:
        build_server_context(jks_settings(pki, **changes), "SSL listener")
    message = str(raised.value)
    assert message.startswith(f"{key}: ") and complaint in message and "\n" not in message
    assert str(pki["jks"] if "keystore" in key or key == "ssl.key.password" else pki["trust"]) in message


def test_a_damaged_jks_file_names_the_file(pki, tmp_path):
    damaged = tmp_path / "damaged.jks"
    damaged.write_bytes(pki["jks"].read_bytes()[:200])
    with pytest.raises(InvalidConfigError, match=f"ssl.keystore.location: {damaged} is not a readable JKS keystore"):
        build_server_context(jks_settings(pki, **{"ssl.keystore.location": str(damaged)}), "SSL listener")
    code, _, stderr = run_serve("--data-dir", str(tmp_path / "d"), "--port", "0", "--kafka-port", "-1",
                                "--admin-port", "-1", "--set", "native.listeners=SSL://127.0.0.1:0",
                                "--set", f"ssl.keystore.location={damaged}", "--set", "ssl.keystore.password=x")
    assert code != 0 and str(damaged) in stderr and "Traceback" not in stderr
    assert len([line for line in stderr.splitlines() if str(damaged) in line]) == 1


def test_the_broker_serves_tls_from_jks_files_and_stderr_stays_json(pki, tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    with BrokerProcess(tmp_path / "data", "--set", "log.format=json",
                       "--set", "listeners=SSL://127.0.0.1:0",
                       "--set", "listener.security.protocol.map=SSL:SSL,PLAINTEXT:PLAINTEXT",
                       "--set", f"ssl.keystore.location={pki['jks']}", "--set", "ssl.keystore.password=storepass",
                       "--set", "ssl.key.password=keypass", "--set", f"ssl.truststore.location={pki['trust']}",
                       "--set", "ssl.truststore.password=trustpass", "--set", "ssl.client.auth=required") as broker:
        broker.start()
        cert, key = pki["client"]
        conf = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": str(pki["ca_pem"]), "ssl.certificate.location": str(cert),
                "ssl.key.location": str(key)}
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("jks", 1)])["jks"].result(TIMEOUT)
        producer = confluent_kafka.Producer({**conf, "linger.ms": 0})
        for i in range(10):
            producer.produce("jks", b"v%d" % i)
        assert producer.flush(TIMEOUT) == 0
        consumer = confluent_kafka.Consumer({**conf, "group.id": "jks", "auto.offset.reset": "earliest"})
        consumer.subscribe(["jks"])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 10 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                got.append(message.value())
        consumer.close()
        del producer, admin  # every TLS session ends before the broker does
        assert got == [b"v%d" % i for i in range(10)]
        assert broker.stop() == 0
        lines = broker.stderr_text().splitlines()
    assert lines
    not_json = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            not_json.append(line)
    assert not_json == []
