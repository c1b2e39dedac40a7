"""`strata configs describe|alter --broker`: the broker's configs, as kafka-configs
--entity-type brokers shows and changes them.

Sent over the Kafka listener, as kafka-configs does (every option of the other
Kafka-listener commands applies: --kafka-bootstrap-server, --command-config for TLS
and SASL). The entity is broker 0 (`--entity-name ID`, Kafka's node.id) or, with
`--entity-default`, the cluster-wide defaults of every broker.

- `describe --broker` (DescribeConfigs with synonyms) prints, as kafka-configs
  --describe --entity-type brokers --entity-name 0 --all does, one line per key, sorted:
      All configs for broker 0 are:
        KEY=VALUE sensitive=false synonyms={SOURCE:KEY=VALUE, SOURCE:KEY=VALUE}
  the synonyms are every layer that sets the key, the one in effect first:
  DYNAMIC_BROKER_CONFIG (set for this broker at runtime), DYNAMIC_DEFAULT_BROKER_CONFIG
  (set for every broker at runtime), STATIC_BROKER_CONFIG (the broker's configuration
  file), DEFAULT_CONFIG (Kafka's default). `describe --broker --entity-default` prints
  only the cluster-wide defaults set at runtime, as kafka-configs --entity-default does:
      Default configs for brokers in the cluster are:
        KEY=VALUE sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:KEY=VALUE}
- `alter --broker [--entity-default] --add-config 'k=v,k2=[a,b]' --delete-config k3,k4`
  sends one IncrementalAlterConfigs (SET each added key, DELETE each deleted one) and
  prints "Completed updating config for broker 0." (or "Completed updating default
  config for brokers in the cluster."). --add-config is read as kafka-configs reads it:
  pairs split at commas outside square brackets, brackets dropped from values (a list
  value is `[a,b]`). Deleting a key the entity does not set at runtime is refused, as
  kafka-configs refuses it ("Invalid config(s): k3"). Whatever the broker refuses (an
  unknown or read-only key, a bad value) is one line with Kafka's error name and the
  broker's message naming the key, a non-zero exit, and nothing changed: the broker
  applies the whole request or none of it.
"""

from __future__ import annotations

import argparse
import re

from . import CliError, UsageError
from .addresses import kafka_address
from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg, command_config
from .kafka_admin import KafkaAdmin

BROKER_ID = 0  # the one node (Kafka's node.id)
DEFAULT_ENTITY = ""  # the resource name of the cluster-wide broker defaults
OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"  # kafka-configs' lookahead: not inside [...]
KEY_CHARACTERS = re.compile(r"[a-zA-Z0-9._-]*")
# The source a key set at runtime on the entity has (kafka-configs' filter for --delete-config
# and for describing the defaults).
DYNAMIC_SOURCE = {True: "DYNAMIC_DEFAULT_BROKER_CONFIG", False: "DYNAMIC_BROKER_CONFIG"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("configs", help="the broker's configs (kafka-configs --entity-type brokers)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    describe = actions.add_parser("describe", help="print every config and where it comes from")
    alter = actions.add_parser("alter", help="set or remove the broker's dynamic configs")
    for action in (describe, alter):
        action.add_argument("--broker", action="store_true", required=True,
                            help="the broker's configs (the only entity so far)")
        entity = action.add_mutually_exclusive_group()
        entity.add_argument("--entity-name", metavar="ID", default=str(BROKER_ID),
                            help=f"the broker's node.id (default: {BROKER_ID})")
        entity.add_argument("--entity-default", action="store_true",
                            help="the cluster-wide defaults of every broker")
        add_bootstrap_arg(action)
        add_kafka_bootstrap_arg(action)
    alter.add_argument("--add-config", metavar="K=V,...", help="configs to set, e.g. 'log.retention.ms=3600000'")
    alter.add_argument("--delete-config", metavar="K,...", help="configs to remove, e.g. log.retention.ms")
    describe.set_defaults(func=_describe)
    alter.set_defaults(func=_alter)


def _entity(args: argparse.Namespace) -> str:
    if args.entity_default:
        return DEFAULT_ENTITY
    try:
        int(args.entity_name)
    except ValueError:
        raise UsageError(f"The entity name for brokers must be a valid integer broker id, "
                         f"found: {args.entity_name}") from None
    return str(args.entity_name)


def parse_add_config(text: str | None) -> dict[str, str]:
    """kafka-configs' reading of --add-config: comma-separated key=value pairs, commas
    and '=' inside [...] belong to the value, the brackets themselves are dropped."""
    if not text:
        return {}
    items = re.split("," + OUTSIDE_BRACKETS, text)
    while items and items[-1] == "":  # Java's split drops trailing empty strings
        items.pop()
    out: dict[str, str] = {}
    for item in items:
        pair = re.split(r"\s*=\s*" + OUTSIDE_BRACKETS, item)
        if len(pair) != 2:
            raise UsageError('Invalid entity config: all configs to be added must be in the format "key=val".')
        key, value = pair[0].strip(), re.sub(r"[\[\]]", "", pair[1]).strip()
        if not KEY_CHARACTERS.fullmatch(key):
            raise UsageError(f"Invalid character found for config key: {key}")
        out[key] = value
    return out


def parse_delete_config(text: str | None) -> list[str]:
    return [key.strip() for key in (text or "").split(",") if key.strip()]


def _shown(value: str | None) -> str:
    return "null" if value is None else value  # as Java prints a null


def _line(config) -> str:
    synonyms = ", ".join(f"{s.source}:{s.name}={_shown(s.value)}" for s in config.synonyms)
    return f"  {config.name}={_shown(config.value)} sensitive=false synonyms={{{synonyms}}}"


def _describe(args: argparse.Namespace) -> int:
    name = _entity(args)
    configs = KafkaAdmin(kafka_address(args), command_config(args)).broker_configs(name)
    if name == DEFAULT_ENTITY:
        lines = ["Default configs for brokers in the cluster are:"]
        configs = [c for c in configs if c.source == DYNAMIC_SOURCE[True]]
    else:
        lines = [f"All configs for broker {name} are:"]
    lines.extend(_line(c) for c in configs)
    print("\n".join(lines))
    return 0


def _alter(args: argparse.Namespace) -> int:
    name = _entity(args)
    added = parse_add_config(args.add_config)
    deleted = parse_delete_config(args.delete_config)
    if not added and not deleted:
        raise UsageError("--alter needs --add-config or --delete-config")
    admin = KafkaAdmin(kafka_address(args), command_config(args))
    if deleted:
        dynamic_source = DYNAMIC_SOURCE[name == DEFAULT_ENTITY]
        present = {c.name for c in admin.broker_configs(name) if c.source == dynamic_source}
        missing = [key for key in deleted if key not in present]
        if missing:
            raise CliError(f"Invalid config(s): {','.join(missing)}")
    admin.alter_broker_configs(name, added, deleted)
    if name == DEFAULT_ENTITY:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for broker {name}.")
    return 0
