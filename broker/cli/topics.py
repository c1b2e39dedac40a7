"""`strata topics`: create, list, describe, alter and delete topics (kafka-topics).

Contract (stdout; errors are one `strata: ...` line on stderr, exit 1; arguments
that do not go together print the subcommand's usage, exit 2). TOPIC is given as
the positional argument or as `--topic TOPIC`, as Kafka's tools take it.

    strata topics create TOPIC [--partitions N] [--replication-factor 1] [--config K=V ...]
                         [--if-not-exists]
        Created topic TOPIC.
        (without --partitions the broker's num.partitions; a replication factor
        other than 1 is refused, INVALID_REPLICATION_FACTOR: the broker is one node;
        --if-not-exists: an existing topic is no error, and nothing is printed)
    strata topics list
        one topic name per line, sorted (internal topics such as
        __consumer_offsets included, as kafka-topics --list does, unless
        --exclude-internal)
    strata topics describe [TOPIC] [--if-exists] [--exclude-internal] [--topics-with-overrides]
        as Kafka 4.0's kafka-topics --describe prints it, per topic:
        Topic: T<TAB>TopicId: ID<TAB>PartitionCount: N<TAB>ReplicationFactor: 1<TAB>Configs: k=v,k2=v2
        <TAB>Topic: T<TAB>Partition: 0<TAB>Leader: 0<TAB>Replicas: 0<TAB>Isr: 0<TAB>Elr: <TAB>LastKnownElr: 
        (one line per partition, each ending in "LastKnownElr: ")
        (Configs: the settings whose source is not Kafka's default, as kafka-topics
        lists them; TopicId, the settings' sources and the replicas come from the Kafka
        listener's Metadata and DescribeConfigs: when it cannot be asked, the topic line
        has no TopicId and no Configs, with one note on stderr. No TOPIC: every topic.
        --topics-with-overrides: only the topic lines of topics with such settings.)
    strata topics describe [TOPIC] --details
        Topic: TOPIC<TAB>PartitionCount: N
        <TAB>Partition: 0<TAB>LogStartOffset: S<TAB>LogEndOffset: E    (one line per partition)
        Configs:
        <TAB>key=value                 (every effective setting, sorted by key; a setting
                                       the topic overrides ends in " (overridden)")
        (no TOPIC: every topic, one block each. Which settings are overridden comes from
        the Kafka listener's DescribeConfigs; when it cannot be asked the settings are
        printed unmarked with one note on stderr)
    strata topics alter TOPIC [--config K=V ...] [--config K= ...] [--delete-config K ...]
                        [--partitions N [--kafka-bootstrap-server H:P]] [--if-exists]
        Completed increasing the partition count of topic TOPIC to N.   (with --partitions)
        Completed updating config for topic TOPIC.                      (with configs)
        (`K=` with an empty value and `--delete-config K` both put K back to its default;
        --partitions grows the topic to N partitions, as kafka-topics --alter does: the
        native protocol has no request for it, so this one goes to the broker's Kafka
        listener as Kafka's CreatePartitions, at --kafka-bootstrap-server. The
        partitions grow before the configs change.)
    strata topics delete TOPIC [--if-exists]
        Deleted topic TOPIC.
    (--if-exists: an unknown topic is no error, and nothing is printed)
    Every subcommand takes --bootstrap-server H:P (client_support.py: its default; either
    listener of the broker, broker/cli/addresses.py).

kafka-topics' flag form does the same beside the subcommands: `strata topics --create
--topic T [--partitions N] [--replication-factor 1] [--config K=V ...]`, `--list`,
`--describe`, `--alter --topic T --partitions N`, `--delete --topic T`, with the options
above, printing what kafka-topics prints (`Created topic T.`; nothing for --alter and
--delete). As kafka-topics, --topic of --list and --describe is a regular expression
(a name matches itself; commas separate alternatives), and a --describe that matches
no topic says `Topic 'T' does not exist as expected`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from kio.schema.errors import ErrorCode

from client import Admin, StrataClientError

from . import CliError, UsageError
from .addresses import kafka_address, native_address
from .client_support import (
    add_bootstrap_arg,
    add_kafka_bootstrap_arg,
    add_topic_args,
    check_bootstrap,
    client_errors,
    command_config,
    parse_config_args,
    topic_arg,
)
from .kafka_admin import KafkaAdmin, TopicConfig, TopicInfo
from .kafka_call import kafka_call

INTERNAL_PREFIX = "__"
USE_BROKER_DEFAULT = -1  # CREATE_TOPIC's partitions: the broker's num.partitions
DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
OVERRIDDEN = " (overridden)"
DEFAULT_CONFIG = "DEFAULT_CONFIG"
NODE_ID = 0  # the broker, leader and only replica of every partition
FLAG_ACTIONS = ("create", "list", "describe", "alter", "delete")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "topics", help="create, list, describe, alter and delete topics",
        description="Create, list, describe, alter and delete topics: `strata topics ACTION ...`, or "
                    "kafka-topics' flag form `strata topics --create|--list|--describe|--alter|--delete ...`.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = False  # kafka-topics' flag form instead

    create = actions.add_parser("create", help="create a topic")
    add_topic_args(create)
    create.add_argument("--partitions", type=int, metavar="N",
                        help="number of partitions (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, default=1, metavar="1",
                        help="replicas per partition: 1, the broker being one node")
    create.add_argument("--if-not-exists", action="store_true",
                        help="an existing topic is no error")
    create.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="a topic setting; repeat for more")
    add_bootstrap_arg(create)
    create.set_defaults(func=_subcommand(_create))

    list_ = actions.add_parser("list", help="list topic names, one per line")
    list_.add_argument("--exclude-internal", action="store_true",
                       help="leave out internal topics (names starting with __)")
    add_bootstrap_arg(list_)
    list_.set_defaults(func=_subcommand(_list))

    describe = actions.add_parser("describe", help="a topic's partitions and settings, as kafka-topics --describe")
    add_topic_args(describe, optional=True)
    describe.add_argument("--if-exists", action="store_true", help="an unknown topic is no error")
    _describe_args(describe)
    add_bootstrap_arg(describe)
    add_kafka_bootstrap_arg(describe, ", for the topic ids and the settings' sources")
    describe.set_defaults(func=_subcommand(_describe))

    alter = actions.add_parser("alter", help="change or reset topic settings")
    add_topic_args(alter)
    alter.add_argument("--if-exists", action="store_true", help="an unknown topic is no error")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE",
                       help="set KEY (an empty VALUE resets it to the default); repeat for more")
    alter.add_argument("--delete-config", action="append", metavar="KEY",
                       help="reset KEY to the default; repeat for more")
    alter.add_argument("--partitions", type=int, metavar="N",
                       help="grow the topic to N partitions (through the broker's Kafka listener)")
    add_kafka_bootstrap_arg(alter, ", for --partitions")
    add_bootstrap_arg(alter)
    alter.set_defaults(func=_subcommand(_alter))

    delete = actions.add_parser("delete", help="delete a topic and its data")
    add_topic_args(delete)
    delete.add_argument("--if-exists", action="store_true", help="an unknown topic is no error")
    add_bootstrap_arg(delete)
    delete.set_defaults(func=_subcommand(_delete))

    _flag_form(parser)


def _describe_args(parser: argparse._ActionsContainer) -> None:
    parser.add_argument("--exclude-internal", action="store_true",
                        help="leave out internal topics (names starting with __)")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="only the topic lines of topics with settings other than Kafka's defaults")
    parser.add_argument("--details", action="store_true",
                        help="Strata's view instead: each partition's log start and end offsets, and every "
                             "effective setting (the overridden ones marked)")


def _flag_form(parser: argparse.ArgumentParser) -> None:
    """kafka-topics' options, on `strata topics` itself (see the module contract)."""
    form = parser.add_argument_group("kafka-topics' flag form (instead of an ACTION)")
    choice = form.add_mutually_exclusive_group()
    for name in FLAG_ACTIONS:
        choice.add_argument(f"--{name}", dest="flag_action", action="store_const", const=name,
                            help=f"{name} (as `strata topics {name}`)")
    form.add_argument("--topic", dest="topic_option", metavar="TOPIC",
                      help="the topic (of --list and --describe: a regular expression)")
    form.add_argument("--partitions", type=int, metavar="N", help="--create: partitions; --alter: grow to N")
    form.add_argument("--replication-factor", type=int, default=1, metavar="1", help="--create: 1")
    form.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic setting; repeat for more")
    form.add_argument("--delete-config", action="append", metavar="KEY", help="--alter: reset KEY")
    form.add_argument("--if-exists", action="store_true", help="--alter, --describe, --delete: no error when missing")
    form.add_argument("--if-not-exists", action="store_true", help="--create: no error when it exists")
    _describe_args(form)
    add_bootstrap_arg(form)
    add_kafka_bootstrap_arg(form)
    parser.set_defaults(func=_run_flag_form, topic=None, flag_action=None)


def _subcommand(func):
    def run(args: argparse.Namespace) -> int:
        if getattr(args, "flag_action", None) is not None:
            raise UsageError(f"give the subcommand {args.action} or --{args.flag_action}, not both")
        return func(args)
    return run


def _run_flag_form(args: argparse.Namespace) -> int:
    action = args.flag_action
    if action is None:
        raise UsageError("give an ACTION (create, list, describe, alter, delete) or one of --create, --list, "
                         "--describe, --alter, --delete")
    if action == "alter" and args.partitions is None and not args.config and not args.delete_config:
        raise UsageError("--alter needs --partitions N (or --config KEY=VALUE)")
    if action in ("list", "describe") and args.topic_option is not None:
        return _list(args, _pattern(args.topic_option)) if action == "list" else _describe_matching(args)
    args.quiet = action in ("alter", "delete")  # kafka-topics prints nothing for these
    return {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete}[action](args)


def _pattern(text: str) -> re.Pattern:
    """kafka-topics' --topic of --list and --describe: a regular expression over the whole
    name, commas separating alternatives, quotes and spaces dropped (Kafka's IncludeList)."""
    cleaned = text.strip().replace(",", "|").replace(" ", "").strip("\"'")
    try:
        return re.compile(cleaned)
    except re.error as e:
        raise UsageError(f"--topic {text!r} is not a regular expression: {e}") from None


def _matching(args: argparse.Namespace, pattern: re.Pattern) -> list[str]:
    with client_errors(), _admin(args) as admin:
        names = admin.list_topics()
    return [n for n in names if pattern.fullmatch(n) and not (args.exclude_internal and n.startswith(INTERNAL_PREFIX))]


def _describe_matching(args: argparse.Namespace) -> int:
    names = _matching(args, _pattern(args.topic_option))
    if not names:
        if args.if_exists:
            return 0
        raise CliError(f"Topic '{args.topic_option}' does not exist as expected")
    return _describe(args, names)


def _admin(args: argparse.Namespace) -> Admin:
    # Few retries: a command line user would rather hear at once that the broker is down.
    return Admin(native_address(args), retries=2, security=command_config(args))


@contextmanager
def _unless(code: ErrorCode, allowed: bool) -> Iterator[list[bool]]:
    """Client errors as CliErrors, except the broker's `code` when `allowed`, which is
    swallowed; the yielded list holds True once it was."""
    swallowed: list[bool] = []
    with client_errors():
        try:
            yield swallowed
        except StrataClientError as e:
            if not (allowed and e.code is not None and int(e.code) == int(code)):
                raise
            swallowed.append(True)


def _create(args: argparse.Namespace) -> int:
    name = topic_arg(args)
    configs = parse_config_args(args.config)
    if args.replication_factor != 1:
        raise CliError(f"--replication-factor {args.replication_factor}: INVALID_REPLICATION_FACTOR: a Strata "
                       f"broker is a single node, so every partition has exactly 1 replica")
    if args.partitions is not None and args.partitions < 1:
        raise CliError(f"--partitions must be at least 1, not {args.partitions}")
    partitions = USE_BROKER_DEFAULT if args.partitions is None else args.partitions
    with _unless(ErrorCode.topic_already_exists, args.if_not_exists) as existed, _admin(args) as admin:
        admin.create_topic(name, partitions, configs)
    if not existed:
        print(f"Created topic {name}.")
    return 0


def _list(args: argparse.Namespace, pattern: re.Pattern | None = None) -> int:
    with client_errors(), _admin(args) as admin:
        names = admin.list_topics()
    for name in names:
        if not (args.exclude_internal and name.startswith(INTERNAL_PREFIX)) and (
                pattern is None or pattern.fullmatch(name)):
            print(name)
    return 0


def _describe(args: argparse.Namespace, names: list[str] | None = None) -> int:
    if names is None and (args.topic or args.topic_option):
        names = [topic_arg(args)]
    if not args.details:
        return _describe_as_kafka(args, names)
    found = []
    with _unless(ErrorCode.unknown_topic_or_partition, args.if_exists), _admin(args) as admin:
        for name in names if names is not None else admin.list_topics():
            found.append((admin.describe_topic(name), admin.describe_config(name)))
    if not found:
        return 0
    overridden = _overridden(args, [topic.topic for topic, _ in found])
    blocks = []
    for topic, configs in found:
        lines = [f"Topic: {topic.topic}\tPartitionCount: {len(topic.partitions)}"]
        for p in sorted(topic.partitions, key=lambda p: p.partition):
            lines.append(f"\tPartition: {p.partition}\tLogStartOffset: {p.log_start_offset}"
                         f"\tLogEndOffset: {p.log_end_offset}")
        lines.append("Configs:")
        marked = overridden.get(topic.topic, set())
        lines += [f"\t{key}={'' if value is None else value}{OVERRIDDEN if key in marked else ''}"
                  for key, value in sorted(configs.items())]
        blocks.append("\n".join(lines))
    print("\n".join(blocks))
    return 0


def _describe_as_kafka(args: argparse.Namespace, names: list[str] | None) -> int:
    """kafka-topics --describe's lines (see the module contract)."""
    found = []
    with _unless(ErrorCode.unknown_topic_or_partition, args.if_exists), _admin(args) as admin:
        if names is None:
            names = [n for n in admin.list_topics()
                     if not (args.exclude_internal and n.startswith(INTERNAL_PREFIX))]
        for name in names:
            found.append(admin.describe_topic(name))
    if not found:
        return 0
    topics: dict[str, TopicInfo] = {}
    configs: dict[str, list[TopicConfig]] = {}
    try:
        kafka = KafkaAdmin(kafka_address(args), command_config(args))
        topics = kafka.describe_topics([t.topic for t in found])
        configs = kafka.topic_configs([t.topic for t in found])
    except CliError as e:
        print(f"strata: topic ids and settings are not shown: {e}", file=sys.stderr)
    lines = []
    for topic in found:
        name = topic.topic
        info = topics.get(name)
        by_partition = {p.partition: p for p in info.partitions} if info is not None else {}
        set_here = ",".join(f"{c.name}={'' if c.value is None else c.value}"
                            for c in configs.get(name, ()) if c.source != DEFAULT_CONFIG)
        if args.topics_with_overrides and not set_here:
            continue
        partitions = sorted(p.partition for p in topic.partitions)
        first = by_partition.get(partitions[0]) if partitions else None
        replication = len(first.replicas) if first is not None else 1
        topic_id = f"\tTopicId: {info.topic_id}" if info is not None and info.topic_id else ""
        lines.append(f"Topic: {name}{topic_id}\tPartitionCount: {len(partitions)}\tReplicationFactor: {replication}"
                     f"\tConfigs: {set_here}")
        if args.topics_with_overrides:
            continue
        for p in partitions:
            known = by_partition.get(p)
            leader = NODE_ID if known is None else known.leader
            replicas = (NODE_ID,) if known is None else known.replicas
            isr = (NODE_ID,) if known is None else known.isr
            lines.append(f"\tTopic: {name}\tPartition: {p}\tLeader: {'none' if leader < 0 else leader}"
                         f"\tReplicas: {_ids(replicas)}\tIsr: {_ids(isr)}\tElr: \tLastKnownElr: ")
    if lines:
        print("\n".join(lines))
    return 0


def _ids(nodes: tuple[int, ...]) -> str:
    return ",".join(str(n) for n in nodes)


def _overridden(args: argparse.Namespace, topics: list[str]) -> dict[str, set[str]]:
    """{topic: the settings it overrides}, from the Kafka listener; {} (and a note on
    stderr) when that cannot be asked."""
    try:
        address = kafka_address(args)
        described: dict[str, list[TopicConfig]] = KafkaAdmin(address, command_config(args)).topic_configs(topics)
    except CliError as e:
        print(f"strata: overridden settings are not marked: {e}", file=sys.stderr)
        return {}
    return {topic: {c.name for c in configs if c.source == DYNAMIC_TOPIC_CONFIG}
            for topic, configs in described.items()}


def _alter(args: argparse.Namespace) -> int:
    name = topic_arg(args)
    configs = parse_config_args(args.config, allow_empty=True)
    for key in args.delete_config or ():
        configs[key] = None
    if not configs and args.partitions is None:
        raise UsageError("nothing to alter: give --partitions N, --config KEY=VALUE or --delete-config KEY")
    if args.kafka_bootstrap_server is not None and args.partitions is None:
        raise UsageError("--kafka-bootstrap-server goes with --partitions")
    check_bootstrap(args.bootstrap_server)
    if args.if_exists:
        with _unless(ErrorCode.unknown_topic_or_partition, True) as missing, _admin(args) as admin:
            admin.describe_topic(name)
        if missing:
            return 0
    if args.partitions is not None:
        _grow(args, name)
        if not getattr(args, "quiet", False):
            print(f"Completed increasing the partition count of topic {name} to {args.partitions}.")
    if configs:
        with client_errors(), _admin(args) as admin:
            admin.alter_config(name, configs)
        if not getattr(args, "quiet", False):
            print(f"Completed updating config for topic {name}.")
    return 0


def _grow(args: argparse.Namespace, name: str) -> None:
    """Kafka's CreatePartitions (v3) for one topic; its error as one line."""
    from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
    from kio.schema.types import TopicName
    from kio.static.primitive import i32Timedelta

    if args.partitions < 1:
        raise CliError(f"--partitions must be at least 1, not {args.partitions}")
    address = kafka_address(args)
    request = CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=TopicName(name), count=args.partitions, assignments=None),),
        timeout=i32Timedelta.parse(timedelta(seconds=30)), validate_only=False)
    response = kafka_call(address, request, security=command_config(args))
    for result in response.results:
        if result.error_code != ErrorCode.none:
            message = f": {result.error_message}" if result.error_message else ""
            raise CliError(f"grow {name} to {args.partitions} partitions: "
                           f"{result.error_code.name.upper()}{message}")


def _delete(args: argparse.Namespace) -> int:
    name = topic_arg(args)
    with _unless(ErrorCode.unknown_topic_or_partition, args.if_exists) as missing, _admin(args) as admin:
        admin.delete_topic(name)
    if not missing and not getattr(args, "quiet", False):
        print(f"Deleted topic {name}.")
    return 0
