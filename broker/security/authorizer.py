"""ACL authorization with Kafka's StandardAuthorizer semantics, for both protocols.

Contract:
- `Authorizer.from_config(values)`: enabled when `authorizer.class.name` names
  Kafka's StandardAuthorizer or AclAuthorizer; `super.users` (a semicolon list
  of principals) may do everything; `allow.everyone.if.no.acl.found` opens a
  resource that no ACL's pattern matches.
- `authorize(context, operation, resource_type, name)` -> bool, for a
  connection's ConnectionContext (broker/net/listeners.py: `principal`, the peer's
  host). Off: always True. On, as Kafka's StandardAuthorizer decides:
  super user -> allowed; an ACL applies when its pattern matches the resource
  (LITERAL equal or `*`, PREFIXED a prefix of the name), its principal is the
  caller's or `User:*`, its host the peer's or `*`; a DENY for the operation
  (or ALL) wins; else an ALLOW for it (or ALL; DESCRIBE is also granted by READ,
  WRITE, DELETE, ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS); else allowed only
  when no ACL's pattern matches the resource and allow.everyone.if.no.acl.found.
- Decisions are cached per (principal, host, operation, resource type, name);
  any ACL change empties the cache, so a change applies to the next request.
- ACLs live in `<data dir>/acls.json` (`load(data_dir)`); `create` and `delete`
  replace the file whole (write-temp, fsync, rename) before the change applies;
  a failed write (a full disk) raises KafkaStorageError and changes nothing. A
  file that cannot be read, or an entry that is not a valid binding, fails
  `load` (InvalidConfigError naming the file and what to do): starting without
  the ACLs would change every decision silently.
  `describe(filter)` / `delete(filters)` match as Kafka's AclBindingFilter.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from broker.state.json_files import damaged, read_document, write_document
from kafka_format.errors import InvalidRequestError, StrataError

from .principal import ANONYMOUS

if TYPE_CHECKING:
    from broker.net.listeners import ConnectionContext

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
FILE_NAME = "acls.json"
REMEDY = ("restore it from a backup (starting without it would drop every ACL: every "
          "decision would change)")
FORMAT_VERSION = 1
CACHE_MAX = 100_000
CLUSTER_NAME = "kafka-cluster"


class TopicAuthorizationError(StrataError):
    code = 29  # TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationError(StrataError):
    code = 30  # GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationError(StrataError):
    code = 31  # CLUSTER_AUTHORIZATION_FAILED


class TransactionalIdAuthorizationError(StrataError):
    code = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(StrataError):
    code = 54  # SECURITY_DISABLED: ACL requests without an authorizer


class Resource(IntEnum):
    """Kafka's ResourceType."""

    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class Pattern(IntEnum):
    """Kafka's PatternType."""

    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Op(IntEnum):
    """Kafka's AclOperation."""

    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    """Kafka's AclPermissionType."""

    ANY = 1
    DENY = 2
    ALLOW = 3


# What an ALLOW of the key grants besides itself (Kafka's implied operations).
IMPLIED_BY: dict[Op, frozenset[Op]] = {
    Op.DESCRIBE: frozenset({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL binding: a resource pattern and an access control entry."""

    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def check(self) -> None:
        """InvalidRequestError naming what a binding to create lacks (Kafka's checks)."""
        if self.resource_type not in (Resource.TOPIC, Resource.GROUP, Resource.CLUSTER,
                                      Resource.TRANSACTIONAL_ID, Resource.DELEGATION_TOKEN, Resource.USER):
            raise InvalidRequestError(f"invalid resource type {self.resource_type}")
        if self.pattern_type not in (Pattern.LITERAL, Pattern.PREFIXED):
            raise InvalidRequestError(f"invalid pattern type {self.pattern_type}: LITERAL or PREFIXED")
        if self.operation in (Op.ANY,) or self.operation not in set(Op):
            raise InvalidRequestError(f"invalid operation {self.operation}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidRequestError(f"invalid permission type {self.permission}: ALLOW or DENY")
        if not self.name:
            raise InvalidRequestError("the resource name is empty")
        if self.resource_type == Resource.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidRequestError(f"the cluster resource is named {CLUSTER_NAME!r}")
        kind, colon, rest = self.principal.partition(":")
        if not colon or not kind or not rest:
            raise InvalidRequestError(f"principal {self.principal!r}: expected TYPE:NAME (User:alice)")
        if not self.host:
            raise InvalidRequestError("the host is empty (use * for every host)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (or ANY) fields match everything; MATCH
    matches the bindings that would apply to the named resource."""

    resource_type: int = Resource.ANY
    name: str | None = None
    pattern_type: int = Pattern.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = Op.ANY
    permission: int = Permission.ANY

    def matches(self, acl: Acl) -> bool:
        if self.resource_type != Resource.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == Pattern.MATCH:
            if self.name is not None and not _pattern_matches(acl, self.name):
                return False
        elif self.pattern_type != Pattern.ANY:
            if acl.pattern_type != self.pattern_type or (self.name is not None and acl.name != self.name):
                return False
        elif self.name is not None and acl.name != self.name:
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != Op.ANY and acl.operation != self.operation:
            return False
        return self.permission == Permission.ANY or acl.permission == self.permission


def _pattern_matches(acl: Acl, name: str) -> bool:
    if acl.pattern_type == Pattern.PREFIXED:
        return name.startswith(acl.name)
    return acl.name in (name, WILDCARD)


def principal_of(context: ConnectionContext) -> str:
    """The connection's principal: `context.principal`; an mTLS client without one
    set is `User:` + its certificate's subject (Kafka's DEFAULT mapping rule)."""
    principal = context.principal or ANONYMOUS
    if principal == ANONYMOUS:
        subject = context.peer_certificate_subject
        if subject:
            return "User:" + subject
    return principal


def host_of(context: ConnectionContext) -> str:
    """The client's IP address ("" for a peer that has none, as a Unix socket)."""
    peer = context.peer
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return ""


class Authorizer:
    """The ACLs, the decision cache and the policy keys (see the module contract)."""

    def __init__(self, *, enabled: bool = False, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False):
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: list[Acl] = []
        # (resource type) -> literal name -> ACLs; (resource type) -> prefix -> ACLs
        self._literal: dict[int, dict[str, list[Acl]]] = {}
        self._prefixed: dict[int, dict[str, list[Acl]]] = {}
        self._cache: dict[tuple, bool] = {}
        self._path: str | None = None
        self._lock = threading.Lock()  # create/delete from the executor

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> Authorizer:
        supers = [p.strip() for p in (values.get("super.users") or "").split(";") if p.strip()]
        return cls(enabled=bool(values.get("authorizer.class.name")), super_users=supers,
                   allow_if_no_acl=bool(values.get("allow.everyone.if.no.acl.found")))

    # ---- decisions ------------------------------------------------------------------------------

    def authorize(self, context: ConnectionContext, operation: int, resource_type: int, name: str) -> bool:
        """Whether the connection may perform `operation` on the resource."""
        if not self.enabled:
            return True
        key = (principal_of(context), host_of(context), operation, resource_type, name)
        found = self._cache.get(key)
        if found is None:
            found = self._decide(*key)
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
            self._cache[key] = found
        return found

    def authorize_any(self, context: ConnectionContext, operation: int, resource_type: int) -> bool:
        """Whether the connection may perform `operation` on some resource of the type
        (Kafka's authorizeByResourceType): a super user; an ALLOW for it (or ALL) that
        applies to the connection and is not overruled by a DENY on every resource
        (LITERAL `*`) or on a pattern covering the allowed one; or no ACL of the type
        at all with allow.everyone.if.no.acl.found."""
        if not self.enabled:
            return True
        principal, host = principal_of(context), host_of(context)
        if principal in self.super_users:
            return True
        of_type = [acl for acl in self._acls if acl.resource_type == resource_type]
        if not of_type:
            return self.allow_if_no_acl
        applies = [acl for acl in of_type if acl.principal in (principal, WILDCARD_PRINCIPAL)
                   and acl.host in (host, WILDCARD) and acl.operation in (operation, Op.ALL)]
        denies = [acl for acl in applies if acl.permission == Permission.DENY]
        for acl in applies:
            if acl.permission == Permission.ALLOW and not any(
                    _pattern_matches(deny, acl.name) if deny.pattern_type == Pattern.LITERAL
                    else acl.name.startswith(deny.name) for deny in denies):
                return True
        return False

    def allowed(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        """`authorize` for a principal and host given directly."""
        return True if not self.enabled else self._decide(principal, host, operation, resource_type, name)

    def _decide(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = list(self._matching(resource_type, name))
        if not matching:
            return self.allow_if_no_acl
        applies = [acl for acl in matching
                   if acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)]
        if any(acl.permission == Permission.DENY and acl.operation in (operation, Op.ALL) for acl in applies):
            return False
        implied = IMPLIED_BY.get(Op(operation), frozenset()) if operation in set(Op) else frozenset()
        return any(acl.permission == Permission.ALLOW
                   and (acl.operation in (operation, Op.ALL) or acl.operation in implied)
                   for acl in applies)

    def _matching(self, resource_type: int, name: str) -> Iterable[Acl]:
        literal = self._literal.get(resource_type)
        if literal:
            yield from literal.get(name, ())
            if name != WILDCARD:
                yield from literal.get(WILDCARD, ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for end in range(1, len(name) + 1):
                yield from prefixed.get(name[:end], ())

    # ---- the ACLs -------------------------------------------------------------------------------

    def load(self, data_dir: str) -> None:
        """Read `<data_dir>/acls.json` (none yet: no ACLs) and keep the path for changes."""
        self._path = os.path.join(data_dir, FILE_NAME)
        doc = read_document(self._path, FORMAT_VERSION, "ACL file", REMEDY)
        acls = []
        try:
            for item in (doc or {}).get("acls", []):
                acl = Acl(**item)
                acl.check()
                acls.append(acl)
            self._install(acls)
        except (AttributeError, TypeError, StrataError) as e:
            raise damaged(self._path, "ACL file", e, REMEDY) from None

    def acls(self) -> list[Acl]:
        return list(self._acls)

    def describe(self, flt: AclFilter) -> list[Acl]:
        return [acl for acl in self._acls if flt.matches(acl)]

    def create(self, acls: Iterable[Acl]) -> None:
        """Add the bindings (each already checked), persisted before they apply."""
        with self._lock:
            merged = list(self._acls)
            seen = set(merged)
            for acl in acls:
                if acl not in seen:
                    merged.append(acl)
                    seen.add(acl)
            self._save(merged)
            self._install(merged)

    def delete(self, filters: list[AclFilter]) -> list[list[Acl]]:
        """Remove the bindings each filter matches; returns them per filter."""
        with self._lock:
            removed = [[acl for acl in self._acls if flt.matches(acl)] for flt in filters]
            gone = {acl for group in removed for acl in group}
            if gone:
                kept = [acl for acl in self._acls if acl not in gone]
                self._save(kept)
                self._install(kept)
            return removed

    def _save(self, acls: list[Acl]) -> None:
        if self._path is not None:
            write_document(self._path, "ACL file", {"version": FORMAT_VERSION, "acls": [asdict(a) for a in acls]})

    def _install(self, acls: list[Acl]) -> None:
        literal: dict[int, dict[str, list[Acl]]] = {}
        prefixed: dict[int, dict[str, list[Acl]]] = {}
        for acl in acls:
            index = prefixed if acl.pattern_type == Pattern.PREFIXED else literal
            index.setdefault(acl.resource_type, {}).setdefault(acl.name, []).append(acl)
        # Swapped whole, then the cache emptied: a request sees the old set or the new one.
        self._acls, self._literal, self._prefixed = acls, literal, prefixed
        self._cache = {}


__all__ = ["ANONYMOUS", "Acl", "AclFilter", "Authorizer", "CLUSTER_NAME", "ClusterAuthorizationError",
           "GroupAuthorizationError", "Op", "Pattern", "Permission", "Resource", "SecurityDisabledError",
           "TopicAuthorizationError", "TransactionalIdAuthorizationError", "host_of", "principal_of"]
