"""minOffsetsPerTrigger and maxTriggerDelay, as Spark's Kafka source applies them, on the stream
reader Spark drives (initialOffset, getDefaultReadLimit, latestOffset) against a live broker."""

from __future__ import annotations

import time

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from pipeline.options import read_options
from pipeline.source import StrataStreamReader
from tests.pipeline.conftest import fill, unique


def reader(address: str, topic: str, **options) -> StrataStreamReader:
    return StrataStreamReader(read_options({"bootstrap.servers": address, "subscribe": topic,
                                            "startingOffsets": "earliest", **options}, streaming=True))


def test_min_offsets_hold_a_batch_back_until_enough_are_there(strata):
    topic = unique("min-offsets")
    fill(strata.address, topic, 0)
    source = reader(strata.address, topic, minOffsetsPerTrigger="5", maxTriggerDelay="1h")
    try:
        start = source.initialOffset()
        limit = source.getDefaultReadLimit()
        assert limit == ReadMinRows(5)
        assert source.latestOffset(start, limit) == start  # the first batch never waits (nothing new)
        fill(strata.address, topic, 3, create=False)
        assert source.latestOffset(start, limit) == start  # 3 < 5: held back
        assert source.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 3}}  # Trigger.Once
        fill(strata.address, topic, 3, start=3, create=False)
        assert source.latestOffset(start, limit) == {topic: {"0": 6}}
    finally:
        source.stop()


def test_max_trigger_delay_lets_a_small_batch_through(strata):
    topic = unique("trigger-delay")
    fill(strata.address, topic, 0)
    source = reader(strata.address, topic, minOffsetsPerTrigger="100", maxTriggerDelay="200ms")
    try:
        start = source.initialOffset()
        limit = source.getDefaultReadLimit()
        started = time.time()
        source.latestOffset(start, limit)  # the first batch: the delay counts from here
        fill(strata.address, topic, 2, create=False)
        while source.latestOffset(start, limit) == start:
            assert time.time() - started < 60, "maxTriggerDelay never let the batch through"
            time.sleep(0.05)
        assert time.time() - started >= 0.2  # not before the delay
    finally:
        source.stop()


def test_min_and_max_together(strata):
    topic = unique("min-max")
    fill(strata.address, topic, 0)
    source = reader(strata.address, topic, minOffsetsPerTrigger="3", maxOffsetsPerTrigger="4",
                    maxTriggerDelay="1h")
    try:
        start = source.initialOffset()
        limit = source.getDefaultReadLimit()
        assert limit == ReadMaxRows(4)
        source.latestOffset(start, limit)
        fill(strata.address, topic, 2, create=False)
        assert source.latestOffset(start, limit) == start
        fill(strata.address, topic, 8, start=2, create=False)
        assert source.latestOffset(start, limit) == {topic: {"0": 4}}
        # Trigger.AvailableNow reaches its end without waiting for more
        source.prepareForTriggerAvailableNow()
        assert source.latestOffset({topic: {"0": 9}}, limit) == {topic: {"0": 10}}
    finally:
        source.stop()
