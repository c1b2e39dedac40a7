"""The security core without a process: SCRAM against RFC 7677's test vector, PLAIN,
JAAS lines, ssl.principal.mapping.rules, listener settings, the credential store."""

from __future__ import annotations

import base64
import json

import pytest

from broker.config.broker_config import BrokerConfig
from broker.net.listeners import ConnectionContext, Listener, ListenerSpec
from broker.security.credentials import ScramCredentialStore
from broker.security.errors import SaslAuthenticationFailedError
from broker.security.jaas import parse_jaas, plain_users
from broker.security.plain import check_plain
from broker.security.principal import NoMatchingRule, SslPrincipalMapper
from broker.security.sasl import listener_sasl
from broker.security.scram import MECHANISMS, ScramServer, credential_from_password
from client.sasl import SaslCredentials, exchange, sasl_credentials
from kafka_format.errors import InvalidConfigError


def test_scram_sha256_rfc7677_vector():
    """RFC 7677 section 3: user 'user', password 'pencil', 4096 iterations."""
    mechanism = MECHANISMS["SCRAM-SHA-256"]
    credential = credential_from_password(mechanism, "pencil", 4096, base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramServer(mechanism, lambda user: credential if user == "user" else None)
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first.startswith(b"r=rOprNGfwEbeRWgbNEkqO") and b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096" in first
    # The RFC's server nonce is fixed; ours is random, so run the client side against ours.
    client = exchange(SaslCredentials("SCRAM-SHA-256", "user", "pencil"))
    server = ScramServer(mechanism, lambda user: credential if user == "user" else None)
    final, user = server.final(client.send(server.first(next(client))))
    assert user == "user"
    with pytest.raises(StopIteration):
        client.send(final)


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user(name):
    credential = credential_from_password(MECHANISMS[name], "right")
    for user, password in [("alice", "wrong"), ("nobody", "right")]:
        server = ScramServer(MECHANISMS[name], lambda u: credential if u == "alice" else None)
        client = exchange(SaslCredentials(name, user, password))
        with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
            server.final(client.send(server.first(next(client))))


def test_plain():
    users = {"alice": "secret"}
    assert check_plain(b"\0alice\0secret", users) == "alice"
    assert check_plain(b"alice\0alice\0secret", users) == "alice"
    for bad in (b"\0alice\0nope", b"\0bob\0secret", b"alice\0secret", b"other\0alice\0secret"):
        with pytest.raises(SaslAuthenticationFailedError):
            check_plain(bad, users)


def test_jaas():
    module, options = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                 'username="admin" password="a\\"b" user_admin="x" user_bob=y;')
    assert module.endswith("PlainLoginModule") and options["password"] == 'a"b'
    assert plain_users(options) == {"admin": "x", "bob": "y"}
    for bad in ("no semicolon", "Module maybe a=1;", 'Module required a="1" junk;'):
        with pytest.raises(ValueError):
            parse_jaas(bad)
    assert sasl_credentials({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.jaas.config": 'x.ScramLoginModule required username="u" password="p";'}) \
        == SaslCredentials("SCRAM-SHA-512", "u", "p")


def test_principal_mapping_rules():
    rules = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,RULE:^CN=([a-z]+),O=(.*)$/$1@$2/,DEFAULT")
    assert rules.name("CN=Kafka-Client,OU=ServiceUsers,O=Org") == "kafka-client"
    assert rules.name("CN=bob,O=example") == "bob@example"
    assert rules.name("CN=Bob,OU=x") == "CN=Bob,OU=x"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1/U").name("CN=eve") == "EVE"
    with pytest.raises(NoMatchingRule, match="No rules apply to OU=x,CN=eve"):  # Kafka: authentication fails
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/U").name("OU=x,CN=eve")
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:broken")
    spec = ListenerSpec("kafka", "SSL", "", 0, "SSL")
    context = ConnectionContext(Listener(spec, principal_mapper=SslPrincipalMapper("RULE:^CN=([^,]+).*$/$1/")))
    assert context.principal == "User:ANONYMOUS" and context.authenticated
    context.certificate_presented("CN=alice,OU=eng,O=example")
    assert context.principal == "User:alice"
    plain = ConnectionContext(Listener(ListenerSpec("kafka", "SSL", "", 0, "SSL")))
    plain.certificate_presented("CN=alice,OU=eng")
    assert plain.principal == "User:CN=alice,OU=eng"


def test_listener_settings(tmp_path):
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="1";'
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={
        "STRATA_LISTENER_NAME_OUTSIDE_PLAIN_SASL_JAAS_CONFIG": jaas}, overrides=[
        "listeners=OUTSIDE://:0,INSIDE://:0",
        "listener.security.protocol.map=OUTSIDE:SASL_SSL,INSIDE:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "listener.name.OUTSIDE.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
        "listener.name.outside.connections.max.reauth.ms=60000"])
    outside = listener_sasl(config.values, "OUTSIDE", "SASL_SSL")
    assert outside.mechanisms == ("SCRAM-SHA-512", "PLAIN") and outside.reauth_ms == 60000
    assert dict(outside.plain_users) == {"a": "1"}
    inside = listener_sasl(config.values, "INSIDE", "SASL_PLAINTEXT")
    assert inside.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and inside.reauth_ms == 0
    assert listener_sasl(config.values, "X", "SSL") is None
    with pytest.raises(InvalidConfigError, match="sasl.enabled.mechanisms.*GSSAPI"):
        BrokerConfig.load(data_dir=str(tmp_path), environ={}, overrides=["sasl.enabled.mechanisms=GSSAPI"])


def test_credential_store(tmp_path):
    store = ScramCredentialStore.open(str(tmp_path))
    assert store.describe() == {}
    credential = credential_from_password(MECHANISMS["SCRAM-SHA-512"], "pw", 8192)
    store.apply([("u", "SCRAM-SHA-512", credential)], [])
    again = ScramCredentialStore.open(str(tmp_path))
    assert again.lookup("SCRAM-SHA-512", "u") == credential and again.describe() == {"u": [("SCRAM-SHA-512", 8192)]}
    doc = json.loads((tmp_path / "scram-credentials.json").read_text())
    assert set(doc["users"]["u"]["SCRAM-SHA-512"]) == {"salt", "stored_key", "server_key", "iterations"}
    again.apply([], [("u", "SCRAM-SHA-512")])
    assert ScramCredentialStore.open(str(tmp_path)).describe() == {}
