"""`strata-segments`: reading `.log` segment files directly, no broker.

    spark.read.format("strata-segments").load("/backups/strata-data")          # a data directory
    spark.read.format("strata-segments").load("/backups/strata-data/events-0")  # a partition
    spark.read.format("strata-segments").option("subscribe", "events").load(path)
    spark.read.format("strata-segments").option("s3.endpoint", url).load("s3://bucket/prefix")

Contract:
- `path` (or several, `.load([a, b])`) names a data directory (every
  `<topic>-<partition>` directory in it) or partition directories (a
  `<topic>-<partition>` directory holding segment files). One Spark
  task per segment (`<20 digits>.log`; `.deleted`, `.cleaned`, `.swap` and
  other files are not segments), planned on the driver from file names only;
  the executors open and read the files themselves, so the path must be
  visible to them (local mode, or a shared file system).
- A path `s3://bucket/prefix` or `file:///path` is a tiered topic's remote store
  (the broker's rsm.config.url): its finished remote segments are read straight
  from the store, one task per segment (remote_segments.py).
- `startingOffsets` / `endingOffsets`: `earliest` (default) / `latest` (default)
  or Spark's JSON (`{"t":{"0":23}}`, -2 earliest, -1 latest; partitions not named
  take the default). For a data directory, earliest is the log start offset and
  latest the end of the files; for a store, the first and one past the last
  remote offset. The `...Timestamp` options need the broker and are refused.
- `includeLocalTail=true` with `kafka.bootstrap.servers` (a store path and
  `subscribe` / `subscribePattern` / `assign` needed): the offsets of the
  subscribed partitions above what the store holds are read from the broker
  through the `strata` source's executor fetches (its security, isolation and
  fetch options apply), up to `endingOffsets` (latest: the broker's log end, or
  last stable offset under read_committed). Partitions the store does not hold
  are read from the broker whole.
- Rows have the broker source's schema (`includeHeaders` too) and hold what a
  consumer reading from the log start would get: records below the log start
  offset that `log-start-offset-checkpoint` (next to the partition
  directories) records are left out, as are transaction markers (always).
- `isolation.level` (Kafka's consumer setting): read_uncommitted (the default)
  returns every data record; read_committed returns what a read_committed
  consumer of the partition would get: no records of aborted transactions (the
  `.txnindex` files name them) and nothing from the first offset of a
  transaction still open in the copy on (segment_txns.py; planned on the driver).
- `subscribe` / `subscribePattern` / `assign` optionally narrow the topics
  (same syntax as the broker source); without them every topic but the
  internal `__consumer_offsets` is read.
- A segment is read in chunks; a trailing entry cut short (a copy taken while
  the broker was writing) is left out with a warning. A corrupt entry (bad
  CRC or structure) fails the task naming the file and position, or with
  `failOnDataLoss=false` ends that segment's read with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from client.fetch import AbortedFilter
from kafka_format.errors import CorruptRecordError
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage.fileutil import parse_segment_file_name
from storage.names import parse_partition_dir_name

from .decode import decode_into
from .fetcher import ROWS_PER_BATCH
from .offsets import EARLIEST, LATEST, OptionError, parse_assign, parse_partition_offsets
from .options import (
    INTERNAL_TOPICS,
    ISOLATION_LEVELS,
    READ_OPTIONS,
    ReadOptions,
    normalize,
    parse_bool,
    parse_int,
    read_options,
)
from .planning import OffsetRange, Planner, split_ranges
from .remote_segments import (
    RemoteSegment,
    RemoteStore,
    is_store_url,
    plan_remote,
    read_remote_chunks,
    split_segments,
    store_of,
)
from .schema import Columns, spark_schema
from .segment_txns import committed_view
from .source import check_user_schema

__all__ = ["StrataSegmentsDataSource", "SegmentReader", "SegmentFile", "find_segments"]

log = logging.getLogger("pipeline")
CHUNK = 8 * 1024 * 1024
NO_END = 2**63 - 1


@dataclass
class SegmentFile(InputPartition):
    path: str
    topic: str
    partition: int
    base_offset: int
    log_start: int  # records below it are not visible
    stable_end: int = NO_END  # read_committed: the copy's last stable offset
    aborted: tuple[tuple[int, int], ...] | None = None  # read_committed: (producer id, first offset)


@dataclass(frozen=True)
class SegmentOptions:
    paths: tuple[str, ...]
    include_headers: bool
    fail_on_data_loss: bool
    topics: tuple[str, ...] | None
    pattern: str | None
    assigned: tuple[tuple[str, int], ...] | None
    read_committed: bool = False
    starting: tuple[tuple[tuple[str, int] | None, int], ...] = ((None, EARLIEST),)
    ending: tuple[tuple[tuple[str, int] | None, int], ...] = ((None, LATEST),)
    stores: tuple[RemoteStore, ...] = ()
    tail: ReadOptions | None = None  # includeLocalTail: the broker source's options
    min_partitions: int | None = None  # remote segments
    max_records_per_partition: int | None = None

    def wants(self, topic: str, partition: int) -> bool:
        if self.topics is not None:
            return topic in self.topics
        if self.pattern is not None:
            return topic not in INTERNAL_TOPICS and re.fullmatch(self.pattern, topic) is not None
        if self.assigned is not None:
            return (topic, partition) in self.assigned
        return topic not in INTERNAL_TOPICS


def segment_options(raw) -> SegmentOptions:
    options = normalize(raw)
    paths: list[str] = []
    if options.get("paths"):
        try:
            paths = [str(p) for p in json.loads(options["paths"])]
        except (ValueError, TypeError):
            paths = [options["paths"]]
    if options.get("path"):
        paths.insert(0, options["path"])
    if not paths:
        raise OptionError("strata-segments needs a path: .load('/path/to/data-dir') or a "
                          "partition directory")
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in options]
    if len(chosen) > 1:
        raise OptionError("Only one of the following options can be specified: subscribe, "
                          "subscribePattern, assign")
    topics = pattern = assigned = None
    if "subscribe" in options:
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
    elif "subscribepattern" in options:
        pattern = options["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern': bad regular expression "
                              f"{pattern!r}: {e}") from None
    elif "assign" in options:
        assigned = tuple(parse_assign(options["assign"]))
    isolation = options.get("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise OptionError(f"Invalid value {options['isolation.level']} for configuration "
                          f"isolation.level: String must be one of: {', '.join(ISOLATION_LEVELS)}")
    for key in ("startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp"):
        if key in options:
            raise OptionError(f"strata-segments: option '{key}' needs the broker's time index lookups; "
                              f"use format('strata') or startingOffsets / endingOffsets")
    paths = list(dict.fromkeys(paths))
    tail = None
    if parse_bool(options, "includelocaltail", False, "includeLocalTail"):
        if not any(is_store_url(p) for p in paths):
            raise OptionError("strata-segments: includeLocalTail reads the broker's offsets above a remote "
                              "store's: load an s3:// or file:// store location")
        if not chosen:
            raise OptionError("strata-segments: includeLocalTail needs subscribe, subscribePattern or assign "
                              "(the broker's partitions to read)")
        passed = {k: v for k, v in options.items() if k in READ_OPTIONS and not k.endswith("offsets")}
        tail = read_options(passed, streaming=False)
    stores = tuple(store_of(p, options, os.environ) for p in paths if is_store_url(p))
    return SegmentOptions(
        paths=tuple(p for p in paths if not is_store_url(p)), stores=stores,
        starting=_offsets(options, "startingoffsets", "startingOffsets", EARLIEST),
        ending=_offsets(options, "endingoffsets", "endingOffsets", LATEST),
        include_headers=parse_bool(options, "includeheaders", False, "includeHeaders"),
        fail_on_data_loss=parse_bool(options, "failondataloss", True, "failOnDataLoss"),
        topics=topics, pattern=pattern, assigned=assigned,
        read_committed=isolation == "read_committed", tail=tail,
        min_partitions=parse_int(options, "minpartitions", "minPartitions"),
        max_records_per_partition=parse_int(options, "maxrecordsperpartition", "maxRecordsPerPartition"))


def _offsets(options, key: str, name: str, default: int) -> tuple[tuple[tuple[str, int] | None, int], ...]:
    """(partition or None for the default, offset) pairs of startingOffsets / endingOffsets."""
    text = options.get(key)
    if text is None:
        return ((None, default),)
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        if (key, word) == ("endingoffsets", "earliest"):
            raise OptionError("ending offset not valid in batch queries: earliest")
        return ((None, EARLIEST if word == "earliest" else LATEST),)
    offsets = parse_partition_offsets(text, name)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(f"{name}: offset {offset} of {tp[0]}-{tp[1]} is not valid "
                              f"(use -2 for earliest, -1 for latest)")
        if key == "endingoffsets" and offset == EARLIEST:
            raise OptionError(f"{name}: ending offset of {tp[0]}-{tp[1]} cannot be -2 (earliest) in a batch query")
    return ((None, default), *sorted(offsets.items()))


def _log_starts(data_dir: str) -> dict[tuple[str, int], int]:
    try:
        return OffsetCheckpointFile(os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)).read()
    except Exception as e:  # unreadable: every record counts, and say so
        log.warning("cannot read %s in %s: %s", LOG_START_OFFSET_CHECKPOINT, data_dir, e)
        return {}


def _partition_segments(directory: str, topic: str, partition: int, log_start: int, read_committed: bool,
                        first: int = EARLIEST, end: int = LATEST) -> list[SegmentFile]:
    """`first` / `end`: the offset range asked for (-2 the log start, -1 the files' end)."""
    bases = sorted(parsed[0] for name in os.listdir(directory)
                   if (parsed := parse_segment_file_name(name)) and parsed[1] == ".log")
    view = committed_view(directory, bases) if read_committed else None
    if first != EARLIEST:
        log_start = max(log_start, NO_END if first == LATEST else first)
    stop = NO_END if end in (EARLIEST, LATEST) else end
    out = []
    for i, base in enumerate(bases):
        following = bases[i + 1] if i + 1 < len(bases) else None
        if following is not None and following <= log_start:
            continue  # wholly below the log start
        if base >= stop:
            break  # wholly past the end asked for
        name = f"{base:020d}.log"
        segment = SegmentFile(os.path.join(directory, name), topic, partition, base, log_start, stop)
        if view is not None:
            if base >= view.stable_end:
                continue  # wholly past the last stable offset
            segment.stable_end = min(stop, view.stable_end)
            segment.aborted = view.aborted_in(max(base, log_start),
                                              min(NO_END if following is None else following, segment.stable_end))
        out.append(segment)
    return out


def find_segments(options: SegmentOptions) -> list[SegmentFile]:
    """Every segment under the paths, sorted by topic, partition, base offset."""
    found: dict[str, SegmentFile] = {}
    for path in options.paths:
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isdir(path):
            raise OptionError(f"strata-segments: {path} is not a directory")
        own = parse_partition_dir_name(os.path.basename(path))
        if own is not None and any(parse_segment_file_name(n) for n in os.listdir(path)):
            directories = [(path, own)]
            data_dir = os.path.dirname(path)
        else:
            data_dir = path
            directories = [(os.path.join(path, name), parsed)
                           for name in sorted(os.listdir(path))
                           if (parsed := parse_partition_dir_name(name))
                           and os.path.isdir(os.path.join(path, name))]
            if not directories:
                raise OptionError(f"strata-segments: no partition directories "
                                  f"(<topic>-<partition>) in {path}")
        starts = _log_starts(data_dir)
        starting, ending = dict(options.starting), dict(options.ending)
        for directory, (topic, partition) in directories:
            if not options.wants(topic, partition):
                continue
            tp = (topic, partition)
            for segment in _partition_segments(directory, topic, partition,
                                               starts.get(tp, 0),
                                               options.read_committed,
                                               starting.get(tp, starting[None]),
                                               ending.get(tp, ending[None])):
                found.setdefault(segment.path, segment)
    return sorted(found.values(), key=lambda s: (s.topic, s.partition, s.base_offset))


def read_segment(segment: SegmentFile, include_headers: bool, fail_on_data_loss: bool):
    """RecordBatches of the segment's visible records, in offset order."""
    def chunks():
        with open(segment.path, "rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk
    yield from decode_chunks(segment.path, chunks(), 0, max(segment.log_start, segment.base_offset),
                             segment.stable_end, segment.aborted, segment.topic, segment.partition,
                             include_headers, fail_on_data_loss)


def read_remote_segment(segment: RemoteSegment, include_headers: bool, fail_on_data_loss: bool):
    """RecordBatches of a remote segment's records in [first, end), by ranged reads."""
    position, chunks = read_remote_chunks(segment, CHUNK)
    yield from decode_chunks(segment.name, chunks, position, segment.first, segment.end, segment.aborted,
                             segment.topic, segment.partition, include_headers, fail_on_data_loss)


def decode_chunks(name: str, chunks, position: int, start: int, end: int,
                  aborted_txns: tuple[tuple[int, int], ...] | None, topic: str, partition: int,
                  include_headers: bool, fail_on_data_loss: bool):
    """RecordBatches of the records in [start, end) of a segment's bytes, given as
    `chunks` from file position `position` on."""
    columns = Columns(include_headers)
    aborted = None if aborted_txns is None else AbortedFilter(aborted_txns)
    buf = b""
    for chunk in chunks:
        buf = buf + chunk if buf else chunk
        try:
            walked = decode_into(buf, start, end, columns, origin=position, aborted=aborted)
        except CorruptRecordError as e:
            message = f"{name}: corrupt {e}"
            if fail_on_data_loss:
                raise CorruptRecordError(message + " (set failOnDataLoss to false to read "
                                         "up to it)") from None
            log.warning("%s; the rest of the segment is skipped", message)
            buf = b""
            break
        start = walked.next_offset
        position += walked.stop
        buf = buf[walked.stop:]
        if len(columns) >= ROWS_PER_BATCH:
            yield columns.to_batch(topic, partition)
        if walked.done:
            buf = b""  # the end asked for, or the last stable offset: nothing further is read
            break
    if buf:
        log.warning("%s: %d bytes at position %d are an entry cut short; left out",
                    name, len(buf), position)
    if len(columns):
        yield columns.to_batch(topic, partition)


def tail_ranges(options: SegmentOptions, covered: dict[tuple[str, int], int]) -> list[OffsetRange]:
    """The broker's offsets of the subscribed partitions from where the stores stop
    (`covered`: the first offset the stores did not give) to the ending offset."""
    assert options.tail is not None
    starting, ending = dict(options.starting), dict(options.ending)
    ranges = []
    with Planner(options.tail) as planner:
        for tp, info in planner.partitions().items():
            first = starting.get(tp, starting[None])
            end = ending.get(tp, ending[None])
            first = info.log_start if first == EARLIEST else info.log_end if first == LATEST else first
            end = info.log_end if end == LATEST else end
            start = max(first, covered.get(tp, first))
            if start < end:
                ranges.append(OffsetRange(tp[0], tp[1], start, end))
    return split_ranges(ranges, options.tail.min_partitions, options.tail.max_records_per_partition)


class SegmentReader(DataSourceReader):
    def __init__(self, options: SegmentOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        local: list[InputPartition] = list(find_segments(options)) if options.paths else []
        remote: list[InputPartition] = []
        covered: dict[tuple[str, int], int] = {}
        for store in options.stores:
            parts, store_covered = plan_remote(store, options.wants, dict(options.starting), dict(options.ending),
                                               options.read_committed)
            remote.extend(split_segments(parts, options.min_partitions, options.max_records_per_partition))
            for tp, offset in store_covered.items():
                covered[tp] = max(covered.get(tp, offset), offset)
        tail: list[InputPartition] = [] if options.tail is None else list(tail_ranges(options, covered))
        return local + remote + tail

    def read(self, partition):
        if isinstance(partition, OffsetRange) and self.options.tail is not None:
            from .source import _read  # the broker source's executor read

            return _read(self.options.tail, partition)
        if isinstance(partition, RemoteSegment):
            return read_remote_segment(partition, self.options.include_headers, self.options.fail_on_data_loss)
        if not isinstance(partition, SegmentFile):
            return iter(())
        return read_segment(partition, self.options.include_headers,
                            self.options.fail_on_data_loss)


class StrataSegmentsDataSource(DataSource):
    """Segment files of a (copied) data directory as a Spark batch source."""

    @classmethod
    def name(cls) -> str:
        return "strata-segments"

    def schema(self):
        return spark_schema(segment_options(self.options).include_headers)

    def reader(self, schema: StructType) -> SegmentReader:
        options = segment_options(self.options)
        check_user_schema(schema, options.include_headers, "strata-segments")
        return SegmentReader(options)
