"""Driver-side planning: which partitions, which offsets, which ranges (as Spark's Kafka source).

Contract:
- `OffsetRange` is the InputPartition of the broker sources: one Spark task
  reads [start, end) of one topic-partition. It is a plain picklable value.
- `Planner(options)` asks the broker through `client.Admin` (METADATA gives
  every partition's log start and end in one request; OFFSETS answers
  timestamps). `partitions()` resolves the subscription: `subscribe` topics
  must exist, `subscribePattern` matches whole topic names (re.fullmatch,
  internal topics left out), `assign` partitions must exist.
  Under read_committed a partition's `log_end` is its last stable offset (what
  Kafka's ListOffsets READ_COMMITTED answers for "latest", as Spark's offset
  reader asks with the query's isolation.level), so no range reaches into an
  open transaction. `resolve(spec, tps, starting)` turns an OffsetSpec into offsets; per
  partition specs must name exactly the subscribed partitions (Spark's
  assertion), timestamps give the first offset at or after them (no match:
  for a start, `startingOffsetsByTimestampStrategy` error | latest; for an
  end, latest).
- `batch_ranges()` plans a batch read; `split_ranges(ranges, minPartitions,
  maxRecordsPerPartition)` is Spark's KafkaOffsetRangeCalculator: empty ranges
  dropped, large ranges split in proportion to their size so that there are
  at least `minPartitions` tasks, small ones left whole.
- `rate_limit(limit, start, end)` is Spark's maxOffsetsPerTrigger proration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from client import Admin
from client.errors import StrataClientError
from protocol import ErrorCode

from .offsets import EARLIEST, LATEST, OptionError, PartitionOffsets, TopicPartition, format_tp
from .options import OffsetSpec, ReadOptions

__all__ = ["OffsetRange", "Planner", "split_ranges", "rate_limit", "PartitionInfo"]


@dataclass
class OffsetRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class PartitionInfo:
    log_start: int
    log_end: int  # the last stable offset under read_committed


class Planner:
    def __init__(self, options: ReadOptions):
        self.options = options
        self._admin: Admin | None = None

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.options.bootstrap,
                                request_timeout_ms=self.options.request_timeout_ms,
                                retries=self.options.fetch_retries,
                                retry_backoff_ms=self.options.retry_interval_ms,
                                security=dict(self.options.security))
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # ---- partitions ---------------------------------------------------------------

    def partitions(self) -> dict[TopicPartition, PartitionInfo]:
        """The subscribed partitions with their log start and end offsets, sorted."""
        o = self.options
        if o.strategy == "subscribePattern":
            topics = self.admin.metadata()
        else:
            names = o.topics if o.strategy == "subscribe" else sorted({t for t, _ in o.assigned})
            topics = self.admin.metadata(names)
        found: dict[TopicPartition, PartitionInfo] = {}
        known: dict[str, set[int]] = {}
        for topic in topics:
            if not o.matches(topic.topic):
                continue
            if topic.error != ErrorCode.NONE:
                if o.strategy == "subscribePattern":
                    continue  # deleted meanwhile
                what = ("does not exist" if topic.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        else "cannot be read")
                raise StrataClientError(f"topic {topic.topic!r} {what}", topic.error)
            known[topic.topic] = {p.partition for p in topic.partitions}
            for p in topic.partitions:
                end = p.log_end_offset
                if o.read_committed:
                    end = self.admin.last_stable_offset(topic.topic, p.partition, end)
                found[(topic.topic, p.partition)] = PartitionInfo(p.log_start_offset, end)
        if o.strategy == "subscribe":
            missing_topics = [t for t in o.topics if t not in known]
            if missing_topics:
                raise StrataClientError(f"topic {missing_topics[0]!r} does not exist",
                                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        elif o.strategy == "assign":
            missing = [tp for tp in o.assigned if tp not in found]
            if missing:
                raise StrataClientError(f"assigned partition {format_tp(missing[0])} does not "
                                        f"exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            found = {tp: found[tp] for tp in o.assigned}
        return dict(sorted(found.items()))

    # ---- offsets ------------------------------------------------------------------

    def resolve(self, spec: OffsetSpec, infos: dict[TopicPartition, PartitionInfo],
                starting: bool) -> PartitionOffsets:
        """Offsets per partition of `infos` for `spec` (-2/-1 resolved)."""
        option = "startingOffsets" if starting else "endingOffsets"
        if spec.kind == "earliest":
            return {tp: info.log_start for tp, info in infos.items()}
        if spec.kind == "latest":
            return {tp: info.log_end for tp, info in infos.items()}
        if spec.kind in ("specific", "timestamps"):
            given = spec.per_partition
            if set(given) != set(infos):
                if spec.kind == "timestamps":
                    option = option.replace("Offsets", "OffsetsByTimestamp")
                raise OptionError(
                    f"If {option} contains specific offsets, you must specify all "
                    f"TopicPartitions. Use -2 for earliest, -1 for latest. Specified: "
                    f"{sorted(format_tp(tp) for tp in given)} Assigned: "
                    f"{sorted(format_tp(tp) for tp in infos)}")
            if spec.kind == "specific":
                return {tp: (info.log_start if given[tp] == EARLIEST else
                             info.log_end if given[tp] == LATEST else given[tp])
                        for tp, info in infos.items()}
            return {tp: self._by_timestamp(tp, given[tp], info, starting)
                    for tp, info in infos.items()}
        timestamp = spec.timestamp
        assert timestamp is not None  # kind "timestamp" (options._offset_spec sets it)
        return {tp: self._by_timestamp(tp, timestamp, info, starting)
                for tp, info in infos.items()}

    def _by_timestamp(self, tp: TopicPartition, timestamp: int, info: PartitionInfo,
                      starting: bool) -> int:
        found = self.admin.offsets(tp[0], tp[1], timestamp)
        if found:
            return found[0]
        if starting and self.options.starting_strategy == "error":
            raise OptionError(f"No offset matched from request of topic-partition "
                              f"{format_tp(tp)} and timestamp {timestamp}. (Set "
                              f"startingOffsetsByTimestampStrategy to 'latest' to start at the "
                              f"log end instead.)")
        return info.log_end

    # ---- batch --------------------------------------------------------------------

    def batch_ranges(self) -> list[OffsetRange]:
        infos = self.partitions()
        starts = self.resolve(self.options.starting, infos, starting=True)
        ending = self.options.ending
        assert ending is not None  # read_options sets one for every batch query
        ends = self.resolve(ending, infos, starting=False)
        ranges = []
        for tp in infos:
            start, end = starts[tp], ends[tp]
            if start > end:
                raise OptionError(f"Beginning offset {start} is after the ending offset {end} "
                                  f"for topic {tp[0]} partition {tp[1]}. You either provided an "
                                  f"invalid fromOffset, or the topic has been damaged")
            ranges.append(OffsetRange(tp[0], tp[1], start, end))
        return split_ranges(ranges, self.options.min_partitions,
                            self.options.max_records_per_partition)


def _round(x: float) -> int:
    return math.floor(x + 0.5)  # Java's Math.round


def _divide(parts: int, r: OffsetRange) -> list[OffsetRange]:
    out, remaining, start = [], r.size, r.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.end)
        out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return [x for x in out if x.size > 0]


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None = None) -> list[OffsetRange]:
    ranges = [r for r in ranges if r.size > 0]
    if (min_partitions is None or len(ranges) >= min_partitions) and max_records is None:
        return ranges
    if max_records is not None:
        ranges = [x for r in ranges for x in _divide(math.ceil(r.size / max_records), r)]
    if min_partitions is None or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)

    def part_count(size: int, whole: int, parts: int) -> int:
        return max(_round(size / whole * parts), 1)

    unsplit = [r for r in ranges if part_count(r.size, total, min_partitions) == 1]
    unsplit_tps = {r.tp for r in unsplit}
    split_total = total - sum(r.size for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    out = []
    for r in ranges:
        parts = 1 if r.tp in unsplit_tps else part_count(r.size, split_total, split_min)
        out.extend(_divide(parts, r))
    return out


def rate_limit(limit: int, start: PartitionOffsets, end: PartitionOffsets) -> PartitionOffsets:
    """At most about `limit` records from `start` to `end`, shared out by backlog."""
    sizes = {tp: e - start[tp] for tp, e in end.items() if tp in start and e - start[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(end)
    out = {}
    for tp, e in end.items():
        if tp not in sizes:
            out[tp] = e
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(e, start[tp] + share)
    return out
