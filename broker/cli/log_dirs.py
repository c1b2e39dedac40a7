"""`strata log-dirs describe`: the size of every partition on disk (kafka-log-dirs --describe).

Contract: asks the broker's Kafka listener (--kafka-bootstrap-server; DescribeLogDirs)
and prints what kafka-log-dirs prints: two lines saying what it does, then one line of
JSON, {"brokers": [{"broker": 0, "logDirs": [{"logDir": DIR, "error": null,
"partitions": [{"partition": "TOPIC-P", "size": BYTES, "offsetLag": 0,
"isFuture": false}, ...]}]}], "version": 1}. `--topic-list T1,T2` keeps those
topics only (an unknown one is an error). With tiered storage the broker answers a
second log dir, the remote store's URL, whose sizes are the tiered partitions'
bytes in the store (broker/kafka/log_dirs.py): both are printed.
"""

from __future__ import annotations

import argparse
import json

from .addresses import kafka_address
from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg, command_config
from .kafka_admin import KafkaAdmin

BROKER_ID = 0  # the one node (Kafka's node.id)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("log-dirs", help="the data directory and the size of each partition")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    describe = actions.add_parser("describe", help="print each partition's size (kafka-log-dirs --describe)")
    describe.add_argument("--topic-list", metavar="T1,T2", help="only these topics (default: every topic)")
    add_bootstrap_arg(describe)
    add_kafka_bootstrap_arg(describe)
    describe.set_defaults(func=_describe)


def _describe(args: argparse.Namespace) -> int:
    topics = [t for t in args.topic_list.split(",") if t] if args.topic_list else None
    print("Querying brokers for log directories information")
    results = KafkaAdmin(kafka_address(args), command_config(args)).describe_log_dirs(topics)
    dirs = [{"partitions": [{"partition": f"{topic.name}-{p.partition_index}", "size": p.partition_size,
                             "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                            for topic in result.topics for p in topic.partitions],
             "error": None if result.error_code == 0 else result.error_code.name.upper(),
             "logDir": result.log_dir}
            for result in results]
    print(f"Received log directory information from brokers {BROKER_ID}")
    print(json.dumps({"brokers": [{"broker": BROKER_ID, "logDirs": dirs}], "version": 1},
                     separators=(",", ":")))
    return 0
