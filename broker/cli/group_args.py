"""What `strata groups` and `strata share-groups` share: their subcommands' common
arguments, GROUP given either way, the reset-offsets options, Kafka's table layout and
the parsing of --topic and --to-datetime (kafka-consumer-groups.sh and
kafka-share-groups.sh take these options alike).

Contract:
    add_action(actions, name, help, func, timeout=False) -> the subcommand's parser, with
        --bootstrap-server/--command-config and --kafka-bootstrap-server (and, with
        `timeout`, Kafka's `--timeout MS`, 30000 by default), `func` to run it.
    add_group_args(parser, many=False, all_groups=False): GROUP as a positional argument
        or as `--group GROUP`; `many`: any number, `args.groups`, otherwise exactly one,
        `args.group`; `all_groups` adds `--all-groups` (then `args.groups` is None:
        every group). connect(args) resolves them (a UsageError when they do not fit) and
        returns the KafkaAdmin for the command.
    add_reset_args(parser, targets, execute_help, dry_run_help): the reset targets named in `targets`
        (from RESET_TARGETS: --to-earliest, --to-latest, --to-offset N, --to-datetime ISO,
        --shift-by N; exactly one is required), --topic T[:P,P...] (repeatable),
        --all-topics, and --dry-run | --execute.
    table(header, rows, widths) -> Kafka's left-aligned columns after a blank line.
    parse_topic("t:0,1") -> ("t", [0, 1]); parse_topic("t") -> ("t", None).
    timestamp_ms(ISO time) -> milliseconds (a naive time is local time, as Kafka reads it).
    reason(error code) -> the code's name and, for the group errors, what it means.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from datetime import datetime

from kio.schema.errors import ErrorCode

from . import CliError, UsageError
from .addresses import kafka_address
from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg, command_config
from .kafka_admin import KafkaAdmin

DEFAULT_TIMEOUT_MS = 30000  # Kafka's tools' --timeout default
RESET_TARGETS = ("to-earliest", "to-latest", "to-offset", "to-datetime", "shift-by")
_TARGET_ARGS: dict[str, dict] = {
    "to-earliest": {"action": "store_true", "help": "the log start offset"},
    "to-latest": {"action": "store_true", "help": "the log end offset"},
    "to-offset": {"type": int, "metavar": "N", "help": "offset N"},
    "to-datetime": {"metavar": "ISO", "help": "the first offset at or after a time, e.g. 2026-11-25T10:00:00 "
                                              "(local time unless it names a zone)"},
    "shift-by": {"type": int, "metavar": "N", "help": "the committed offset plus N (N may be negative)"},
}


def add_action(actions, name: str, help: str, func: Callable[[argparse.Namespace], int], *,
               timeout: bool = False) -> argparse.ArgumentParser:
    sub = actions.add_parser(name, help=help)
    add_bootstrap_arg(sub)
    add_kafka_bootstrap_arg(sub)
    if timeout:
        sub.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                         help=f"how long to wait for each answer, in ms (default {DEFAULT_TIMEOUT_MS})")
    sub.set_defaults(func=func)
    return sub


def add_group_args(parser: argparse.ArgumentParser, many: bool = False, all_groups: bool = False) -> None:
    """GROUP as a positional argument or as `--group GROUP` (Kafka's tools' way)."""
    parser.add_argument("groups", nargs="*" if many else "?", metavar="GROUP")
    parser.add_argument("--group", dest="group_option", action="append", metavar="GROUP",
                        help="the group" + ("; repeat for more" if many else ""))
    if all_groups:
        parser.add_argument("--all-groups", action="store_true", help="every group of the kind")
    parser.set_defaults(resolve_groups=many)


def resolve_groups(args: argparse.Namespace) -> None:
    positional = args.groups if isinstance(args.groups, list) else [args.groups] if args.groups else []
    groups = positional + (args.group_option or [])
    if getattr(args, "all_groups", False):
        if groups:
            raise UsageError(f"give --all-groups or the groups ({', '.join(groups)}), not both")
        args.groups = None
        return
    if not groups:
        raise UsageError("the group is missing: give GROUP or --group GROUP")
    if args.resolve_groups:
        args.groups = list(dict.fromkeys(groups))
    elif len(set(groups)) > 1:
        raise UsageError(f"one group at a time, not {', '.join(groups)}")
    else:
        args.group = groups[0]


def connect(args: argparse.Namespace) -> KafkaAdmin:
    if hasattr(args, "resolve_groups"):
        resolve_groups(args)
    timeout_ms = getattr(args, "timeout", None)
    if timeout_ms is None:
        return KafkaAdmin(kafka_address(args), command_config(args))
    if timeout_ms <= 0:
        raise CliError(f"bad --timeout {timeout_ms}: a number of milliseconds above 0")
    return KafkaAdmin(kafka_address(args), command_config(args), timeout=timeout_ms / 1000)


def add_reset_args(parser: argparse.ArgumentParser, targets: Iterable[str], execute_help: str,
                   dry_run_help: str = "print the new offsets only") -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    for name in targets:
        target.add_argument(f"--{name}", **_TARGET_ARGS[name])
    parser.add_argument("--topic", action="append", metavar="T[:P,P...]",
                        help="reset only this topic (or these partitions of it); repeat for more "
                             "(default: every partition the group has)")
    parser.add_argument("--all-topics", action="store_true", help="every partition the group has (the default)")
    run = parser.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help=dry_run_help)
    run.add_argument("--execute", action="store_true", help=execute_help)


def table(header: tuple[str, ...], rows: list[tuple], widths: tuple[int, ...]) -> str:
    """Left-aligned columns, each at least its `widths` entry wide and as wide as its
    longest cell, the last one unpadded, after a blank line (Kafka's layout)."""
    columns = len(header)
    sizes = [max([widths[i], len(header[i])] + [len(str(r[i])) for r in rows]) for i in range(columns)]
    lines = [""]
    for row in [header, *rows]:
        cells = [str(cell).ljust(sizes[i]) if i < columns - 1 else str(cell) for i, cell in enumerate(row)]
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)


def parse_topic(value: str) -> tuple[str, list[int] | None]:
    topic, sep, partitions = value.partition(":")
    if not topic:
        raise CliError(f"bad --topic {value!r}: expected TOPIC or TOPIC:P,P,...")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in partitions.split(",")]
    except ValueError:
        raise CliError(f"bad --topic {value!r}: partitions are numbers, as in {topic}:0,1") from None


def chosen_partitions(admin: KafkaAdmin, topics: list[str]) -> list[tuple[str, int]]:
    """The partitions that `--topic TOPIC[:P,P,...]` values name, each checked to exist."""
    chosen: set[tuple[str, int]] = set()
    for value in topics:
        topic, partitions = parse_topic(value)
        count = admin.partition_count(topic)
        for p in range(count) if partitions is None else partitions:
            if not 0 <= p < count:
                raise CliError(f"topic {topic!r} has no partition {p} (it has {count})")
            chosen.add((topic, p))
    return sorted(chosen)


def timestamp_ms(value: str) -> int:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise CliError(f"bad --to-datetime {value!r}: expected an ISO time such as 2026-11-25T10:00:00") from None
    return int(moment.timestamp() * 1000)  # a naive time is local time, as Kafka's tool reads it


def reason(code: ErrorCode) -> str:
    name = code.name.upper()
    if code == ErrorCode.non_empty_group:
        return f"{name}: the group has active members"
    if code == ErrorCode.group_id_not_found:
        return f"{name}: the group does not exist"
    return name
