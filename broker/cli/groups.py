"""`strata groups`: list, describe, reset and delete consumer groups (kafka-consumer-groups).

Groups of both protocols are covered: a native client's COMMIT_OFFSET and a Kafka
consumer's OffsetCommit write the same `__consumer_offsets`; Kafka consumer groups of
either group protocol (classic, and KIP-848's `group.protocol=consumer`, described
through ConsumerGroupDescribe; see kafka_admin.py). Every request goes to
the broker's Kafka listener (its admin APIs ListGroups, DescribeGroups, OffsetFetch,
ListOffsets, OffsetCommit, DeleteGroups; see kafka_admin.py), at
--kafka-bootstrap-server (addresses.kafka_address says the default).

Contract (stdout; errors are one `strata: ...` line on stderr, exit 1; arguments that
do not go together print the subcommand's usage, exit 2). GROUP may also be given as
`--group GROUP`, as kafka-consumer-groups takes it.

    strata groups list [--state]
        one group id per line, sorted; with --state a GROUP STATE table (a group
        that only has committed offsets, native ones included, is Empty)
    strata groups describe GROUP [--offsets | --members]
        --offsets (the default), one row per partition the group has committed or
        is assigned, as kafka-consumer-groups --describe prints it:
        GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
        (LAG = log end - committed; "-" where there is no committed offset or no member;
        the log end, not the last stable offset, even for read_committed consumers,
        as kafka-consumer-groups does: its lag may count an open transaction's records)
        --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
        A group without members says "Consumer group 'G' has no active members." first;
        an unknown group is an error.
    strata groups reset-offsets GROUP (--to-earliest | --to-latest | --to-offset N |
                                       --to-datetime ISO | --shift-by N)
                                [--topic T[:P,P...] ...] [--dry-run | --execute]
        GROUP TOPIC PARTITION NEW-OFFSET, one row per partition: every partition the
        group has committed, or those of --topic (a topic without partitions: all of
        them). Targets are kept within [log start, log end], as Kafka does; a datetime
        past the last record goes to the log end. --dry-run (the default) only
        prints; --execute commits. A group with active members is refused (Kafka's
        rule: reset only an inactive group).
    strata groups delete GROUP [GROUP ...]
        Deletion of requested consumer groups ('G', ...) was successful.
        (a group with active members is refused with NON_EMPTY_GROUP)
"""

from __future__ import annotations

import argparse
import sys

from kio.schema.errors import ErrorCode

from . import CliError
from .group_args import (
    RESET_TARGETS,
    add_action,
    add_group_args,
    add_reset_args,
    chosen_partitions,
    connect,
    reason,
    table,
    timestamp_ms,
)
from .kafka_admin import EARLIEST, LATEST, Group, KafkaAdmin, TopicPartition

INACTIVE_STATES = ("Empty", "Dead")
MISSING = "-"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("groups", help="list, describe, reset and delete consumer groups")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    list_ = add_action(actions, "list", "list consumer groups, one id per line", _list)
    list_.add_argument("--state", action="store_true", help="print each group's state too")

    describe = add_action(actions, "describe", "a group's offsets and lag, or its members", _describe)
    add_group_args(describe)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="offsets and lag per partition (the default)")
    view.add_argument("--members", action="store_true", help="the group's members")

    reset = add_action(actions, "reset-offsets", "move a group's committed offsets (dry run unless --execute)",
                       _reset)
    add_group_args(reset)
    add_reset_args(reset, RESET_TARGETS, execute_help="commit the new offsets",
                   dry_run_help="print the new offsets only (the default)")

    delete = add_action(actions, "delete", "delete groups and their committed offsets", _delete)
    add_group_args(delete, many=True)


def _list(args: argparse.Namespace) -> int:
    groups = connect(args).list_groups()
    if args.state:
        print(table(("GROUP", "STATE"), [(group_id, state) for group_id, _, state in groups], (25, 0)).lstrip("\n"))
        return 0
    for group_id, _, _ in groups:
        print(group_id)
    return 0


def _existing_group(admin: KafkaAdmin, group_id: str) -> tuple[Group, dict[TopicPartition, int]]:
    group = admin.describe_group(group_id)
    committed = admin.committed(group_id)
    if group.state == "Dead" and not committed:
        raise CliError(f"consumer group {group_id!r} does not exist")
    return group, committed


def _describe(args: argparse.Namespace) -> int:
    admin = connect(args)
    group, committed = _existing_group(admin, args.group)
    if not group.members:
        print(f"\nConsumer group '{group.group_id}' has no active members.")
    if args.members:
        members = [(group.group_id, m.member_id, m.host, m.client_id, len(m.assignment)) for m in group.members]
        print(table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"), members, (15, 15, 15, 15, 12)))
        return 0
    owner = {tp: m for m in group.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner))
    ends = admin.list_offsets(partitions, LATEST) if partitions else {}
    rows: list[tuple] = []
    for tp in partitions:
        current, end = committed.get(tp), ends[tp]
        member = owner.get(tp)
        rows.append((group.group_id, tp[0], tp[1], MISSING if current is None else current, end,
                     MISSING if current is None else max(0, end - current),
                     member.member_id if member else MISSING, member.host if member else MISSING,
                     member.client_id if member else MISSING))
    print(table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                  "HOST", "CLIENT-ID"), rows, (15, 15, 10, 15, 15, 15, 15, 15, 0)))
    return 0


def _reset_partitions(admin: KafkaAdmin, args: argparse.Namespace,
                      committed: dict[TopicPartition, int]) -> list[TopicPartition]:
    if not args.topic:
        return sorted(committed)
    return chosen_partitions(admin, args.topic)


def _targets(admin: KafkaAdmin, args: argparse.Namespace, partitions: list[TopicPartition],
             committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    starts = admin.list_offsets(partitions, EARLIEST)
    ends = admin.list_offsets(partitions, LATEST)

    def within(tp: TopicPartition, offset: int) -> int:
        return min(max(offset, starts[tp]), ends[tp])

    if args.to_earliest:
        return starts
    if args.to_latest:
        return ends
    if args.to_offset is not None:
        return {tp: within(tp, args.to_offset) for tp in partitions}
    if args.to_datetime is not None:
        found = admin.list_offsets(partitions, timestamp_ms(args.to_datetime))
        return {tp: ends[tp] if found[tp] < 0 else found[tp] for tp in partitions}
    targets = {}
    for tp in partitions:
        if tp not in committed:
            raise CliError(f"cannot shift the offset of {tp[0]}-{tp[1]}: group {args.group!r} "
                           f"has no committed offset there")
        targets[tp] = within(tp, committed[tp] + args.shift_by)
    return targets


def _reset(args: argparse.Namespace) -> int:
    if args.topic and args.all_topics:
        raise CliError("give --topic or --all-topics, not both")
    admin = connect(args)
    group = admin.describe_group(args.group)
    if group.state not in INACTIVE_STATES:
        raise CliError(f"Assignments can only be reset if the group '{args.group}' is inactive, but the "
                       f"current state is {group.state} ({len(group.members)} active members): stop its "
                       f"consumers first")
    committed = admin.committed(args.group)
    partitions = _reset_partitions(admin, args, committed)
    if not partitions:
        raise CliError(f"group {args.group!r} has no committed offsets: name the partitions to reset "
                       f"with --topic")
    targets = _targets(admin, args, partitions, committed)
    if args.execute:
        admin.commit(args.group, targets)
    rows = [(args.group, tp[0], tp[1], targets[tp]) for tp in partitions]
    print(table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows, (30, 30, 10, 0)))
    if not args.execute and not args.dry_run:
        print("strata: dry run, nothing committed: add --execute to commit these offsets", file=sys.stderr)
    return 0


def _delete(args: argparse.Namespace) -> int:
    results = connect(args).delete_groups(args.groups)
    failed = {g: code for g, code in results.items() if code != ErrorCode.none}
    if failed:
        reasons = "; ".join(f"group '{g}': {reason(code)}" for g, code in failed.items())
        deleted = [g for g in args.groups if g not in failed]
        done = f" (deleted: {', '.join(deleted)})" if deleted else ""
        raise CliError(f"deletion of some consumer groups failed: {reasons}{done}")
    names = ", ".join(f"'{g}'" for g in args.groups)
    print(f"Deletion of requested consumer groups ({names}) was successful.")
    return 0
