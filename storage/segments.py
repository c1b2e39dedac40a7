"""The ordered segments of one partition log, copy-on-write.

Contract:
- Not thread-safe for changes: `add`, `remove`, `replace` and `clear` run only
  under the owning Log's lock (storage/log.py), as Kafka's LocalLog relies on
  UnifiedLog for its thread safety.
- Each change replaces the whole state; a reader takes `snapshot()` once and gets
  a list that never changes under it, so a roll, a retention pass or a cleaner
  swap never shows a reader a half-updated list. Readers take no lock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from .segment import LogSegment


class SegmentsSnapshot:
    """An immutable, sorted view of segments by base offset."""

    __slots__ = ("bases", "segments")

    def __init__(self, bases: tuple[int, ...], segments: tuple[LogSegment, ...]):
        self.bases = bases
        self.segments = segments

    def __len__(self) -> int:
        return len(self.segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.segments)

    @property
    def first(self) -> LogSegment | None:
        return self.segments[0] if self.segments else None

    @property
    def last(self) -> LogSegment | None:
        return self.segments[-1] if self.segments else None

    def get(self, base_offset: int) -> LogSegment | None:
        i = bisect.bisect_left(self.bases, base_offset)
        return self.segments[i] if i < len(self.bases) and self.bases[i] == base_offset else None

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= `offset`."""
        i = bisect.bisect_right(self.bases, offset)
        return self.segments[i - 1] if i else None

    def higher(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base offset > `offset`."""
        i = bisect.bisect_right(self.bases, offset)
        return self.segments[i] if i < len(self.segments) else None

    def from_offset(self, offset: int) -> tuple[LogSegment, ...]:
        """The segment holding `offset` (its floor) and every later one."""
        i = max(bisect.bisect_right(self.bases, offset) - 1, 0)
        return self.segments[i:]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)


class LogSegments:
    def __init__(self) -> None:
        self._state = SegmentsSnapshot((), ())

    def snapshot(self) -> SegmentsSnapshot:
        return self._state

    def add(self, segment: LogSegment) -> None:
        """Insert `segment`, replacing one with the same base offset."""
        pairs = {s.base_offset: s for s in self._state.segments}
        pairs[segment.base_offset] = segment
        self._replace(pairs)

    def remove(self, base_offset: int) -> LogSegment | None:
        pairs = {s.base_offset: s for s in self._state.segments}
        removed = pairs.pop(base_offset, None)
        self._replace(pairs)
        return removed

    def replace(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Swap `old` segments for `new` in one step (the cleaner's swap): a reader
        sees either the old segments or the new one, never both or neither."""
        pairs = {s.base_offset: s for s in self._state.segments}
        for segment in old:
            pairs.pop(segment.base_offset, None)
        pairs[new.base_offset] = new
        self._replace(pairs)

    def clear(self) -> None:
        self._state = SegmentsSnapshot((), ())

    def _replace(self, pairs: dict[int, LogSegment]) -> None:
        bases = tuple(sorted(pairs))
        self._state = SegmentsSnapshot(bases, tuple(pairs[b] for b in bases))

    # Convenience reads through the current snapshot.
    def __len__(self) -> int:
        return len(self._state)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._state)

    @property
    def active(self) -> LogSegment:
        """The last segment, the one appends go to: a loaded log always has one."""
        last = self._state.last
        if last is None:
            raise LookupError("the log has no segments")
        return last

    @property
    def first(self) -> LogSegment:
        first = self._state.first
        if first is None:
            raise LookupError("the log has no segments")
        return first
