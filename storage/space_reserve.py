"""A reserved file that keeps room for metadata writes on a full disk.

Freeing space must not need space: deleting a topic writes the topic registry,
DELETE_RECORDS writes the log-start-offset checkpoint, a clean shutdown writes
both checkpoints, and each is a new file (write-temp, fsync, rename). On a full
disk those writes fail with ENOSPC, and the data that would free space stays.
So the data directory holds `.strata-space-reserve`, RESERVE_BYTES of allocated
blocks, as databases keep a reserve: `run(what, write)` runs `write`, and when it
fails with ENOSPC (or EDQUOT) deletes the reserve and runs it once more.

Contract:
- `ensure()` creates the reserve (allocated, fsynced) when it is missing;
  False, leaving no partial file, when the disk has no room for it.
- `run` gives the reserve up at most once per call and only on ENOSPC/EDQUOT;
  any other error, or a second failure, is raised as it is.
- `maybe_restore()` (the manager's periodic flush calls it) re-creates a
  released reserve once the filesystem has its size and RESTORE_MARGIN_BYTES
  free: the reserve comes back before appends take the space freed (without it
  the next full disk could not free anything), and never takes the last bytes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable
from typing import TypeVar

import structlog

from .fileutil import fsync_dir

RESERVE_FILE = ".strata-space-reserve"
RESERVE_BYTES = 4 * 1024 * 1024
RESTORE_MARGIN_BYTES = 1024 * 1024
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

log = structlog.get_logger("strata.storage")

T = TypeVar("T")


def is_no_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE


class SpaceReserve:
    def __init__(self, data_dir: str, size: int = RESERVE_BYTES):
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, RESERVE_FILE)
        self.size = size
        self._lock = threading.Lock()
        self._in_place = False

    @property
    def in_place(self) -> bool:
        return self._in_place

    def ensure(self) -> bool:
        """Create the reserve unless it is there; True when it is in place."""
        with self._lock:
            return self._create()

    def _create(self) -> bool:
        try:
            if os.stat(self.path).st_size >= self.size:
                self._in_place = True
                return True
        except FileNotFoundError:
            pass
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.posix_fallocate(fd, 0, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.data_dir)
        except OSError as e:
            self._remove()
            log.warning("space_reserve_unavailable", path=self.path, bytes=self.size,
                        error=e.strerror or str(e))
            return False
        self._in_place = True
        return True

    def release(self) -> bool:
        """Delete the reserve, giving its blocks back; False when it was not there."""
        with self._lock:
            if not os.path.exists(self.path):
                self._in_place = False
                return False
            self._remove()
            log.warning("space_reserve_released", path=self.path, bytes=self.size)
            return True

    def _remove(self) -> None:
        self._in_place = False
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("space_reserve_remove_failed", path=self.path, error=e.strerror or str(e))
            return
        # the blocks are free already; only the unlink's durability waits
        with contextlib.suppress(OSError):
            fsync_dir(self.data_dir)

    def maybe_restore(self) -> bool:
        """Re-create a released reserve when space has come back; True when in place."""
        if self._in_place:
            return True
        with self._lock:
            if self._in_place:
                return True
            try:
                stat = os.statvfs(self.data_dir)
            except OSError:
                return False
            if stat.f_bavail * stat.f_frsize < self.size + RESTORE_MARGIN_BYTES:
                return False
            if self._create():
                log.info("space_reserve_restored", path=self.path, bytes=self.size)
                return True
            return False

    def run(self, what: str, write: Callable[[], T]) -> T:
        """`write()`; on ENOSPC/EDQUOT release the reserve and try once more."""
        try:
            return write()
        except OSError as e:
            if not is_no_space(e) or not self.release():
                raise
            log.warning("space_reserve_used", operation=what)
        return write()
