"""`strata serve`: run the broker.

Contract: `strata serve [--data-dir DIR] [--host H] [--port P] [--config FILE]
[--set KEY=VALUE ...]` loads the configuration (precedence: command line >
STRATA_* environment > properties file > defaults; see broker/config.py), prints
exactly one line to stdout once the socket listens, `strata listening on HOST:PORT`
(the real port when --port 0), writes structured logs to stderr, and exits 0
after a graceful shutdown (SIGTERM or SIGINT). Every startup failure is one line
`strata: ...` on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import sys

from broker.cli import CliError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the broker",
        description="Run the Strata broker. Settings: command line > STRATA_<KEY> environment "
                    "variables > --config file > defaults.")
    parser.add_argument("--data-dir", metavar="DIR", help="data directory (beats log.dirs)")
    parser.add_argument("--host", metavar="HOST", help="address to listen on (host.name, default 0.0.0.0)")
    parser.add_argument("--port", metavar="PORT", help="port to listen on (port, default 9000; 0 = any)")
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                        help="override one setting (repeatable)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so that the other subcommands do not pay for uvloop and storage.
    from storage.errors import InvalidConfigError

    from broker.app import StartupError, run_broker
    from broker.config import BrokerConfig

    try:
        config = BrokerConfig.load(config_file=args.config, overrides=args.overrides,
                                   cli={"host.name": args.host, "port": args.port},
                                   data_dir=args.data_dir)
    except InvalidConfigError as e:
        raise CliError(f"invalid configuration: {e}", code=2) from None

    def ready(address: str) -> None:
        print(f"strata listening on {address}", flush=True)

    try:
        return run_broker(config, ready=ready)
    except StartupError as e:
        raise CliError(str(e)) from None
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
