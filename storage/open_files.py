"""One process-wide budget of open data files: segment `.log` files and index files.

Kafka keeps every segment's files open, so its descriptors grow with the number of
segments. Here they follow what is in use: a file's descriptor is opened on first
use and closed when the file has been idle longest and the budget is spent.

Contract:
- A `ManagedFile` holds at most one descriptor (an index's mapping is counted with
  its descriptor). The budget counts the files whose descriptor is open and keeps
  that count at most `limit`: opening one more first closes the least-recently-used
  idle files.
- `pin(f)` starts a use: it opens f's descriptor when it is closed (never opened, or
  evicted) and marks f most recently used; `unpin(f)` ends it. A file is idle while
  no pin is held; a pinned file is never closed, so the count passes `limit` only
  while more than `limit` files are pinned at once. Every use of a descriptor or a
  mapping happens under a pin, so eviction never pulls one from under a reader.
- `retire(f)` closes f for good: at once when idle, else at its last unpin. Pinning
  a retired file raises KafkaStorageError once its descriptor is closed (until then
  the holders of a pin, e.g. a fetch being sent, can still use it).
- `limit` 0 means half of the soft RLIMIT_NOFILE (read when the limit is set), the
  other half staying for sockets, checkpoints and the like (`log.max.open.files`).
- Thread-safe: one lock. Opening and closing a descriptor happen under it; they are
  a few short system calls (open, fstat, mmap / munmap, close).
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict

from kafka_format.errors import KafkaStorageError


def default_limit() -> int:
    """Half of the soft RLIMIT_NOFILE (at least 16)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, soft // 2)


def raise_nofile_limit() -> tuple[int, int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (soft before, soft after, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new_soft = soft
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            new_soft = hard
        except (ValueError, OSError):
            new_soft = soft  # e.g. an unlimited hard limit the kernel caps lower: keep the soft one
    return soft, new_soft, hard


class BudgetState:
    """One file's state in its budget: read and written by the budget, under its lock."""

    __slots__ = ("descriptor_open", "pins", "retired")

    def __init__(self) -> None:
        self.pins = 0
        self.descriptor_open = False
        self.retired = False


class ManagedFile:
    """A file whose one descriptor an `OpenFiles` budget opens on use and may close
    while idle. Subclasses implement `open_descriptor` and `close_descriptor`: hooks
    that only the budget calls, under its lock; they must not take locks a pinning
    thread holds."""

    def __init__(self, budget: OpenFiles | None = None):
        self._budget = budget if budget is not None else OPEN_FILES
        self.budget_state = BudgetState()

    @property
    def retired(self) -> bool:
        return self.budget_state.retired

    @property
    def descriptor_open(self) -> bool:
        return self.budget_state.descriptor_open

    def _pin(self) -> None:
        self._budget.pin(self)

    def _unpin(self) -> None:
        self._budget.unpin(self)

    def _retire(self) -> None:
        self._budget.retire(self)

    def describe(self) -> str:
        """The file, for error messages."""
        return repr(self)

    def open_descriptor(self) -> None:
        raise NotImplementedError

    def close_descriptor(self) -> None:
        raise NotImplementedError


class OpenFiles:
    def __init__(self, limit: int = 0):
        self._lock = threading.Lock()
        self._open: OrderedDict[ManagedFile, None] = OrderedDict()  # least recently used first
        self._limit = limit if limit > 0 else default_limit()
        self.peak = 0  # most descriptors open at once
        self.evictions = 0

    @property
    def limit(self) -> int:
        return self._limit

    def set_limit(self, limit: int) -> None:
        """Set the budget (0: half the soft RLIMIT_NOFILE) and close idle files down to it."""
        with self._lock:
            self._limit = limit if limit > 0 else default_limit()
            self._make_room(0)

    def open_count(self) -> int:
        return len(self._open)

    def pin(self, f: ManagedFile) -> None:
        state = f.budget_state
        with self._lock:
            if state.retired and not state.descriptor_open:
                raise KafkaStorageError(f"{f.describe()} is closed")
            if state.descriptor_open:
                self._open.move_to_end(f)
            else:
                self._make_room(1)
                f.open_descriptor()
                state.descriptor_open = True
                self._open[f] = None
                self.peak = max(self.peak, len(self._open))
            state.pins += 1

    def unpin(self, f: ManagedFile) -> None:
        state = f.budget_state
        with self._lock:
            state.pins -= 1
            if state.pins == 0 and state.retired:
                self._close(f)

    def retire(self, f: ManagedFile) -> None:
        state = f.budget_state
        with self._lock:
            state.retired = True
            if state.pins == 0:
                self._close(f)

    def evict_idle(self, f: ManagedFile) -> bool:
        """Close `f`'s descriptor now when it is open and idle (it reopens on use)."""
        state = f.budget_state
        with self._lock:
            if state.descriptor_open and state.pins == 0:
                self._close(f)
                return True
            return False

    def no_opens(self) -> threading.Lock:
        """`with budget.no_opens():` no file opens or closes meanwhile (a rename: a
        reopen in the middle would look for the old name)."""
        return self._lock

    def close_idle(self) -> int:
        """Close every idle file's descriptor (they reopen on use): room for a caller
        that ran out of descriptors. Returns how many were closed."""
        with self._lock:
            idle = [f for f in self._open if f.budget_state.pins == 0]
            for f in idle:
                self._close(f)
            return len(idle)

    def _make_room(self, wanted: int) -> None:
        """Close least-recently-used idle files until `wanted` more fit the limit."""
        excess = len(self._open) + wanted - self._limit
        if excess <= 0:
            return
        victims = []
        for f in self._open:
            if f.budget_state.pins == 0:
                victims.append(f)
                if len(victims) == excess:
                    break
        for f in victims:
            self._close(f)
            self.evictions += 1

    def _close(self, f: ManagedFile) -> None:
        state = f.budget_state
        if not state.descriptor_open:
            return
        del self._open[f]
        state.descriptor_open = False
        f.close_descriptor()


# The process's budget; the broker sets its limit from log.max.open.files at start.
OPEN_FILES = OpenFiles()
