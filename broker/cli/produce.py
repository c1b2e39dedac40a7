"""`strata produce TOPIC`: one message per line of stdin (Kafka's console producer).

Contract:
- Each stdin line, without its line ending ("\\n" or "\\r\\n"), is one
  message; lines are bytes, passed on as they are (no decoding).
- With `--key-separator SEP` a line is split at the first SEP into key and
  value; a line without SEP stops the run with `strata: line N has no key
  separator ...` (Kafka's console producer also fails there), after the lines
  before it have been delivered. Without it messages have no key.
- `--property KEY=VALUE` (repeatable) takes the console producer's line reader
  properties (Kafka's LineMessageReader): `parse.key=true` splits at
  `key.separator` (default TAB) as --key-separator does; `parse.headers=true`
  first takes the headers up to `headers.delimiter` (default TAB), pairs
  separated by `headers.separator` (default `,`), key and value by
  `headers.key.separator` (default `:`); `null.marker` makes a key, value or
  header value equal to it null; `ignore.error=true` sends a line without a
  separator instead of failing (no key, or no headers, and the rest as the
  value). Separators must differ from each other as Kafka requires; other keys
  are ignored with one note on stderr.
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
from dataclasses import dataclass

from client import COMPRESSION_CODECS, Producer, StrataClientError

from . import CliError, UsageError
from .addresses import native_address
from .client_support import add_bootstrap_arg, add_topic_args, client_errors, command_config, topic_arg

CHECK_EVERY = 1000  # sends kept before looking at finished ones (keeps memory flat)
READER_KEYS = ("parse.key", "key.separator", "ignore.error", "parse.headers", "headers.delimiter",
               "headers.separator", "headers.key.separator", "null.marker")


class LineError(Exception):
    """A line the reader cannot split (no separator where one must be)."""


@dataclass
class LineReader:
    """Kafka's LineMessageReader over byte lines (see the module contract)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None
    key_separator_text: str = "\t"  # as given, for messages

    @classmethod
    def from_properties(cls, properties: dict[str, str], key_separator: str | None) -> LineReader:
        def flag(key: str) -> bool:
            return properties.get(key, "").strip().lower() == "true"

        separator = key_separator if key_separator is not None else properties.get("key.separator", "\t")
        reader = cls(parse_key=key_separator is not None or flag("parse.key"), key_separator=separator.encode(),
                     parse_headers=flag("parse.headers"),
                     headers_delimiter=properties.get("headers.delimiter", "\t").encode(),
                     headers_separator=properties.get("headers.separator", ",").encode(),
                     headers_key_separator=properties.get("headers.key.separator", ":").encode(),
                     ignore_error=flag("ignore.error"),
                     null_marker=properties["null.marker"].encode() if "null.marker" in properties else None,
                     key_separator_text=separator)
        names = {"key.separator": reader.key_separator, "headers.delimiter": reader.headers_delimiter,
                 "headers.separator": reader.headers_separator,
                 "headers.key.separator": reader.headers_key_separator}
        for name, value in names.items():
            if not value:
                raise UsageError(f"{name} must not be empty")
        for a, b in (("headers.delimiter", "headers.separator"), ("headers.delimiter", "headers.key.separator"),
                     ("headers.separator", "headers.key.separator")):
            if names[a] == names[b]:
                raise UsageError(f"{a} and {b} may not be equal")
        if reader.null_marker is not None:
            for name, value in names.items():
                if value == reader.null_marker:
                    raise UsageError(f"null.marker and {name} may not be equal")
        return reader

    def _null(self, value: bytes) -> bytes | None:
        return None if self.null_marker is not None and value == self.null_marker else value

    def read(self, line: bytes) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]:
        """(key, value, headers) of one line; LineError when a separator is missing."""
        rest, headers = line, None
        if self.parse_headers:
            text, found, after = rest.partition(self.headers_delimiter)
            if found:
                rest, headers = after, self._headers(text)
            elif not self.ignore_error:
                raise LineError(f"no headers delimiter {self.headers_delimiter.decode()!r}: {line[:80]!r}")
        key = None
        if self.parse_key:
            text, found, after = rest.partition(self.key_separator)
            if found:
                rest, key = after, self._null(text)
            elif not self.ignore_error:
                raise LineError(f"no key separator {self.key_separator_text!r}: {line[:80]!r}")
        return key, self._null(rest), headers

    def _headers(self, text: bytes) -> list[tuple[str, bytes | None]] | None:
        if self.null_marker is not None and text == self.null_marker:
            return None
        out: list[tuple[str, bytes | None]] = []
        for pair in text.split(self.headers_separator):
            name, found, value = pair.partition(self.headers_key_separator)
            if not found:
                if not self.ignore_error:
                    raise LineError(f"no header key separator in {pair[:80]!r}")
                out.append((pair.decode("utf-8", "replace"), None))
                continue
            if self.null_marker is not None and name == self.null_marker:
                raise LineError(f"a header key equals the null marker {self.null_marker.decode()!r}")
            out.append((name.decode("utf-8", "replace"), self._null(value)))
        return out


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
    parser.add_argument("--property", action="append", metavar="KEY=VALUE",
                        help="a console producer line reader property: parse.key, key.separator, "
                             "ignore.error, parse.headers, headers.delimiter, headers.separator, "
                             "headers.key.separator, null.marker; repeat for more")
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
    from .consume import parse_properties

    properties = parse_properties(args.property)
    unknown = sorted(k for k in properties if k not in READER_KEYS)
    if unknown:
        print(f"strata: --property {', '.join(unknown)}: not a console producer property; ignored", file=sys.stderr)
    reader = LineReader.from_properties(properties, args.key_separator)
    with client_errors():
        producer = Producer(native_address(args), linger_ms=args.linger_ms,
                            compression=args.compression, retries=2, security=command_config(args))
        try:
            count = producer.partition_count(args.topic)
            if args.partition is not None and not 0 <= args.partition < count:
                raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                               f"(it has {count})")
            _send_lines(producer, args, reader)
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


def _send_lines(producer: Producer, args: argparse.Namespace, reader: LineReader) -> None:
    pending: deque = deque()  # (line number, size, send future)
    failures = LineFailures(args.on_error == "continue")
    problem: CliError | None = None
    lines = 0
    try:
        for number, line in enumerate(_lines(sys.stdin.buffer), start=1):
            lines = number
            try:
                key, value, headers = reader.read(line)
            except LineError as e:
                failures.failed(number, str(e))
                continue
            pending.append((number, len(value or b""), producer.send(args.topic, value, key, partition=args.partition,
                                                              headers=headers)))
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
