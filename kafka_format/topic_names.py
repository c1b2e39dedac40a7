"""Kafka's topic-name rule: only `[A-Za-z0-9._-]`, 1 to 249 characters, and
never `.` or `..`. A topic name becomes a directory name, so this rule is what
keeps names inside the data directory; both the protocols (checking requests)
and storage (naming directories) apply it.
"""

from __future__ import annotations

import re

from .errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")


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
