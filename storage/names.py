"""Partition directory names: `<topic>-<partition>` and the special names
Kafka gives directories it is deleting or moving. The topic-name rule itself
(kafka_format/topic_names.py) sits in the bottom layer, since protocol/ checks
names too.
"""

from __future__ import annotations

import uuid

from kafka_format.errors import InvalidTopicError
from kafka_format.topic_names import validate_topic_name

# The longest file name Linux filesystems take (NAME_MAX), in bytes; topic names
# are ASCII, so bytes and characters agree.
MAX_FILE_NAME_LENGTH = 255
# Directories Kafka leaves behind while deleting or moving a partition.
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
SPECIAL_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def special_dir_name(topic: str, partition: int, suffix: str) -> str:
    """`<topic>-<partition>.<uuid>-delete` (or -future, -stray): the name a
    partition directory is renamed to. Kafka's logDirNameWithSuffixCappedLength:
    the topic part is cut short so that the whole name stays within 255 bytes
    (a 249-character topic's `-delete` name would be 285)."""
    if suffix not in SPECIAL_DIR_SUFFIXES:
        raise ValueError(f"unknown special directory suffix {suffix!r}")
    full_suffix = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    return topic[:MAX_FILE_NAME_LENGTH - len(full_suffix)] + full_suffix


def delete_dir_name(topic: str, partition: int) -> str:
    return special_dir_name(topic, partition, DELETE_DIR_SUFFIX)


def stray_dir_name(topic: str, partition: int) -> str:
    return special_dir_name(topic, partition, STRAY_DIR_SUFFIX)


def future_dir_name(topic: str, partition: int) -> str:
    return special_dir_name(topic, partition, FUTURE_DIR_SUFFIX)


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) for `<topic>-<partition>`; None for anything else."""
    if name.endswith(SPECIAL_DIR_SUFFIXES):
        return None
    topic, dash, number = name.rpartition("-")
    if not dash or not number.isdigit() or (len(number) > 1 and number.startswith("0")):
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return None
    return topic, int(number)
