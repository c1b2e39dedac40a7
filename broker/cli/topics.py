"""`strata topics`: create, list, describe, alter and delete topics.

Contract (stdout; errors are one `strata: ...` line on stderr, exit 1):

    strata topics create NAME [--partitions N] [--config K=V ...] --bootstrap-server H:P
        Created topic NAME.
    strata topics list --bootstrap-server H:P
        one topic name per line, sorted (internal topics such as
        __consumer_offsets included, as kafka-topics --list does, unless
        --exclude-internal)
    strata topics describe NAME --bootstrap-server H:P
        Topic: NAME<TAB>PartitionCount: N
        <TAB>Partition: 0<TAB>LogStartOffset: S<TAB>LogEndOffset: E    (one line per partition)
        Configs:
        <TAB>key=value                                (every effective setting, sorted by key)
    strata topics alter NAME [--config K=V ...] [--config K= ...] [--delete-config K ...]
                        [--partitions N [--kafka-bootstrap-server H:P]] --bootstrap-server H:P
        Completed increasing the partition count of topic NAME to N.   (with --partitions)
        Completed updating config for topic NAME.                      (with configs)
        (`K=` with an empty value and `--delete-config K` both put K back to its default;
        --partitions grows the topic to N partitions, as kafka-topics --alter does: the
        native protocol has no request for it, so this one goes to the broker's Kafka
        listener as Kafka's CreatePartitions, at --kafka-bootstrap-server, by default
        the --bootstrap-server host on port 9092, `kafka.port`'s default. The partitions
        grow before the configs change.)
    strata topics delete NAME --bootstrap-server H:P
        Deleted topic NAME.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from kio.schema.errors import ErrorCode

from client import Admin

from . import CliError
from .client_support import (add_bootstrap_arg, add_kafka_bootstrap_arg, check_bootstrap, client_errors,
                             kafka_address, parse_config_args)
from .kafka_call import kafka_call

INTERNAL_PREFIX = "__"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=int, default=1, metavar="N",
                        help="number of partitions (default 1)")
    create.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="a topic setting; repeat for more")
    add_bootstrap_arg(create)
    create.set_defaults(func=_create)

    list_ = actions.add_parser("list", help="list topic names, one per line")
    list_.add_argument("--exclude-internal", action="store_true",
                       help="leave out internal topics (names starting with __)")
    add_bootstrap_arg(list_)
    list_.set_defaults(func=_list)

    describe = actions.add_parser("describe",
                                  help="partitions, offsets and every setting of a topic")
    describe.add_argument("name", metavar="NAME")
    add_bootstrap_arg(describe)
    describe.set_defaults(func=_describe)

    alter = actions.add_parser("alter", help="change or reset topic settings")
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE",
                       help="set KEY (an empty VALUE resets it to the default); repeat for more")
    alter.add_argument("--delete-config", action="append", metavar="KEY",
                       help="reset KEY to the default; repeat for more")
    alter.add_argument("--partitions", type=int, metavar="N",
                       help="grow the topic to N partitions (through the broker's Kafka listener)")
    add_kafka_bootstrap_arg(alter, ", for --partitions")
    add_bootstrap_arg(alter)
    alter.set_defaults(func=_alter)

    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name", metavar="NAME")
    add_bootstrap_arg(delete)
    delete.set_defaults(func=_delete)


def _admin(args: argparse.Namespace) -> Admin:
    # Few retries: a command line user would rather hear at once that the broker is down.
    return Admin(check_bootstrap(args.bootstrap_server), retries=2)


def _create(args: argparse.Namespace) -> int:
    configs = parse_config_args(args.config)
    with client_errors(), _admin(args) as admin:
        admin.create_topic(args.name, args.partitions, configs)
    print(f"Created topic {args.name}.")
    return 0


def _list(args: argparse.Namespace) -> int:
    with client_errors(), _admin(args) as admin:
        names = admin.list_topics()
    for name in names:
        if not (args.exclude_internal and name.startswith(INTERNAL_PREFIX)):
            print(name)
    return 0


def _describe(args: argparse.Namespace) -> int:
    with client_errors(), _admin(args) as admin:
        topic = admin.describe_topic(args.name)
        configs = admin.describe_config(args.name)
    lines = [f"Topic: {topic.topic}\tPartitionCount: {len(topic.partitions)}"]
    for p in sorted(topic.partitions, key=lambda p: p.partition):
        lines.append(f"\tPartition: {p.partition}\tLogStartOffset: {p.log_start_offset}"
                     f"\tLogEndOffset: {p.log_end_offset}")
    lines.append("Configs:")
    lines += [f"\t{key}={'' if value is None else value}" for key, value in sorted(configs.items())]
    print("\n".join(lines))
    return 0


def _alter(args: argparse.Namespace) -> int:
    configs = parse_config_args(args.config, allow_empty=True)
    for key in args.delete_config or ():
        configs[key] = None
    if not configs and args.partitions is None:
        raise CliError("nothing to alter: give --partitions N, --config KEY=VALUE or --delete-config KEY")
    if args.kafka_bootstrap_server is not None and args.partitions is None:
        raise CliError("--kafka-bootstrap-server goes with --partitions")
    check_bootstrap(args.bootstrap_server)
    if args.partitions is not None:
        _grow(args)
        print(f"Completed increasing the partition count of topic {args.name} to {args.partitions}.")
    if configs:
        with client_errors(), _admin(args) as admin:
            admin.alter_config(args.name, configs)
        print(f"Completed updating config for topic {args.name}.")
    return 0


def _grow(args: argparse.Namespace) -> None:
    """Kafka's CreatePartitions (v3) for one topic; its error as one line."""
    from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
    from kio.static.primitive import i32Timedelta

    if args.partitions < 1:
        raise CliError(f"--partitions must be at least 1, not {args.partitions}")
    address = kafka_address(args)
    request = CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=args.name, count=args.partitions, assignments=None),),
        timeout=i32Timedelta.parse(timedelta(seconds=30)), validate_only=False)
    response = kafka_call(address, request)
    for result in response.results:
        if result.error_code != ErrorCode.none:
            message = f": {result.error_message}" if result.error_message else ""
            raise CliError(f"grow {args.name} to {args.partitions} partitions: "
                           f"{result.error_code.name.upper()}{message}")


def _delete(args: argparse.Namespace) -> int:
    with client_errors(), _admin(args) as admin:
        admin.delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
    return 0
