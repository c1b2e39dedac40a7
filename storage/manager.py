"""The data directory: every partition log in it, its checkpoints and the
clean-shutdown marker (Kafka's LogManager, storage side only).

Contract:
- `startup()` takes an exclusive lock on the directory (a second broker on the
  same directory fails with a clear error), reads the checkpoints, opens every
  `<topic>-<partition>` directory, recovering those not closed cleanly, and
  then removes the clean-shutdown marker so that a later crash is noticed.
  Logs are opened by `recovery_threads` threads (Kafka's
  num.recovery.threads.per.data.dir); progress is logged as Kafka does per log
  directory: `logs_recovered` with recovered/total logs, bytes and elapsed time,
  at every tenth of the logs and at the end, then `logs_loaded`.
- `shutdown()` flushes and closes every log (the same number of threads),
  writes both checkpoints (recovery point = log end) and, last, the marker:
  after it, a restart scans no data.
- `checkpoint()` writes the producer-state snapshots captured by flushes that
  reached the log end, then the recovery-point and log-start checkpoints, then
  prunes snapshots no start will use (storage/log.py, storage/producer_state.py):
  an unclean start finds a snapshot at (or just below) each recovery point.
- Deleting a partition renames its directory to `<name>.<id>-delete` first, so a
  crash half-way never brings the partition back; startup removes leftovers.
- Topic configuration lives with the caller: `config_for(topic)` gives each
  log its LogConfig.
- Retention: `delete_old_segments()` runs one pass over every log and
  `delete_due_files()` removes deleted segments' files once due; the broker
  calls both periodically (storage/retention.py). Log start offsets moved by a
  pass reach `log-start-offset-checkpoint` at the next `checkpoint()`; a crash
  before it loses nothing (the loader starts at the first segment left).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import structlog

from .checkpoint import OffsetCheckpointFile
from .clock import SYSTEM_CLOCK, SystemClock
from .config import LogConfig
from .errors import KafkaStorageError
from .fileutil import atomic_write, fsync_dir
from .log import Log
from .names import DELETE_DIR_SUFFIX, parse_partition_dir_name, partition_dir_name, validate_topic_name
from .retention import RetentionResult, run_retention

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
DEFAULT_RECOVERY_THREADS = 1  # num.recovery.threads.per.data.dir (see broker/config.py)
PROGRESS_STEPS = 10  # logs_recovered lines per start: one per tenth of the logs

log = structlog.get_logger("strata.storage")

TopicPartition = tuple[str, int]


class LogManager:
    def __init__(self, data_dir: str, *, config_for: Callable[[str], LogConfig],
                 clock: SystemClock = SYSTEM_CLOCK, recovery_threads: int = DEFAULT_RECOVERY_THREADS):
        if recovery_threads < 1:
            raise ValueError(f"recovery_threads must be at least 1, not {recovery_threads}")
        self.data_dir = os.path.abspath(data_dir)
        self.config_for = config_for
        self.clock = clock
        self.recovery_threads = recovery_threads
        self._logs: dict[TopicPartition, Log] = {}
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self.had_clean_shutdown = False
        self._recovery_points = OffsetCheckpointFile(os.path.join(self.data_dir, RECOVERY_POINT_CHECKPOINT))
        self._log_starts = OffsetCheckpointFile(os.path.join(self.data_dir, LOG_START_OFFSET_CHECKPOINT))
        self.cleaner = None  # the broker's LogCleaner (storage/log_cleaner.py), when it runs one

    # ---- start and stop ------------------------------------------------------------

    def startup(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        self._take_directory_lock()
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = os.path.exists(marker)
        recovery_points = self._recovery_points.read()
        log_starts = self._log_starts.read()
        found: list[tuple[TopicPartition, str]] = []
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is None:
                log.warning("skipping_directory", directory=path, reason="not <topic>-<partition>")
                continue
            found.append((parsed, path))

        def open_one(item: tuple[TopicPartition, str]) -> Log:
            (topic, partition), path = item
            return Log.open(path, topic, partition, self.config_for(topic),
                            log_start_offset=log_starts.get((topic, partition), 0),
                            recovery_point=recovery_points.get((topic, partition), 0),
                            had_clean_shutdown=self.had_clean_shutdown, clock=self.clock)

        progress = _RecoveryProgress(self.data_dir, len(found), self.had_clean_shutdown, self.recovery_threads)
        for (tp, _), opened in zip(found, self._in_parallel(open_one, found, progress.done)):
            self._logs[tp] = opened
        if self.had_clean_shutdown:
            os.unlink(marker)
            fsync_dir(self.data_dir)
        log.info("logs_loaded", data_dir=self.data_dir, logs=len(self._logs),
                 clean_shutdown=self.had_clean_shutdown, elapsed_ms=progress.elapsed_ms())

    def _in_parallel(self, work: Callable, items: list, done: Callable[[Log], None]) -> list:
        """`work(item)` for every item on `recovery_threads` threads, results in the
        items' order; `done(result)` runs (on the worker) as each finishes. The first
        failure is raised once every started item has finished."""
        if self.recovery_threads == 1 or len(items) <= 1:
            results = []
            for item in items:
                results.append(work(item))
                done(results[-1])
            return results

        def run(item):
            result = work(item)
            done(result)
            return result

        with ThreadPoolExecutor(self.recovery_threads, thread_name_prefix="strata-recovery") as pool:
            futures = [pool.submit(run, item) for item in items]
            failure = None
            results = []
            for future in futures:
                try:
                    results.append(future.result())
                except BaseException as e:  # the first one is raised, after the others stop
                    if failure is None:
                        failure = e
                        for later in futures:
                            later.cancel()
        if failure is not None:
            for opened in results:
                if isinstance(opened, Log):
                    opened.close()
            raise failure
        return results

    def _take_directory_lock(self) -> None:
        fd = os.open(os.path.join(self.data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaStorageError(f"data directory {self.data_dir} is in use by another process") from None
        self._lock_fd = fd

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the marker."""
        with self._lock:
            logs = list(self._logs.values())

        def close_one(one: Log) -> Log:
            one.flush()
            one.close()
            return one

        self._in_parallel(close_one, logs, lambda one: None)
        self.checkpoint()
        atomic_write(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE), b"")
        with self._lock:
            self._logs.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("logs_closed", data_dir=self.data_dir, logs=len(logs))

    # ---- logs ---------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self._logs):
            out.setdefault(topic, []).append(partition)
        return out

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        validate_topic_name(topic)
        if partition < 0:
            raise ValueError(f"partition {partition} is negative")
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
            created = Log.open(path, topic, partition, config or self.config_for(topic),
                               had_clean_shutdown=True, clock=self.clock)
            fsync_dir(self.data_dir)
            self._logs[(topic, partition)] = created
            return created

    def delete_log(self, topic: str, partition: int) -> None:
        with self._lock:
            doomed = self._logs.pop((topic, partition), None)
        if doomed is None:
            return
        if self.cleaner is not None:
            self.cleaner.abort(topic, partition)  # waits until no clean of it runs
        doomed.close()  # a fetch still sending keeps its file open until released
        renamed = f"{doomed.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.rename(doomed.directory, renamed)
        fsync_dir(self.data_dir)
        shutil.rmtree(renamed, ignore_errors=True)

    # ---- periodic work ----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery points and log start offsets (Kafka's text format), with
        the producer-state snapshots at the recovery points written first."""
        logs = self.logs_by_partition()
        snapshotted = [(tp, one) for tp, one in logs.items() if one.write_checkpoint_snapshot()]
        recovery_points = {tp: one.recovery_point for tp, one in logs.items()}
        self._recovery_points.write(recovery_points)
        self._log_starts.write({tp: one.log_start_offset for tp, one in logs.items()})
        for tp, one in snapshotted:
            one.prune_snapshots(recovery_points[tp])

    def delete_old_segments(self, now_ms: int | None = None) -> list[RetentionResult]:
        """One retention pass over every log (Kafka's cleanupLogs; storage/retention.py)."""
        return run_retention(self.logs(), self.clock.time_ms() if now_ms is None else now_ms)

    def delete_due_files(self, now_ms: int | None = None) -> int:
        """Remove deleted segments' files once their file.delete.delay.ms has passed
        (`now_ms` on the clock's monotonic scale); returns how many segments."""
        now = self.clock.monotonic_ms() if now_ms is None else now_ms
        return sum(one.delete_due_files(now) for one in self.logs())

    def flush_due(self) -> None:
        """fsync rolled segments and logs past their `flush.ms`."""
        for one in self.logs():
            one.flush_rolled()
            one.maybe_flush()

    def logs_by_partition(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)


class _RecoveryProgress:
    """Counts the logs a start has opened and logs `logs_recovered` at every tenth
    of them and at the last one (Kafka's "N/M completed in <dir>")."""

    def __init__(self, data_dir: str, total: int, clean: bool, threads: int):
        self.data_dir = data_dir
        self.total = total
        self.clean = clean
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._done = 0
        self._bytes = 0
        self._tenths_logged = 0
        log.info("logs_recovering", data_dir=data_dir, logs=total, clean_shutdown=clean, threads=threads,
                 action="loading" if clean else "recovering: no clean shutdown marker")

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def done(self, opened: Log) -> None:
        size = opened.size_in_bytes
        with self._lock:
            self._done += 1
            self._bytes += size
            done, total, size_so_far = self._done, self.total, self._bytes
            tenths = done * PROGRESS_STEPS // total
            if tenths <= self._tenths_logged:
                return
            self._tenths_logged = tenths
        log.info("logs_recovered", data_dir=self.data_dir, recovered=done, total=total,
                 progress=f"{done}/{total}", bytes=size_so_far, elapsed_ms=self.elapsed_ms(),
                 clean_shutdown=self.clean)
