"""What the client subcommands (topics, produce, consume) share.

Contract: `add_bootstrap_arg` registers `--bootstrap-server HOST:PORT` (either
listener of the broker), by default $STRATA_BOOTSTRAP_SERVER or localhost:9000;
`add_kafka_bootstrap_arg` registers `--kafka-bootstrap-server HOST:PORT` (the
Kafka listener, for what only a Kafka request does); broker/cli/addresses.py finds
the listener a command needs from them; `add_topic_args`
registers a topic given as positional TOPIC or `--topic TOPIC` (Kafka's tools take
the option) and `topic_arg(args)` returns it (a UsageError when it is missing or
given twice differently); `client_errors()` is a context manager that turns every client
failure (StrataClientError and subclasses, a bad bootstrap address) into a
CliError whose message is one line, so `strata` prints `strata: <message>` and
exits non-zero; `parse_config_args` turns repeated `--config k=v` into a dict.
`add_bootstrap_arg` also registers `--command-config FILE`, Kafka's tools'
client.properties: `command_config(args)` returns its security settings
(security.protocol, ssl.*, sasl.*: client/security.py and client/sasl.py; a Java
client's `ssl.truststore.location` with `ssl.truststore.type=PEM` is taken as
ssl.ca.location), {} without the option; other keys are ignored, an unknown
ssl.*/sasl.* key or an unreadable file is a CliError naming it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from client import StrataClientError, parse_bootstrap
from client.sasl import sasl_credentials
from client.security import SECURITY_SETTINGS, ssl_context

from . import CliError, UsageError

BOOTSTRAP_ENV = "STRATA_BOOTSTRAP_SERVER"
KAFKA_BOOTSTRAP_ENV = "STRATA_KAFKA_BOOTSTRAP_SERVER"
DEFAULT_BOOTSTRAP = "localhost:9000"  # port's default


def add_bootstrap_arg(parser: argparse._ActionsContainer) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        default=os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP,
                        help=f"the broker: its native or its Kafka listener, the other one is asked of it "
                             f"(default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties, as Kafka's tools take them: security.protocol, ssl.*, "
                             "sasl.mechanism, sasl.username/sasl.password or sasl.jaas.config")


# Java clients' names the Python client has no use for (the truststore is mapped).
_IGNORED_SECURITY = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
                     "ssl.keystore.type", "ssl.protocol", "ssl.enabled.protocols", "sasl.kerberos.service.name")


def command_config(args: argparse.Namespace) -> dict[str, str]:
    """The security settings of --command-config (see the module contract)."""
    from broker.config.properties import parse_properties

    path = getattr(args, "command_config", None)
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            properties = parse_properties(f.read(), path)
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"--command-config {path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    except ValueError as e:
        raise CliError(f"--command-config {path}: {e}") from None
    settings = {k: v for k, v in properties.items()
                if k == "security.protocol" or k.startswith(("ssl.", "sasl."))}
    if properties.get("ssl.truststore.type", "").upper() == "PEM" and properties.get("ssl.truststore.location"):
        settings.setdefault("ssl.ca.location", properties["ssl.truststore.location"])
    unknown = sorted(k for k in settings if k not in SECURITY_SETTINGS and k not in _IGNORED_SECURITY)
    if unknown:
        raise CliError(f"--command-config {path}: unknown setting(s) {', '.join(unknown)}")
    settings = {k: v for k, v in settings.items() if k in SECURITY_SETTINGS}
    try:
        ssl_context(settings)
        sasl_credentials(settings)
    except ValueError as e:
        raise CliError(f"--command-config {path}: {e}") from None
    return settings


def add_kafka_bootstrap_arg(parser: argparse._ActionsContainer, purpose: str = "") -> None:
    parser.add_argument("--kafka-bootstrap-server", metavar="HOST:PORT",
                        help=f"the broker's Kafka listener{purpose} (default: ${KAFKA_BOOTSTRAP_ENV}, else "
                             f"--bootstrap-server when it is the Kafka listener, else the one the broker names)")


def add_topic_args(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    parser.add_argument("topic", nargs="?", metavar="TOPIC",
                        help="the topic" + (" (default: every topic)" if optional else ""))
    parser.add_argument("--topic", dest="topic_option", metavar="TOPIC",
                        help="the topic, given as Kafka's tools take it")


def topic_arg(args: argparse.Namespace) -> str:
    positional, option = args.topic, args.topic_option
    if positional and option and positional != option:
        raise UsageError(f"two different topics: {positional!r} and --topic {option!r}")
    name = option or positional
    if not name:
        raise UsageError("the topic is missing: give TOPIC or --topic TOPIC")
    return name


def check_bootstrap(value: str) -> str:
    try:
        parse_bootstrap(value)
    except ValueError as e:
        raise CliError(str(e)) from None
    return value


@contextmanager
def client_errors() -> Iterator[None]:
    try:
        yield
    except StrataClientError as e:
        raise CliError(" ".join(str(e).split())) from None


def parse_config_args(pairs: list[str] | None, *,
                      allow_empty: bool = False) -> dict[str, str | None]:
    """{key: value} from `k=v` strings; with allow_empty, `k=` maps k to None (the default)."""
    configs: dict[str, str | None] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"bad --config {pair!r}: expected KEY=VALUE")
        if value == "" and not allow_empty:
            raise CliError(f"bad --config {pair!r}: the value is empty")
        configs[key] = value if value != "" else None
    return configs
