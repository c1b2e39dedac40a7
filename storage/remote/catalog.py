"""The finished remote segments of a store, as a reader without the broker sees them.

Contract:
- `open_store(url, endpoint=, region=, environ=)` opens the store at
  `s3://bucket/prefix` or `file:///path` with the broker's rules
  (storage/remote/config.py: rsm.config.s3.endpoint / region, AWS_* credentials
  from `environ`, os.environ by default); a bad URL or setting raises
  InvalidConfigError naming it; a file store whose directory does not exist
  raises RemoteStorageError (a reader never creates it).
- `list_segments(rsm, wants=)` lists, for each partition the store holds
  (`<topic>-<topic id>/<partition>/`), the segments whose manifest is present
  (store.py: a manifest exists only while the broker's metadata says
  COPY_SEGMENT_FINISHED), as RemoteLogSegmentMetadata sorted by start offset.
  `wants(topic, partition)` narrows the partitions before their manifests are
  read. A manifest that does not decode, is not in state COPY_SEGMENT_FINISHED,
  or names another segment than its own key raises RemoteStorageError naming
  it; so do two listed segments of one partition whose offsets overlap.
- `split_object_url(url)` splits the URL of one object
  (`.../<topic>-<topic id>/<partition>/<start>-<uuid>.log`) into the store's URL
  and the object's key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka_format.errors import CorruptRecordError

from .config import S3_ENDPOINT, S3_REGION, URL, RemoteLogConfig
from .errors import RemoteStorageError
from .metadata import RemoteLogSegmentMetadata, SegmentState, TopicIdPartition, decode_record
from .store import MANIFEST_SUFFIX, ObjectStoreRemoteStorageManager, object_key, open_remote_storage

__all__ = ["open_store", "list_segments", "split_object_url", "topic_of_directory"]

# `<topic>-<22 characters of URL-safe base64: Kafka's Uuid.toString>`
_TOPIC_DIRECTORY = re.compile(r"(?P<topic>.+)-(?P<id>[A-Za-z0-9_-]{22})")
_MANIFEST_READERS = 8


def open_store(url: str, *, endpoint: str = "", region: str = "",
               environ: Mapping[str, str] | None = None) -> ObjectStoreRemoteStorageManager:
    props: dict[str, Any] = {URL: url}
    if endpoint:
        props[S3_ENDPOINT] = endpoint
    if region:
        props[S3_REGION] = region
    config = RemoteLogConfig.from_props(props, environ)
    location = config.location
    if location is not None and location.scheme == "file" and not os.path.isdir(location.prefix):
        raise RemoteStorageError(f"remote store {location}: no such directory")
    return open_remote_storage(config)


def topic_of_directory(name: str) -> str | None:
    match = _TOPIC_DIRECTORY.fullmatch(name)
    return match.group("topic") if match else None


def split_object_url(url: str) -> tuple[str, str]:
    """(store URL, key) of an object URL three levels below the store's root."""
    head, _, name = url.rstrip("/").rpartition("/")
    head, _, partition = head.rpartition("/")
    root, _, topic_directory = head.rpartition("/")
    if not (name and partition.isdigit() and topic_of_directory(topic_directory) and "://" in root
            and not root.endswith(":/")):
        raise RemoteStorageError(f"{url}: not the URL of a remote segment object "
                                 f"(<store>/<topic>-<topic id>/<partition>/<start offset>-<uuid>.log)")
    return root, f"{topic_directory}/{partition}/{name}"


def _read_manifest(rsm: ObjectStoreRemoteStorageManager, key: str) -> RemoteLogSegmentMetadata:
    data = rsm.get_object(key)
    try:
        event = decode_record(data)
    except CorruptRecordError as e:
        raise RemoteStorageError(f"remote manifest {rsm.location}/{key} is corrupt: {e}") from None
    if not isinstance(event, RemoteLogSegmentMetadata):
        raise RemoteStorageError(f"remote manifest {rsm.location}/{key} holds a {type(event).__name__}, "
                                 f"not a segment's metadata")
    if event.state != SegmentState.COPY_SEGMENT_FINISHED:
        raise RemoteStorageError(f"remote manifest {rsm.location}/{key}: state {event.state.name}, "
                                 f"not COPY_SEGMENT_FINISHED")
    if object_key(event, MANIFEST_SUFFIX) != key:
        raise RemoteStorageError(f"remote manifest {rsm.location}/{key} names another segment "
                                 f"({object_key(event, MANIFEST_SUFFIX)})")
    return event


def list_segments(rsm: ObjectStoreRemoteStorageManager,
                  wants: Callable[[str, int], bool] | None = None,
                  ) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
    keys: list[str] = []
    for topic_directory in rsm.list_dirs():
        topic = topic_of_directory(topic_directory.rsplit("/", 1)[-1])
        if topic is None:
            continue
        for partition_directory in rsm.list_dirs(topic_directory + "/"):
            number = partition_directory.rsplit("/", 1)[-1]
            if not number.isdigit() or (wants is not None and not wants(topic, int(number))):
                continue
            keys.extend(k for k in rsm.list_keys(partition_directory + "/") if k.endswith(MANIFEST_SUFFIX))
    with ThreadPoolExecutor(_MANIFEST_READERS) as pool:
        manifests = list(pool.map(lambda key: _read_manifest(rsm, key), keys))
    found: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {}
    for metadata in manifests:
        found.setdefault(metadata.topic_id_partition, []).append(metadata)
    for tp, segments in found.items():
        segments.sort(key=lambda m: m.start_offset)
        for before, after in zip(segments, segments[1:], strict=False):
            if after.start_offset <= before.end_offset:
                raise RemoteStorageError(
                    f"remote store {rsm.location}: {tp.topic}-{tp.partition} has overlapping finished segments "
                    f"{object_key(before, MANIFEST_SUFFIX)} (offsets {before.start_offset}-{before.end_offset}) "
                    f"and {object_key(after, MANIFEST_SUFFIX)} (offsets {after.start_offset}-{after.end_offset})")
    return dict(sorted(found.items(), key=lambda item: (item[0].topic, item[0].partition)))
