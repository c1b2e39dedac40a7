"""The data directory: every partition log in it, its checkpoints and the
clean-shutdown marker (Kafka's LogManager, storage side only).

Contract:
- `startup()` takes an exclusive lock on the directory (a second broker on the
  same directory fails with a clear error), refuses a directory in the place of
  the marker or a checkpoint (IsADirectoryError naming it), reads the
  checkpoints (one that does not parse reads as empty, logged
  `checkpoint_unreadable`, as Kafka: recovery points 0, log starts at the first
  segments), opens every
  `<topic>-<partition>` directory, recovering those not closed cleanly, and
  then removes the clean-shutdown marker so that a later crash is noticed.
  Logs are opened by `recovery_threads` threads (Kafka's
  num.recovery.threads.per.data.dir); progress is logged as Kafka does per log
  directory: `logs_recovered` with recovered/total logs, segments, bytes and elapsed time,
  at every tenth of the logs and at the end, then `logs_loaded` (the totals).
- `shutdown()` flushes and closes every log (on as many threads), writes both
  checkpoints (recovery point = log end) and, last, the marker: after it, a
  restart scans no data.
- `checkpoint()` writes the producer-state snapshots captured by flushes that
  reached the log end, then the recovery-point and log-start checkpoints, then
  prunes snapshots no start will use (storage/log.py, storage/producer_state.py):
  an unclean start finds a snapshot at (or just below) each recovery point. A
  snapshot that cannot be written (a full disk) counts in the storage error
  episode and the checkpoint goes on.
- Deleting a partition renames its directory to `<topic>-<partition>.<id>-delete`
  (storage/names.py: the topic part cut short so the name stays within 255 bytes)
  first, so a crash half-way never brings the partition back; startup removes
  leftovers. A partition directory that fails to open and that `startup(known=...)`
  says no registered topic owns is renamed `...-stray` and left for the operator;
  startup goes on.
- Disk errors: every log shares `io_errors` (storage/io_errors.py: an OSError of
  an append answers KAFKA_STORAGE_ERROR, one log line per episode). The data
  directory keeps `space_reserve` (storage/space_reserve.py), given up when a
  write that frees space or closes cleanly (topic deletion, DELETE_RECORDS,
  shutdown checkpoints) meets a full disk, and restored by `flush_due` once space
  has come back.
- `set_log_start_offset` (DELETE_RECORDS) writes the checkpoint holding the new
  start before the log's memory moves: an answered deletion survives a crash, a
  failed one changes nothing. Checkpoint writes are serialized, so a periodic
  checkpoint never writes a start older than one already written.
- Topic configuration lives with the caller: `config_for(topic)` gives each
  log its LogConfig.
- Compaction: given a `CleanerConfig`, the manager makes its `cleaner`
  (storage/log_cleaner.py), which sees only `data_dir` and `logs_by_partition`,
  as Kafka's LogManager makes its LogCleaner; `delete_log` aborts a clean of the
  log first.
- Retention: `delete_old_segments()` runs one pass over every log and
  `delete_due_files()` removes deleted segments' files once due; the broker
  calls both periodically (storage/retention.py). Log start offsets moved by a
  pass reach `log-start-offset-checkpoint` at the next `checkpoint()`; a crash
  before it loses nothing (the loader starts at the first segment left).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from kafka_format.errors import KafkaStorageError, StrataError

from . import retention
from .checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from .clock import SYSTEM_CLOCK, SystemClock
from .config import LogConfig
from .fileutil import atomic_write, fsync_dir
from .io_errors import StorageErrorEpisodes
from .log import Log
from .log_cleaner import CleanerConfig, LogCleaner
from .names import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    STRAY_DIR_SUFFIX,
    delete_dir_name,
    parse_partition_dir_name,
    partition_dir_name,
    stray_dir_name,
    validate_topic_name,
)
from .open_files import OPEN_FILES
from .retention import RetentionResult
from .space_reserve import SpaceReserve

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
DEFAULT_RECOVERY_THREADS = 1  # num.recovery.threads.per.data.dir (see broker/config/broker_config.py)
PROGRESS_STEPS = 10  # logs_recovered lines per start: one per tenth of the logs

log = structlog.get_logger("strata.storage")

TopicPartition = tuple[str, int]


class LogManager:
    def __init__(self, data_dir: str, *, config_for: Callable[[str], LogConfig],
                 clock: SystemClock = SYSTEM_CLOCK, recovery_threads: int = DEFAULT_RECOVERY_THREADS,
                 cleaner: CleanerConfig | None = None, reserved_dirs: frozenset[str] = frozenset(),
                 retention_elsewhere: Callable[[Log], bool] | None = None):
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
        self.new_data_dir = False  # startup() found no data directory, or an empty one
        self._recovery_points = OffsetCheckpointFile(os.path.join(self.data_dir, RECOVERY_POINT_CHECKPOINT))
        self._log_starts = OffsetCheckpointFile(os.path.join(self.data_dir, LOG_START_OFFSET_CHECKPOINT))
        # The log cleaner (storage/log_cleaner.py), with a CleanerConfig (log.cleaner.enable):
        # it sees the logs through `logs_by_partition`; the manager aborts its clean of a
        # log being deleted. The caller runs `cleaner.clean_once` on its own thread.
        self.cleaner: LogCleaner | None = None
        if cleaner is not None:
            self.cleaner = LogCleaner(self.data_dir, self.logs_by_partition,
                                      dedupe_buffer_size=cleaner.dedupe_buffer_size,
                                      io_buffer_size=cleaner.io_buffer_size, load_factor=cleaner.load_factor,
                                      clock=clock)
        self.io_errors = StorageErrorEpisodes(self.data_dir)
        self.space_reserve = SpaceReserve(self.data_dir)
        self._checkpoint_lock = threading.Lock()  # one checkpoint write at a time
        # Totals of the retention passes (delete_old_segments), for the broker's metrics.
        self.retention_deleted_segments = 0
        self.retention_deleted_bytes = 0
        # Directories of the data directory that are not partition logs although named
        # like one (the remote log metadata's `__remote_log_metadata-0`): never opened,
        # adopted or set aside by the scan.
        self.reserved_dirs = reserved_dirs
        # Logs whose retention runs elsewhere (a tiered topic's, by its RemotePartition's
        # local retention pass): skipped by `delete_old_segments`.
        self.retention_elsewhere: Callable[[Log], bool] = retention_elsewhere or (lambda _log: False)

    # ---- start and stop ------------------------------------------------------------

    def startup(self, known: Callable[[str, int], bool] | None = None) -> None:
        """Open every partition directory. `known(topic, partition)`: whether a
        registered topic owns a partition; a directory it does not own that fails
        to open is renamed `-stray` instead of failing the start. A data directory that
        does not exist yet, or is empty, is a first start: it is logged as created
        (`data_dir_created`), not as a recovery."""
        existed = os.path.isdir(self.data_dir)
        self.new_data_dir = not existed or not any(
            name != "lost+found" for name in os.listdir(self.data_dir))  # a fresh filesystem's root
        os.makedirs(self.data_dir, exist_ok=True)
        self._take_directory_lock()
        try:
            self._refuse_directories_in_file_places()
        except BaseException:
            self._release_directory_lock()
            raise
        if self.new_data_dir:
            log.info("data_dir_created", data_dir=self.data_dir, existed=existed,
                     action="new data directory: nothing to recover")
        self.space_reserve.ensure()
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = os.path.exists(marker)
        recovery_points = self._read_checkpoint_at_start(
            self._recovery_points, "recovering every log from its first segment")
        log_starts = self._read_checkpoint_at_start(
            self._log_starts, "starting every log at its first segment's base offset")
        found: list[tuple[str, TopicPartition]] = []
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not os.path.isdir(path) or name in self.reserved_dirs:
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                log.info("deleted_directory_removed", directory=path)
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is None:
                reason = ("set aside earlier" if name.endswith((STRAY_DIR_SUFFIX, FUTURE_DIR_SUFFIX))
                          else "not <topic>-<partition>")
                log.warning("skipping_directory", directory=path, reason=reason)
                continue
            found.append((path, parsed))

        def open_one(item: tuple[str, TopicPartition]) -> Log | None:
            path, tp = item
            return self._open_at_startup(path, tp, log_starts.get(tp, 0), recovery_points.get(tp, 0), known)

        progress = _RecoveryProgress(self.data_dir, len(found), self.had_clean_shutdown, self.recovery_threads,
                                     announce=not self.new_data_dir)
        for (_, tp), opened in zip(found, self._in_parallel(open_one, found, progress.done), strict=True):
            if opened is not None:
                self._logs[tp] = opened
        if self.had_clean_shutdown:
            os.unlink(marker)
            fsync_dir(self.data_dir)
        log.info("logs_loaded", data_dir=self.data_dir, logs=len(self._logs), **progress.totals(),
                 clean_shutdown=self.had_clean_shutdown, elapsed_ms=progress.elapsed_ms())

    def _refuse_directories_in_file_places(self) -> None:
        """A directory where the data directory keeps one of its files (the marker, a
        checkpoint) fails the start, naming it: no write could replace it, and a
        directory at the marker's place would pass for a clean shutdown."""
        for name in (CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                     CLEANER_OFFSET_CHECKPOINT):
            path = os.path.join(self.data_dir, name)
            if os.path.isdir(path):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)

    @staticmethod
    def _read_checkpoint_at_start(checkpoint: OffsetCheckpointFile, action: str) -> dict[TopicPartition, int]:
        """A checkpoint's offsets; one that cannot be parsed (torn, garbage) reads as
        empty with a warning, as Kafka's LogManager.loadLogs does: every offset in
        it can be found again from the logs. A file that cannot be read at all
        (EACCES, EIO) fails the start."""
        try:
            return checkpoint.read()
        except KafkaStorageError as e:
            log.warning("checkpoint_unreadable", path=checkpoint.path, error=str(e), action=action)
            return {}

    def _in_parallel(self, work: Callable, items: list, done: Callable) -> list:
        """`work(item)` for every item on `recovery_threads` threads, results in the
        items' order; `done(result)` runs (on the worker) as each finishes. The first
        failure is raised once every started item has finished, the logs opened by
        the others closed."""
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

        failure: BaseException | None = None
        results = []
        with ThreadPoolExecutor(self.recovery_threads, thread_name_prefix="strata-recovery") as pool:
            futures = [pool.submit(run, item) for item in items]
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

    def _open_at_startup(self, path: str, tp: TopicPartition, log_start_offset: int, recovery_point: int,
                         known: Callable[[str, int], bool] | None) -> Log | None:
        """Open (recovering) one partition directory; None when it failed and was set
        aside (`known` says no topic owns it); raises when a topic owns it."""
        topic, partition = tp
        try:
            return Log.open(path, topic, partition, self.config_for(topic), log_start_offset=log_start_offset,
                            recovery_point=recovery_point, had_clean_shutdown=self.had_clean_shutdown,
                            clock=self.clock, io_errors=self.io_errors)
        except (OSError, StrataError) as e:
            if known is None or known(topic, partition):
                raise
            self._set_aside(path, topic, partition, e)
            return None

    def _set_aside(self, path: str, topic: str, partition: int, error: Exception) -> None:
        """Rename a partition directory no topic owns and that cannot be opened to
        `-stray`, so that the broker starts and nothing in it is lost."""
        stray = os.path.join(self.data_dir, stray_dir_name(topic, partition))
        try:
            os.rename(path, stray)
            fsync_dir(self.data_dir)
        except OSError as e:
            log.error("stray_directory_rename_failed", directory=path, error=str(e))
            return
        log.error("stray_directory", directory=path, renamed_to=stray, error=str(error),
                  reason="not in the topic registry and cannot be opened")

    def _take_directory_lock(self) -> None:
        fd = os.open(os.path.join(self.data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaStorageError(f"data directory {self.data_dir} is in use by another process") from None
        self._lock_fd = fd

    def _release_directory_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the marker. A log
        that fails to flush is logged and the marker is not written (the next start
        recovers); the checkpoints may use the space reserve."""
        with self._lock:
            logs = list(self._logs.values())

        def close_log(partition_log: Log) -> bool:
            flushed = True
            try:
                partition_log.flush()
            except (OSError, StrataError) as e:
                flushed = False
                log.error("log_flush_failed", log=partition_log.name, error=str(e))
            partition_log.close()
            return flushed

        clean = all(self._in_parallel(close_log, logs, lambda flushed: None))
        self.space_reserve.run("shutdown checkpoint", self.checkpoint)
        if clean:
            marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
            self.space_reserve.run("clean shutdown marker", lambda: atomic_write(marker, b""))
        with self._lock:
            self._logs.clear()
        self._release_directory_lock()
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

    def has_partition_directories(self, topic: str) -> bool:
        """Whether any `<topic>-<partition>` directory of `topic` is in the data
        directory (open as a log or not: one whose deletion failed)."""
        for name in os.listdir(self.data_dir):
            parsed = parse_partition_dir_name(name)
            if parsed is not None and parsed[0] == topic:
                return True
        return False

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        validate_topic_name(topic)
        if partition < 0:
            raise ValueError(f"partition {partition} is negative")
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
            new_directory = not os.path.exists(path)
            try:
                created = Log.open(path, topic, partition, config or self.config_for(topic),
                                   had_clean_shutdown=True, clock=self.clock,
                                   io_errors=self.io_errors)
                fsync_dir(self.data_dir)
            except OSError as e:
                if new_directory:
                    self._remove_partial_directory(path, e)
                raise KafkaStorageError(
                    f"cannot create the log of {topic}-{partition}: {e.strerror or e}") from e
            self._logs[(topic, partition)] = created
            return created

    def _remove_partial_directory(self, path: str, error: OSError) -> None:
        """Remove what a failed get_or_create_log left of a directory it was creating,
        so that the next start does not adopt a half-made partition. Out of
        descriptors (EMFILE), idle data files are closed first to make room."""
        if error.errno in (errno.EMFILE, errno.ENFILE):
            OPEN_FILES.close_idle()
        shutil.rmtree(path, ignore_errors=True)
        # the directory is gone either way; a crash now leaves at most an empty one
        with contextlib.suppress(OSError):
            fsync_dir(self.data_dir)
        if os.path.exists(path):
            log.error("partial_log_directory_left", directory=path, error=str(error))

    def delete_log(self, topic: str, partition: int) -> None:
        with self._lock:
            doomed = self._logs.pop((topic, partition), None)
        if doomed is None:
            return
        if self.cleaner is not None:
            self.cleaner.abort(topic, partition)  # waits until no clean of it runs
        doomed.close()  # a fetch still sending keeps its file open until released
        renamed = os.path.join(os.path.dirname(doomed.directory), delete_dir_name(topic, partition))
        os.rename(doomed.directory, renamed)
        fsync_dir(self.data_dir)
        shutil.rmtree(renamed, ignore_errors=True)

    # ---- periodic work ----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery points and log start offsets (Kafka's text format), with
        the producer-state snapshots at the recovery points written first and the
        snapshots no start will use pruned after."""
        with self._checkpoint_lock:
            snapshotted = [partition_log for partition_log in self.logs()
                           if partition_log.write_checkpoint_snapshot()]
            recovery_points = self._write_checkpoints({})
            for partition_log in snapshotted:
                checkpointed = recovery_points.get((partition_log.topic, partition_log.partition))
                if checkpointed is not None:
                    partition_log.prune_snapshots(checkpointed)

    def periodic_checkpoint(self) -> None:
        """`checkpoint()` for the broker's periodic task: a failed write (a full
        disk) counts in the storage error episode instead of logging a traceback
        per interval; the next interval writes again."""
        try:
            self.checkpoint()
        except OSError as e:
            self.io_errors.failed(e, operation="checkpoint", log_name=self.data_dir)

    def _write_checkpoints(self, starts: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Both checkpoints, with `starts` over the logs' own start offsets (lock held);
        returns the recovery points written."""
        logs = self.logs_by_partition()
        log_starts = {tp: starts.get(tp, partition_log.log_start_offset) for tp, partition_log in logs.items()}
        recovery_points = {tp: max(partition_log.recovery_point, log_starts[tp])
                           for tp, partition_log in logs.items()}
        self._recovery_points.write(recovery_points)
        self._log_starts.write(log_starts)
        return recovery_points

    def set_log_start_offset(self, partition_log: Log, offset: int) -> int:
        """DELETE_RECORDS: move `partition_log`'s log start to `offset` (never back); the
        checkpoint holding it is written first (using the space reserve on a full
        disk), then the log's memory. Returns the log start offset."""
        tp = (partition_log.topic, partition_log.partition)

        def persist(start: int) -> None:
            self.space_reserve.run("delete records checkpoint", lambda: self._write_checkpoints({tp: start}))

        with self._checkpoint_lock:
            return partition_log.increase_log_start_offset(offset, persist=persist)

    def delete_old_segments(self, now_ms: int | None = None) -> list[RetentionResult]:
        """One retention pass over every log (Kafka's cleanupLogs; storage/retention.py)."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        started = time.perf_counter()
        logs = self.logs()
        results = []
        for partition_log in logs:
            if self.retention_elsewhere(partition_log):
                continue
            try:
                results.append(partition_log.delete_old_segments(now))
            except Exception:  # one failing log does not stop the pass
                retention.logger.exception("retention_failed", log=partition_log.name)
        retention.log_pass(results, len(logs), (time.perf_counter() - started) * 1000)
        self.retention_deleted_segments += sum(r.segments_deleted for r in results)
        self.retention_deleted_bytes += sum(r.bytes_deleted for r in results)
        return results

    def delete_due_files(self, now_ms: int | None = None) -> int:
        """Remove deleted segments' files once their file.delete.delay.ms has passed
        (`now_ms` on the clock's monotonic scale); returns how many segments."""
        now = self.clock.monotonic_ms() if now_ms is None else now_ms
        return sum(partition_log.delete_due_files(now) for partition_log in self.logs())

    def flush_due(self) -> None:
        """fsync rolled segments and logs past their `flush.ms`; re-create the
        space reserve once space has come back."""
        for partition_log in self.logs():
            try:
                partition_log.flush_rolled()
                partition_log.maybe_flush()
            except KafkaStorageError:
                continue  # logged once per episode (io_errors); the next pass tries again
        self.space_reserve.maybe_restore()

    def logs_by_partition(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)


class _RecoveryProgress:
    """Counts the logs a start has opened and logs `logs_recovered` at every tenth
    of them and at the last one (Kafka's "N/M completed in <dir>")."""

    def __init__(self, data_dir: str, total: int, clean: bool, threads: int, *, announce: bool = True):
        """`announce`: log `logs_recovering` (not for a new data directory: nothing to recover)."""
        self.data_dir = data_dir
        self.total = total
        self.clean = clean
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._done = 0
        self._bytes = 0
        self._segments = 0
        self._tenths_logged = 0
        if announce:
            log.info("logs_recovering", data_dir=data_dir, logs=total, clean_shutdown=clean, threads=threads,
                     action="loading" if clean else "recovering: no clean shutdown marker")

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def done(self, opened: Log | None) -> None:
        """One log opened (None: a directory set aside)."""
        snapshot = opened.segments.snapshot() if opened is not None else ()
        size = sum(segment.size for segment in snapshot)
        with self._lock:  # held while logging, so that the lines come out in order
            self._done += 1
            self._bytes += size
            self._segments += len(snapshot)
            done, total = self._done, self.total
            tenths = done * PROGRESS_STEPS // total
            if tenths <= self._tenths_logged:
                return
            self._tenths_logged = tenths
            log.info("logs_recovered", data_dir=self.data_dir, recovered=done, total=total,
                     progress=f"{done}/{total}", segments=self._segments, bytes=self._bytes,
                     elapsed_ms=self.elapsed_ms(), clean_shutdown=self.clean)

    def totals(self) -> dict[str, int]:
        """Segments and bytes of the logs opened so far."""
        with self._lock:
            return {"segments": self._segments, "bytes": self._bytes}
