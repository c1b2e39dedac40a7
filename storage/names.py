"""Topic names and partition directory names.

A topic name becomes a directory name, so the rule that keeps names inside the
data directory lives here, in the lowest layer: Kafka's rule, only
`[A-Za-z0-9._-]`, 1 to 249 characters, and never `.` or `..`.
"""

from __future__ import annotations

import re
import uuid

from .errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249
# The longest file name Linux filesystems take (NAME_MAX), in bytes; topic names
# are ASCII, so bytes and characters agree.
MAX_FILE_NAME_LENGTH = 255
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")
# Directories Kafka leaves behind while deleting or moving a partition.
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
SPECIAL_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)


def validate_topic_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_LENGTH} characters")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: use only ASCII letters, digits, '.', '_' and '-'")


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
