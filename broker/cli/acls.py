"""`strata acls`: add, list and remove the broker's ACLs (kafka-acls).

Contract (stdout; errors are one `strata: ...` line on stderr, exit 1; arguments
that do not go together print the subcommand's usage, exit 2). Requests go to the
native listener (--bootstrap-server) as the native ACL requests (NATIVE.md); the
broker needs `authorizer.class.name` set (else SECURITY_DISABLED).

    strata acls add --allow-principal P ... | --deny-principal P ... --operation OP ...
                    (--topic T | --group G | --cluster | --transactional-id ID) ...
                    [--allow-host H ...] [--deny-host H ...] [--resource-pattern-type literal|prefixed]
        Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=T, patternType=LITERAL)`:
        <TAB>(principal=P, host=*, operation=READ, permissionType=ALLOW)
        (one block per resource; every principal × host × operation is one ACL)
    strata acls add --allow-principal P ... [--producer [--idempotent]] [--consumer] --topic T ...
                    [--group G ...] [--transactional-id ID ...] [--allow-host H ...]
        kafka-acls' role shortcuts (AclCommand), the operations implied:
        --producer: WRITE, DESCRIBE, CREATE on each topic; WRITE, DESCRIBE on each
        transactional id; with --idempotent IDEMPOTENT_WRITE on the cluster (LITERAL
        pattern only). --consumer: READ, DESCRIBE on each topic, READ on each group.
        Both may be given. Either takes no --operation, --deny-principal or --deny-host;
        --producer needs a --topic, --consumer a --topic and a --group (and, without
        --producer, no --cluster or --transactional-id). `remove` takes them too.
    strata acls list [RESOURCE ...] [--principal P] [--resource-pattern-type any|match|literal|prefixed]
        Current ACLs for resource `ResourcePattern(...)`:
        <TAB>(principal=..., host=..., operation=..., permissionType=...)
        (no RESOURCE: every ACL; pattern type default: literal with a resource, any without)
    strata acls remove [RESOURCE ...] [--allow-principal P ...] [--deny-principal P ...]
                       [--operation OP ...] [--resource-pattern-type ...] [--force]
        Removed ACLs for resource `ResourcePattern(...)`:   (and each ACL removed)
        (filters as `list`; kafka-acls asks for confirmation, --force is accepted for
        its command lines)

OP is one of Kafka's operation names, any case: All, Read, Write, Create, Delete,
Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite
(Kafka's spellings, with or without underscores).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from client import Admin
from protocol import AclBinding, AclBindingFilter

from . import UsageError
from .addresses import native_address
from .client_support import add_bootstrap_arg, client_errors, command_config

RESOURCE_TYPES = {1: "ANY", 2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID"}
PATTERNS = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
PATTERN_NAMES = {v: k.upper() for k, v in PATTERNS.items()}
OPERATIONS = {"ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
              "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}
OPERATION_NAMES = {v: k for k, v in OPERATIONS.items()}
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
READ, WRITE, CREATE, DESCRIBE, IDEMPOTENT_WRITE = 3, 4, 5, 8, 12
ANY, DENY, ALLOW = 1, 2, 3
CLUSTER_NAME = "kafka-cluster"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("acls", help="add, list and remove ACLs (kafka-acls)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", help="add ACLs")
    _principal_args(add)
    _role_args(add)
    _resource_args(add, patterns=("literal", "prefixed"))
    add.add_argument("--allow-host", action="append", metavar="HOST", help="hosts of the ALLOWs (default: *)")
    add.add_argument("--deny-host", action="append", metavar="HOST", help="hosts of the DENYs (default: *)")
    add.set_defaults(func=_add)
    listing = actions.add_parser("list", help="list ACLs")
    _resource_args(listing, patterns=tuple(PATTERNS))
    listing.add_argument("--principal", metavar="PRINCIPAL", help="only this principal's ACLs")
    listing.set_defaults(func=_list)
    remove = actions.add_parser("remove", help="remove ACLs")
    _principal_args(remove)
    _role_args(remove)
    _resource_args(remove, patterns=tuple(PATTERNS))
    remove.add_argument("--force", action="store_true", help="accepted: removal never asks")
    remove.set_defaults(func=_remove)


def _principal_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                        help="a principal allowed, e.g. User:alice (repeatable)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                        help="a principal denied (repeatable)")
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help="an operation (repeatable): Read, Write, Describe, All, ...")


def _role_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--producer", action="store_true",
                        help="the producer role: WRITE, DESCRIBE, CREATE on the topics (kafka-acls)")
    parser.add_argument("--consumer", action="store_true",
                        help="the consumer role: READ, DESCRIBE on the topics, READ on the groups")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IDEMPOTENT_WRITE on the cluster as well")


def _resource_args(parser: argparse.ArgumentParser, patterns: tuple[str, ...]) -> None:
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", choices=patterns, type=str.lower,
                        help=f"{', '.join(patterns)}")
    add_bootstrap_arg(parser)


def _operation(name: str) -> int:
    key = name.strip().upper().replace("-", "_")
    if key not in OPERATIONS:  # Kafka's CamelCase: DescribeConfigs -> DESCRIBE_CONFIGS
        key = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name.strip())).upper()
    if key not in OPERATIONS or key == "ANY":
        raise UsageError(f"unknown operation {name!r} (one of: All, Read, Write, Create, Delete, Alter, "
                         "Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite)")
    return OPERATIONS[key]


def _resources(args: argparse.Namespace) -> list[tuple[int, str]]:
    return ([(2, t) for t in args.topic] + [(3, g) for g in args.group]
            + [(5, t) for t in args.transactional_id] + ([(4, CLUSTER_NAME)] if args.cluster else []))


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(native_address(args), retries=2, security=command_config(args))


def _pattern(resource_type: int, name: str, pattern_type: int) -> str:
    return (f"`ResourcePattern(resourceType={RESOURCE_TYPES.get(resource_type, resource_type)}, name={name}, "
            f"patternType={PATTERN_NAMES.get(pattern_type, pattern_type)})`")


def _entry(acl: AclBinding) -> str:
    permission = {ALLOW: "ALLOW", DENY: "DENY"}.get(acl.permission, str(acl.permission))
    return (f" \t(principal={acl.principal}, host={acl.host}, "
            f"operation={OPERATION_NAMES.get(acl.operation, acl.operation)}, permissionType={permission})")


def _print_grouped(title: str, acls: Iterable[AclBinding]) -> None:
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in acls:
        grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
    for (resource_type, name, pattern_type), entries in sorted(grouped.items()):
        print(f"{title} for resource {_pattern(resource_type, name, pattern_type)}: ")
        for acl in entries:
            print(_entry(acl))
        print()


def _check_roles(args: argparse.Namespace) -> None:
    """kafka-acls' rules for --producer, --consumer and --idempotent (AclCommandOptions.checkArgs)."""
    if args.idempotent and not args.producer:
        raise UsageError("the --idempotent option is only available if --producer is set")
    if not (args.producer or args.consumer):
        return
    role = "--producer" if args.producer else "--consumer"
    for option, given in (("--operation", args.operation), ("--deny-principal", args.deny_principal),
                          ("--deny-host", getattr(args, "deny_host", None))):
        if given:
            raise UsageError(f"{role} infers its operations and only allows: {option} does not go with it")
    if args.producer and not args.topic:
        raise UsageError("with --producer you must specify a --topic")
    if args.consumer and (not args.topic or not args.group
                          or (not args.producer and (args.cluster or args.transactional_id))):
        raise UsageError("with --consumer you must specify a --topic and a --group and no --cluster or "
                         "--transactional-id option should be specified")


def _role_operations(args: argparse.Namespace, pattern: int) -> dict[tuple[int, str], list[int]]:
    """resource -> the operations --producer / --consumer grant on it (AclCommand's
    getProducerResourceFilterToAcls / getConsumerResourceFilterToAcls, merged)."""
    granted: dict[tuple[int, str], list[int]] = {}

    def grant(resource: tuple[int, str], *operations: int) -> None:
        held = granted.setdefault(resource, [])
        held.extend(op for op in operations if op not in held)

    if args.producer:
        for topic in args.topic:
            grant((TOPIC, topic), WRITE, DESCRIBE, CREATE)
        for transactional_id in args.transactional_id:
            grant((TRANSACTIONAL_ID, transactional_id), WRITE, DESCRIBE)
        if args.idempotent and pattern == PATTERNS["literal"]:
            grant((CLUSTER, CLUSTER_NAME), IDEMPOTENT_WRITE)
    if args.consumer:
        for topic in args.topic:
            grant((TOPIC, topic), READ, DESCRIBE)
        for group in args.group:
            grant((GROUP, group), READ)
    return granted


def _add(args: argparse.Namespace) -> int:
    _check_roles(args)
    resources = _resources(args)
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not args.allow_principal and not args.deny_principal:
        raise UsageError("name a principal: --allow-principal or --deny-principal")
    pattern = PATTERNS[args.resource_pattern_type or "literal"]
    if args.producer or args.consumer:
        acls = [AclBinding(rtype, name, pattern, principal, host, op, ALLOW)
                for (rtype, name), operations in _role_operations(args, pattern).items()
                for principal in args.allow_principal for host in (args.allow_host or ["*"]) for op in operations]
    else:
        if not args.operation:
            raise UsageError("name an operation: --operation")
        operations = [_operation(op) for op in args.operation]
        acls = [AclBinding(rtype, name, pattern, principal, host, op, permission)
                for rtype, name in resources
                for permission, principals, hosts in ((ALLOW, args.allow_principal, args.allow_host),
                                                      (DENY, args.deny_principal, args.deny_host))
                for principal in principals for host in (hosts or ["*"]) for op in operations]
    with client_errors(), _admin(args) as admin:
        admin.create_acls(acls)
    _print_grouped("Adding ACLs", acls)
    return 0


def _filters(args: argparse.Namespace, principals: list[tuple[int, str | None]],
             operations: list[int]) -> list[AclBindingFilter]:
    resources: list[tuple[int, str | None]] = list(_resources(args)) or [(ANY, None)]
    pattern = PATTERNS[args.resource_pattern_type or ("literal" if _resources(args) else "any")]
    return [AclBindingFilter(rtype, name, pattern, principal, None, op, permission)
            for rtype, name in resources for permission, principal in principals for op in operations]


def _list(args: argparse.Namespace) -> int:
    filters = _filters(args, [(ANY, args.principal)], [ANY])
    with client_errors(), _admin(args) as admin:
        found: dict[AclBinding, None] = {}
        for acl_filter in filters:
            found.update(dict.fromkeys(admin.describe_acls(acl_filter)))
    _print_grouped("Current ACLs", found)
    return 0


def _remove(args: argparse.Namespace) -> int:
    _check_roles(args)
    principals: list[tuple[int, str | None]] = ([(ALLOW, p) for p in args.allow_principal]
                                                + [(DENY, p) for p in args.deny_principal]) or [(ANY, None)]
    operations = [_operation(op) for op in args.operation] or [ANY]
    if not _resources(args) and principals == [(ANY, None)]:
        raise UsageError("name a resource or a principal: removing every ACL takes at least one filter")
    if args.producer or args.consumer:
        pattern = PATTERNS[args.resource_pattern_type or "literal"]
        filters = [AclBindingFilter(rtype, name, pattern, principal, None, op, permission)
                   for (rtype, name), role_operations in _role_operations(args, pattern).items()
                   for permission, principal in principals
                   for op in (role_operations if principal is not None else [ANY])]
    else:
        filters = _filters(args, principals, operations)
    with client_errors(), _admin(args) as admin:
        removed = [acl for group in admin.delete_acls(filters) for acl in group]
    _print_grouped("Removed ACLs", dict.fromkeys(removed))
    return 0
