"""The log cleaner of a data directory (Kafka's LogCleaner, one cleaner thread).

Contract:
- `LogCleaner(data_dir, logs, dedupe_buffer_size=..., io_buffer_size=...)` owns the
  offset map (memory: the dedupe buffer), one Cleaner and the
  LogCleanerManager (choice of log, `cleaner-offset-checkpoint`). `logs()` is the
  data directory's logs by (topic, partition); it is all the cleaner knows of the
  LogManager, which makes its cleaner from a `CleanerConfig` (storage/manager.py).
- `clean_once()` cleans the dirtiest compacted log, if one qualifies, and returns
  whether it did; the broker runs it in an executor thread and sleeps
  `log.cleaner.backoff.ms` when it returns False. Each clean logs one
  `log_cleaned` line on `strata.cleaner` (bytes read and written, records kept
  and dropped, offset map use, durations, MB/s); a clean running longer than
  `progress_interval_s` (10 s) logs `log_cleaning_progress` that often (phase,
  bytes mapped, segments cleaned, bytes read and written). `cleans`,
  `bytes_read` and `bytes_written` total the finished cleans (broker metrics). A failing log is logged and
  left alone until restart (Kafka's uncleanable partitions).
- `shutdown()` stops a clean in progress at its next check (between chunks of
  `io_buffer_size` bytes): the group being written is discarded, the checkpoint
  not moved. `abort(topic, partition)` does the same for one log (before it is
  deleted) and forgets it.
- The offset map is emptied after every clean, so an idle cleaner holds no map.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from .cleaner import DEFAULT_IO_BUFFER_SIZE, Cleaner, CleaningAborted
from .cleaner_manager import LogCleanerManager
from .clock import SYSTEM_CLOCK, SystemClock
from .log import Log
from .offset_map import OffsetMap
from .segment_swap import SwapAborted

log = structlog.get_logger("strata.cleaner")

DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
PROGRESS_INTERVAL_S = 10.0  # a clean running longer logs `log_cleaning_progress` this often


@dataclass(frozen=True)
class CleanerConfig:
    """The log cleaner's settings (Kafka's CleanerConfig): log.cleaner.dedupe.buffer.size,
    log.cleaner.io.buffer.size and log.cleaner.io.buffer.load.factor."""

    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE
    io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE
    load_factor: float = DEFAULT_LOAD_FACTOR


class LogCleaner:
    def __init__(self, data_dir: str, logs: Callable[[], Mapping[tuple[str, int], Log]], *,
                 dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
                 io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE, load_factor: float = DEFAULT_LOAD_FACTOR,
                 clock: SystemClock = SYSTEM_CLOCK, step: Callable[[str], None] | None = None):
        self.clock = clock
        self.cleaner_manager = LogCleanerManager(data_dir, logs)
        self.offset_map = OffsetMap(dedupe_buffer_size, load_factor=load_factor)
        self._step = step or (lambda name: None)
        self.cleaner = Cleaner(self.offset_map, io_buffer_size=io_buffer_size, clock=clock, step=self._step)
        self._stop = threading.Event()
        self.cleans = 0  # finished cleans, for tests and stats
        self.progress_interval_s = PROGRESS_INTERVAL_S
        self.bytes_read = 0  # totals of the finished cleans, for the broker's metrics
        self.bytes_written = 0

    def clean_once(self) -> bool:
        """Clean the dirtiest log that qualifies; False when none does (or stopping)."""
        if self._stop.is_set():
            return False
        chosen = self.cleaner_manager.grab_filthiest_log(self.clock.time_ms())
        if chosen is None:
            return False
        tp = chosen.tp

        started = last_progress = time.monotonic()

        def check_done() -> None:
            nonlocal last_progress
            if self._stop.is_set():
                raise CleaningAborted("the cleaner is shutting down")
            self.cleaner_manager.check_aborted(tp)
            now = time.monotonic()
            if now - last_progress >= self.progress_interval_s:
                last_progress = now
                self._log_progress(chosen, now - started)

        end_offset = None
        try:
            end_offset, stats = self.cleaner.clean(chosen.log, chosen.first_dirty, chosen.first_uncleanable,
                                                   check_done=check_done)
        except (CleaningAborted, SwapAborted) as e:
            log.info("cleaning_stopped", log=chosen.log.name, reason=str(e))
        except Exception:
            log.exception("cleaning_failed", log=chosen.log.name)
            self.cleaner_manager.mark_uncleanable(tp)
        else:
            self.cleans += 1
            self.bytes_read += stats.bytes_read
            self.bytes_written += stats.bytes_written
            log.info("log_cleaned", dirty_ratio=round(chosen.cleanable_ratio, 4), **stats.fields())
        finally:
            self.offset_map.clear()
        self.cleaner_manager.done_cleaning(tp, end_offset)
        self._step("checkpoint_written")
        return True

    def _log_progress(self, chosen, elapsed_s: float) -> None:
        """A long clean says how far it got (`log_cleaning_progress`), every
        progress_interval_s, as Kafka's cleaner logs its passes over a log."""
        stats = self.cleaner.current
        if stats is None:
            return
        log.info("log_cleaning_progress", log=chosen.log.name, dirty_ratio=round(chosen.cleanable_ratio, 4),
                 phase="cleaning" if stats.map_seconds else "building offset map",
                 map_bytes_read=stats.map_bytes_read, map_records_read=stats.map_records_read,
                 segments_cleaned=stats.segments, bytes_read=stats.bytes_read, bytes_written=stats.bytes_written,
                 elapsed_s=round(elapsed_s, 1))

    def abort(self, topic: str, partition: int) -> None:
        """Stop any clean of the log and forget it (it is being deleted)."""
        tp = (topic, partition)
        self.cleaner_manager.abort_and_pause(tp)
        self.cleaner_manager.forget(tp)

    def shutdown(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()
