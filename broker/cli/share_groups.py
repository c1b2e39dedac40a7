"""`strata share-groups`: list, describe, reset and delete share groups (KIP-932), with
the flags and tables of Kafka's kafka-share-groups.sh (ShareGroupCommand).

Every request goes to the broker's Kafka listener (ListGroups with the type filter
"share", ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteGroups, ListOffsets; kio requests through kafka_admin.KafkaAdmin.call), at
--kafka-bootstrap-server (addresses.kafka_address says the default).

Contract (stdout; errors are one `strata: ...` line on stderr, exit 1). GROUP may also be
given as `--group GROUP`, as kafka-share-groups takes it.

    strata share-groups list [--state]
        one share group id per line, sorted; with --state a GROUP STATE table
    strata share-groups describe GROUP [--offsets | --members | --state] [--verbose]
        --offsets (the default): GROUP TOPIC PARTITION LEADER-EPOCH START-OFFSET LAG, one
          row per share partition the group has (START-OFFSET: the share-partition start
          offset; LAG: records not yet acknowledged or archived)
        --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT
          (--verbose adds MEMBER-EPOCH)
        --state: GROUP COORDINATOR (ID) STATE #MEMBERS
          (--verbose adds GROUP-EPOCH ASSIGNMENT-EPOCH)
        A group without members says "Share group 'G' has no active members." first
        (stderr, as Kafka's tool); an unknown group is an error.
    strata share-groups reset-offsets GROUP (--to-earliest | --to-latest | --to-offset N |
                                             --to-datetime ISO)
                                      [--topic T[:P,P...] ... | --all-topics] [--dry-run | --execute]
        GROUP TOPIC PARTITION NEW-OFFSET: every share partition of the group, or those of
        --topic. --execute writes them (AlterShareGroupOffsets); a group with members is
        refused (NON_EMPTY_GROUP), as Kafka does.
    strata share-groups delete GROUP [GROUP ...]
        Deletion of requested share groups ('G', ...) was successful.
"""

from __future__ import annotations

import argparse
import sys

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from ..kafka.codec import make, nested
from . import CliError
from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg
from .groups import _admin, _group_args, _parse_topic, _reason, _table, _timestamp_ms
from .kafka_admin import EARLIEST, LATEST, KafkaAdmin, TopicPartition

LIST_GROUPS, SHARE_GROUP_DESCRIBE, DESCRIBE_OFFSETS, ALTER_OFFSETS = 16, 77, 90, 91
SHARE = "share"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("share-groups", help="list, describe, reset and delete share groups")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    def action(name: str, help: str, func) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help)
        add_bootstrap_arg(sub)
        add_kafka_bootstrap_arg(sub)
        sub.set_defaults(func=func)
        return sub

    list_ = action("list", "list share groups, one id per line", _list)
    list_.add_argument("--state", action="store_true", help="print each group's state too")

    describe = action("describe", "a share group's start offsets and lag, members or state", _describe)
    _group_args(describe)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="start offset and lag per partition (the default)")
    view.add_argument("--members", action="store_true", help="the group's members")
    view.add_argument("--state", action="store_true", help="the group's state")
    describe.add_argument("--verbose", action="store_true", help="epochs too")

    reset = action("reset-offsets", "move a share group's start offsets (dry run unless --execute)", _reset)
    _group_args(reset)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--to-datetime", metavar="ISO", help="the first offset at or after a time")
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="T[:P,P...]", help="this topic (or partitions)")
    scope.add_argument("--all-topics", action="store_true", help="every share partition of the group (default)")
    run = reset.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="print the new offsets only (the default)")
    run.add_argument("--execute", action="store_true", help="write the new start offsets")

    delete = action("delete", "delete share groups and their state", _delete)
    _group_args(delete, many=True)


def _request(api_key: int, version: int, **values):
    return make(load_request_schema(api_key, version), **values)


def _check(code, what: str, message: str | None = None) -> None:
    code = ErrorCode(code)
    if code != ErrorCode.none:
        raise CliError(f"{what}: {code.name.upper()}" + (f" ({message})" if message else ""))


def _share_groups(admin: KafkaAdmin) -> list[tuple[str, str]]:
    response = admin.call(_request(LIST_GROUPS, 5, states_filter=(), types_filter=(SHARE,)))
    _check(response.error_code, "list share groups")
    return sorted((g.group_id, g.group_state) for g in response.groups if g.group_type == SHARE)


def _list(args: argparse.Namespace) -> int:
    groups = _share_groups(_admin(args))
    if args.state:
        print(_table(("GROUP", "STATE"), groups, (15, 0)).lstrip("\n"))
        return 0
    for group_id, _ in groups:
        print(group_id)
    return 0


def _described(admin: KafkaAdmin, group_id: str):
    response = admin.call(_request(SHARE_GROUP_DESCRIBE, 1, group_ids=(group_id,),
                                   include_authorized_operations=False))
    group = response.groups[0]
    if group.error_code == ErrorCode.group_id_not_found or group.group_state == "Dead":
        raise CliError(f"Share group '{group_id}' does not exist.")
    _check(group.error_code, f"describe share group {group_id!r}", group.error_message)
    return group


def _offsets(admin: KafkaAdmin, group_id: str) -> list[tuple[str, int, int, int, int]]:
    """(topic, partition, leader epoch, start offset, lag) of every share partition of the group."""
    R = load_request_schema(DESCRIBE_OFFSETS, 1)
    response = admin.call(make(R, groups=(make(nested(R, "groups"), group_id=group_id, topics=None),)))
    group = response.groups[0]
    _check(group.error_code, f"describe offsets of share group {group_id!r}", group.error_message)
    return sorted((t.topic_name, p.partition_index, p.leader_epoch, p.start_offset, p.lag)
                  for t in group.topics for p in t.partitions if p.error_code == ErrorCode.none)


def _describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    group = _described(admin, args.group)
    if not group.members:
        print(f"\nShare group '{group.group_id}' has no active members.", file=sys.stderr)
    if args.state:
        host, port = admin.address.rsplit(":", 1)
        row = [group.group_id, f"{host}:{port}  (0)", group.group_state, len(group.members)]
        header = ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]
        if args.verbose:
            header += ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
            row += [group.group_epoch, group.assignment_epoch]
        print(_table(tuple(header), [tuple(row)], (15, 25, 15, 10, 12, 0)))
        return 0
    if args.members:
        rows = []
        for m in group.members:
            parts = [f"{t.topic_name}:{p}" for t in m.assignment.topic_partitions for p in sorted(t.partitions)]
            row = [group.group_id, m.member_id, m.client_host, m.client_id, len(parts)]
            if args.verbose:
                row.append(m.member_epoch)
            row.append(",".join(parts) or "-")
            rows.append(tuple(row))
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        header += ["MEMBER-EPOCH"] if args.verbose else []
        print(_table((*header, "ASSIGNMENT"), rows, (15, 15, 15, 15, 12, 12, 0)))
        return 0
    rows = [(group.group_id, topic, partition, "-" if epoch < 0 else epoch, "-" if start < 0 else start,
             "-" if lag < 0 else lag) for topic, partition, epoch, start, lag in _offsets(admin, args.group)]
    print(_table(("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"), rows,
                 (15, 15, 10, 12, 12, 0)))
    return 0


def _reset(args: argparse.Namespace) -> int:
    admin = _admin(args)
    known = {(topic, partition) for topic, partition, *_ in _offsets(admin, args.group)}
    if args.topic:
        chosen: set[TopicPartition] = set()
        for value in args.topic:
            topic, partitions = _parse_topic(value)
            count = admin.partition_count(topic)
            for p in range(count) if partitions is None else partitions:
                if not 0 <= p < count:
                    raise CliError(f"topic {topic!r} has no partition {p} (it has {count})")
                chosen.add((topic, p))
        partitions_ = sorted(chosen)
    else:
        partitions_ = sorted(known)
    if not partitions_:
        raise CliError(f"share group {args.group!r} has no share partitions: name them with --topic")
    starts = admin.list_offsets(partitions_, EARLIEST)
    ends = admin.list_offsets(partitions_, LATEST)
    if args.to_earliest:
        targets = starts
    elif args.to_latest:
        targets = ends
    elif args.to_offset is not None:
        targets = {tp: min(max(args.to_offset, starts[tp]), ends[tp]) for tp in partitions_}
    else:
        found = admin.list_offsets(partitions_, _timestamp_ms(args.to_datetime))
        targets = {tp: ends[tp] if found[tp] < 0 else found[tp] for tp in partitions_}
    if args.execute:
        R = load_request_schema(ALTER_OFFSETS, 0)
        T = nested(R, "topics")
        P = nested(T, "partitions")
        by_topic: dict[str, list] = {}
        for tp in partitions_:
            by_topic.setdefault(tp[0], []).append(make(P, partition_index=tp[1], start_offset=targets[tp]))
        response = admin.call(make(R, group_id=args.group, topics=tuple(
            make(T, topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
        if response.error_code == ErrorCode.non_empty_group:
            raise CliError(f"Share group '{args.group}' is not empty: stop its consumers first "
                           f"(start offsets can only be reset in an inactive group)")
        _check(response.error_code, f"reset offsets of share group {args.group!r}", response.error_message)
        for t in response.responses:
            for p in t.partitions:
                _check(p.error_code, f"reset {t.topic_name}-{p.partition_index}", p.error_message)
    rows = [(args.group, tp[0], tp[1], targets[tp]) for tp in partitions_]
    print(_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows, (15, 15, 10, 0)))
    if not args.execute and not args.dry_run:
        print("strata: dry run, nothing written: add --execute to write these start offsets", file=sys.stderr)
    return 0


def _delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    shares = {g for g, _ in _share_groups(admin)}
    missing = [g for g in args.groups if g not in shares]
    if missing:
        raise CliError("; ".join(f"Share group '{g}' does not exist." for g in missing))
    results = admin.delete_groups(args.groups)
    failed = {g: code for g, code in results.items() if code != ErrorCode.none}
    if failed:
        reasons = "; ".join(f"group '{g}': {_reason(code)}" for g, code in failed.items())
        raise CliError(f"deletion of some share groups failed: {reasons}")
    names = ", ".join(f"'{g}'" for g in args.groups)
    print(f"Deletion of requested share groups ({names}) was successful.")
    return 0
