"""`strata-segments`: reading `.log` segment files directly, no broker.

    spark.read.format("strata-segments").load("/backups/strata-data")          # a data directory
    spark.read.format("strata-segments").load("/backups/strata-data/events-0")  # a partition
    spark.read.format("strata-segments").option("subscribe", "events").load(path)

Contract:
- `path` (or several, `.load([a, b])`) names a data directory (every
  `<topic>-<partition>` directory in it) or partition directories (a
  `<topic>-<partition>` directory holding segment files). One Spark
  task per segment (`<20 digits>.log`; `.deleted`, `.cleaned`, `.swap` and
  other files are not segments), planned on the driver from file names only;
  the executors open and read the files themselves, so the path must be
  visible to them (local mode, or a shared file system).
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
from .offsets import OptionError, parse_assign
from .options import INTERNAL_TOPICS, ISOLATION_LEVELS, normalize, parse_bool
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
    return SegmentOptions(
        paths=tuple(dict.fromkeys(paths)),
        include_headers=parse_bool(options, "includeheaders", False, "includeHeaders"),
        fail_on_data_loss=parse_bool(options, "failondataloss", True, "failOnDataLoss"),
        topics=topics, pattern=pattern, assigned=assigned,
        read_committed=isolation == "read_committed")


def _log_starts(data_dir: str) -> dict[tuple[str, int], int]:
    try:
        return OffsetCheckpointFile(os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)).read()
    except Exception as e:  # unreadable: every record counts, and say so
        log.warning("cannot read %s in %s: %s", LOG_START_OFFSET_CHECKPOINT, data_dir, e)
        return {}


def _partition_segments(directory: str, topic: str, partition: int,
                        log_start: int, read_committed: bool) -> list[SegmentFile]:
    bases = sorted(parsed[0] for name in os.listdir(directory)
                   if (parsed := parse_segment_file_name(name)) and parsed[1] == ".log")
    view = committed_view(directory, bases) if read_committed else None
    out = []
    for i, base in enumerate(bases):
        following = bases[i + 1] if i + 1 < len(bases) else None
        if following is not None and following <= log_start:
            continue  # wholly below the log start
        name = f"{base:020d}.log"
        segment = SegmentFile(os.path.join(directory, name), topic, partition, base, log_start)
        if view is not None:
            if base >= view.stable_end:
                continue  # wholly past the last stable offset
            segment.stable_end = view.stable_end
            segment.aborted = view.aborted_in(max(base, log_start),
                                              min(NO_END if following is None else following, view.stable_end))
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
        for directory, (topic, partition) in directories:
            if not options.wants(topic, partition):
                continue
            for segment in _partition_segments(directory, topic, partition,
                                               starts.get((topic, partition), 0),
                                               options.read_committed):
                found.setdefault(segment.path, segment)
    return sorted(found.values(), key=lambda s: (s.topic, s.partition, s.base_offset))


def read_segment(segment: SegmentFile, include_headers: bool, fail_on_data_loss: bool):
    """RecordBatches of the segment's visible records, in offset order."""
    columns = Columns(include_headers)
    start = max(segment.log_start, segment.base_offset)
    aborted = None if segment.aborted is None else AbortedFilter(segment.aborted)
    buf = b""
    position = 0  # file position of buf[0]
    with open(segment.path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            buf = buf + chunk if buf else chunk
            try:
                walked = decode_into(buf, start, segment.stable_end, columns, origin=position,
                                     aborted=aborted)
            except CorruptRecordError as e:
                message = f"{segment.path}: corrupt {e}"
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
                yield columns.to_batch(segment.topic, segment.partition)
            if walked.done:
                buf = b""  # the last stable offset: nothing further is read
                break
    if buf:
        log.warning("%s: %d bytes at position %d are an entry cut short; left out",
                    segment.path, len(buf), position)
    if len(columns):
        yield columns.to_batch(segment.topic, segment.partition)


class SegmentReader(DataSourceReader):
    def __init__(self, options: SegmentOptions):
        self.options = options

    def partitions(self) -> list[SegmentFile]:
        return find_segments(self.options)

    def read(self, partition):
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
