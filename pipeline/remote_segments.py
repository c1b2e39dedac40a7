"""`strata-segments` over a tiered topic's remote store: no broker in the path.

    spark.read.format("strata-segments").option("s3.endpoint", "http://minio:9000")
        .option("subscribe", "events").load("s3://bucket/prefix")
    spark.read.format("strata-segments").load("file:///mnt/tier")

Contract:
- A path starting with `s3://` or `file://` is a remote store location, the
  broker's `rsm.config.url`. The store is opened with the broker's rules
  (storage/remote/catalog.py): options `s3.endpoint` and `s3.region` (also under
  their broker names `rsm.config.s3.endpoint` / `rsm.config.s3.region`), else
  AWS_REGION / AWS_DEFAULT_REGION; credentials are the driver's AWS_ACCESS_KEY_ID,
  AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, handed to the executors with
  their tasks.
- Which segments exist is what the store's manifests say (one per segment the
  broker recorded COPY_SEGMENT_FINISHED and has not begun to delete;
  storage/remote/store.py); objects of unfinished or deleted copies are never
  read. The driver lists the manifests only; each remote segment within the
  offset range is one Spark task, and the executor reads the `.log` object
  itself with ranged reads of CHUNK bytes, starting at the position the
  segment's remote `.index` gives for the task's first offset.
- Offsets: `startingOffsets` / `endingOffsets` are `earliest`, `latest` or
  Spark's JSON (-2 earliest, -1 latest); earliest is a partition's first remote
  offset, latest one past its last remote offset.
- `minPartitions` / `maxRecordsPerPartition` split a segment's offset range
  into several tasks with the `strata` source's arithmetic (each segment's range
  counted as a partition's); each task starts at its own index position.
- read_committed: aborted transactions from the segments' `.txnindex` objects
  (the segment's and those after it), and nothing from the first offset of a
  transaction the last segment's `.snapshot` (the producer state at its end)
  shows open; without any snapshot the batch headers are read as for files.
- A topic whose name the store holds under two topic ids (deleted and created
  again) is refused, naming both directories: the reader cannot tell which one
  is the topic's history.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import logging
import struct
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from kafka_format.errors import CorruptIndexError, CorruptRecordError
from storage.producer_state import CorruptSnapshotError, decode_snapshot
from storage.remote.catalog import list_segments, open_store
from storage.remote.config import StoreLocation
from storage.remote.errors import RemoteStorageError
from storage.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition, uuid_string
from storage.remote.store import SEGMENT_SUFFIX, IndexType, ObjectStoreRemoteStorageManager, object_key
from storage.txn_index import AbortedTxn, decode_entries

from .offsets import EARLIEST, LATEST, OptionError

__all__ = ["RemoteStore", "RemoteSegment", "is_store_url", "plan_remote", "read_remote_chunks"]

log = logging.getLogger("pipeline")
NO_END = 2**63 - 1
INDEX_ENTRY = struct.Struct(">ii")
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                 "AWS_DEFAULT_REGION")


def is_store_url(path: str) -> bool:
    return path.startswith(("s3://", "file://"))


@dataclass(frozen=True)
class RemoteStore:
    """What an executor needs to open the store (pickled with each task)."""

    url: str
    endpoint: str = ""
    region: str = ""
    environ: tuple[tuple[str, str], ...] = ()  # the driver's AWS_* variables

    def __repr__(self) -> str:  # never print credentials
        return f"RemoteStore({self.url!r}, endpoint={self.endpoint!r}, region={self.region!r})"

    def open(self) -> ObjectStoreRemoteStorageManager:
        return open_store(self.url, endpoint=self.endpoint, region=self.region, environ=dict(self.environ))


_opened: dict[RemoteStore, ObjectStoreRemoteStorageManager] = {}
_opened_lock = threading.Lock()


def _store(store: RemoteStore) -> ObjectStoreRemoteStorageManager:
    """One client per store and Python worker (workers are reused across tasks)."""
    with _opened_lock:
        rsm = _opened.get(store)
        if rsm is None:
            rsm = _opened[store] = store.open()
        return rsm


@dataclass
class RemoteSegment(InputPartition):
    store: RemoteStore
    key: str  # the `.log` object
    index_key: str  # its offset index
    size: int
    topic: str
    partition: int
    base_offset: int
    first: int  # the first offset read
    end: int  # reading stops before it (endingOffsets, read_committed's last stable offset)
    aborted: tuple[tuple[int, int], ...] | None = None  # read_committed: (producer id, first offset)

    @property
    def name(self) -> str:
        return f"{StoreLocation.parse(self.store.url)}/{self.key}"


def store_of(url: str, options: Mapping[str, str], environ: Mapping[str, str]) -> RemoteStore:
    endpoint = options.get("s3.endpoint") or options.get("rsm.config.s3.endpoint") or ""
    region = options.get("s3.region") or options.get("rsm.config.s3.region") or ""
    store = RemoteStore(url, endpoint.strip(), region.strip(),
                        tuple((k, environ[k]) for k in AWS_VARIABLES if environ.get(k)))
    try:
        store.open()
    except Exception as e:  # InvalidConfigError or RemoteStorageError: the message names the problem
        raise OptionError(f"strata-segments: {e}") from None
    return store


def _check_topic_ids(found: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]], url: str) -> None:
    ids: dict[str, set[str]] = {}
    for tp in found:
        ids.setdefault(tp.topic, set()).add(uuid_string(tp.topic_id))
    for topic, seen in ids.items():
        if len(seen) > 1:
            names = ", ".join(f"{topic}-{i}" for i in sorted(seen))
            raise OptionError(f"strata-segments: {url} holds topic {topic!r} under {len(seen)} topic ids "
                              f"({names}): it was deleted and created again; read a copy with one of them")


def _resolve(value: int | None, earliest: int, latest: int) -> int:
    if value is None:
        return -3
    return earliest if value == EARLIEST else latest if value == LATEST else value


def plan_remote(store: RemoteStore, wants, starting, ending,
                read_committed: bool) -> tuple[list[RemoteSegment], dict[tuple[str, int], int]]:
    """The tasks of one store: every finished remote segment within the offset range,
    and per partition the first offset the store does not give (one past its last
    remote offset; under read_committed at most its last stable offset).
    `starting` / `ending`: (topic, partition) -> offset (-2 earliest, -1 latest), or a
    default under the key None."""
    rsm = _store(store)
    try:
        found = list_segments(rsm, wants)
    except RemoteStorageError as e:
        raise OptionError(f"strata-segments: {e}") from None
    _check_topic_ids(found, store.url)
    parts: list[RemoteSegment] = []
    covered: dict[tuple[str, int], int] = {}
    for tp, segments in found.items():
        if not segments:
            continue
        key = (tp.topic, tp.partition)
        earliest, latest = segments[0].start_offset, segments[-1].end_offset + 1
        covered[key] = latest
        first = max(earliest, _resolve(starting.get(key, starting[None]), earliest, latest))
        end = min(latest, _resolve(ending.get(key, ending[None]), earliest, latest))
        chosen = [m for m in segments if m.end_offset >= first and m.start_offset < end]
        aborted: list[AbortedTxn] = []
        if read_committed and chosen:
            stable_end, aborted = remote_committed_view(rsm, segments, chosen[0])
            end = min(end, stable_end)
            covered[key] = min(latest, stable_end)
            chosen = [m for m in chosen if m.start_offset < end]
        for m in chosen:
            part_first = max(first, m.start_offset)
            part_end = min(end, m.end_offset + 1)
            segment_aborted = None
            if read_committed:
                segment_aborted = tuple((t.producer_id, t.first_offset) for t in aborted
                                        if t.last_offset >= part_first and t.first_offset < part_end)
            parts.append(RemoteSegment(store, object_key(m, SEGMENT_SUFFIX), object_key(m, IndexType.OFFSET.value),
                                       m.segment_size_in_bytes, tp.topic, tp.partition, m.start_offset,
                                       part_first, part_end, segment_aborted))
    return parts, covered


def split_segments(parts: list[RemoteSegment], min_partitions: int | None,
                   max_records: int | None) -> list[RemoteSegment]:
    """The tasks after `minPartitions` / `maxRecordsPerPartition` (planning.split_ranges)."""
    from .planning import OffsetRange, split_ranges

    if min_partitions is None and max_records is None:
        return parts
    ranges = [OffsetRange(str(i), 0, p.first, p.end) for i, p in enumerate(parts)]
    return [dataclasses.replace(parts[int(r.topic)], first=r.start, end=r.end)
            for r in split_ranges(ranges, min_partitions, max_records)]


def remote_committed_view(rsm: ObjectStoreRemoteStorageManager, segments: list[RemoteLogSegmentMetadata],
                          first: RemoteLogSegmentMetadata) -> tuple[int, list[AbortedTxn]]:
    """(last stable offset, aborted transactions) of a partition's remote segments, as
    segment_txns.committed_view computes them for files."""
    from .segment_txns import scan_headers  # the reader of headers, shared with the files' view

    wanted = [m for m in segments if m.start_offset >= first.start_offset]

    def txn_index(m: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        key = object_key(m, IndexType.TRANSACTION.value)
        try:
            return decode_entries(rsm.get_object(key), f"{rsm.location}/{key}")
        except CorruptIndexError as e:
            raise CorruptRecordError(str(e)) from None

    with ThreadPoolExecutor(8) as pool:
        aborted = [t for entries in pool.map(txn_index, wanted) for t in entries]
    start, open_txns, scan_from = segments[0].start_offset, {}, 0
    for i in range(len(segments) - 1, -1, -1):  # the newest snapshot: producer state at a segment's end
        key = object_key(segments[i], IndexType.PRODUCER_SNAPSHOT.value)
        data = rsm.get_object(key)
        if not data:
            continue
        try:
            entries = decode_snapshot(data)
        except CorruptSnapshotError as e:
            raise CorruptRecordError(f"{rsm.location}/{key}: {e}") from None
        start, scan_from = segments[i].end_offset + 1, i + 1
        open_txns = {e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0}
        break
    for m in segments[scan_from:]:
        scan_headers(functools.partial(_read_at, rsm, object_key(m, SEGMENT_SUFFIX), m.segment_size_in_bytes),
                     start, open_txns)
    return min(open_txns.values(), default=NO_END), aborted


def _read_at(rsm: ObjectStoreRemoteStorageManager, key: str, size: int, position: int, length: int) -> bytes:
    """Up to `length` bytes of the object from `position` (nothing at or past its `size`)."""
    return rsm.get_object_range(key, position, min(length, size - position)) if position < size else b""


def start_position(rsm: ObjectStoreRemoteStorageManager, segment: RemoteSegment) -> int:
    """The position of the last index entry at or below the first offset (0 without one)."""
    if segment.first <= segment.base_offset:
        return 0
    data = rsm.get_object(segment.index_key)
    count = len(data) // INDEX_ENTRY.size
    relatives = [INDEX_ENTRY.unpack_from(data, i * INDEX_ENTRY.size)[0] for i in range(count)]
    at = bisect.bisect_right(relatives, segment.first - segment.base_offset) - 1
    return 0 if at < 0 else INDEX_ENTRY.unpack_from(data, at * INDEX_ENTRY.size)[1]


def read_remote_chunks(segment: RemoteSegment, chunk: int) -> tuple[int, Iterator[bytes]]:
    """(start position, ranged reads of the segment's `.log` from there in `chunk`-byte pieces)."""
    rsm = _store(segment.store)
    position = start_position(rsm, segment)

    def chunks() -> Iterator[bytes]:
        # The next range is read while the current one is decoded (obstore releases the GIL).
        with ThreadPoolExecutor(1) as pool:
            at = position
            pending = None
            while at < segment.size or pending is not None:
                if pending is None:
                    pending = pool.submit(rsm.get_object_range, segment.key, at, min(chunk, segment.size - at))
                data = pending.result()
                pending = None
                if not data:
                    raise RemoteStorageError(f"remote object {segment.name} ends at {at}, before the "
                                             f"{segment.size} bytes its manifest gives")
                at += len(data)
                if at < segment.size:
                    pending = pool.submit(rsm.get_object_range, segment.key, at, min(chunk, segment.size - at))
                yield data
            # A reader that stops early (endingOffsets) leaves at most one range read for nothing.
    return position, chunks()
