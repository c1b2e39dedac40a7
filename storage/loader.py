"""Opening a partition directory: clean-up, swap completion, segment loading and
crash recovery (Kafka's LogLoader).

Order, as Kafka does it:
1. `*.deleted` files go; `*.cleaned` files go (a clean that never finished);
   `*.swap` files at or past the lowest `.cleaned` base came from that unfinished
   clean and go too; index `.swap` files go (they are rebuilt), except a
   `.txnindex.swap` beside its `.log.swap` (aborted transactions are not rebuilt
   from the segment alone): it completes with it.
2. Each remaining `.log.swap` is a finished clean or split whose swap was cut
   short: the segments it replaces (its offset range) go, and it takes the final
   name. The result is either the old or the new data, never a loss.
3. `.log` files are opened; index files without a `.log` go; a missing or
   untrustworthy index (segment.sanity_check: entries out of order or pointing
   past the `.log`) is rebuilt from its `.log`. Each segment's files are closed
   again once checked; they reopen on use, so a log of many segments needs only
   a few descriptors at a time. Without a clean shutdown the index files of the
   segments step 4 recovers (the one holding the recovery point and every later
   one) are neither checked nor rebuilt here, and are cut to one page before
   they are opened: step 4 rebuilds them, and an index a crash left
   preallocated is megabytes of sparse file whose last page opening would fault in.
4. Without a clean shutdown, every segment from the recovery point on is
   scanned: entries validated, indexes rebuilt, the file cut at the first bad or
   partial entry, and every later segment dropped (as Kafka, the whole segment
   holding the recovery point is scanned). After a clean shutdown only
   the active segment's tail is read (for the log end, and checked: whole entries
   with good CRCs); if it is not whole and valid, the active segment is recovered
   the same way, so appends never go after a torn or garbage tail.
5. An empty directory gets one empty segment at the log start offset.
6. Every segment's `.txnindex` is checked (TransactionIndex.sanity_check: entries
   within the segment's offsets, in order). A bad one is emptied and
   `txn_rebuild_from` names the lowest such segment's base: the producer state's
   load (storage/producer_state.py) then replays from a snapshot no later than it,
   which writes the aborted transactions of every marker it reads again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

import structlog

from kafka_format.errors import CorruptIndexError, CorruptRecordError

from .clock import SystemClock
from .config import LogConfig
from .fileutil import fsync_dir, parse_segment_file_name
from .segment import LogSegment
from .segments import LogSegments

logger = structlog.get_logger("strata.storage")

SWAP = ".swap"
CLEANED = ".cleaned"
DELETED = ".deleted"
TXN_INDEX_SWAP = ".txnindex" + SWAP
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
# What is kept of an index file that recovery rebuilds, before it is opened: within
# one page, whole 8- and 12-byte entries (see LogLoader._shrink_indexes).
UNTRUSTED_INDEX_BYTES = 4080


class LoadedLog(NamedTuple):
    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    next_offset: int
    txn_rebuild_from: int | None = None  # the base of the first segment whose .txnindex is to rebuild


class LogLoader:
    def __init__(self, directory: str, config: LogConfig, *, clock: SystemClock,
                 log_start_offset: int, recovery_point: int, had_clean_shutdown: bool,
                 roll_jitter: Callable[[], int] = lambda: 0):
        self.directory = directory
        self.config = config
        self.clock = clock
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.had_clean_shutdown = had_clean_shutdown
        self.roll_jitter = roll_jitter
        self.recovered_bytes_cut = 0  # for the caller's log line
        self.recovered_bytes_scanned = 0  # bytes of the segments recovered or rebuilt

    def load(self) -> LoadedLog:
        swaps = self._remove_temp_files_and_collect_swaps()
        self._complete_swaps(swaps)
        segments = self._load_segment_files()
        if not self.had_clean_shutdown:
            self._recover(segments, self.recovery_point)
        if len(segments) == 0:
            segments.add(self._open(self.log_start_offset))
        try:
            if self.had_clean_shutdown:
                segments.active.verify_tail()
            next_offset = segments.active.read_next_offset()
        except CorruptRecordError as e:
            # A clean shutdown vouches for the files as they were left, not for what
            # happened to them since (a torn copy, a bad disk): the active segment is
            # recovered as after a crash rather than leaving a broker that cannot start.
            logger.warning("corrupt_tail_recovered", log=os.path.basename(self.directory), error=str(e))
            self._recover(segments, segments.active.base_offset)
            if len(segments) == 0:
                segments.add(self._open(self.log_start_offset))
            next_offset = segments.active.read_next_offset()
        log_start = max(self.log_start_offset, segments.first.base_offset)
        if log_start > next_offset:
            # Everything below the checkpointed start is gone: start afresh there.
            for segment in list(segments):
                segments.remove(segment.base_offset)
                segment.delete()
            segments.add(self._open(log_start))
            next_offset = log_start
        for segment in list(segments)[:-1]:
            if segment.offset_index.max_entries > segment.offset_index.entries:
                segment.on_became_inactive()  # rebuilt indexes: trim them as a roll would
        segments.active.resize_indexes(self.config.segment_index_bytes)
        recovery_point = next_offset if self.had_clean_shutdown else min(self.recovery_point, next_offset)
        return LoadedLog(segments, log_start, recovery_point, next_offset,
                         self._check_txn_indexes(segments, next_offset))

    def _check_txn_indexes(self, segments: LogSegments, next_offset: int) -> int | None:
        """Step 6: the base of the first segment whose `.txnindex` failed its check
        (emptied, to be rebuilt), or None."""
        ordered = list(segments)
        rebuild_from = None
        for i, segment in enumerate(ordered):
            end = ordered[i + 1].base_offset if i + 1 < len(ordered) else next_offset
            try:
                segment.txn_index.sanity_check(end)
            except CorruptIndexError as e:
                logger.warning("txn_index_corrupt", log=os.path.basename(self.directory), error=str(e),
                               action="rebuilt from the log")
                segment.txn_index.reset()
                if rebuild_from is None:
                    rebuild_from = segment.base_offset
        return rebuild_from

    # ---- step 1 and 2 ---------------------------------------------------------------

    def _files(self) -> list[tuple[int, str, str]]:
        found = []
        for name in os.listdir(self.directory):
            parsed = parse_segment_file_name(name)
            if parsed is not None:
                found.append((parsed[0], parsed[1], os.path.join(self.directory, name)))
        return sorted(found)

    def _remove_temp_files_and_collect_swaps(self) -> list[tuple[int, str]]:
        min_cleaned = None
        swaps = []
        for base, suffix, path in self._files():
            if suffix.endswith(DELETED):
                os.unlink(path)
            elif suffix.endswith(CLEANED):
                min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
                os.unlink(path)
            elif suffix.endswith(SWAP):
                swaps.append((base, suffix, path))
        valid = []
        log_swaps = {base for base, suffix, _ in swaps if suffix == ".log" + SWAP}
        for base, suffix, path in swaps:
            unfinished = min_cleaned is not None and base >= min_cleaned
            if unfinished or suffix != ".log" + SWAP:
                # From an unfinished clean, or an index to rebuild; a `.txnindex.swap` (the
                # aborted transactions the cleaned segment carries) goes with its `.log.swap`.
                if unfinished or suffix != TXN_INDEX_SWAP or base not in log_swaps:
                    os.unlink(path)
            else:
                valid.append((base, path))
        return valid

    def _complete_swaps(self, swaps: list[tuple[int, str]]) -> None:
        if not swaps:
            return
        opened = []
        for base, _ in swaps:
            segment = self._open(base, suffix=SWAP)
            segment.recover(self.config.segment_index_bytes)
            opened.append(segment)
        low = min(s.base_offset for s in opened)
        high = max(s.read_next_offset() for s in opened)
        files = self._files()
        # A final-named `.txnindex` at a swap's base with no `.txnindex.swap` beside it is
        # the new segment's, renamed before the crash (the cleaner carries the old ones'
        # entries into the new one): it stays.
        renamed_txn_indexes = {base for base, _ in swaps} - {base for base, suffix, _ in files
                                                              if suffix == TXN_INDEX_SWAP}
        for base, suffix, path in files:
            if suffix == ".txnindex" and base in renamed_txn_indexes:
                continue
            if low <= base < high and not suffix.endswith(SWAP):
                os.unlink(path)  # replaced by the swap
        for segment in opened:
            segment.change_file_suffixes(SWAP, "")
            segment.close()
        fsync_dir(self.directory)

    # ---- step 3 ----------------------------------------------------------------------

    def _load_segment_files(self) -> LogSegments:
        files = self._files()
        logs = {base for base, suffix, _ in files if suffix == ".log"}
        for base, suffix, path in files:
            if suffix in INDEX_SUFFIXES and base not in logs:
                os.unlink(path)  # an orphan index
        segments = LogSegments()
        bases = sorted(logs)
        to_recover = self._first_to_recover(bases)
        for base in bases:
            if base >= to_recover:
                self._shrink_indexes(base)  # step 4 rebuilds them
                segment = self._open(base)
                segments.add(segment)
                segment.evict()
                continue
            index_missing = not all(
                os.path.exists(os.path.join(self.directory, f"{base:020d}{s}")) for s in (".index", ".timeindex"))
            segment = self._open(base)
            if index_missing:
                self._rebuild(segment)
            else:
                try:
                    segment.sanity_check()
                except CorruptIndexError:
                    self._rebuild(segment)
            segments.add(segment)
            # Startup never needs every segment open at once: a checked segment's
            # files close now and reopen on their next use (storage/open_files.py).
            segment.evict()
        return segments

    def _shrink_indexes(self, base: int) -> None:
        """Cut a segment's index files to at most UNTRUSTED_INDEX_BYTES before they are
        opened. Opening an index reads its last entry, which in a file a crash left
        preallocated is a page of a megabytes-long hole: 5-10 ms of faulting in on
        ext4. Removing or emptying the file costs milliseconds too where freeing
        blocks is slow (`discard` mounts); a cut within the first page frees nothing
        when the entries fit in it, and takes microseconds."""
        for suffix in (".index", ".timeindex"):
            path = os.path.join(self.directory, f"{base:020d}{suffix}")
            try:
                if os.stat(path).st_size > UNTRUSTED_INDEX_BYTES:
                    os.truncate(path, UNTRUSTED_INDEX_BYTES)
            except FileNotFoundError:
                pass

    def _first_to_recover(self, bases: list[int]) -> float:
        """The base of the first segment step 4 recovers (infinity: none, after a clean
        shutdown): the one holding the recovery point, or the first one."""
        if self.had_clean_shutdown or not bases:
            return float("inf")
        below = [base for base in bases if base <= self.recovery_point]
        return below[-1] if below else bases[0]

    def _rebuild(self, segment: LogSegment) -> None:
        self.recovered_bytes_scanned += segment.size
        self.recovered_bytes_cut += segment.recover(self.config.segment_index_bytes)

    # ---- step 4 -------------------------------------------------------------------------

    def _recover(self, segments: LogSegments, from_offset: int) -> None:
        unflushed = segments.snapshot().from_offset(from_offset)
        for i, segment in enumerate(unflushed):
            self.recovered_bytes_scanned += segment.size
            try:
                cut = segment.recover(self.config.segment_index_bytes)
            except CorruptRecordError:
                cut = segment.log.truncate_to(0)
            self.recovered_bytes_cut += cut
            if cut > 0:
                for later in unflushed[i + 1:]:
                    segments.remove(later.base_offset)
                    self.recovered_bytes_cut += later.size
                    later.delete()
                break

    def _open(self, base_offset: int, suffix: str = "") -> LogSegment:
        return LogSegment.open(self.directory, base_offset,
                               index_interval_bytes=self.config.index_interval_bytes,
                               max_index_size=self.config.segment_index_bytes,
                               roll_jitter_ms=self.roll_jitter(), clock=self.clock, suffix=suffix)
