"""`strata serve`: run the broker.

Contract: `strata serve [--data-dir DIR] [--host H] [--port P] [--kafka-port P] [--admin-port P]
[--config FILE] [--set KEY=VALUE ...] [--strict]` loads the configuration (precedence:
command line > STRATA_* environment > properties file > defaults; see
broker/config/broker_config.py), prints one line to stdout once the sockets listen,
`strata listening on HOST:PORT` (the real port when --port 0), then, unless the
Kafka listener is off (kafka.port -1), a second one,
`strata kafka listening on HOST:PORT` (the bound address, real port when
--kafka-port 0) (these two: the first native and the first Kafka listener), then,
unless the admin port is off (admin.port -1), `strata admin listening on
http://HOST:PORT`, then one line per other listener, `strata listener PROTOCOL NAME
SECURITY_PROTOCOL on HOST:PORT` (PROTOCOL is native or kafka): each listener is printed
once (the log's `broker_started` event lists every one with its name); it writes structured
logs to stderr and exits 0 after a graceful shutdown (SIGTERM or SIGINT). Every startup failure is one line
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
    parser.add_argument("--kafka-port", metavar="PORT",
                        help="port of the Kafka protocol listener (kafka.port, default 9092; 0 = any; "
                             "-1 = none)")
    parser.add_argument("--admin-port", metavar="PORT",
                        help="HTTP port of /metrics and /health/* (admin.port, default 9644; 0 = any; -1 = off)")
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                        help="override one setting (repeatable)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse unknown settings (by default they are logged and ignored, as Kafka does)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so that the other subcommands do not pay for uvloop and storage.
    from broker.app import StartupError
    from broker.config.broker_config import BrokerConfig
    from broker.process import run_broker
    from kafka_format.errors import InvalidConfigError

    try:
        config = BrokerConfig.load(config_file=args.config, overrides=args.overrides,
                                   cli={"host.name": args.host, "port": args.port,
                                        "kafka.port": args.kafka_port, "admin.port": args.admin_port},
                                   data_dir=args.data_dir, strict=args.strict)
    except InvalidConfigError as e:
        raise CliError(f"invalid configuration: {e}", code=2) from None

    def ready(address: str) -> None:
        print(f"strata listening on {address}", flush=True)

    def kafka_ready(address: str) -> None:
        print(f"strata kafka listening on {address}", flush=True)

    def listener_ready(listener) -> None:
        from broker.net.server import format_address

        print(f"strata listener {listener.spec.protocol} {listener.name} {listener.security_protocol} "
              f"on {format_address(*listener.address)}", flush=True)

    def admin_ready(address: str) -> None:
        print(f"strata admin listening on http://{address}", flush=True)

    try:
        return run_broker(config, ready=ready, kafka_ready=kafka_ready, listener_ready=listener_ready,
                          admin_ready=admin_ready)
    except StartupError as e:
        raise CliError(str(e)) from None
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
