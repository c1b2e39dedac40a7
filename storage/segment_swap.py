"""Swapping a cleaned segment in for the segments it replaces, crash-safely
(Kafka's LocalLog.replaceSegments, one new segment at a time).

Protocol, for a cleaned segment written as `<base>.log.cleaned` (+ `.index.cleaned`,
`.timeindex.cleaned`), already fsynced and carrying the last offset of the segments
it replaces (the cleaner keeps that offset, see cleaner_records):

    1. `.cleaned` -> `.swap` (index files first, the `.log` last), fsync the directory;
    2. in memory: the old segments leave the copy-on-write list and the new one
       enters it, in one step;
    3. the old segments' files -> `.deleted` (removed file.delete.delay.ms later,
       storage/pending_deletions.py), so readers of an older snapshot finish their reads;
    4. `.swap` -> final names, fsync the directory.
   (5. the cleaner writes `cleaner-offset-checkpoint`, last.)

What the loader (storage/loader.py) makes of a crash at each point:
    before 1 is complete   a `.cleaned` file is left: every `.cleaned` and any
                           `.swap` at or past its base go; the old segments stay;
    after 1, before 4      the `.log.swap` is complete: `.deleted` files go, the
                           segments whose base lies in the swap's offset range (the
                           old ones: the swap ends at their last offset) go, and the
                           swap takes the final name: the new segment;
    during or after 4      as above, for what is still `.swap`; a final-named file
                           of the new segment is kept (an index is rebuilt).
Either the old segments or the new one, never a loss; `step(name)` is called
after each point (tests stop there to play a crash).

Locking: none here. This is the lower layer (as Kafka's LocalLog, not
thread-safe): `Log.replace_segments` runs it under the log's lock, as retention's
removals, so retention and the cleaner never interleave their changes to one
log. The segments must still be the log's own (retention may have deleted some
while the cleaner was writing): otherwise SwapAborted, and nothing was changed.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka_format.errors import KafkaStorageError

from .fileutil import fsync_dir
from .segment import LogSegment
from .segments import LogSegments

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


class SwapAborted(KafkaStorageError):
    """The log changed under the cleaner (closed, or a segment to replace is gone)."""


def _rename(segment: LogSegment, old_suffix: str, new_suffix: str) -> None:
    # The indexes first: a `.log` with a given suffix stands for the whole segment.
    txn = segment.txn_index  # renamed when it has a file (no aborted transaction: none)
    if txn.path.endswith(old_suffix):
        txn.rename(txn.path[: len(txn.path) - len(old_suffix)] + new_suffix)
    for f in (segment.offset_index, segment.time_index, segment.log):
        if f.path.endswith(old_suffix):
            f.rename(f.path[: len(f.path) - len(old_suffix)] + new_suffix)


def swap_segments(directory: str, segments: LogSegments, new: LogSegment, old: list[LogSegment],
                  retire: Callable[[list[LogSegment]], None], *, log_name: str,
                  step: Callable[[str], None] = lambda name: None) -> None:
    """Put `new` (files named `.cleaned`) in the place of `old` in `segments`, the
    list of log `log_name` in `directory` (see the module doc). `retire(old)` renames the
    old segments' files to `.deleted` and schedules their removal. The caller
    holds the log's lock."""
    snapshot = segments.snapshot()
    for segment in old:
        if snapshot.get(segment.base_offset) is not segment:
            raise SwapAborted(f"segment {segment.base_offset} of {log_name} is no longer in the log")
    if old[-1] is snapshot.last:
        raise SwapAborted(f"segment {old[-1].base_offset} of {log_name} is the active segment")
    if new.base_offset != old[0].base_offset:
        raise ValueError("the cleaned segment must start where the first segment it replaces does")
    _rename(new, CLEANED_SUFFIX, SWAP_SUFFIX)
    step("renamed_to_swap")
    fsync_dir(directory)
    step("swap_synced")
    segments.replace(new, old)
    retire(old)
    step("old_renamed_deleted")
    _rename(new, SWAP_SUFFIX, "")
    step("swap_renamed")
    fsync_dir(directory)
    step("dir_synced")
