"""Topic names and partition directory names.

A topic name becomes a directory name, so the rule that keeps names inside the
data directory lives here, in the lowest layer: Kafka's rule, only
`[A-Za-z0-9._-]`, 1 to 249 characters, and never `.` or `..`.
"""

from __future__ import annotations

import re

from .errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")
# Directories Kafka leaves behind while deleting or moving a partition.
DELETE_DIR_SUFFIX = "-delete"
SPECIAL_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, "-future", "-stray")


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
