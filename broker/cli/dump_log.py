"""`strata dump-log FILE...`: print and check segment files, like kafka-dump-log.

Works on the files alone (no broker): a segment's .log, .index, .timeindex and .txnindex,
local or a remote store's objects (s3://..., file://..., or every finished remote segment
of a topic with `--remote URL --topic T`). It prints Kafka's DumpLogSegments lines and
reports each problem found as one `FILE: ...` line on stderr (exit code 1). The output
and the checks are described in README.md, "The command line" (`strata dump-log`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import mmap
import os
import re
import struct
import sys
import tempfile
from collections.abc import Callable
from typing import NamedTuple

from kafka_format import LogEntry
from kafka_format.batch import MIN_BATCH_LENGTH
from kafka_format.codecs import Codec
from kafka_format.errors import CorruptRecordError, InvalidConfigError
from kafka_format.framing import ENTRY_PREFIX, LOG_APPEND_TIME, LOG_OVERHEAD, MAGIC_OFFSET, MIN_ENTRY_SIZE_FIELD
from storage.offset_index import OffsetIndex
from storage.remote.catalog import list_segments, open_store, split_object_url
from storage.remote.errors import RemoteStorageError
from storage.remote.store import SEGMENT_SUFFIX, ObjectStoreRemoteStorageManager, object_key
from storage.time_index import TimeIndex
from storage.txn_index import ENTRY as TXN_INDEX_ENTRY
from storage.txn_markers import parse_marker_record

from . import CliError

SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
# Kafka's ControlRecordType ids past ABORT (0) and COMMIT (1).
CONTROL_TYPES = {2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION",
                 6: "KRAFT_VOTERS"}
RECORD_INDENT = "|"
REMOTE_SCHEMES = ("s3://", "file://")
DOWNLOAD_CHUNK = 8 * 1024 * 1024
# A remote segment object's name: the 20-digit start offset, then the segment uuid.
_REMOTE_STEM = re.compile(r"(\d{20})-[A-Za-z0-9_-]{22}")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("dump-log", help="print and check .log/.index/.timeindex/.txnindex files")
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="segment files, or remote objects (s3://... or file://...)")
    parser.add_argument("--remote", metavar="URL",
                        help="a remote store (s3://bucket/prefix or file:///path): dump a topic's remote segments")
    parser.add_argument("--topic", help="with --remote: the topic")
    parser.add_argument("--partition", type=int, help="with --remote: one partition (default: every one)")
    parser.add_argument("--s3-endpoint", default="", help="an S3-compatible server's URL (rsm.config.s3.endpoint)")
    parser.add_argument("--s3-region", default="", help="the bucket's region (rsm.config.s3.region)")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print every record with its key and payload")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record's metadata (implied by --print-data-log)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from . import UsageError

    if args.remote is None and (args.topic is not None or args.partition is not None):
        raise UsageError("--topic and --partition go with --remote")
    if args.remote is not None and args.files:
        raise UsageError("give either FILEs or --remote, not both")
    if args.remote is not None and not args.topic:
        raise UsageError("--remote needs --topic")
    if args.remote is None and not args.files:
        raise UsageError("give the FILEs to dump, or --remote URL --topic T")
    with contextlib.ExitStack() as stack:
        targets = (_remote_segments(args, stack) if args.remote is not None
                   else [_target(path, args, stack) for path in args.files])
        found_problems = False
        for name, fetch in targets:
            path = fetch()
            print(f"Dumping {name}", flush=True)
            problems: list[str] = []
            suffix = os.path.splitext(path)[1]
            if suffix == ".log":
                dump_log(path, problems, deep=args.deep_iteration or args.print_data_log,
                         print_data=args.print_data_log)
            elif suffix == ".index":
                dump_offset_index(path, problems)
            elif suffix == ".txnindex":
                dump_txn_index(path, problems)
            else:
                dump_time_index(path, problems)
            sys.stdout.flush()
            for problem in problems:
                print(f"{name}: {problem.replace(path, name)}", file=sys.stderr)
            found_problems |= bool(problems)
    return 1 if found_problems else 0


Target = tuple[str, Callable[[], str]]  # (name shown, a call giving the local path)


def _target(path: str, args: argparse.Namespace, stack: contextlib.ExitStack) -> Target:
    """A FILE argument, checked before anything is dumped."""
    if path.startswith("file://"):
        local = path[len("file://"):]
        if not local.startswith("/"):
            raise CliError(f"{path}: must be file:///absolute/path")
        _check_dumpable(local)
        return path, lambda: local
    if path.startswith("s3://"):
        suffix = os.path.splitext(path)[1]
        if suffix not in SUFFIXES:
            raise CliError(f"{path}: unknown file type (expected a .log, .index, .timeindex or .txnindex object)")
        try:
            root, key = split_object_url(path)
            rsm = _open(root, args)
        except RemoteStorageError as e:
            raise CliError(str(e)) from None
        _remote_call(lambda: rsm.object_size(key))  # there, and readable
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="strata-dump-log-"))
        return path, lambda: _download_with_log(rsm, key, directory)
    _check_dumpable(path)
    return path, lambda: path


def _open(url: str, args: argparse.Namespace) -> ObjectStoreRemoteStorageManager:
    try:
        return open_store(url, endpoint=args.s3_endpoint, region=args.s3_region)
    except (InvalidConfigError, RemoteStorageError) as e:
        raise CliError(str(e).replace("rsm.config.url: ", "")) from None


def _remote_call(fn):
    try:
        return fn()
    except RemoteStorageError as e:
        raise CliError(str(e)) from None


def _download(rsm: ObjectStoreRemoteStorageManager, key: str, directory: str) -> str:
    """The object, as a file in `directory` named as a local segment file."""
    name = key.rsplit("/", 1)[-1]
    stem, suffix = name.split(".", 1)
    match = _REMOTE_STEM.fullmatch(stem)
    path = os.path.join(directory, f"{match.group(1) if match else stem}.{suffix}")
    size = _remote_call(lambda: rsm.object_size(key))
    with open(path, "wb") as f:
        position = 0
        while position < size:
            data = _remote_call(functools.partial(rsm.get_object_range, key, position,
                                                  min(DOWNLOAD_CHUNK, size - position)))
            if not data:
                raise CliError(f"{rsm.location}/{key}: ends at {position}, before its {size} bytes")
            f.write(data)
            position += len(data)
    return path


def _download_with_log(rsm: ObjectStoreRemoteStorageManager, key: str, directory: str) -> str:
    """An object, and for an index the segment's .log too (the index is checked against it)."""
    path = _download(rsm, key, directory)
    if not key.endswith(SEGMENT_SUFFIX):
        log_key = os.path.splitext(key)[0] + SEGMENT_SUFFIX
        with contextlib.suppress(CliError):  # no .log: the index is dumped unchecked, as for files
            _download(rsm, log_key, directory)
    return path


def _remote_segments(args: argparse.Namespace, stack: contextlib.ExitStack) -> list[Target]:
    """The .log objects of the topic's finished remote segments."""
    rsm = _open(args.remote, args)

    def wants(topic: str, partition: int) -> bool:
        return topic == args.topic and (args.partition is None or partition == args.partition)

    found = _remote_call(lambda: list_segments(rsm, wants))
    segments = [m for tp in sorted(found, key=lambda tp: (tp.partition, str(tp.topic_id))) for m in found[tp]]
    if not segments:
        which = args.topic if args.partition is None else f"{args.topic}-{args.partition}"
        raise CliError(f"{args.remote}: no finished remote segments of {which}")
    directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="strata-dump-log-"))
    targets: list[Target] = []
    for metadata in segments:
        key = object_key(metadata, SEGMENT_SUFFIX)
        if rsm.location.scheme == "file":
            local = os.path.join(rsm.location.prefix, key)
            targets.append((f"{rsm.location}/{key}", functools.partial(str, local)))
        else:
            sub = os.path.join(directory, str(len(targets)))
            os.mkdir(sub)
            targets.append((f"{rsm.location}/{key}", functools.partial(_download, rsm, key, sub)))
    return targets


def _check_dumpable(path: str) -> None:
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise CliError(f"{path}: not a regular file")
    suffix = os.path.splitext(path)[1]
    if suffix not in SUFFIXES:
        raise CliError(f"{path}: unknown file type (expected a .log, .index, .timeindex or .txnindex file)")
    if suffix != ".log" and _base_offset(path) is None:
        raise CliError(f"{path}: the file name must be the segment's base offset, "
                       f"like 00000000000000000000{suffix}")
    if not os.access(path, os.R_OK):
        raise CliError(f"{path}: permission denied")


def _base_offset(path: str) -> int | None:
    stem = os.path.basename(path).split(".")[0]
    if (match := _REMOTE_STEM.fullmatch(stem)) is not None:  # a file store's remote segment object
        return int(match.group(1))
    return int(stem) if stem.isdigit() else None


def _read(path: str):
    """The file's bytes, mapped rather than read: segments can be a gigabyte."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


# ---- .log ----------------------------------------------------------------------------------

class EntrySpan(NamedTuple):
    position: int
    last_offset: int
    max_timestamp: int


class LogWalk(NamedTuple):
    spans: list[EntrySpan]  # every whole entry, in file order
    valid_bytes: int  # where the first byte that is not part of a whole entry sits


def _timestamp_key(entry: LogEntry) -> str:
    if entry.magic == 0:
        return "NoTimestampType"
    return "LogAppendTime" if entry.timestamp_type == LOG_APPEND_TIME else "CreateTime"


def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name
    except ValueError:
        return f"UNKNOWN({codec})"


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def walk_log(data, problems: list[str], base_offset: int | None,
             on_entry: Callable[[LogEntry, bool, int, int | None], None] | None = None) -> LogWalk:
    """Walk and check every entry of a .log's bytes; call `on_entry(entry, valid,
    first_offset, count)` for each whole entry."""
    spans: list[EntrySpan] = []
    previous_last = None
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < LOG_OVERHEAD + 5:  # not even up to the magic byte
            _torn_tail(problems, pos, end)
            break
        offset, size = ENTRY_PREFIX.unpack_from(data, pos)
        magic = data[pos + MAGIC_OFFSET]
        if size < MIN_ENTRY_SIZE_FIELD or (magic == 2 and size < MIN_BATCH_LENGTH):
            problems.append(f"entry at position {pos}: size {size} is too small for an entry; "
                            f"the {end - pos} bytes from here on cannot be read")
            break
        if magic > 2:
            problems.append(f"entry at position {pos}: unknown magic {magic}; "
                            f"the {end - pos} bytes from here on cannot be read")
            break
        if pos + LOG_OVERHEAD + size > end:
            _torn_tail(problems, pos, end)
            break
        try:
            entry = LogEntry(data, pos)
        except CorruptRecordError as e:
            problems.append(f"{e}; the {end - pos} bytes from here on cannot be read")
            break
        valid = True
        try:
            entry.ensure_valid()
        except CorruptRecordError as e:
            valid = False
            problems.append(f"entry at position {pos} (offset {offset}): {_strip_position(e)}")
        first_offset, count = offset, None
        if valid:
            try:  # a compressed classic wrapper's first offset and count live inside it
                first_offset, count = entry.base_offset, entry.record_count
            except CorruptRecordError as e:
                problems.append(f"entry at position {pos}: {_strip_position(e)}")
        if previous_last is not None and first_offset <= previous_last:
            problems.append(f"entry at position {pos}: offset {first_offset} does not follow "
                            f"offset {previous_last}")
        elif previous_last is None and base_offset is not None and first_offset < base_offset:
            problems.append(f"entry at position {pos}: offset {first_offset} is below the "
                            f"segment's base offset {base_offset}")
        previous_last = entry.last_offset
        spans.append(EntrySpan(pos, entry.last_offset, entry.max_timestamp))
        if on_entry is not None:
            on_entry(entry, valid, first_offset, count)
        pos += entry.size
    return LogWalk(spans, pos)


def _strip_position(e: Exception) -> str:
    text = str(e)
    return text.split(": ", 1)[1] if text.startswith(("entry at", "message at")) else text


def _torn_tail(problems: list[str], pos: int, end: int) -> None:
    problems.append(f"torn tail: the last {end - pos} bytes (from position {pos}) "
                    f"are not a whole entry")


def dump_log(path: str, problems: list[str], *, deep: bool, print_data: bool) -> None:
    out = sys.stdout.write

    def on_entry(entry: LogEntry, valid: bool, first_offset: int, count: int | None) -> None:
        line = (f"baseOffset: {first_offset} lastOffset: {entry.last_offset} "
                f"count: {'null' if count is None else count} position: {entry.position} "
                f"size: {entry.size} magic: {entry.magic} "
                f"compresscodec: {_codec_name(entry.codec)} crc: {entry.crc} "
                f"isValid: {'true' if valid else 'false'} "
                f"{_timestamp_key(entry)}: {entry.max_timestamp}")
        if entry.magic == 2:
            last_sequence = (-1 if entry.base_sequence < 0 else
                             (entry.base_sequence + entry.last_offset - first_offset) % 2**31)
            line += (f" baseSequence: {entry.base_sequence} lastSequence: {last_sequence}"
                     f" producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch}"
                     f" partitionLeaderEpoch: {entry.partition_leader_epoch}"
                     f" isTransactional: {str(entry.is_transactional).lower()}"
                     f" isControl: {str(entry.is_control).lower()}")
        out(line + "\n")
        if deep and valid:
            _dump_records(entry, first_offset, print_data, problems)

    data = _read(path)
    walk = walk_log(data, problems, _base_offset(path), on_entry)
    if walk.valid_bytes < len(data):  # Kafka's closing line for a log it could not read to the end
        out(f"Found {len(data) - walk.valid_bytes} invalid bytes at the end of "
            f"{os.path.basename(path)}\n")


def _dump_records(entry: LogEntry, first_offset: int, print_data: bool,
                  problems: list[str]) -> None:
    try:
        records = entry.records()
    except CorruptRecordError as e:
        problems.append(f"entry at position {entry.position}: records: {_strip_position(e)}")
        return
    key_name = _timestamp_key(entry)
    lines = []
    for record in records:
        line = (f"{RECORD_INDENT} offset: {record.offset} {key_name}: {record.timestamp} "
                f"keySize: {-1 if record.key is None else len(record.key)} "
                f"valueSize: {-1 if record.value is None else len(record.value)}")
        if entry.magic == 2:
            sequence = (-1 if entry.base_sequence < 0 else
                        (entry.base_sequence + record.offset - first_offset) % 2**31)
            line += (f" sequence: {sequence} headerKeys: "
                     f"[{','.join(key for key, _ in record.headers)}]")
        if entry.is_control:
            line += _control_text(record.key, record.value, entry.position, problems)
        if print_data and not entry.is_control:
            if record.key is not None:
                line += f" key: {_text(record.key)}"
            if record.value is not None:
                line += f" payload: {_text(record.value)}"
        lines.append(line + "\n")
    sys.stdout.write("".join(lines))


def _control_text(key: bytes | None, value: bytes | None, position: int, problems: list[str]) -> str:
    """What Kafka's DumpLogSegments prints after a control record's metadata."""
    try:
        marker = parse_marker_record(key, value)
    except CorruptRecordError as e:
        problems.append(f"entry at position {position}: {e}")
        return ""
    if marker is None:
        kind = struct.unpack_from(">h", key or b"\0\0\0\0", 2)[0]
        return f" controlType: {CONTROL_TYPES.get(kind, 'UNKNOWN')}({kind})"
    commit, coordinator_epoch = marker
    return f" endTxnMarker: {'COMMIT' if commit else 'ABORT'} coordinatorEpoch: {coordinator_epoch}"


# ---- indexes -------------------------------------------------------------------------------

def _log_next_to(path: str) -> tuple[list[EntrySpan], int] | None:
    """(entries, size) of the .log beside an index, or None (said on stderr) without one."""
    log_path = os.path.splitext(path)[0] + ".log"
    if not os.path.isfile(log_path):
        print(f"{path}: no {os.path.basename(log_path)} next to it: entries are not checked "
              f"against the log", file=sys.stderr)
        return None
    data = _read(log_path)
    return walk_log(data, [], _base_offset(log_path)).spans, len(data)


def _entries(path: str, entry: struct.Struct, problems: list[str]):
    data = _read(path)
    whole = len(data) - len(data) % entry.size
    if whole != len(data):
        problems.append(f"{len(data)} bytes is not a whole number of {entry.size}-byte entries")
    return [entry.unpack_from(data, i) for i in range(0, whole, entry.size)]


def dump_offset_index(path: str, problems: list[str]) -> None:
    base = _base_offset(path)
    log = _log_next_to(path)
    by_position = {span.position: span for span in log[0]} if log else {}
    previous = None
    lines = []
    for i, (relative, position) in enumerate(_entries(path, OffsetIndex.ENTRY, problems)):
        if relative == 0 and (i > 0 or (position == 0 and log is not None and (
                0 not in by_position or by_position[0].last_offset != base))):
            # The zero-filled, preallocated rest of an active segment's index. The
            # first slot is one too unless the log says an entry really ends there.
            break
        offset = base + relative
        lines.append(f"offset: {offset} position: {position}\n")
        if previous is not None and offset <= previous[0]:
            problems.append(f"entry {i}: offset {offset} is not above the previous "
                            f"entry's offset {previous[0]}")
        if previous is not None and position <= previous[1]:
            problems.append(f"entry {i}: position {position} is not above the previous "
                            f"entry's position {previous[1]}")
        if relative < 0 or position < 0:
            problems.append(f"entry {i}: negative relative offset or position")
        if log is not None:
            span = by_position.get(position)
            if position >= log[1]:
                problems.append(f"entry {i}: offset {offset} points to position {position}, "
                                f"past the end of the log ({log[1]} bytes)")
            elif span is None:
                problems.append(f"entry {i}: offset {offset} points to position {position}, "
                                f"where no entry of the log starts")
            elif span.last_offset != offset:
                problems.append(f"entry {i}: index offset {offset}, but the log's entry at "
                                f"position {position} ends at offset {span.last_offset}")
        previous = (offset, position)
    sys.stdout.write("".join(lines))


def dump_time_index(path: str, problems: list[str]) -> None:
    base = _base_offset(path)
    log = _log_next_to(path)
    by_last_offset = {span.last_offset: span for span in log[0]} if log else {}
    previous = None
    lines = []
    for i, (timestamp, relative) in enumerate(_entries(path, TimeIndex.ENTRY, problems)):
        if relative == 0 and (i > 0 or (timestamp == 0 and log is not None and (
                base not in by_last_offset or by_last_offset[base].max_timestamp != 0))):
            break  # preallocated zeros, as in the offset index
        offset = base + relative
        lines.append(f"timestamp: {timestamp} offset: {offset}\n")
        if relative < 0:
            problems.append(f"entry {i}: offset {offset} is below the base offset {base}")
        if previous is not None and timestamp <= previous[0]:
            problems.append(f"entry {i}: timestamp {timestamp} is not above the previous "
                            f"entry's timestamp {previous[0]}")
        if previous is not None and offset < previous[1]:
            problems.append(f"entry {i}: offset {offset} is below the previous entry's "
                            f"offset {previous[1]}")
        if log is not None:
            span = by_last_offset.get(offset)
            if span is None:
                problems.append(f"entry {i}: offset {offset} is not the last offset of any "
                                f"entry in the log")
            elif span.max_timestamp != timestamp:
                problems.append(f"entry {i}: timestamp {timestamp}, but the log's entry ending "
                                f"at offset {offset} has max timestamp {span.max_timestamp}")
        previous = (timestamp, offset)
    sys.stdout.write("".join(lines))


def dump_txn_index(path: str, problems: list[str]) -> None:
    base = _base_offset(path)
    lines = []
    previous = None
    for i, (version, producer_id, first, last, last_stable) in enumerate(
            _entries(path, TXN_INDEX_ENTRY, problems)):
        lines.append(f"version: {version} producerId: {producer_id} firstOffset: {first} "
                     f"lastOffset: {last} lastStableOffset: {last_stable}\n")
        if version != 0:
            problems.append(f"entry {i}: unknown version {version}")
        if base is not None and last < base:
            problems.append(f"entry {i}: last offset {last} is below the segment's base offset {base}")
        if first > last:
            problems.append(f"entry {i}: first offset {first} is past the last offset {last}")
        if previous is not None and last <= previous:
            problems.append(f"entry {i}: last offset {last} is not above the previous entry's {previous}")
        previous = last
    sys.stdout.write("".join(lines))
