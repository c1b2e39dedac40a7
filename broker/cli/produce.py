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
  before exit; the first message the broker refused makes the exit code 1 with
  its error on stderr: the input line number and size, then the broker's reason
  (for a line over max.message.bytes: the entry's size and the limit).
"""

from __future__ import annotations

import argparse
import sys
from collections import deque

from client import COMPRESSION_CODECS, Producer

from . import CliError
from .client_support import add_bootstrap_arg, check_bootstrap, client_errors

CHECK_EVERY = 1000  # sends kept before looking at finished ones (keeps memory flat)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("produce", help="send stdin lines to a topic")
    parser.add_argument("topic", metavar="TOPIC")
    add_bootstrap_arg(parser)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line at the first SEP into key and value")
    parser.add_argument("--partition", type=int, metavar="N", help="send everything to partition N")
    parser.add_argument("--compression", choices=sorted(COMPRESSION_CODECS), default="none",
                        help="compression codec for the record batches (default none)")
    parser.add_argument("--linger-ms", type=int, default=5, metavar="MS",
                        help="how long a batch waits for more messages (default 5)")
    parser.set_defaults(func=run)


def _lines(stream):
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


def run(args: argparse.Namespace) -> int:
    if args.key_separator == "":
        raise CliError("--key-separator must not be empty")
    separator = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    with client_errors():
        producer = Producer(check_bootstrap(args.bootstrap_server), linger_ms=args.linger_ms,
                            compression=args.compression, retries=2)
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


def _send_lines(producer: Producer, args: argparse.Namespace, separator: bytes | None) -> None:
    pending: deque = deque()
    problem: CliError | None = None
    for number, line in enumerate(_lines(sys.stdin.buffer), start=1):
        key = None
        if separator is not None:
            key, found, value = line.partition(separator)
            if not found:
                problem = CliError(f"line {number} has no key separator "
                                   f"{args.key_separator!r}: {line[:80]!r}")
                break
            line = value
        pending.append((number, len(line), producer.send(args.topic, line, key, partition=args.partition)))
        if len(pending) >= CHECK_EVERY:
            _check_done(pending)
    producer.flush()
    _check_done(pending)
    if problem is not None:
        raise problem


def _check_done(pending: deque) -> None:
    """Drop the finished sends at the front, raising the first failure among them.

    Sends finish roughly in order, so looking only at the front keeps this
    O(1) per line; a failure further back is found on a later call or at the end."""
    while pending and pending[0][2].done():
        number, size, sent = pending.popleft()
        error = sent.exception()
        if error is None:
            continue
        # The lines of one batch fail together, with one error: name the largest of
        # them (the one over the limit, for a MESSAGE_TOO_LARGE).
        while pending and pending[0][2].exception() is error:
            other, other_size, _ = pending.popleft()
            if other_size > size:
                number, size = other, other_size
        raise CliError(f"line {number} ({size} bytes) was not sent: {' '.join(str(error).split())}")
