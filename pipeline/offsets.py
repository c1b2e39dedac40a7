"""Offsets as JSON, in the shapes Spark's Kafka source uses (pure logic, no I/O).

Contract:
- A topic-partition is `(topic, partition)`; `PartitionOffsets` maps it to an
  offset. The JSON form is Spark's: `{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}`
  (partition numbers as strings, topics and partitions sorted when written).
  -2 means earliest, -1 latest (in `startingOffsets` / `endingOffsets`).
- `parse_partition_offsets(text, option)` and `parse_assign(text)` (`{"t":[0,1]}`)
  raise OptionError naming the option and showing the expected shape.
- `offsets_to_json` / `offsets_from_json` turn a stream offset (what the
  streaming engine checkpoints) to and from the plain dict the Python data
  source API exchanges: the same nesting, JSON-compatible.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = ["EARLIEST", "LATEST", "TopicPartition", "PartitionOffsets", "OptionError",
           "parse_partition_offsets", "parse_assign", "offsets_to_json", "offsets_from_json",
           "format_tp"]

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


class OptionError(ValueError):
    """A data source option is missing, unknown in this context, or malformed."""


def format_tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _partition_number(text, option: str, example: str, got: str) -> int:
    if isinstance(text, bool):
        raise OptionError(f"{option}: bad partition {text!r}: expected e.g. {example}, got {got}")
    try:
        number = int(text)
    except (TypeError, ValueError):
        raise OptionError(f"{option}: bad partition {text!r}: expected e.g. {example}, "
                          f"got {got}") from None
    if number < 0 or str(number) != str(text).strip():
        raise OptionError(f"{option}: bad partition {text!r}: expected e.g. {example}, got {got}")
    return number


def parse_partition_offsets(text: str, option: str = "startingOffsets") -> PartitionOffsets:
    """{(topic, partition): offset} from `{"t":{"0":23,"1":-1}}`."""
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise OptionError(f"{option}: expected e.g. {example}, got {text}")
    result: PartitionOffsets = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"{option}: expected e.g. {example}, got {text}")
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OptionError(f"{option}: offset of {topic}-{partition} must be an integer "
                                  f"(-2 earliest, -1 latest), got {offset!r}")
            result[(topic, _partition_number(partition, option, example, text))] = offset
    return result


def parse_assign(text: str) -> list[TopicPartition]:
    """[(topic, partition), ...] from `{"topicA":[0,1],"topicB":[2,4]}`."""
    example = '{"topicA":[0,1],"topicB":[0,1]}'
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"assign: expected e.g. {example}, got {text}")
    result: list[TopicPartition] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list):
            raise OptionError(f"assign: expected e.g. {example}, got {text}")
        for partition in partitions:
            tp = (topic, _partition_number(partition, "assign", example, text))
            if tp not in result:
                result.append(tp)
    return result


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict:
    """{"topic": {"0": offset, ...}, ...}: what a stream offset looks like."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(value) -> PartitionOffsets:
    """The inverse of offsets_to_json; also takes the JSON text itself."""
    if isinstance(value, str):
        value = json.loads(value)
    result: PartitionOffsets = {}
    for topic, partitions in (value or {}).items():
        for partition, offset in partitions.items():
            result[(topic, int(partition))] = int(offset)
    return result
