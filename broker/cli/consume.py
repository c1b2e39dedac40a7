"""`strata consume TOPIC`: print a topic's messages (Kafka's console consumer).

Contract:
- Prints each message's value on its own line, bytes as they are; with
  `--print-key` prints `key<TAB>value`. A null key or value prints as `null`.
- `--property KEY=VALUE` (repeatable) takes the console consumer's formatter
  properties (Kafka's DefaultMessageFormatter): print.timestamp (`CreateTime:MS`
  or `LogAppendTime:MS`), print.partition (`Partition:N`), print.offset
  (`Offset:N`), print.headers (`k:v,k2:v2`, `NO_HEADERS` when there are none),
  print.key, print.value (default true), in that order, each followed by
  key.separator (default TAB) but the last, which is followed by line.separator
  (default newline); headers.separator (default `,`) and null.literal (default
  `null`). A boolean is true when its value is `true`, any case. Other keys are
  ignored with one note on stderr (key/value/headers.deserializer silently: the
  bytes are printed as they are).
- Start: with `--group G` and an offset committed by G, from there; otherwise
  from the log start with `--from-beginning`, else from the log end (only
  messages produced from now on), as Kafka's console consumer does.
- `--partition N` reads only partition N; otherwise every partition. With it,
  `--offset earliest|latest|N` starts there (Kafka's console consumer's rules:
  --offset needs --partition and excludes --from-beginning).
- With `--group G` the consumed positions are committed for G (periodically
  and on exit), so a later run with the same group resumes after the last
  message printed.
- Stops after `--max-messages N` messages, or after `--timeout-ms T` without
  a message; otherwise runs until Ctrl-C, which exits 0. Once the topic was
  found, the exit (any of these, or a failure) prints `Processed a total of N
  messages` on stderr, as Kafka's console consumer does.
- TOPIC may be given as `--topic TOPIC`, as Kafka's console consumer takes it.
- Errors (unknown topic, unreachable broker, ...) are one `strata: ...` line on
  stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
from typing import Any

from client import Consumer

from . import CliError, UsageError
from .addresses import native_address
from .client_support import add_bootstrap_arg, add_topic_args, client_errors, command_config, topic_arg

POLL_SLICE_MS = 500  # the longest single poll, so --timeout-ms and Ctrl-C stay prompt
BOOLEANS = ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key", "print.value")
SEPARATORS = {"key.separator": "\t", "line.separator": "\n", "headers.separator": ",", "null.literal": "null"}
SILENTLY_IGNORED = ("key.deserializer", "value.deserializer", "headers.deserializer")
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def parse_properties(pairs: list[str] | None, option: str = "--property") -> dict[str, str]:
    """Kafka's CommandLineUtils.parseKeyValueArgs: `k=v` (a value may hold '='), `k` alone is `k=`."""
    properties = {}
    for pair in pairs or ():
        key, _, value = pair.partition("=")
        if not key:
            raise UsageError(f"bad {option} {pair!r}: expected KEY=VALUE")
        properties[key] = value
    return properties


class Formatter:
    """Kafka's DefaultMessageFormatter over Strata's records (see the module contract)."""

    def __init__(self, properties: dict[str, str], print_key: bool = False):
        flags = {k: properties[k].strip().lower() == "true" for k in BOOLEANS if k in properties}
        self.timestamp = flags.get("print.timestamp", False)
        self.partition = flags.get("print.partition", False)
        self.offset = flags.get("print.offset", False)
        self.headers = flags.get("print.headers", False)
        self.key = flags.get("print.key", print_key)
        self.value = flags.get("print.value", True)
        text = {k: properties.get(k, default).encode() for k, default in SEPARATORS.items()}
        self.column, self.line = text["key.separator"], text["line.separator"]
        self.header_separator, self.null = text["headers.separator"], text["null.literal"]
        self.unknown = sorted(k for k in properties if k not in BOOLEANS and k not in SEPARATORS
                              and not k.startswith(SILENTLY_IGNORED))

    def format(self, record) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind = TIMESTAMP_TYPES.get(record.timestamp_type)
            fields.append(b"NO_TIMESTAMP" if record.timestamp < 0 or kind is None
                          else f"{kind}:{record.timestamp}".encode())
        if self.partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.headers:
            fields.append(self.header_separator.join(
                k.encode() + b":" + (self.null if v is None else bytes(v)) for k, v in record.headers)
                if record.headers else b"NO_HEADERS")
        if self.key:
            fields.append(self.null if record.key is None else bytes(record.key))
        if self.value:
            fields.append(self.null if record.value is None else bytes(record.value))
        return self.column.join(fields) + self.line if fields else b""


def start_offset(text: str) -> str | int:
    """--offset as Kafka's console consumer reads it: earliest, latest or a non-negative number."""
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        return lowered
    if re.fullmatch(r"\d+", text):
        return int(text)
    raise UsageError(f"The provided offset value '{text}' is incorrect. Valid values are 'earliest', "
                     f"'latest', or a non-negative long.")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("consume", help="print a topic's messages")
    add_topic_args(parser)
    add_bootstrap_arg(parser)
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the log start when the group has no committed offset")
    parser.add_argument("--group", metavar="G", help="consumer group: commit and resume positions")
    parser.add_argument("--max-messages", type=int, metavar="N", help="exit after N messages")
    parser.add_argument("--partition", type=int, metavar="N", help="read only partition N")
    parser.add_argument("--offset", metavar="OFFSET",
                        help="with --partition: start at earliest, latest or offset N (a non-negative number)")
    parser.add_argument("--print-key", action="store_true", help="print key<TAB>value")
    parser.add_argument("--property", action="append", metavar="KEY=VALUE",
                        help="a console consumer formatter property: print.key, print.timestamp, print.partition, "
                             "print.offset, print.headers, print.value, key.separator, line.separator, "
                             "headers.separator, null.literal; repeat for more")
    parser.add_argument("--timeout-ms", type=int, metavar="T",
                        help="exit after T ms without a message")
    parser.set_defaults(func=run)


class InterruptFlag:
    """Ctrl-C while messages are consumed: noted instead of raised, so that the loop
    ends between polls and every message a poll returned is printed and counted
    before the close commits the positions. Installed only on the main thread (where
    Python delivers signals)."""

    def __init__(self) -> None:
        self.requested = False
        self._installed = False
        self._previous: Any = None

    def __enter__(self) -> InterruptFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._note)
            self._installed = True
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)

    def _note(self, signum, frame) -> None:
        self.requested = True


class Progress:
    """How far a run got: whether it started consuming, and how many messages it printed."""

    def __init__(self) -> None:
        self.started = False
        self.printed = 0


def run(args: argparse.Namespace) -> int:
    args.topic = topic_arg(args)
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages must be at least 0")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError("--timeout-ms must be at least 0")
    if args.offset is not None:
        if args.partition is None:
            raise UsageError("The partition is required when offset is specified.")
        if args.from_beginning:
            raise UsageError("Options from-beginning and offset cannot be specified together.")
        args.offset = start_offset(args.offset)
    args.formatter = Formatter(parse_properties(args.property), args.print_key)
    if args.formatter.unknown:
        print(f"strata: --property {', '.join(args.formatter.unknown)}: not a console consumer property; ignored",
              file=sys.stderr)
    progress = Progress()
    try:
        with client_errors():
            consumer = Consumer(native_address(args), group=args.group,
                                auto_offset_reset="earliest" if args.from_beginning else "latest",
                                retries=2, security=command_config(args))
            try:
                _consume(consumer, args, progress)
            finally:
                consumer.close()  # commits the group's positions
                if progress.started:
                    print(f"Processed a total of {progress.printed} messages", file=sys.stderr)
    except KeyboardInterrupt:
        # Ctrl-C is the normal way to stop. Before consuming starts it interrupts
        # the setup; while consuming, InterruptFlag turns it into the end of the loop,
        # so the positions the close commits are those of what was printed.
        pass
    except BrokenPipeError:
        # The reader went away (`| head`): stop, and keep Python from complaining
        # about the unflushable stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _consume(consumer: Consumer, args: argparse.Namespace, progress: Progress) -> None:
    if args.partition is not None:
        count = len(consumer.partitions_for(args.topic))
        if not 0 <= args.partition < count:
            raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                           f"(it has {count})")
        consumer.assign(args.topic, [args.partition])
        if args.offset == "earliest":
            consumer.seek_to_beginning(args.topic, args.partition)
        elif args.offset == "latest":
            consumer.seek_to_end(args.topic, args.partition)
        elif args.offset is not None:
            consumer.seek(args.topic, args.partition, args.offset)
    else:
        consumer.subscribe(args.topic)
    consumer.assignment()  # looks the topic up now: an unknown topic fails before any wait
    progress.started = True
    with InterruptFlag() as interrupt:
        _print_messages(consumer, args, progress, interrupt)


def _print_messages(consumer: Consumer, args: argparse.Namespace, progress: Progress,
                    interrupt: InterruptFlag) -> None:
    out = sys.stdout.buffer
    printed = 0
    last_message = time.monotonic()
    while not interrupt.requested and (args.max_messages is None or printed < args.max_messages):
        wait_ms = POLL_SLICE_MS
        if args.timeout_ms is not None:
            idle_ms = (time.monotonic() - last_message) * 1000
            if idle_ms >= args.timeout_ms:
                break
            wait_ms = max(1, min(wait_ms, int(args.timeout_ms - idle_ms)))
        limit = None if args.max_messages is None else args.max_messages - printed
        records = consumer.poll(wait_ms, max_records=limit)
        if not records:
            continue
        last_message = time.monotonic()
        out.write(b"".join(map(args.formatter.format, records)))
        out.flush()
        printed += len(records)
        progress.printed = printed

