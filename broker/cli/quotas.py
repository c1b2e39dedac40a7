"""`strata quotas --describe|--alter`: client quotas, in the style of kafka-configs
--entity-type users|clients|ips.

Sent over the Kafka listener, as kafka-configs does: DescribeClientQuotas and
AlterClientQuotas (every option of the other Kafka-listener commands applies:
--kafka-bootstrap-server, --command-config for TLS and SASL).

- The entity: `--entity-type users|clients|ips`, each followed by its
  `--entity-name NAME` or `--entity-default`, paired in order as kafka-configs
  pairs them (`--entity-type users --entity-name alice --entity-type clients
  --entity-default`); or the shorthands `--user NAME`, `--client NAME`, `--ip
  ADDRESS`, `--user-defaults`, `--client-defaults`, `--ip-defaults`.
- `--describe` prints, as kafka-configs does, one line per entity that matches
  exactly those entity types (a type without a name: every named entity of it;
  no entity at all: every quota):
      Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0
- `--alter --add-config 'k=v,k2=v2' --delete-config k3,k4` changes one entity's
  quotas: `producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
  `controller_mutation_rate` for users and clients, `connection_creation_rate`
  for ips. Deleting a key the entity does not have is refused, as kafka-configs
  refuses it ("Invalid config(s): k"). Prints "Completed updating config for
  client c1." (or "... default config for clients in the cluster.").
- A value that is not a number, and anything the broker refuses (an unknown key,
  a value that is not positive, an entity type combination Kafka refuses), is a
  CliError with Kafka's error name and the broker's message; nothing changes.
"""

from __future__ import annotations

import argparse

from kio.static.primitive import f64, i8

from . import CliError, UsageError
from .addresses import kafka_address
from .client_support import add_bootstrap_arg, add_kafka_bootstrap_arg, command_config
from .kafka_admin import KafkaAdmin

ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}  # kafka-configs' -> the protocol's
SHOWN = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
DEFAULT = None  # the name of a default entity


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("quotas", help="client quotas (kafka-configs --entity-type users|clients|ips)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="print the quotas of the entities named")
    action.add_argument("--alter", action="store_true", help="change one entity's quotas")
    parser.add_argument("--entity-type", action="append", default=[], choices=sorted(ENTITY_TYPES),
                        help="users, clients or ips; repeat for a user and client-id pair")
    parser.add_argument("--entity-name", action="append", dest="entity_names", metavar="NAME",
                        help="the name of the --entity-type before it")
    parser.add_argument("--entity-default", action="append_const", const=DEFAULT, dest="entity_names",
                        help="the default entity of the --entity-type before it")
    for flag, kind in (("--user", "users"), ("--client", "clients"), ("--ip", "ips")):
        parser.add_argument(flag, metavar="NAME", help=f"--entity-type {kind} --entity-name NAME")
        parser.add_argument(f"{flag}-defaults", action="store_true",
                            help=f"--entity-type {kind} --entity-default")
    parser.add_argument("--add-config", metavar="K=V,...", help="quotas to set, e.g. producer_byte_rate=1048576")
    parser.add_argument("--delete-config", metavar="K,...", help="quotas to remove")
    add_bootstrap_arg(parser)
    add_kafka_bootstrap_arg(parser)
    parser.set_defaults(func=_run)


Component = tuple[str, int, str | None]  # (entity type, match type, name): a DescribeClientQuotas filter component


def entity_of(args: argparse.Namespace) -> list[Component]:
    """The entity named, kafka-configs' pairing: --entity-type with
    --entity-name/--entity-default in order, then the shorthands. A type without a
    name (--describe only) matches every named entity of it."""
    types = [ENTITY_TYPES[t] for t in args.entity_type]
    names: list[str | None] = list(args.entity_names or [])
    if len(names) > len(types):
        raise UsageError("more entity names than entity types: give --entity-type before each "
                         "--entity-name or --entity-default")
    pairs: list[Component] = []
    for index, entity_type in enumerate(types):
        if index < len(names):
            name = names[index]
            pairs.append((entity_type, MATCH_DEFAULT if name is DEFAULT else MATCH_EXACT, name))
        elif args.alter:
            raise UsageError(f"--entity-name or --entity-default must follow --entity-type "
                             f"{args.entity_type[index]} for --alter")
        else:
            pairs.append((entity_type, MATCH_SPECIFIED, None))
    for flag, kind in (("user", "user"), ("client", "client-id"), ("ip", "ip")):
        name = getattr(args, flag)
        if name is not None:
            pairs.append((kind, MATCH_EXACT, name))
        if getattr(args, f"{flag}_defaults"):
            pairs.append((kind, MATCH_DEFAULT, DEFAULT))
    seen = [t for t, _, _ in pairs]
    if len(set(seen)) != len(seen):
        raise UsageError(f"duplicate entity type(s): {', '.join(sorted({t for t in seen if seen.count(t) > 1}))}")
    return pairs


def _configs(text: str | None, *, values: bool) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if not values:
            out[item] = None
            continue
        key, equals, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or not key:
            raise UsageError(f"invalid --add-config {item!r}: every config must be KEY=VALUE")
        try:
            out[key] = float(value)
        except ValueError:
            raise CliError(f"Cannot parse quota configuration value for {key}: {value}") from None
    return out


def describe(admin: KafkaAdmin, pairs: list[Component]) -> list[tuple[dict[str, str | None], dict]]:
    """(entity, {key: value}) of every stored quota the filter matches (strict when
    entity types are given: exactly those types)."""
    from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest

    components = tuple(ComponentData(entity_type=t, match_type=i8(match_type), match=name)
                       for t, match_type, name in pairs)
    response = admin.call(DescribeClientQuotasRequest(components=components, strict=bool(pairs)))
    if response.error_code != 0:
        raise CliError(f"describe client quotas: {response.error_code.name.upper()}"
                       + (f": {response.error_message}" if response.error_message else ""))
    return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
            for entry in response.entries or ()]


def entity_text(entity: dict[str, str | None]) -> str:
    """kafka-configs' words for an entity: user-principal 'alice', the default client-id."""
    return ", ".join(f"{SHOWN[t]} '{entity[t]}'" if entity[t] is not None else f"the default {SHOWN[t]}"
                     for t in ("user", "client-id", "ip") if t in entity)


def _run(args: argparse.Namespace) -> int:
    pairs = entity_of(args)
    admin = KafkaAdmin(kafka_address(args), command_config(args))
    if args.describe:
        if args.add_config is not None or args.delete_config is not None:
            raise UsageError("--add-config and --delete-config go with --alter")
        for entity, values in describe(admin, pairs):
            shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
            print(f"Quota configs for {entity_text(entity)} are {shown}")
        return 0
    if not pairs:
        raise UsageError("--alter needs an entity: --entity-type with --entity-name or --entity-default "
                         "(or --user, --client, --ip, --user-defaults, ...)")
    added = _configs(args.add_config, values=True)
    deleted = _configs(args.delete_config, values=False)
    if not added and not deleted:
        raise UsageError("--alter needs --add-config or --delete-config")
    if deleted:
        found = describe(admin, pairs)
        current = found[0][1] if found else {}
        missing = [k for k in deleted if k not in current]
        if missing:
            raise CliError(f"Invalid config(s): {','.join(missing)}")
    _alter(admin, pairs, {**deleted, **added})
    entity_type, _, name = pairs[0]
    plural = {v: k for k, v in ENTITY_TYPES.items()}[entity_type]
    if name is DEFAULT:
        print(f"Completed updating default config for {plural} in the cluster.")
    else:
        print(f"Completed updating config for {plural[:-1]} {name}.")
    return 0


def _alter(admin: KafkaAdmin, pairs: list[Component], ops: dict[str, float | None]) -> None:
    from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData

    entry = EntryData(entity=tuple(EntityData(entity_type=t, entity_name=n) for t, _, n in pairs),
                      ops=tuple(OpData(key=k, value=f64(0.0 if v is None else v), remove=v is None)
                                for k, v in ops.items()))
    response = admin.call(AlterClientQuotasRequest(entries=(entry,), validate_only=False))
    for answer in response.entries:
        if answer.error_code != 0:
            entity = entity_text({e.entity_type: e.entity_name for e in answer.entity})
            raise CliError(f"{entity}: {answer.error_code.name.upper()}"
                           + (f": {answer.error_message}" if answer.error_message else ""))
