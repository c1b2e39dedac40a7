"""I/O errors of a data directory: what a failed write answers and what it logs.

Contract:
- `StorageErrorEpisodes.failed(error, ...)` turns an OSError from an append or a
  flush (ENOSPC, EIO, EDQUOT, ...) into KafkaStorageError (Kafka's
  KAFKA_STORAGE_ERROR, 56), which both protocols answer as they answer any
  StrataError. Only the first failure of an episode logs (`storage_error`, with
  errno and the operation); the requests failing after it count silently.
- `succeeded()` ends an episode: the first write that works again logs
  `storage_recovered` with how many requests failed meanwhile. While nothing
  fails it is one attribute read, cheap enough for every append.
- One instance per data directory (LogManager's), shared by all its logs: a full
  disk is one episode, not one per partition.
"""

from __future__ import annotations

import errno
import threading

import structlog

from kafka_format.errors import KafkaStorageError

log = structlog.get_logger("strata.storage")


class StorageErrorEpisodes:
    def __init__(self, data_dir: str = ""):
        self.data_dir = data_dir
        self._failing = False
        self._failures = 0
        self._lock = threading.Lock()

    @property
    def failing(self) -> bool:
        return self._failing

    def failed(self, error: OSError, *, operation: str, log_name: str) -> KafkaStorageError:
        """Count (and, first in an episode, log) `error`; the error to raise instead."""
        with self._lock:
            self._failures += 1
            first = not self._failing
            self._failing = True
        reason = error.strerror or str(error)
        if first:
            log.error("storage_error", data_dir=self.data_dir, operation=operation, log=log_name,
                      errno=errno.errorcode.get(error.errno or 0, error.errno), error=reason)
        return KafkaStorageError(f"{operation} of {log_name} failed: {reason}")

    def succeeded(self) -> None:
        """A write worked: end the episode, if one is going on."""
        if not self._failing:
            return
        with self._lock:
            if not self._failing:
                return
            self._failing = False
            failures, self._failures = self._failures, 0
        log.info("storage_recovered", data_dir=self.data_dir, failed_requests=failures)
