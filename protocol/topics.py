"""Topic-name rules, Kafka's (org.apache.kafka.common.internals.Topic).

Contract:
- `validate_topic_name(name)` returns None for a legal name and raises
  `InvalidTopicName` (code INVALID_TOPIC_EXCEPTION, 17) otherwise: a name must be
  1..249 characters from [A-Za-z0-9._-] and must not be "." or "..". The rule
  itself lives in storage.names, next to the code that turns names into
  directories, so there is one rule for both layers.
- `has_collision(a, b)` is Kafka's check that two names differ only by '.'
  versus '_' (they share metric names); Kafka refuses to create the second one
  with INVALID_TOPIC_EXCEPTION.
- `InvalidTopicName` is deliberately not a ProtocolError: the bytes were fine,
  the name breaks a rule, and the answer is a per-request (or per-item) error,
  not a malformed-request one.
"""

from __future__ import annotations

from storage.errors import InvalidTopicError as InvalidTopicName
from storage.names import MAX_TOPIC_LENGTH as MAX_NAME_LENGTH
from storage.names import validate_topic_name

__all__ = ["InvalidTopicName", "MAX_NAME_LENGTH", "validate_topic_name", "has_collision"]


def has_collision(a: str, b: str) -> bool:
    return a.replace(".", "_") == b.replace(".", "_")
