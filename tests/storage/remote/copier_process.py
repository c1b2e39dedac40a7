"""A copier process for the kill -9 tests. MODE copy (the default): copies a tiered
log's rolled segments and, on the segment starting at PAUSE_AT, stops once all of
the segment's objects are in the store (before COPY_SEGMENT_FINISHED is recorded),
writes the marker file and waits to be killed. MODE delete: copies every rolled
segment, then runs total retention (retention.bytes=RETENTION_BYTES) and, in the
deletion of the segment starting at PAUSE_AT, stops once its manifest and .log
object are deleted (its other objects still in the store, DELETE_SEGMENT_FINISHED
not recorded), writes the marker file and waits to be killed.

    python -m tests.storage.remote.copier_process LOG_DIR METADATA_DIR SETTINGS_JSON PAUSE_AT MARKER [MODE]
"""

from __future__ import annotations

import json
import sys
import time

import obstore

from storage.remote.config import RemoteLogConfig
from storage.remote.copier import RemotePartition
from storage.remote.metadata import RemoteLogMetadataStore
from storage.remote.store import RemoteStorageManager, object_key
from tests.storage.remote.conftest import open_rsm
from tests.storage.remote.helpers import LOG_TP, open_tiered_log, tiered_config

RETENTION_BYTES = 12_000  # of the four segments of `fill(log, 4)`, the first two go


class PausingStore(RemoteStorageManager):
    """The real store, except that the copy of the segment at `pause_at` stops once
    every object of it is in the store, before the copier records it finished."""

    def __init__(self, inner: RemoteStorageManager, pause_at: int, marker: str, mode: str = "copy"):
        self.inner, self.pause_at, self.marker, self.mode = inner, pause_at, marker, mode

    def _pause(self, metadata) -> None:
        with open(self.marker, "w") as f:
            f.write(object_key(metadata, ".log"))
        while True:
            time.sleep(60)  # killed here

    def copy_log_segment_data(self, metadata, data):
        custom = self.inner.copy_log_segment_data(metadata, data)
        if self.mode == "copy" and metadata.start_offset == self.pause_at:
            self._pause(metadata)  # mid-copy
        return custom

    def read_log_segment(self, metadata, start, length):
        return self.inner.read_log_segment(metadata, start, length)

    def fetch_index(self, metadata, index_type):
        return self.inner.fetch_index(metadata, index_type)

    def delete_log_segment_data(self, metadata):
        if self.mode == "delete" and metadata.start_offset == self.pause_at:
            self.inner.delete_manifest(metadata)
            obstore.delete(self.inner.store, object_key(metadata, ".log"))  # type: ignore[attr-defined]
            self._pause(metadata)  # mid-deletion
        self.inner.delete_log_segment_data(metadata)

    def write_manifest(self, metadata):
        self.inner.write_manifest(metadata)

    def delete_manifest(self, metadata):
        self.inner.delete_manifest(metadata)

    def missing_manifests(self, finished):
        return self.inner.missing_manifests(finished)


def main() -> None:
    log_dir, metadata_dir, settings, pause_at, marker = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "copy"
    config = RemoteLogConfig.from_props(json.loads(settings))
    metadata = RemoteLogMetadataStore(metadata_dir)
    if mode == "delete":
        log = open_tiered_log(log_dir, tiered_config(retention_bytes=RETENTION_BYTES))
        rsm = open_rsm(config)
        RemotePartition(log, LOG_TP, rsm, metadata).copy_pass()
        RemotePartition(log, LOG_TP, PausingStore(rsm, int(pause_at), marker, mode), metadata).remote_retention_pass()
    else:
        log = open_tiered_log(log_dir)
        RemotePartition(log, LOG_TP, PausingStore(open_rsm(config), int(pause_at), marker), metadata).copy_pass()
    sys.exit("the copier was meant to pause and be killed")


if __name__ == "__main__":
    main()
