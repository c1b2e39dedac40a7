"""`strata configs describe --broker`: the broker's effective configs (kafka-configs --describe --all).

Contract: asks the broker's Kafka listener (--kafka-bootstrap-server; DescribeConfigs
of the broker resource) and prints, as kafka-configs --describe --entity-type brokers
--all does:

    All configs for broker 0 are:
      KEY=VALUE sensitive=false synonyms={SOURCE:KEY=VALUE}     (one line per key, sorted)

SOURCE is STATIC_BROKER_CONFIG for what the broker's configuration sets and
DEFAULT_CONFIG for defaults.
"""

from __future__ import annotations

import argparse

from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg, command_config, kafka_address
from .kafka_admin import KafkaAdmin

BROKER_ID = 0  # the one node (Kafka's node.id)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("configs", help="the broker's effective configs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    describe = actions.add_parser("describe", help="print every config and where it comes from")
    describe.add_argument("--broker", action="store_true", required=True,
                          help="the broker's configs (the only entity so far)")
    add_bootstrap_arg(describe)
    add_kafka_bootstrap_arg(describe)
    describe.set_defaults(func=_describe)


def _describe(args: argparse.Namespace) -> int:
    configs = KafkaAdmin(kafka_address(args), command_config(args)).broker_configs()
    lines = [f"All configs for broker {BROKER_ID} are:"]
    for config in configs:
        shown = "" if config.value is None else config.value
        lines.append(f"  {config.name}={shown} sensitive=false synonyms={{{config.source}:{config.name}={shown}}}")
    print("\n".join(lines))
    return 0
