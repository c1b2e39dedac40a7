"""`strata produce TOPIC`: one message per line of stdin (Kafka's console producer).

Contract:
- Each stdin line, without its line ending ("\\n" or "\\r\\n"), is one
  message; lines are bytes, passed on as they are (no decoding).
- With `--key-separator SEP` a line is split at the first SEP into key and
  value; a line without SEP stops the run with `strata: line N has no key
  separator ...` (Kafka's console producer also fails there), after the lines
  before it have been delivered. Without it messages have no key.
- `--partition N` sends every message to partition N; otherwise keys are
  partitioned with murmur2 and keyless messages with the sticky partitioner.
- Ctrl-C ends the input like end-of-file: lines already read are delivered
  and the exit code is 0.
- The topic is looked up before any input is read, through METADATA asking the
  broker to create it when missing (as Kafka's producer; the broker does when
  auto.create.topics.enable is on), so a topic that does not exist and is not
  created fails at once, named, even with empty input. Everything is flushed
  before exit.
- A failed line (no key separator, or a message the broker refused) is named by
  its number, `strata: line N: ...` on stderr; a refused message also by its
  size, `strata: line N (SIZE bytes): REASON`, with the broker's reason (for a
  line over max.message.bytes: the entry's size and the limit). A batch too
  large as a whole is split by the producer, so only a line too large by
  itself fails; when the lines of one batch fail together with one error (an
  unknown partition, say), the largest of them is named. `--on-error stop` (the
  default) stops reading at the first one found (sends already made are still
  delivered) and exits 1; `--on-error continue` reports each failed line, sends
  every other one, and exits 1 after a last line counting the failures.
- TOPIC may be given as `--topic TOPIC`, as Kafka's console producer takes it.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque

from client import COMPRESSION_CODECS, Producer, StrataClientError

from . import CliError, UsageError
from .client_support import (
    add_bootstrap_arg,
    add_topic_args,
    client_errors,
    command_config,
    native_address,
    topic_arg,
)

CHECK_EVERY = 1000  # sends kept before looking at finished ones (keeps memory flat)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("produce", help="send stdin lines to a topic")
    add_topic_args(parser)
    add_bootstrap_arg(parser)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line at the first SEP into key and value")
    parser.add_argument("--partition", type=int, metavar="N", help="send everything to partition N")
    parser.add_argument("--compression", choices=sorted(COMPRESSION_CODECS), default="none",
                        help="compression codec for the record batches (default none)")
    parser.add_argument("--linger-ms", type=int, default=5, metavar="MS",
                        help="how long a batch waits for more messages (default 5)")
    parser.add_argument("--on-error", choices=("stop", "continue"), default="stop",
                        help="at a line that fails: stop there (the default) or report it and go on")
    parser.set_defaults(func=run)


def _lines(stream):
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


def run(args: argparse.Namespace) -> int:
    args.topic = topic_arg(args)
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    separator = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    with client_errors():
        producer = Producer(native_address(args), linger_ms=args.linger_ms,
                            compression=args.compression, retries=2, security=command_config(args))
        try:
            count = producer.partition_count(args.topic)
            if args.partition is not None and not 0 <= args.partition < count:
                raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                               f"(it has {count})")
            _send_lines(producer, args, separator)
        except KeyboardInterrupt:
            pass  # Ctrl-C ends the input, like Ctrl-D: what was read is still delivered
        finally:
            producer.close()
    return 0


class LineFailures:
    """The failed lines of a run: the first one stops it (`stop`), or each is reported
    on stderr and counted (`continue`)."""

    def __init__(self, keep_going: bool):
        self.keep_going = keep_going
        self.count = 0

    def failed(self, number: int, reason: str, size: int | None = None) -> None:
        where = f"line {number}" if size is None else f"line {number} ({size} bytes)"
        message = f"{where}: {' '.join(reason.split())}"
        if not self.keep_going:
            raise CliError(message)
        self.count += 1
        print(f"strata: {message}", file=sys.stderr, flush=True)


def _send_lines(producer: Producer, args: argparse.Namespace, separator: bytes | None) -> None:
    pending: deque = deque()  # (line number, size, send future)
    failures = LineFailures(args.on_error == "continue")
    problem: CliError | None = None
    lines = 0
    try:
        for number, line in enumerate(_lines(sys.stdin.buffer), start=1):
            lines = number
            key = None
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    failures.failed(number, f"no key separator {args.key_separator!r}: {line[:80]!r}")
                    continue
                line = value
            pending.append((number, len(line), producer.send(args.topic, line, key, partition=args.partition)))
            if len(pending) >= CHECK_EVERY:
                _check_done(pending, failures)
    except CliError as e:  # the first failed line, under --on-error stop
        problem = e
    producer.flush()
    if problem is None:
        try:
            _check_done(pending, failures)
        except CliError as e:
            problem = e
    if problem is not None:
        raise problem
    if failures.count:
        raise CliError(f"{failures.count} of {lines} lines were not sent")


def _check_done(pending: deque, failures: LineFailures) -> None:
    """Drop the finished sends at the front, reporting the failures among them.

    Sends finish roughly in order, so looking only at the front keeps this
    O(1) per line; a failure further back is found on a later call or at the end."""
    while pending and pending[0][2].done():
        number, size, sent = pending.popleft()
        error = sent.exception()
        if error is None:
            continue
        if not isinstance(error, StrataClientError):
            raise error
        # The lines of one batch fail together, with one error: name the largest of
        # them (the one over the limit, for a MESSAGE_TOO_LARGE).
        while pending and pending[0][2].done() and pending[0][2].exception() is error:
            other, other_size, _ = pending.popleft()
            if other_size > size:
                number, size = other, other_size
        failures.failed(number, str(error), size)
