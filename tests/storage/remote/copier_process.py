"""A copier process for the kill -9 test: copies a tiered log's rolled segments and,
on the segment starting at PAUSE_AT, stops once all of the segment's objects are in
the store (before COPY_SEGMENT_FINISHED is recorded), writes the marker file and
waits to be killed.

    python -m tests.storage.remote.copier_process LOG_DIR METADATA_DIR SETTINGS_JSON PAUSE_AT MARKER
"""

from __future__ import annotations

import json
import sys
import time

from storage.remote.config import RemoteLogConfig
from storage.remote.copier import RemotePartition
from storage.remote.metadata import RemoteLogMetadataStore
from storage.remote.store import RemoteStorageManager, object_key
from tests.storage.remote.conftest import open_rsm
from tests.storage.remote.helpers import LOG_TP, open_tiered_log


class PausingStore(RemoteStorageManager):
    """The real store, except that the copy of the segment at `pause_at` stops once
    every object of it is in the store, before the copier records it finished."""

    def __init__(self, inner: RemoteStorageManager, pause_at: int, marker: str):
        self.inner, self.pause_at, self.marker = inner, pause_at, marker

    def copy_log_segment_data(self, metadata, data):
        custom = self.inner.copy_log_segment_data(metadata, data)
        if metadata.start_offset == self.pause_at:
            with open(self.marker, "w") as f:
                f.write(object_key(metadata, ".log"))
            while True:
                time.sleep(60)  # killed here, mid-copy
        return custom

    def read_log_segment(self, metadata, start, length):
        return self.inner.read_log_segment(metadata, start, length)

    def fetch_index(self, metadata, index_type):
        return self.inner.fetch_index(metadata, index_type)

    def delete_log_segment_data(self, metadata):
        self.inner.delete_log_segment_data(metadata)


def main() -> None:
    log_dir, metadata_dir, settings, pause_at, marker = sys.argv[1:6]
    config = RemoteLogConfig.from_props(json.loads(settings))
    log = open_tiered_log(log_dir)
    metadata = RemoteLogMetadataStore(metadata_dir)
    rsm = PausingStore(open_rsm(config), int(pause_at), marker)
    RemotePartition(log, LOG_TP, rsm, metadata).copy_pass()
    sys.exit("the copier was meant to pause and be killed")


if __name__ == "__main__":
    main()
