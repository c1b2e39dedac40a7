"""Topic-name rules, Kafka's (org.apache.kafka.common.internals.Topic).

Contract:
- `validate_topic_name(name)` returns None for a legal name and raises
  `InvalidTopicName` (code INVALID_TOPIC_EXCEPTION, 17) otherwise: a name must be
  1..249 characters from [A-Za-z0-9._-] and must not be "." or "..". The rule
  itself lives in kafka_format.topic_names, the bottom layer, so storage
  (which turns names into directories) and the protocols apply one rule.
- `has_collision(a, b)` is Kafka's check that two names differ only by '.'
  versus '_' (they share metric names); Kafka refuses to create the second one
  with INVALID_TOPIC_EXCEPTION.
- `InvalidTopicName` is deliberately not a ProtocolError: the bytes were fine,
  the name breaks a rule, and the answer is a per-request (or per-item) error,
  not a malformed-request one.
"""

from __future__ import annotations

from kafka_format.errors import InvalidTopicError as InvalidTopicName
from kafka_format.topic_names import MAX_TOPIC_LENGTH as MAX_NAME_LENGTH
from kafka_format.topic_names import validate_topic_name

__all__ = ["InvalidTopicName", "MAX_NAME_LENGTH", "validate_topic_name", "has_collision"]


def has_collision(a: str, b: str) -> bool:
    return a.replace(".", "_") == b.replace(".", "_")
