"""Internal topics: what no request, on either protocol, may do to them.

Strata has two internal topics, `__consumer_offsets`, the log of committed
offsets (broker/state/group_offsets.py), and `__transaction_state`, the transaction
coordinator's log (broker/kafka/transactions/). Their records are state, and
only compaction may remove them: a record is gone only once a newer one for the
same key (or a tombstone) replaces it. Kafka's rules, applied by the handlers of
both protocols and by the topic registry:

- DELETE_RECORDS (native and Kafka's DeleteRecords) on an internal topic:
  INVALID_TOPIC_EXCEPTION (17), as Kafka's ReplicaManager answers.
- A config change (native ALTER_CONFIG, AlterConfigs, IncrementalAlterConfigs)
  or a CreateTopics whose effective config would let anything other than
  compaction remove offsets: INVALID_CONFIG (40) with a message. That is a
  cleanup.policy other than exactly `compact`: with `delete` (or
  `compact,delete`) retention.ms and retention.bytes delete segments of
  committed offsets; with `compact` alone they do not apply (storage/retention.py),
  so retention settings are harmless and allowed.
- Producing to an internal topic and deleting one are refused elsewhere
  (broker/core/service.py, broker/state/topic_registry.py) with Kafka's codes.
"""

from __future__ import annotations

from kafka_format.errors import InvalidConfigError, InvalidTopicError
from storage.config import LogConfig

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"  # the share coordinator's log (broker/share/)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})
# Kafka's offsets.topic.segment.bytes default; offsets.topic.compression.codec is none.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "104857600"}
# Kafka's transaction.state.log.segment.bytes default.
TRANSACTION_STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "104857600"}
# Kafka's share.coordinator.state.topic.segment.bytes default.
SHARE_GROUP_STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "104857600"}
INTERNAL_TOPIC_CONFIGS = {OFFSETS_TOPIC: OFFSETS_TOPIC_CONFIGS,
                          TRANSACTION_STATE_TOPIC: TRANSACTION_STATE_TOPIC_CONFIGS,
                          SHARE_GROUP_STATE_TOPIC: SHARE_GROUP_STATE_TOPIC_CONFIGS}
REQUIRED_CLEANUP_POLICY = ("compact",)


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def check_delete_records(topic: str) -> None:
    """InvalidTopicError for DELETE_RECORDS on an internal topic."""
    if is_internal(topic):
        raise InvalidTopicError(f"cannot delete records of internal topic {topic}")


def check_config(topic: str, config: LogConfig) -> None:
    """InvalidConfigError when `config` (the effective config a change or a
    creation would give `topic`) would let anything but compaction remove
    records of an internal topic."""
    if not is_internal(topic):
        return
    if tuple(config.cleanup_policy) != REQUIRED_CLEANUP_POLICY:
        raise InvalidConfigError(
            f"cleanup.policy of internal topic {topic} must be compact, not "
            f"{','.join(config.cleanup_policy)}: its records are state, which only "
            f"compaction may remove")
