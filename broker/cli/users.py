"""`strata users set|list|delete`: SCRAM credentials, in the style of kafka-configs
--entity-type users (SCRAM-SHA-256/512).

Sent over the Kafka listener, as kafka-configs does: AlterUserScramCredentials
(`set`: this tool salts and hashes the password -- a random 32-byte salt,
PBKDF2 with --iterations, 4096 by default as kafka-configs -- so the password
never travels; `delete`) and DescribeUserScramCredentials (`list`). Every
option of the other Kafka-listener commands applies (--kafka-bootstrap-server,
--command-config for TLS and SASL). The password comes from --password, else
$STRATA_USER_PASSWORD, else a prompt. A refused change is a CliError with
Kafka's error name and message.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import os

from kio.static.primitive import i8, i32

from . import CliError
from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg, command_config, kafka_address
from .kafka_admin import KafkaAdmin

MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
NAMES = {number: name for name, (number, _) in MECHANISMS.items()}
DEFAULT_ITERATIONS = 4096
PASSWORD_ENV = "STRATA_USER_PASSWORD"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("users", help="SCRAM users (kafka-configs --entity-type users)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    set_ = actions.add_parser("set", help="create or replace a user's SCRAM credential")
    set_.add_argument("user")
    set_.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                      help="SCRAM-SHA-256 or SCRAM-SHA-512, repeatable (default: both)")
    set_.add_argument("--password", help=f"the password (default: ${PASSWORD_ENV}, else a prompt)")
    set_.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                      help=f"PBKDF2 iterations, 4096..16384 (default {DEFAULT_ITERATIONS})")
    set_.set_defaults(func=_set)
    list_ = actions.add_parser("list", help="users with SCRAM credentials, their mechanisms and iterations")
    list_.add_argument("users", nargs="*", metavar="USER", help="only these users (default: every user)")
    list_.set_defaults(func=_list)
    delete = actions.add_parser("delete", help="remove a user's SCRAM credential(s)")
    delete.add_argument("user")
    delete.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                        help="only this mechanism, repeatable (default: every one the user has)")
    delete.set_defaults(func=_delete)
    for sub in (set_, list_, delete):
        add_bootstrap_arg(sub)
        add_kafka_bootstrap_arg(sub)


def _admin(args: argparse.Namespace) -> KafkaAdmin:
    return KafkaAdmin(kafka_address(args), command_config(args))


def _check(results) -> None:
    for result in results:
        if result.error_code != 0:
            message = f": {result.error_message}" if result.error_message else ""
            raise CliError(f"user {result.user!r}: {result.error_code.name.upper()}{message}")


def _describe(admin: KafkaAdmin, users: list[str] | None) -> dict[str, list[tuple[str, int]]]:
    from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName

    request = DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(UserName(name=u) for u in users))
    response = admin.call(request)
    if response.error_code != 0:
        raise CliError(f"describe users: {response.error_code.name.upper()}: {response.error_message or ''}")
    _check(response.results)
    return {r.user: [(NAMES.get(i.mechanism, str(i.mechanism)), i.iterations) for i in r.credential_infos]
            for r in response.results}


def _alter(admin: KafkaAdmin, upsertions=(), deletions=()) -> None:
    from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest

    _check(admin.call(AlterUserScramCredentialsRequest(deletions=tuple(deletions),
                                                       upsertions=tuple(upsertions))).results)


def _set(args: argparse.Namespace) -> int:
    from kio.schema.alter_user_scram_credentials.v0.request import ScramCredentialUpsertion

    password = args.password or os.environ.get(PASSWORD_ENV)
    if password is None:
        password = getpass.getpass(f"password for {args.user}: ")
    if not password:
        raise CliError("the password is empty")
    upsertions = []
    for name in args.mechanism or sorted(MECHANISMS):
        number, hash_name = MECHANISMS[name]
        salt = os.urandom(32)
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, max(1, args.iterations))
        upsertions.append(ScramCredentialUpsertion(name=args.user, mechanism=i8(number),
                                                   iterations=i32(args.iterations), salt=salt,
                                                   salted_password=salted))
    _alter(_admin(args), upsertions=upsertions)
    print(f"Completed updating config for user {args.user}.")
    return 0


def _list(args: argparse.Namespace) -> int:
    described = _describe(_admin(args), args.users or None)
    for user, infos in sorted(described.items()):
        credentials = ",".join(f"{name}=iterations={iterations}" for name, iterations in infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {credentials}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from kio.schema.alter_user_scram_credentials.v0.request import ScramCredentialDeletion

    admin = _admin(args)
    names = args.mechanism or [name for name, _ in _describe(admin, [args.user]).get(args.user, [])]
    _alter(admin, deletions=[ScramCredentialDeletion(name=args.user, mechanism=i8(MECHANISMS[n][0]))
                             for n in names])
    print(f"Completed updating config for user {args.user}.")
    return 0
