"""`strata`: the Spark data source over the broker (batch and streaming, read and write).

Contract (Spark's Kafka source, where this file is silent):
- Batch read: `StrataBatchReader.partitions()` plans offset ranges on the
  driver (planning.py) and `read()` runs on the executors, one task per
  range, each fetching exactly its range (fetcher.py) as Arrow batches.
- Streaming read: `StrataStreamReader`. Offsets are `{"topic":{"0":42}}`
  (the next offset to read per partition), which Spark checkpoints as JSON.
  The first batch starts from `startingOffsets` (default latest);
  `latestOffset` reads the log ends (partitions added meanwhile start at
  their log start) and, under a `ReadMaxRows` limit (`maxOffsetsPerTrigger`),
  shares the limit out by backlog. `minOffsetsPerTrigger` holds a batch back
  (latestOffset answers the start, so Spark plans nothing) while fewer new
  offsets than that are there, until `maxTriggerDelay` has passed since the
  last batch, as Spark's Kafka source does (its first batch never waits); a
  `ReadAllAvailable` limit from Spark (Trigger.Once) overrides both bounds.
  `Trigger.AvailableNow` fixes the log ends
  when the query starts (prepareForTriggerAvailableNow) and goes no further,
  in as many batches as the limit needs. Planning a batch reports data loss
  for partitions that are gone or whose offsets went backwards; executors
  report records gone below the log start (failOnDataLoss decides: fail, or
  warn and go on).
- Write: see writer.py; `mode("append")` only (Spark itself refuses the default
  errorifexists mode for every Python data source, where the Kafka sink takes it).
- The schema is fixed (schema.py); a user-given schema different from it is
  refused, as Spark's Kafka source does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .fetcher import data_loss, read_range
from .offsets import OptionError, PartitionOffsets, format_tp, offsets_from_json, offsets_to_json
from .options import ReadOptions, read_options, write_options
from .planning import OffsetRange, Planner, rate_limit, split_ranges
from .schema import spark_schema
from .writer import StrataBatchWriter, StrataStreamWriter, check_write_schema

__all__ = ["StrataDataSource", "StrataBatchReader", "StrataStreamReader"]

log = logging.getLogger("pipeline")


def _include_headers(options) -> bool:
    value = {k.lower(): v for k, v in options.items()}.get("includeheaders", "false")
    return str(value).strip().lower() == "true"


def check_user_schema(schema: StructType, include_headers: bool, source: str) -> None:
    if schema is not None and schema != spark_schema(include_headers):
        raise OptionError(f"the {source} source has a fixed schema and cannot be set with a "
                          f"custom one: {spark_schema(include_headers).simpleString()}")


class StrataDataSource(DataSource):
    """Topics of a Strata broker as a Spark source and sink (format `strata`)."""

    @classmethod
    def name(cls) -> str:
        return "strata"

    def schema(self):
        return spark_schema(_include_headers(self.options))

    def reader(self, schema: StructType) -> StrataBatchReader:
        options = read_options(self.options, streaming=False)
        check_user_schema(schema, options.include_headers, "strata")
        return StrataBatchReader(options)

    def streamReader(self, schema: StructType) -> StrataStreamReader:
        options = read_options(self.options, streaming=True)
        check_user_schema(schema, options.include_headers, "strata")
        return StrataStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> StrataBatchWriter:
        if overwrite:
            raise OptionError("Save mode overwrite not allowed for Strata: records are "
                              "appended to topics, use mode(\"append\")")
        options = write_options(self.options)
        check_write_schema(schema, options)
        return StrataBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StrataStreamWriter:
        options = write_options(self.options)
        check_write_schema(schema, options)
        return StrataStreamWriter(options)


def _read(options: ReadOptions, partition) -> Iterator:
    if not isinstance(partition, OffsetRange):  # no range at all: Spark's placeholder
        return iter(())
    return read_range(options, partition.topic, partition.partition, partition.start,
                      partition.end)


class StrataBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions):
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        with Planner(self.options) as planner:
            ranges = planner.batch_ranges()
        log.info("strata batch read: %d ranges", len(ranges))
        return ranges

    def read(self, partition):
        return _read(self.options, partition)


class StrataStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions):
        self.options = options
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow's end
        self._latest: PartitionOffsets | None = None  # last log ends seen
        self._planner: Planner | None = None
        self._last_trigger_ms = 0.0  # as Spark's lastTriggerMillis: the first batch never waits

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def __getstate__(self):  # executors get the options only
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    def initialOffset(self) -> dict:
        infos = self.planner.partitions()
        return offsets_to_json(self.planner.resolve(self.options.starting, infos, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        # One limit only in the Python API: latestOffset applies both bounds from the options.
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _delay_batch(self, begin: dict, latest: dict) -> bool:
        """Spark's KafkaMicroBatchStream.delayBatch: wait for minOffsetsPerTrigger new
        offsets unless maxTriggerDelay has passed since the last batch."""
        now = time.time() * 1000
        if now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        new = sum(end - begin.get(tp, 0) for tp, end in latest.items())
        assert self.options.min_offsets_per_trigger is not None
        if new < self.options.min_offsets_per_trigger:
            return True
        self._last_trigger_ms = now
        return False

    def prepareForTriggerAvailableNow(self) -> None:
        infos = self.planner.partitions()
        self._target = {tp: info.log_end for tp, info in infos.items()}
        log.info("strata stream: Trigger.AvailableNow reads up to %s", self._target)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        infos = self.planner.partitions()
        self._latest = {tp: info.log_end for tp, info in infos.items()}
        latest = dict(self._target) if self._target is not None else dict(self._latest)
        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(latest)
        # Partitions new to this query count from their log start.
        begin_all = {tp: begin.get(tp, infos[tp].log_start if tp in infos else end)
                     for tp, end in latest.items()}
        # Trigger.AvailableNow has a fixed end and must reach it: it never waits for more.
        if (self.options.min_offsets_per_trigger is not None and self._target is None
                and self._delay_batch(begin_all, latest)):
            return start
        if self.options.max_offsets_per_trigger is not None:
            latest = rate_limit(self.options.max_offsets_per_trigger, begin_all, latest)
        return offsets_to_json(latest)

    def reportLatestOffset(self):
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        fail = self.options.fail_on_data_loss
        gone = sorted(set(begin) - set(until))
        if gone:
            data_loss(f"{', '.join(format_tp(tp) for tp in gone)} are gone.", fail)
        new = [tp for tp in until if tp not in begin]
        if new:
            infos = self.planner.partitions()
            for tp in new:
                if tp in infos:
                    begin[tp] = infos[tp].log_start
                else:
                    data_loss(f"Cannot find the log start of {format_tp(tp)}.", fail)
        ranges = []
        for tp, stop in sorted(until.items()):
            if tp not in begin:
                continue
            if stop < begin[tp]:
                data_loss(f"Partition {format_tp(tp)}'s offset was changed from {begin[tp]} to "
                          f"{stop}, some data may have been missed.", fail)
                continue
            ranges.append(OffsetRange(tp[0], tp[1], begin[tp], stop))
        return split_ranges(ranges, self.options.min_partitions,
                            self.options.max_records_per_partition)

    def read(self, partition):
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the broker

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
