"""The authorizer's decisions (broker/security/authorizer.py), as Kafka's StandardAuthorizer decides."""

from __future__ import annotations

import json

import pytest

from broker.net.listeners import ConnectionContext
from broker.security.authorizer import Acl, AclFilter, Authorizer, Op, Pattern, Permission, Resource
from kafka_format.errors import InvalidRequestError

T, G, C = Resource.TOPIC, Resource.GROUP, Resource.CLUSTER
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def conn(principal="User:alice", host="10.0.0.1"):
    c = ConnectionContext(None, (host, 5555))
    c.principal = principal
    return c


def acl(name, op, permission=ALLOW, *, rtype=T, pattern=Pattern.LITERAL, principal="User:alice", host="*"):
    return Acl(rtype, name, pattern, principal, host, op, permission)


def authorizer(*acls, **options) -> Authorizer:
    a = Authorizer(enabled=True, **options)
    a.create(acls)
    return a


def test_off_allows_everything():
    assert Authorizer().authorize(conn(), Op.WRITE, T, "t")


def test_literal_prefixed_wildcard_and_implications():
    a = authorizer(acl("orders", Op.READ), acl("logs-", Op.WRITE, pattern=Pattern.PREFIXED),
                   acl("*", Op.DESCRIBE, principal="User:*"), acl("cfg", Op.ALTER_CONFIGS, rtype=G), acl("all", Op.ALL))
    c = conn()
    assert a.authorize(c, Op.READ, T, "orders") and a.authorize(c, Op.DESCRIBE, T, "orders")
    assert not a.authorize(c, Op.WRITE, T, "orders")
    assert a.authorize(c, Op.WRITE, T, "logs-app") and not a.authorize(c, Op.WRITE, T, "log")
    assert a.authorize(conn("User:bob"), Op.DESCRIBE, T, "anything")
    assert not a.authorize(conn("User:bob"), Op.READ, T, "orders")
    assert a.authorize(c, Op.DESCRIBE_CONFIGS, G, "cfg") and not a.authorize(c, Op.DESCRIBE, G, "cfg")
    assert all(a.authorize(c, op, T, "all") for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER_CONFIGS))
    assert not a.authorize(c, Op.READ, G, "orders")  # another resource type


def test_deny_wins_and_hosts():
    a = authorizer(acl("t", Op.ALL), acl("t", Op.WRITE, DENY, host="10.0.0.9"),
                   acl("p-", Op.READ, DENY, pattern=Pattern.PREFIXED), acl("p-x", Op.READ))
    assert a.authorize(conn(), Op.WRITE, T, "t")
    assert not a.authorize(conn(host="10.0.0.9"), Op.WRITE, T, "t")
    assert a.authorize(conn(host="10.0.0.9"), Op.READ, T, "t")
    assert not a.authorize(conn(), Op.READ, T, "p-x")  # the prefixed DENY wins over the literal ALLOW


def test_super_users_and_no_acl_found():
    a = authorizer(acl("t", Op.READ), super_users=["User:admin"])
    assert a.authorize(conn("User:admin"), Op.DELETE, T, "t")
    assert not a.authorize(conn("User:bob"), Op.READ, T, "other")
    open_ = authorizer(acl("t", Op.READ), allow_if_no_acl=True)
    assert open_.authorize(conn("User:bob"), Op.WRITE, T, "other")  # no ACL on it
    assert not open_.authorize(conn("User:bob"), Op.READ, T, "t")  # an ACL exists: not bob's


def test_mtls_subject_is_the_principal():
    c = ConnectionContext(None, ("127.0.0.1", 1), peer_certificate_subject="CN=alice")
    a = authorizer(acl("t", Op.READ, principal="User:CN=alice"))
    assert a.authorize(c, Op.READ, T, "t")


def test_cache_is_emptied_by_changes():
    a = authorizer(acl("t", Op.READ))
    c = conn()
    assert a.authorize(c, Op.READ, T, "t")
    a.create([acl("t", Op.READ, DENY)])
    assert not a.authorize(c, Op.READ, T, "t")
    removed = a.delete([AclFilter(permission=DENY)])
    assert len(removed[0]) == 1 and a.authorize(c, Op.READ, T, "t")


def test_filters_and_authorize_any():
    a = authorizer(acl("t", Op.READ), acl("x-", Op.WRITE, pattern=Pattern.PREFIXED), acl("g", Op.READ, rtype=G))
    assert len(a.describe(AclFilter())) == 3
    assert [b.name for b in a.describe(AclFilter(resource_type=T, name="x-1", pattern_type=Pattern.MATCH))] == ["x-"]
    assert [b.name for b in a.describe(AclFilter(resource_type=T, pattern_type=Pattern.PREFIXED))] == ["x-"]
    assert a.describe(AclFilter(principal="User:bob")) == []
    assert a.authorize_any(conn(), Op.WRITE, T) and not a.authorize_any(conn("User:bob"), Op.WRITE, T)


def test_persistence_and_validation(tmp_path):
    a = Authorizer(enabled=True)
    a.load(str(tmp_path))
    a.create([acl("t", Op.READ)])
    doc = json.loads((tmp_path / "acls.json").read_text())
    assert doc["version"] == 1 and doc["acls"][0]["name"] == "t"
    b = Authorizer(enabled=True)
    b.load(str(tmp_path))
    assert b.acls() == a.acls() and b.authorize(conn(), Op.READ, T, "t")
    for bad in (acl("t", Op.ANY), acl("t", Op.READ, Permission.ANY), acl("t", Op.READ, pattern=Pattern.MATCH),
                acl("t", Op.READ, principal="alice"), acl("other", Op.ALTER, rtype=C)):
        with pytest.raises(InvalidRequestError):
            bad.check()
