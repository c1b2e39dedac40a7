"""Shared values of the tiered-storage tests."""

from __future__ import annotations

import uuid

from storage.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

TP = TopicIdPartition("events", uuid.UUID("6c7a1c39-0b64-4a0e-9a39-2f0a3f0c9f11"), 3)


def segment_metadata(start: int, end: int, size: int, *, tp: TopicIdPartition = TP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), start, end, 1_700_000_000_000, 0,
                                    1_700_000_000_500, size, ((0, start),))


