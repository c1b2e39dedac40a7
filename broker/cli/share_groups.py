"""`strata share-groups`: list, describe, reset and delete share groups (KIP-932), with
the options and tables of Kafka 4.2's kafka-share-groups.sh (ShareGroupCommand).

Every request goes to the broker's Kafka listener (ListGroups with the type filter
"share", ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, DeleteGroups, ListOffsets; kio requests through
kafka_admin.KafkaAdmin.call), at --kafka-bootstrap-server (addresses.kafka_address
says the default). Each action takes Kafka's --command-config FILE and --timeout MS
(30000). GROUP may also be given as `--group GROUP`, as kafka-share-groups takes it.

Contract (stdout; errors are one `strata: ...` line on stderr, exit 1; arguments that
do not go together print the subcommand's usage, exit 2). Tables are Kafka's: a blank
line, then left-aligned columns at least as wide as Kafka's format makes them.

    strata share-groups list [--state [STATES]]
        one share group id per line, sorted; with --state a GROUP STATE table; STATES
        (comma-separated, any case: Empty, Stable, Dead) keeps the groups in them
    strata share-groups describe (GROUP ... | --all-groups) [--offsets | --members | --state]
                                 [--verbose]
        one table per group, in group order:
        --offsets (the default): GROUP TOPIC PARTITION START-OFFSET LAG per share partition
          (--verbose: GROUP TOPIC PARTITION LEADER-EPOCH START-OFFSET LAG); START-OFFSET
          is the share-partition start offset, LAG the records not yet acknowledged or
          archived (KIP-1226); "-" where unknown. A group without share partitions:
          "Share group 'G' has no offset information."
        --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT (--verbose adds
          MEMBER-EPOCH before ASSIGNMENT), members by id; ASSIGNMENT as `t:0,1;u:2`
        --state: GROUP COORDINATOR (ID) STATE #MEMBERS (--verbose: GROUP COORDINATOR (ID)
          STATE GROUP-EPOCH ASSIGNMENT-EPOCH #MEMBERS)
        An Empty group says "Share group 'G' has no active members." on stderr with
        --members (then no table) and --state; an unknown group is an error.
    strata share-groups reset-offsets GROUP (--to-earliest | --to-latest | --to-datetime ISO |
                                             --to-offset N) (--dry-run | --execute)
                                      [--topic T[:P,P...] ... | --all-topics]
        GROUP TOPIC PARTITION NEW-OFFSET, one row per share partition of the group, or
        per partition of --topic (a group or topic the group has no state for yet is
        fine: the reset initializes it). --dry-run only prints; --execute writes the
        start offsets (AlterShareGroupOffsets). A group with members is refused ("Share
        group 'G' is not empty"), as Kafka does. --to-offset is Kafka 4.3's (KIP-1323).
    strata share-groups delete (GROUP ... | --all-groups)
        Deletion of requested share groups ('G', ...) was successful.
        (each group that is not a share group, or not Empty, is refused; the others
        are deleted)
    strata share-groups delete-offsets GROUP --topic T [--topic T ...]
        a TOPIC STATUS table, "Successful" or "Error: <reason>" per topic (an error exits 1)
"""

from __future__ import annotations

import argparse
import sys

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from ..kafka.codec import make, nested
from . import CliError, UsageError
from .group_args import (
    add_action,
    add_group_args,
    add_reset_args,
    chosen_partitions,
    connect,
    reason,
    table,
    timestamp_ms,
)
from .kafka_admin import EARLIEST, LATEST, KafkaAdmin, TopicPartition

LIST_GROUPS, SHARE_GROUP_DESCRIBE, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 16, 77, 90, 91, 92
SHARE = "share"
STATES = ("Empty", "Stable", "Dead")  # Kafka's GroupState.groupStatesForType(SHARE)
INACTIVE = ("Empty", "Dead")
EMPTY = "Empty"
MISSING = "-"
RESET_TARGETS = ("to-earliest", "to-latest", "to-datetime", "to-offset")
COORDINATOR_ID = 0  # the broker, the only node and every group's coordinator


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("share-groups", help="list, describe, reset and delete share groups")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    list_ = add_action(actions, "list", "list share groups, one id per line", _list, timeout=True)
    list_.add_argument("--state", nargs="?", const="", metavar="STATES",
                       help="print each group's state too; with STATES (comma-separated: Empty, Stable, Dead) "
                            "only the groups in those states")

    describe = add_action(actions, "describe", "share groups' start offsets and lag, members or state", _describe,
                          timeout=True)
    add_group_args(describe, many=True, all_groups=True)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="start offset and lag per partition (the default)")
    view.add_argument("--members", action="store_true", help="the groups' members")
    view.add_argument("--state", action="store_true", help="the groups' state")
    describe.add_argument("--verbose", action="store_true", help="leader epochs, member epochs, group epochs too")

    reset = add_action(actions, "reset-offsets", "move a share group's start offsets (--dry-run or --execute)",
                       _reset, timeout=True)
    add_group_args(reset)
    add_reset_args(reset, RESET_TARGETS, execute_help="write the new start offsets")

    delete = add_action(actions, "delete", "delete share groups and their state", _delete, timeout=True)
    add_group_args(delete, many=True, all_groups=True)

    delete_offsets = add_action(actions, "delete-offsets", "delete a share group's state for topics",
                                _delete_offsets, timeout=True)
    add_group_args(delete_offsets)
    delete_offsets.add_argument("--topic", action="append", required=True, metavar="TOPIC",
                                help="a topic whose share-partition state goes; repeat for more")


def _request(api_key: int, version: int, **values):
    return make(load_request_schema(api_key, version), **values)


def _check(code, what: str, message: str | None = None) -> None:
    code = ErrorCode(code)
    if code != ErrorCode.none:
        raise CliError(f"{what}: {code.name.upper()}" + (f" ({message})" if message else ""))


def _states(value: str | None) -> tuple[str, ...] | None:
    """--state's STATES (None: no --state; (): every state), named as Kafka names them."""
    if value is None or not value.strip():
        return None if value is None else ()
    by_name = {s.lower(): s for s in STATES}
    names = [part.strip().lower() for part in value.split(",")]
    if not all(name in by_name for name in names):
        raise CliError(f"Invalid state list '{value}'. Valid states are: {', '.join(STATES)}")
    return tuple(dict.fromkeys(by_name[name] for name in names))


def _share_groups(admin: KafkaAdmin, states: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(group id, state) of the share groups, in those states if any are given, sorted."""
    response = admin.call(_request(LIST_GROUPS, 5, states_filter=states, types_filter=(SHARE,)))
    _check(response.error_code, "list share groups")
    return sorted((g.group_id, g.group_state) for g in response.groups
                  if g.group_type == SHARE and (not states or g.group_state in states))


def _list(args: argparse.Namespace) -> int:
    states = _states(args.state)
    groups = _share_groups(connect(args), states or ())
    if states is None:
        for group_id, _ in groups:
            print(group_id)
    else:
        print(table(("GROUP", "STATE"), groups, (15, 0)).lstrip("\n"))
    return 0


def _described(admin: KafkaAdmin, group_id: str, missing_ok: bool = False):
    """The group's ShareGroupDescribe entry; None for an unknown group when `missing_ok`."""
    response = admin.call(_request(SHARE_GROUP_DESCRIBE, 1, group_ids=(group_id,),
                                   include_authorized_operations=False))
    group = response.groups[0]
    if group.error_code == ErrorCode.group_id_not_found or group.group_state == "Dead":
        if missing_ok:
            return None
        raise CliError(f"Share group '{group_id}' does not exist.")
    _check(group.error_code, f"describe share group {group_id!r}", group.error_message)
    return group


def _offsets(admin: KafkaAdmin, group_id: str, missing_ok: bool = False) -> list[tuple[str, int, int, int, int]]:
    """(topic, partition, leader epoch, start offset, lag) of every share partition of the group."""
    R = load_request_schema(DESCRIBE_OFFSETS, 1)
    response = admin.call(make(R, groups=(make(nested(R, "groups"), group_id=group_id, topics=None),)))
    group = response.groups[0]
    if missing_ok and group.error_code == ErrorCode.group_id_not_found:
        return []
    _check(group.error_code, f"describe offsets of share group {group_id!r}", group.error_message)
    return sorted((t.topic_name, p.partition_index, p.leader_epoch, p.start_offset, p.lag)
                  for t in group.topics for p in t.partitions if p.error_code == ErrorCode.none)


def _known(value: int):
    return MISSING if value < 0 else value


def _describe(args: argparse.Namespace) -> int:
    admin = connect(args)
    group_ids = [g for g, _ in _share_groups(admin)] if args.groups is None else args.groups
    described = {group_id: _described(admin, group_id) for group_id in group_ids}
    for group_id in sorted(described):
        group = described[group_id]
        if args.members:
            _print_members(group, args.verbose)
        elif args.state:
            _print_state(admin, group, args.verbose)
        else:
            _print_offsets(admin, group_id, args.verbose)
    return 0


def _no_active_members(group) -> None:
    if group.group_state == EMPTY:
        print(f"\nShare group '{group.group_id}' has no active members.", file=sys.stderr)


def _print_offsets(admin: KafkaAdmin, group_id: str, verbose: bool) -> None:
    offsets = _offsets(admin, group_id)
    if not offsets:
        print(f"\nShare group '{group_id}' has no offset information.")
        return
    rows: list[tuple] = [(group_id, topic, partition, *((_known(epoch),) if verbose else ()), _known(start),
                          _known(lag)) for topic, partition, epoch, start, lag in offsets]
    header = ("GROUP", "TOPIC", "PARTITION", *(("LEADER-EPOCH",) if verbose else ()), "START-OFFSET", "LAG")
    print(table(header, rows, (15, 15, 10, *((13,) if verbose else ()), 13, 0)))


def _assignment(member) -> tuple[int, str]:
    """(partition count, Kafka's `t:0,1;u:2`) of a member's assignment."""
    by_topic = {t.topic_name: sorted(t.partitions) for t in member.assignment.topic_partitions}
    text = ";".join(sorted(f"{topic}:{','.join(map(str, ps))}" for topic, ps in by_topic.items() if ps))
    return sum(len(ps) for ps in by_topic.values()), text


def _print_members(group, verbose: bool) -> None:
    _no_active_members(group)
    if not group.members:
        return
    rows = []
    for m in sorted(group.members, key=lambda m: m.member_id):
        count, text = _assignment(m)
        rows.append((group.group_id, m.member_id, m.client_host, m.client_id, count,
                     *((m.member_epoch,) if verbose else ()), text))
    header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", *(("MEMBER-EPOCH",) if verbose else ()),
              "ASSIGNMENT")
    print(table(header, rows, (15, 15, 15, 15, 12, *((13,) if verbose else ()), 0)))


def _print_state(admin: KafkaAdmin, group, verbose: bool) -> None:
    _no_active_members(group)
    host, port = admin.address.rsplit(":", 1)
    coordinator = f"{host}:{port}  ({COORDINATOR_ID})"
    if verbose:
        print(table(("GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"),
                    [(group.group_id, coordinator, group.group_state, group.group_epoch, group.assignment_epoch,
                      len(group.members))], (15, 25, 15, 12, 17, 0)))
    else:
        print(table(("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"),
                    [(group.group_id, coordinator, group.group_state, len(group.members))], (15, 25, 15, 0)))


def _reset_partitions(admin: KafkaAdmin, args: argparse.Namespace) -> list[TopicPartition]:
    if not args.topic:
        return sorted({(topic, partition) for topic, partition, *_ in _offsets(admin, args.group, missing_ok=True)})
    return chosen_partitions(admin, args.topic)


def _targets(admin: KafkaAdmin, args: argparse.Namespace, partitions: list[TopicPartition]) -> dict:
    starts = admin.list_offsets(partitions, EARLIEST)
    ends = admin.list_offsets(partitions, LATEST)
    if args.to_earliest:
        return starts
    if args.to_latest:
        return ends
    if args.to_offset is not None:
        return {tp: min(max(args.to_offset, starts[tp]), ends[tp]) for tp in partitions}
    found = admin.list_offsets(partitions, timestamp_ms(args.to_datetime))
    return {tp: ends[tp] if found[tp] < 0 else found[tp] for tp in partitions}


def _write_start_offsets(admin: KafkaAdmin, group_id: str, targets: dict[TopicPartition, int]) -> None:
    R = load_request_schema(ALTER_OFFSETS, 0)
    T = nested(R, "topics")
    P = nested(T, "partitions")
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in sorted(targets.items()):
        by_topic.setdefault(topic, []).append(make(P, partition_index=partition, start_offset=offset))
    response = admin.call(make(R, group_id=group_id, topics=tuple(
        make(T, topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    if response.error_code == ErrorCode.non_empty_group:
        raise CliError(f"Share group '{group_id}' is not empty: stop its consumers first "
                       f"(start offsets can only be reset in an inactive group)")
    _check(response.error_code, f"reset offsets of share group {group_id!r}", response.error_message)
    for t in response.responses:
        for p in t.partitions:
            _check(p.error_code, f"reset {t.topic_name}-{p.partition_index}", p.error_message)


def _reset(args: argparse.Namespace) -> int:
    if not args.dry_run and not args.execute:
        raise UsageError("reset-offsets takes --dry-run (print the new start offsets) or --execute (write them)")
    if args.topic and args.all_topics:
        raise CliError("give --topic or --all-topics, not both")
    admin = connect(args)
    group = _described(admin, args.group, missing_ok=True)
    if group is not None and group.group_state not in INACTIVE:
        raise CliError(f"Share group '{args.group}' is not empty: stop its consumers first "
                       f"(start offsets can only be reset in an inactive group)")
    partitions = _reset_partitions(admin, args)
    if not partitions:
        raise CliError(f"share group {args.group!r} has no share partitions: name them with --topic")
    targets = _targets(admin, args, partitions)
    if args.execute:
        _write_start_offsets(admin, args.group, targets)
    rows = [(args.group, tp[0], tp[1], targets[tp]) for tp in partitions]
    print(table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows, (30, 30, 10, 0)))
    return 0


def _delete(args: argparse.Namespace) -> int:
    admin = connect(args)
    listed = dict(_share_groups(admin))
    group_ids = sorted(listed) if args.groups is None else args.groups
    errors: dict[str, str] = {}
    for group_id in group_ids:
        state = listed.get(group_id)
        if state is None:
            errors[group_id] = f"Group '{group_id}' is not a share group."
        elif state == "Dead":
            errors[group_id] = f"Share group '{group_id}' group state is DEAD."
        elif state != EMPTY:
            errors[group_id] = f"Share group '{group_id}' is not EMPTY: it has active members."
    wanted = [g for g in group_ids if g not in errors]
    results = admin.delete_groups(wanted) if wanted else {}
    errors.update({g: reason(code) for g, code in results.items() if code != ErrorCode.none})
    if errors:
        deleted = [g for g in wanted if g not in errors]
        done = f" (deleted: {', '.join(deleted)})" if deleted else ""
        reasons = "; ".join(f"group '{g}': {e}" for g, e in errors.items())
        raise CliError(f"deletion of some share groups failed: {reasons}{done}")
    names = ", ".join(f"'{g}'" for g in group_ids)
    print(f"Deletion of requested share groups ({names}) was successful.")
    return 0


def _delete_offsets(args: argparse.Namespace) -> int:
    admin = connect(args)
    topics = list(dict.fromkeys(args.topic))
    R = load_request_schema(DELETE_OFFSETS, 0)
    response = admin.call(make(R, group_id=args.group, topics=tuple(
        make(nested(R, "topics"), topic_name=t) for t in topics)))
    if response.error_code not in (ErrorCode.none, ErrorCode.topic_authorization_failed,
                                   ErrorCode.unknown_topic_or_partition):
        if response.error_code == ErrorCode.group_id_not_found:
            raise CliError(f"Share group '{args.group}' does not exist.")
        _check(response.error_code, f"delete offsets of share group {args.group!r}", response.error_message)
    found = {t.topic_name: t for t in response.responses}
    rows, failed = [], []
    for topic in sorted(topics):
        t = found.get(topic)
        code = ErrorCode(t.error_code if t is not None else response.error_code)
        if code == ErrorCode.none and t is not None:
            rows.append((topic, "Successful"))
        else:
            message = (t.error_message if t is not None else response.error_message) or code.name.upper()
            rows.append((topic, f"Error: {message}"))
            failed.append(topic)
    print(table(("TOPIC", "STATUS"), rows, (15, 0)))
    if failed:
        raise CliError(f"the share-group state of {', '.join(failed)} was not deleted (see STATUS)")
    return 0
