"""Shared values of the tiered-storage tests."""

from __future__ import annotations

import uuid

from storage.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

TP = TopicIdPartition("events", uuid.UUID("6c7a1c39-0b64-4a0e-9a39-2f0a3f0c9f11"), 3)


def segment_metadata(start: int, end: int, size: int, *, tp: TopicIdPartition = TP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), start, end, 1_700_000_000_000, 0,
                                    1_700_000_000_500, size, ((0, start),))




# ---- a tiered partition log with rolled segments ------------------------------------------------

LOG_TP = TopicIdPartition("clicks", uuid.UUID("0f3e8c1a-7d2b-4c55-8e11-5a9d3c2b1f00"), 0)
RECORDS_PER_BATCH = 10
BATCHES_PER_SEGMENT = 5


def tiered_config(**overrides):
    from storage.config import LogConfig

    props = {"remote.storage.enable": "true", "index.interval.bytes": "1", "retention.ms": "-1"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return LogConfig.from_props(props)


def open_tiered_log(directory, config=None, clock=None):
    from storage.clock import SYSTEM_CLOCK
    from storage.log import Log

    return Log.open(str(directory), LOG_TP.topic, LOG_TP.partition, config or tiered_config(),
                    clock=clock or SYSTEM_CLOCK)


def fill(log, segments: int, *, timestamp: int = 1_700_000_000_000) -> None:
    """Append `segments` full segments (each rolled), leaving an empty active one."""
    from kafka_format import build_batch

    for _ in range(segments):
        for _ in range(BATCHES_PER_SEGMENT):
            first = log.log_end_offset
            log.append(build_batch([(b"k%d" % (first + i), b"value-%d-" % (first + i) + b"x" * 200, timestamp)
                                    for i in range(RECORDS_PER_BATCH)]))
        log.roll()
    log.flush()
