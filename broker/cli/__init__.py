"""The `strata` command line.

Each subcommand lives in its own module exposing `add_parser(subparsers)`, which
registers its arguments and sets `func` to a callable taking the parsed
arguments and returning an exit code. `main()` turns every expected failure
into one clear line on stderr and a non-zero exit: users never see a traceback.
A UsageError (a bad combination of arguments) prints the subcommand's usage and
exits 2, as argparse does for the errors it finds itself. `strata --version`
prints the installed package's version.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in the order `strata --help` lists them.
SUBCOMMANDS = ("serve", "topics", "produce", "consume", "groups", "share_groups", "log_dirs", "configs", "acls",
               "users", "quotas", "dump_log")


class CliError(Exception):
    """An expected failure: printed as `strata: <message>`, exit code `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    """Arguments that do not go together: the subcommand's usage, then the message, exit 2."""

    def __init__(self, message: str):
        super().__init__(message, code=2)


class _Parser(argparse.ArgumentParser):
    """Records on the parsed arguments, as `usage_parser`, the innermost (sub)parser that
    parsed them, so a UsageError found later prints that subcommand's usage. Subparsers
    are of the same class (add_subparsers makes them with the parent's type)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if getattr(parsed, "usage_parser", None) is None:
            parsed.usage_parser = self
        return parsed, extras

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but arguments nobody knows are reported with the usage of the
        subcommand they were given to."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parsed.usage_parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strata")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="strata", description="Strata: a Kafka-compatible log broker")
    parser.add_argument("--version", action="version", version=f"strata {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"broker.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"broker.cli.{name}":
                continue  # not built yet
            raise
        module.add_parser(subparsers)
    return parser


def _library_logs_to_stderr() -> dict:
    """Client commands print their results on stdout; what the libraries they
    use (storage, client) log goes to stderr, warnings and worse only. `serve`
    configures logging itself. Returns the previous configuration."""
    import logging

    import structlog

    previous = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        logger_factory=lambda *args: structlog.PrintLogger(sys.stderr))
    return previous


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    previous_logging = _library_logs_to_stderr() if args.command != "serve" else None
    try:
        return _run(args)
    finally:
        if previous_logging is not None:  # main() may run inside another program (tests)
            import structlog
            structlog.configure(**previous_logging)


def _run(args) -> int:
    try:
        return int(args.func(args) or 0)
    except UsageError as e:
        args.usage_parser.error(str(e))  # exits 2
        raise
    except CliError as e:
        print(f"strata: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # the promise: never a traceback
        print(f"strata: unexpected error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
