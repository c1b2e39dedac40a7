"""What the client subcommands (topics, produce, consume) share.

Contract: `add_bootstrap_arg` registers the required `--bootstrap-server
HOST:PORT`; `client_errors()` is a context manager that turns every client
failure (StrataClientError and subclasses, a bad bootstrap address) into a
CliError whose message is one line, so `strata` prints `strata: <message>` and
exits non-zero; `parse_config_args` turns repeated `--config k=v` into a dict.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from client import StrataClientError, parse_bootstrap

from . import CliError


def add_bootstrap_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="the broker to talk to")


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
