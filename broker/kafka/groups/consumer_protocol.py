"""The consumer protocol that classic groups embed (protocol type "consumer"): the
ConsumerProtocolSubscription a member sends as JoinGroup metadata and the
ConsumerProtocolAssignment it gets back in SyncGroup, as Kafka's ConsumerProtocol
reads and writes them (kio's schemas, versions 0-3).

Both start with an int16 version; a version above 3 is read as 3 (Kafka reads the
fields it knows of newer versions), a negative one is malformed. The broker reads
them when a classic group becomes a consumer group and when classic members join
a consumer group, and writes assignments for classic members of consumer groups
(in the version of the member's metadata, as Kafka does).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from .assignors import Partition

PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3
_SUBSCRIPTIONS = (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
_ASSIGNMENTS = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)
_VERSION = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: frozenset[Partition]  # empty before v1
    rack_id: str | None  # None before v3


def version_of(data: bytes) -> int:
    """The version of a subscription or assignment (ValueError when there is none)."""
    if len(data) < 2:
        raise ValueError("no version")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise ValueError(f"negative version {version}")
    return min(version, HIGHEST_VERSION)


def parse_subscription(data: bytes) -> Subscription:
    """A member's JoinGroup metadata; ValueError when it is malformed."""
    version = version_of(data)
    schema = _SUBSCRIPTIONS[version].ConsumerProtocolSubscription
    try:
        sub, _ = entity_reader(schema)(memoryview(data), 2)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"malformed ConsumerProtocolSubscription v{version}: {e}") from e
    owned = frozenset((tp.topic, int(p)) for tp in getattr(sub, "owned_partitions", ()) for p in tp.partitions)
    return Subscription(version, tuple(sub.topics), owned, getattr(sub, "rack_id", None))


def parse_assignment(data: bytes) -> set[Partition]:
    """The partitions of a SyncGroup assignment; no bytes is no partitions. ValueError
    when it is malformed."""
    if not data:
        return set()
    version = version_of(data)
    schema = _ASSIGNMENTS[version].ConsumerProtocolAssignment
    try:
        assignment, _ = entity_reader(schema)(memoryview(data), 2)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"malformed ConsumerProtocolAssignment v{version}: {e}") from e
    return {(tp.topic, int(p)) for tp in assignment.assigned_partitions for p in tp.partitions}


def encode_assignment(partitions: Iterable[Partition], version: int) -> bytes:
    """A ConsumerProtocolAssignment of `partitions` in `version` (at most 3), topics by name."""
    version = max(0, min(version, HIGHEST_VERSION))
    module = _ASSIGNMENTS[version]
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    assignment = module.ConsumerProtocolAssignment(assigned_partitions=tuple(
        module.TopicPartition(topic=topic, partitions=tuple(i32(i) for i in sorted(indexes)))
        for topic, indexes in sorted(by_topic.items())), user_data=None)
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(version))
    entity_writer(type(assignment))(buffer, assignment)
    return buffer.getvalue()


__all__ = ["HIGHEST_VERSION", "PROTOCOL_TYPE", "Subscription", "encode_assignment", "parse_assignment",
           "parse_subscription", "version_of"]
