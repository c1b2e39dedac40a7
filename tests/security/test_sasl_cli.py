"""`strata` with --command-config on SASL listeners (native and Kafka, SASL_SSL), and
`strata users set|list|delete` (SCRAM over AlterUserScramCredentials), against the
real broker process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.client.live_broker import REPO
from tests.tls_certs import CertificateAuthority

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret";')


def strata(*args, input=None):
    return subprocess.run([sys.executable, "-m", "broker", *map(str, args)], input=input, text=True,
                          capture_output=True, cwd=REPO, timeout=60)


@pytest.fixture
def secured(broker, tmp_path):
    ca = CertificateAuthority()
    ca_pem = ca.write_pem(tmp_path / "ca.pem")
    server_pem = ca.issue("localhost").write_pem(tmp_path / "server.pem")
    b = broker("--set", "listeners=SASL_SSL://127.0.0.1:0",
               "--set", "native.listeners=SASL_SSL://127.0.0.1:0",
               "--set", "ssl.keystore.type=PEM", "--set", f"ssl.keystore.location={server_pem}",
               "--set", f"sasl.jaas.config={JAAS}", kafka_port=None)
    b.addresses = b.read_listeners(2)
    admin = tmp_path / "admin.properties"
    admin.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     'username="admin" password="admin-secret";\n'
                     f"ssl.truststore.type=PEM\nssl.truststore.location={ca_pem}\n")
    native = "{}:{}".format(*b.addresses["native", "SASL_SSL"])
    kafka = "{}:{}".format(*b.addresses["kafka", "SASL_SSL"])
    return {"broker": b, "ca": ca_pem, "admin": admin, "tmp": tmp_path,
            "servers": ["--bootstrap-server", native, "--kafka-bootstrap-server", kafka]}


def test_command_config_and_users(secured):
    s, admin = secured["servers"], ["--command-config", secured["admin"]]
    assert strata("topics", "create", "c1", *s[:2], *admin).returncode == 0
    produced = strata("produce", "c1", *s[:2], *admin, input="a\nb\n")
    assert produced.returncode == 0, produced.stderr
    consumed = strata("consume", "c1", "--from-beginning", "--max-messages", "2", *s[:2], *admin)
    assert consumed.stdout.split() == ["a", "b"], consumed.stderr
    # Without credentials: one clear line.
    tls_only = secured["tmp"] / "tls.properties"
    tls_only.write_text(f"security.protocol=SSL\nssl.ca.location={secured['ca']}\n")
    refused = strata("topics", "list", *s[:2], "--command-config", tls_only)
    assert refused.returncode != 0 and ("requires SASL" in refused.stderr or "TLS" in refused.stderr)

    # SCRAM users over the Kafka listener.
    created = strata("users", "set", "carol", "--password", "carol-pw", "--mechanism", "SCRAM-SHA-512", *s, *admin)
    assert created.returncode == 0, created.stderr
    listed = strata("users", "list", *s, *admin)
    assert "carol" in listed.stdout and "SCRAM-SHA-512=iterations=4096" in listed.stdout, listed.stderr
    carol = secured["tmp"] / "carol.properties"
    carol.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=carol\n"
                     f"sasl.password=carol-pw\nssl.ca.location={secured['ca']}\n")
    as_carol = strata("topics", "list", *s[:2], "--command-config", carol)
    assert as_carol.returncode == 0 and "c1" in as_carol.stdout, as_carol.stderr
    groups = strata("groups", "list", *s, "--command-config", carol)
    assert groups.returncode == 0, groups.stderr
    too_few = strata("users", "set", "dave", "--password", "x", "--iterations", "100", *s, *admin)
    assert too_few.returncode != 0 and "UNACCEPTABLE_CREDENTIAL" in too_few.stderr
    assert strata("users", "delete", "carol", *s, *admin).returncode == 0
    wrong = strata("topics", "list", *s[:2], "--command-config", carol)
    assert wrong.returncode != 0 and "invalid credentials" in wrong.stderr
    missing = strata("users", "delete", "carol", "--mechanism", "SCRAM-SHA-256", *s, *admin)
    assert missing.returncode != 0 and "RESOURCE_NOT_FOUND" in missing.stderr
    bad = secured["tmp"] / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    refused = strata("topics", "list", *s[:2], "--command-config", bad)
    assert refused.returncode != 0 and "sasl.mechanism" in refused.stderr and "Traceback" not in refused.stderr


def test_quotas_over_sasl_ssl_with_command_config(secured):
    """`strata quotas` (AlterClientQuotas / DescribeClientQuotas) through --command-config."""
    s, admin = secured["servers"], ["--command-config", secured["admin"]]
    altered = strata("quotas", "--alter", "--user", "admin", "--add-config", "consumer_byte_rate=65536", *s, *admin)
    assert altered.returncode == 0 and altered.stdout == "Completed updating config for user admin.\n", altered.stderr
    described = strata("quotas", "--describe", "--user", "admin", *s, *admin)
    assert described.stdout == "Quota configs for user-principal 'admin' are consumer_byte_rate=65536.0\n", \
        described.stderr
