"""`strata consume TOPIC`: print a topic's messages (Kafka's console consumer).

Contract:
- Prints each message's value on its own line, bytes as they are; with
  `--print-key` prints `key<TAB>value`. A null key or value prints as `null`.
- Start: with `--group G` and an offset committed by G, from there; otherwise
  from the log start with `--from-beginning`, else from the log end (only
  messages produced from now on), as Kafka's console consumer does.
- `--partition N` reads only partition N; otherwise every partition.
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
import signal
import sys
import threading
import time
from typing import Any

from client import Consumer

from . import CliError, UsageError
from .client_support import (
    add_bootstrap_arg,
    add_topic_args,
    client_errors,
    command_config,
    native_address,
    topic_arg,
)

POLL_SLICE_MS = 500  # the longest single poll, so --timeout-ms and Ctrl-C stay prompt


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("consume", help="print a topic's messages")
    add_topic_args(parser)
    add_bootstrap_arg(parser)
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the log start when the group has no committed offset")
    parser.add_argument("--group", metavar="G", help="consumer group: commit and resume positions")
    parser.add_argument("--max-messages", type=int, metavar="N", help="exit after N messages")
    parser.add_argument("--partition", type=int, metavar="N", help="read only partition N")
    parser.add_argument("--print-key", action="store_true", help="print key<TAB>value")
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
        lines = []
        for record in records:
            value = b"null" if record.value is None else record.value
            if args.print_key:
                key = b"null" if record.key is None else record.key
                lines.append(key + b"\t" + value + b"\n")
            else:
                lines.append(value + b"\n")
        out.write(b"".join(lines))
        out.flush()
        printed += len(records)
        progress.printed = printed

