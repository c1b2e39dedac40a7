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

Offline (`--data-dir DIR`, no broker running on it; what kafka-storage format
--add-scram does for Kafka): `set`, `list` and `delete` read and write the data
directory's credentials file themselves (broker/security/credentials.py
apply_offline: write-temp, fsync, rename, under the data directory's lock; a
broker holding the lock is an error and nothing changes). The broker reads the
file when it starts. `set --data-dir DIR --add-scram 'SCRAM-SHA-256=[name=alice,
password=...]'` (repeatable) takes Kafka's argument as kafka-storage does, in
place of USER / --mechanism / --password / --iterations; `--add-scram-file FILE`
reads such arguments one a line (blank lines and `#` comments skipped), so that
the passwords stay off the command line.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import os

from kio.static.primitive import i8, i32

from kafka_format.errors import StrataError

from ..security.add_scram import parse_add_scram
from ..security.credentials import DataDirectoryInUse, ScramCredentialStore, apply_offline
from ..security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, credential_from_password
from ..security.scram import MECHANISMS as SCRAM
from . import CliError, UsageError
from .addresses import kafka_address
from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg, command_config
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
    set_.add_argument("user", nargs="?", help="the user (not with --add-scram)")
    set_.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS),
                      help="SCRAM-SHA-256 or SCRAM-SHA-512, repeatable (default: both)")
    set_.add_argument("--password", help=f"the password (default: ${PASSWORD_ENV}, else a prompt)")
    set_.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                      help=f"PBKDF2 iterations, 4096..16384 (default {DEFAULT_ITERATIONS})")
    set_.add_argument("--add-scram", action="append", default=[], metavar="'MECHANISM=[name=U,password=P]'",
                      help="with --data-dir: Kafka's kafka-storage format argument (repeatable)")
    set_.add_argument("--add-scram-file", metavar="FILE",
                      help="with --data-dir: --add-scram arguments, one a line")
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
        sub.add_argument("--data-dir", metavar="DIR",
                         help="offline: the data directory of a broker that is not running (seeds users "
                              "before the first start, as kafka-storage format --add-scram)")


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


def _offline(args: argparse.Namespace) -> bool:
    """Whether the command works on --data-dir (and its arguments go together)."""
    if args.data_dir is None:
        if getattr(args, "add_scram", None) or getattr(args, "add_scram_file", None):
            raise UsageError("--add-scram and --add-scram-file seed users offline: they need --data-dir")
        return False
    if args.kafka_bootstrap_server or args.command_config:
        raise UsageError("--data-dir changes the credentials file offline: it does not go with "
                         "--kafka-bootstrap-server or --command-config")
    return True


def _add_scram_arguments(args: argparse.Namespace) -> list[str]:
    arguments = list(args.add_scram)
    if args.add_scram_file:
        try:
            with open(args.add_scram_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(f"--add-scram-file {args.add_scram_file}: cannot read it: "
                           f"{getattr(e, 'strerror', None) or e}") from None
        arguments += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return arguments


def _offline_upsertions(args: argparse.Namespace) -> list[tuple[str, str, ScramCredential]]:
    arguments = _add_scram_arguments(args)
    if arguments and (args.user or args.mechanism or args.password or args.iterations != DEFAULT_ITERATIONS):
        raise UsageError("--add-scram names the user, mechanism, password and iterations itself")
    if not arguments and not args.user:
        raise UsageError("name a user, or give --add-scram")
    upsertions = []
    for argument in arguments:
        try:
            upsertions.append(parse_add_scram(argument))
        except ValueError as e:
            raise CliError(f"--add-scram: {e}") from None
    if args.user:
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            raise CliError(f"--iterations {args.iterations}: must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        password = _password(args)
        upsertions += [(args.user, name, credential_from_password(SCRAM[name], password, args.iterations))
                       for name in args.mechanism or sorted(MECHANISMS)]
    return upsertions


def _apply_offline(data_dir: str, upsertions=(), deletions=()) -> None:
    try:
        apply_offline(data_dir, upsertions, deletions)
    except DataDirectoryInUse as e:
        raise CliError(str(e)) from None
    except (OSError, StrataError) as e:
        raise CliError(f"data directory {data_dir}: {getattr(e, 'strerror', None) or e}") from None


def _password(args: argparse.Namespace) -> str:
    password = args.password or os.environ.get(PASSWORD_ENV)
    if password is None:
        password = getpass.getpass(f"password for {args.user}: ")
    if not password:
        raise CliError("the password is empty")
    return password


def _set(args: argparse.Namespace) -> int:
    from kio.schema.alter_user_scram_credentials.v0.request import ScramCredentialUpsertion

    if _offline(args):
        seeded = _offline_upsertions(args)
        _apply_offline(args.data_dir, upsertions=seeded)
        for user in dict.fromkeys(user for user, _, _ in seeded):
            print(f"Completed updating config for user {user}.")
        return 0
    if not args.user:
        raise UsageError("name a user")
    password = _password(args)
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


def _offline_describe(args: argparse.Namespace) -> dict[str, list[tuple[str, int]]]:
    try:
        described = ScramCredentialStore.open(args.data_dir).describe()
    except (OSError, StrataError) as e:
        raise CliError(f"data directory {args.data_dir}: {getattr(e, 'strerror', None) or e}") from None
    return {user: infos for user, infos in described.items() if not args.users or user in args.users}


def _list(args: argparse.Namespace) -> int:
    described = _offline_describe(args) if _offline(args) else _describe(_admin(args), args.users or None)
    for user, infos in sorted(described.items()):
        credentials = ",".join(f"{name}=iterations={iterations}" for name, iterations in infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {credentials}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from kio.schema.alter_user_scram_credentials.v0.request import ScramCredentialDeletion

    if _offline(args):
        args.users = [args.user]
        held = [name for name, _ in _offline_describe(args).get(args.user, [])]
        names = args.mechanism or held
        missing = [name for name in names if name not in held]
        if missing or not names:
            raise CliError(f"user {args.user!r}: RESOURCE_NOT_FOUND: no {' '.join(missing) or 'SCRAM'} credential")
        _apply_offline(args.data_dir, deletions=[(args.user, name) for name in names])
        print(f"Completed updating config for user {args.user}.")
        return 0
    admin = _admin(args)
    names = args.mechanism or [name for name, _ in _describe(admin, [args.user]).get(args.user, [])]
    _alter(admin, deletions=[ScramCredentialDeletion(name=args.user, mechanism=i8(MECHANISMS[n][0]))
                             for n in names])
    print(f"Completed updating config for user {args.user}.")
    return 0
