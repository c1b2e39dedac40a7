"""The remote storage manager (KIP-405's RemoteStorageManager) over obstore.

Contract:
- `RemoteStorageManager` is Kafka's interface: `copy_log_segment_data(metadata,
  data)` puts one segment's files, `fetch_log_segment(metadata, start, end)`
  yields the `.log` bytes of [start, end) in chunks of at most `chunk_bytes`,
  `read_log_segment(metadata, start, length)` returns one range,
  `fetch_index(metadata, IndexType)` returns one index's bytes and
  `delete_log_segment_data(metadata)` removes every object of the segment (an
  object already gone is no error). Every method is blocking and thread-safe
  (obstore's client is); a fetch reads only the ranges it is asked for, never a
  whole segment into memory.
- Object layout, one object per file of a segment, under the store's prefix:
  `<topic>-<topic id>/<partition>/<20-digit start offset>-<segment uuid><suffix>`
  with the suffixes of Kafka's RemoteLogSegmentFileset: `.log`, `.index`,
  `.timeindex`, `.txnindex`, `.snapshot` (the producer state at the segment's
  end) and `.leader_epoch_checkpoint`. The segment uuid is the
  RemoteLogSegmentId's: every copy attempt writes new names, so the objects of a
  crashed copy are never those of a finished one, and only metadata in state
  COPY_SEGMENT_FINISHED (storage/remote/metadata.py) points a reader at objects.
- Manifests, for readers without the broker's metadata (the offline
  `strata-segments` source, `strata dump-log --remote`): `write_manifest(metadata)`
  puts `<...>-<segment uuid>.manifest`, the segment's RemoteLogSegmentMetadataRecord
  (state COPY_SEGMENT_FINISHED) in the `__remote_log_metadata` serde bytes.
  The copier writes it only after COPY_SEGMENT_FINISHED is recorded and deletes it
  (`delete_manifest`) before DELETE_SEGMENT_STARTED is recorded, so a manifest is
  present only while the metadata says the segment is finished: an offline reader
  reads exactly the segments whose manifest it lists (storage/remote/catalog.py).
  `delete_log_segment_data` removes the manifest first, then the other objects.
- Errors: a missing object raises RemoteResourceNotFoundError, any other failure
  of the store RemoteStorageError; both name the object. A read that returns
  fewer bytes than the metadata promises raises RemoteStorageError.
- Two stores: `FileRemoteStorageManager` (`file:///path`: obstore's LocalStore;
  a copy fsyncs each object and its directory before it returns) and
  `S3RemoteStorageManager` (`s3://bucket/prefix`: obstore's S3Store, with
  rsm.config.s3.endpoint / region and AWS credentials; obstore's own retries are
  kept few and short so that a store that is down surfaces to the copier's
  back-off). `open_remote_storage(config)` builds the one the config names.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import obstore
from obstore.exceptions import BaseError as ObstoreError
from obstore.exceptions import NotFoundError
from obstore.store import LocalStore, S3Store

from ..fileutil import fsync_dir
from .config import RemoteLogConfig, StoreLocation
from .errors import RemoteResourceNotFoundError, RemoteStorageError
from .metadata import RemoteLogSegmentMetadata, SegmentState, encode_record, uuid_string

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

T = TypeVar("T")

DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
UPLOAD_PART_BYTES = 8 * 1024 * 1024


class IndexType(enum.Enum):
    """Kafka's RemoteStorageManager.IndexType, with each one's object suffix."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = ".leader_epoch_checkpoint"


SEGMENT_SUFFIX = ".log"
ALL_SUFFIXES = (SEGMENT_SUFFIX, *(t.value for t in IndexType))
MANIFEST_SUFFIX = ".manifest"


@dataclass(frozen=True)
class LogSegmentData:
    """A rolled segment's files, as Kafka's LogSegmentData: paths of the `.log`, the
    offset and time indexes, the transaction index and producer snapshot (None when
    the segment has none) and the leader-epoch checkpoint's bytes. `log_size` bounds
    the `.log` bytes copied (the segment's committed size); the index sizes bound
    the index bytes copied (their valid entries)."""

    log_segment: str
    log_size: int
    offset_index: str
    offset_index_size: int
    time_index: str
    time_index_size: int
    transaction_index: str | None
    producer_snapshot: str | None
    leader_epoch_checkpoint: bytes


def object_key(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    tp = metadata.topic_id_partition
    return (f"{tp.topic}-{uuid_string(tp.topic_id)}/{tp.partition}/"
            f"{metadata.start_offset:020d}-{uuid_string(metadata.segment_id.id)}{suffix}")


def leader_epoch_checkpoint(entries: tuple[tuple[int, int], ...]) -> bytes:
    """Kafka's leader-epoch-checkpoint text (version 0, count, `epoch offset` lines)."""
    lines = ["0", str(len(entries)), *(f"{epoch} {offset}" for epoch, offset in entries)]
    return ("\n".join(lines) + "\n").encode()


class RemoteStorageManager(ABC):
    chunk_bytes: int = DEFAULT_CHUNK_BYTES

    @abstractmethod
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Put the segment's files; returns custom metadata (None here)."""

    @abstractmethod
    def read_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, length: int) -> bytes:
        """Bytes [start, start + length) of the segment's `.log` (cut at its size)."""

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> Iterator[bytes]:
        """The `.log` bytes from `start_position` up to `end_position` (exclusive;
        default the segment's size), in chunks of at most `chunk_bytes`."""
        end = metadata.segment_size_in_bytes if end_position is None else min(end_position,
                                                                              metadata.segment_size_in_bytes)
        position = start_position
        while position < end:
            length = min(self.chunk_bytes, end - position)
            yield self.read_log_segment(metadata, position, length)
            position += length

    def read_log_segment_view(self, metadata: RemoteLogSegmentMetadata, start: int, length: int) -> memoryview:
        """`read_log_segment` as a read-only view of the store's buffer (no copy where
        the store allows it; the remote reader's chunks)."""
        return memoryview(self.read_log_segment(metadata, start, length))

    @abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """One index of the segment, whole (indexes are small: segment.index.bytes at most)."""

    @abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Remove every object of the segment; objects already gone are no error."""

    def write_manifest(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Put the finished segment's manifest (a store without manifests does nothing)."""
        return None

    def delete_manifest(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Remove the segment's manifest; one already gone is no error."""
        return None

    def missing_manifests(self, finished: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        """Those of the finished segments (of one partition) whose manifest is not in the store."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the store's resources."""


class ObjectStoreRemoteStorageManager(RemoteStorageManager):
    """The RemoteStorageManager over one obstore store (file or S3)."""

    def __init__(self, store: Any, location: StoreLocation, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.store = store
        self.location = location
        self.chunk_bytes = chunk_bytes

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location})"

    def _call(self, key: str, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (FileNotFoundError, NotFoundError) as e:
            raise RemoteResourceNotFoundError(f"remote object {self.location}/{key} is missing ({what})") from e
        except (ObstoreError, OSError, RuntimeError, ValueError) as e:
            raise RemoteStorageError(f"remote store {self.location}: {what} {key} failed: "
                                     f"{type(e).__name__}: {_first_line(e)}") from e

    def _put_file(self, key: str, path: str, size: int) -> None:
        def put() -> None:
            with open(path, "rb") as f:
                if size <= UPLOAD_PART_BYTES:
                    obstore.put(self.store, key, f.read(size))
                else:
                    obstore.put(self.store, key, _file_chunks(f, size), chunk_size=UPLOAD_PART_BYTES,
                                max_concurrency=4)
        self._call(key, "put", put)

    def _put_bytes(self, key: str, data: bytes) -> None:
        self._call(key, "put", lambda: obstore.put(self.store, key, data))

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        # Indexes first, the data last: whatever a crash leaves is never named by
        # finished metadata, and a finished copy has every object.
        self._put_file(object_key(metadata, IndexType.OFFSET.value), data.offset_index, data.offset_index_size)
        self._put_file(object_key(metadata, IndexType.TIMESTAMP.value), data.time_index, data.time_index_size)
        for index_type, path in ((IndexType.TRANSACTION, data.transaction_index),
                                 (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot)):
            key = object_key(metadata, index_type.value)
            if path is not None and os.path.exists(path):
                self._put_file(key, path, os.path.getsize(path))
            else:
                self._put_bytes(key, b"")  # an empty index: the segment has none
        self._put_bytes(object_key(metadata, IndexType.LEADER_EPOCH.value), data.leader_epoch_checkpoint)
        self._put_file(object_key(metadata, SEGMENT_SUFFIX), data.log_segment, data.log_size)
        self._make_durable(metadata)
        return None

    def _make_durable(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A store whose put returns before the data is durable makes it so here."""

    def read_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, length: int) -> bytes:
        return self.read_log_segment_view(metadata, start, length).tobytes()

    def read_log_segment_view(self, metadata: RemoteLogSegmentMetadata, start: int, length: int) -> memoryview:
        """The range as a view of obstore's buffer (no copy)."""
        size = metadata.segment_size_in_bytes
        if start < 0 or length < 0 or start > size:
            raise RemoteStorageError(f"remote segment {metadata.segment_id}: range {start}+{length} is outside "
                                     f"its {size} bytes")
        length = min(length, size - start)
        if length == 0:
            return memoryview(b"")
        key = object_key(metadata, SEGMENT_SUFFIX)
        data = self._call(key, "ranged get",
                          lambda: memoryview(obstore.get_range(self.store, key, start=start, length=length)))
        if len(data) != length:
            raise RemoteStorageError(f"remote object {self.location}/{key} is shorter than its metadata says: "
                                     f"{len(data)} bytes at {start}, expected {length} (segment of {size} bytes)")
        return data

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        key = object_key(metadata, index_type.value)
        return self._call(key, "get", lambda: bytes(obstore.get(self.store, key).bytes()))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        for suffix in (MANIFEST_SUFFIX, *ALL_SUFFIXES):  # the manifest first: no reader is sent on
            self._delete(object_key(metadata, suffix))

    def _delete(self, key: str) -> None:
        with contextlib.suppress(RemoteResourceNotFoundError):
            self._call(key, "delete", functools.partial(obstore.delete, self.store, key))

    def write_manifest(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state != SegmentState.COPY_SEGMENT_FINISHED:
            raise RemoteStorageError(f"remote segment {metadata.segment_id}: a manifest is for a finished "
                                     f"copy, not {metadata.state.name}")
        key = object_key(metadata, MANIFEST_SUFFIX)
        self._put_bytes(key, encode_record(metadata))
        self._make_manifest_durable(key)

    def delete_manifest(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._delete(object_key(metadata, MANIFEST_SUFFIX))
        self._make_manifest_durable(None, object_key(metadata, MANIFEST_SUFFIX))

    def missing_manifests(self, finished: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        if not finished:
            return []
        directory = object_key(finished[0], "").rsplit("/", 1)[0] + "/"
        present = set(self.list_keys(directory))
        return [m for m in finished if object_key(m, MANIFEST_SUFFIX) not in present]

    def _make_manifest_durable(self, key: str | None, deleted: str | None = None) -> None:
        """A store whose put or delete returns before it is durable makes it so here."""

    def get_object(self, key: str) -> bytes:
        """One whole object (manifests, indexes: small ones)."""
        return self._call(key, "get", lambda: bytes(obstore.get(self.store, key).bytes()))

    def get_object_range(self, key: str, start: int, length: int) -> bytes:
        """Bytes [start, start + length) of an object (fewer at its end)."""
        if length <= 0:
            return b""
        return self._call(key, "ranged get",
                          lambda: bytes(obstore.get_range(self.store, key, start=start, length=length)))

    def object_size(self, key: str) -> int:
        return int(self._call(key, "head", lambda: obstore.head(self.store, key))["size"])

    def list_dirs(self, prefix: str = "") -> list[str]:
        """The `directories` (common prefixes) right under `prefix`."""
        def listing() -> list[str]:
            found = obstore.list_with_delimiter(self.store, prefix=prefix or None)
            return [p.rstrip("/") for p in found["common_prefixes"]]
        return self._call(prefix, "list", listing)

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every object key under `prefix` (tests and tools)."""
        def listing() -> list[str]:
            return [m["path"] for batch in obstore.list(self.store, prefix=prefix or None) for m in batch]
        return self._call(prefix, "list", listing)


def _file_chunks(f, size: int) -> Iterator[bytes]:
    left = size
    while left > 0:
        chunk = f.read(min(UPLOAD_PART_BYTES, left))
        if not chunk:
            raise OSError(f"{f.name} ended {left} bytes early")
        left -= len(chunk)
        yield chunk


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


class FileRemoteStorageManager(ObjectStoreRemoteStorageManager):
    """The store is a directory (`file:///path`), e.g. a mounted volume."""

    def __init__(self, location: StoreLocation, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        if location.scheme != "file":
            raise ValueError(f"not a file store: {location}")
        try:
            os.makedirs(location.prefix, exist_ok=True)
            store = LocalStore(location.prefix)
        except (OSError, ObstoreError) as e:
            raise RemoteStorageError(f"remote store {location}: cannot open: {_first_line(e)}") from e
        super().__init__(store, location, chunk_bytes=chunk_bytes)

    def _make_durable(self, metadata: RemoteLogSegmentMetadata) -> None:
        directory = ""
        for suffix in ALL_SUFFIXES:
            path = os.path.join(self.location.prefix, object_key(metadata, suffix))
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                raise RemoteStorageError(f"remote store {self.location}: fsync of {path} failed: {e}") from e
            directory = os.path.dirname(path)
        try:
            fsync_dir(directory)
            fsync_dir(os.path.dirname(directory))
        except OSError as e:
            raise RemoteStorageError(f"remote store {self.location}: fsync of {directory} failed: {e}") from e


    def _make_manifest_durable(self, key: str | None, deleted: str | None = None) -> None:
        path = os.path.join(self.location.prefix, key or deleted or "")
        try:
            if key is not None:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            if os.path.isdir(os.path.dirname(path)):
                fsync_dir(os.path.dirname(path))
        except OSError as e:
            raise RemoteStorageError(f"remote store {self.location}: fsync of {path} failed: {e}") from e


class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
    """The store is an S3 bucket (`s3://bucket/prefix`), AWS or S3-compatible."""

    def __init__(self, config: RemoteLogConfig, *, max_retries: int = 2,
                 timeout: timedelta = timedelta(seconds=30)):
        location = config.location
        if location is None or location.scheme != "s3":
            raise ValueError(f"not an S3 store: {location}")
        options: S3Config = {"region": config.s3_region}
        credentials = config.credentials
        if credentials.access_key_id:
            options["access_key_id"] = credentials.access_key_id
            options["secret_access_key"] = credentials.secret_access_key or ""
            if credentials.session_token:
                options["session_token"] = credentials.session_token
        else:
            options["skip_signature"] = True
        if config.s3_endpoint:
            options["endpoint"] = config.s3_endpoint
        client: ClientConfig = {"allow_http": config.s3_endpoint.startswith("http://"), "timeout": timeout,
                                "connect_timeout": timedelta(seconds=5)}
        retry: RetryConfig = {"max_retries": max_retries, "retry_timeout": timeout,
                              "backoff": {"init_backoff": timedelta(milliseconds=100),
                                          "max_backoff": timedelta(seconds=2), "base": 2}}
        try:
            store = S3Store(location.bucket, prefix=location.prefix or None, config=options, client_options=client,
                            retry_config=retry)
        except (ObstoreError, ValueError) as e:
            raise RemoteStorageError(f"remote store {location}: cannot configure: {_first_line(e)}") from e
        super().__init__(store, location, chunk_bytes=config.fetch_chunk_bytes)


def open_remote_storage(config: RemoteLogConfig) -> ObjectStoreRemoteStorageManager:
    """The remote storage manager rsm.config.url names."""
    if config.location is None:
        raise RemoteStorageError("rsm.config.url is not set: no remote store")
    if config.location.scheme == "file":
        return FileRemoteStorageManager(config.location, chunk_bytes=config.fetch_chunk_bytes)
    return S3RemoteStorageManager(config)
