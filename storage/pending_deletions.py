"""Deleted segments waiting for their files' removal (Kafka's LocalLog.deleteSegmentFiles,
asynchronous).

Contract:
- `retire(segments, due_ms)` renames segments that already left a log's list to
  `.deleted` and schedules their files' removal at `due_ms` (monotonic ms: now +
  file.delete.delay.ms), so readers of an older snapshot or a FileSlice finish
  their reads first.
- `delete_due(now_ms)` removes the files of every segment due by then (the broker
  calls it periodically through Log.delete_due_files).
- `close()` closes what is still pending and leaves its `.deleted` files, which
  the loader removes at the next start; a crash between the rename and the
  removal ends the same way.
- Thread-safe: one lock. `retire` runs under the owning log's lock, `delete_due`
  on the broker's periodic task and `close` at shutdown, on different threads.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterable

from .segment import LogSegment

DELETED_SUFFIX = ".deleted"


class PendingDeletions:
    """Segments renamed to `.deleted`, waiting for their due time (monotonic ms)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, LogSegment]] = []
        self._seq = itertools.count()  # ties keep their order; segments never compare
        self._lock = threading.Lock()
        self._closed = False

    def retire(self, segments: Iterable[LogSegment], due_ms: int) -> None:
        """Rename `segments` (no longer in their log's list) to `.deleted` and schedule
        the removal of their files at `due_ms`."""
        for segment in segments:
            if not segment.log.path.endswith(DELETED_SUFFIX):
                segment.change_file_suffixes("", DELETED_SUFFIX)
            self.schedule(segment, due_ms)

    def schedule(self, segment: LogSegment, due_ms: int) -> None:
        with self._lock:
            if self._closed:
                segment.close()  # too late to delete: the loader removes `.deleted` files
                return
            heapq.heappush(self._heap, (due_ms, next(self._seq), segment))

    def delete_due(self, now_ms: int) -> int:
        """Remove the files of every segment due by `now_ms`; returns how many.
        A FileSlice still held keeps its data readable until released."""
        due = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now_ms:
                due.append(heapq.heappop(self._heap)[2])
        for segment in due:
            segment.delete()
        return len(due)

    def close(self) -> None:
        """Close what is still pending, leaving its `.deleted` files for the loader."""
        with self._lock:
            self._closed = True
            pending, self._heap = self._heap, []
        for _, _, segment in pending:
            segment.close()

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return [segment for _, _, segment in sorted(self._heap, key=lambda e: (e[0], e[1]))]
