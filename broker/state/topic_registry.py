"""The topic registry: which topics exist, their partition counts, ids and config overrides.

Kafka keeps these in its metadata log; Strata in `<data-dir>/strata-topics.json`, replaced
whole through broker/state/json_files.py `write_document`. Thread-safe: mutations run in
the executor under one lock, lookups take none. Every change writes the file first and
changes memory only then. Its rules (the commit points of create, delete and
add_partitions, reconcile, internal topics, config precedence, errors, topic ids) are in
broker/SERVER.md, "Topics".
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import structlog

from broker.state import internal_topics
from broker.state.internal_topics import INTERNAL_TOPIC_CONFIGS, OFFSETS_TOPIC
from broker.state.json_files import damaged, read_document, write_document
from kafka_format.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    StrataError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka_format.topic_names import validate_topic_name
from storage.config import LogConfig, check_remote_storage_change
from storage.manager import LogManager

REGISTRY_FILE = "strata-topics.json"
REMEDY = "restore it from a backup (topic configs and topic ids cannot be rebuilt from the logs)"
FORMAT_VERSION = 1
# Not Kafka's (it has none): one request must not be able to make the broker
# create millions of directories.
MAX_PARTITIONS = 10_000

log = structlog.get_logger("strata.topics")


def has_collision(a: str, b: str) -> bool:
    """Kafka's rule: names equal once '.' and '_' are identified collide."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)  # overrides only
    internal: bool = False
    log_config: LogConfig = field(default_factory=LogConfig)  # overrides over broker defaults
    topic_id: str = ""  # Kafka's topic id (a UUID), "" until assigned

    def to_json(self) -> dict:
        out: dict = {"partitions": self.partitions, "configs": dict(sorted(self.configs.items()))}
        if self.internal:
            out["internal"] = True
        if self.topic_id:
            out["id"] = self.topic_id
        return out


def new_topic_id() -> str:
    """A random UUID that is neither Kafka's ZERO_UUID nor METADATA_TOPIC_ID (1)."""
    while True:
        value = uuid.uuid4()
        if value.int > 1:
            return str(value)


class TopicRegistry:
    def __init__(self, data_dir: str, defaults: LogConfig, *, num_partitions: int = 1,
                 remote_storage_system_enable: bool = False,
                 remote_storage_disabled: Callable[[Topic], None] | None = None):
        self.path = os.path.join(data_dir, REGISTRY_FILE)
        self.defaults = defaults
        self.num_partitions = num_partitions
        # The broker's remote.log.storage.system.enable: whether a topic may be tiered
        # (check_remote_storage_change on create and alter, both protocols).
        self.remote_storage_system_enable = remote_storage_system_enable
        # Called (blocking) once a topic's remote.storage.enable is turned off (with
        # remote.log.delete.on.disable, which check_remote_storage_change requires):
        # tiered storage deletes the topic's remote data (broker/app.py).
        self.remote_storage_disabled = remote_storage_disabled
        self._topics: Mapping[str, Topic] = MappingProxyType({})
        self._deleting: tuple[str, ...] = ()
        self._lock = threading.RLock()
        self._manager: LogManager | None = None
        self._by_id: tuple[Mapping[str, Topic], dict[str, Topic]] | None = None
        self.file_existed = False

    # ---- loading -----------------------------------------------------------------------

    def load(self) -> None:
        """Read the registry file (no writes: the data directory is not locked yet)."""
        doc = read_document(self.path, FORMAT_VERSION, "topic registry", REMEDY)
        self.file_existed = doc is not None
        if doc is None:
            return
        topics = {}
        try:
            for name, entry in doc.get("topics", {}).items():
                configs = {str(k): str(v) for k, v in entry.get("configs", {}).items()}
                topic_id = str(uuid.UUID(entry["id"])) if entry.get("id") else ""
                topics[name] = Topic(name, int(entry["partitions"]), MappingProxyType(configs),
                                     bool(entry.get("internal", False)),
                                     LogConfig.from_props(configs, self.defaults), topic_id)
            deleting = tuple(str(n) for n in doc.get("deleting", ()))
        except (AttributeError, KeyError, TypeError, ValueError, InvalidConfigError) as e:
            raise damaged(self.path, "topic registry", e, REMEDY) from None
        self._topics = MappingProxyType(topics)
        self._deleting = deleting

    def reconcile(self, manager: LogManager) -> None:
        """Bring the registry and the directories in line after `manager.startup()`:
        finish interrupted deletions, adopt partition directories the registry does not
        know (a crash during create, or a data directory from before the registry),
        and create missing partition logs of registered topics."""
        self._manager = manager
        with self._lock:
            on_disk = manager.topics()
            still_deleting = []
            for name in self._deleting:
                if self._delete_logs(name, on_disk.get(name, ())):
                    log.info("topic_deletion_finished", topic=name)
                else:
                    still_deleting.append(name)
            topics = dict(self._topics)
            for name, partitions in on_disk.items():
                if name in self._deleting:
                    continue
                known = topics.get(name)
                count = max(partitions) + 1
                if known is None:
                    log.warning("topic_adopted", topic=name, partitions=count,
                                reason="partition directories not in the registry")
                    topics[name] = Topic(name, count, MappingProxyType({}), internal_topics.is_internal(name),
                                         self.defaults)
                elif count > known.partitions:
                    log.warning("topic_partitions_adopted", topic=name, partitions=count,
                                registered=known.partitions)
                    topics[name] = replace(known, partitions=count)
            for name, topic in list(topics.items()):
                if not topic.topic_id:
                    topics[name] = replace(topic, topic_id=new_topic_id())
            for topic in topics.values():
                if topic.internal:
                    continue  # created on first use
                for partition in range(topic.partitions):
                    if manager.get_log(topic.name, partition) is None:
                        try:
                            manager.get_or_create_log(topic.name, partition, topic.log_config)
                        except (OSError, StrataError) as e:
                            log.error("partition_create_failed", topic=topic.name, partition=partition,
                                      error=str(e), reason="created again at the next start")
            deleting = tuple(still_deleting)
            if topics != dict(self._topics) or deleting != self._deleting or not self.file_existed:
                try:
                    self._commit(topics, deleting, use_reserve=True)
                except KafkaStorageError as e:
                    # The directories are the truth this start found; the file catches up
                    # with the next change (or the next start reconciles again).
                    log.error("registry_write_failed", path=self.path, error=str(e))
                    self._topics, self._deleting = MappingProxyType(topics), deleting

    def owns(self, topic: str, partition: int) -> bool:
        """Whether a registered topic (not being deleted) has this partition
        (LogManager.startup's `known`: what it may set aside as stray)."""
        known = self._topics.get(topic)
        return known is not None and topic not in self._deleting and 0 <= partition < known.partitions

    def _delete_logs(self, name: str, partitions: Iterable[int]) -> bool:
        """Delete these partition logs of `name`; False (each failure logged) when
        some could not be, so that the name stays under "deleting"."""
        manager = self._require_manager()
        done = True
        for partition in partitions:
            try:
                manager.delete_log(name, partition)
            except (OSError, StrataError) as e:
                done = False
                log.error("partition_delete_failed", topic=name, partition=partition, error=str(e))
        return done

    def ensure_internal_topic(self, partitions: int, name: str = OFFSETS_TOPIC) -> Topic:
        """Register the internal topic `name` (`__consumer_offsets` or
        `__transaction_state`) unless it exists. Like Kafka, a later change of its
        partition count setting does not change an existing topic."""
        with self._lock:
            existing = self._topics.get(name)
            if existing is not None:
                if existing.partitions != partitions:
                    log.warning("internal_topic_partitions_fixed", topic=name, partitions=existing.partitions,
                                configured=partitions)
                if not existing.internal or not existing.topic_id:
                    existing = replace(existing, internal=True,
                                       topic_id=existing.topic_id or new_topic_id())
                    self._replace(existing)
                return existing
            configs = MappingProxyType(dict(INTERNAL_TOPIC_CONFIGS[name]))
            topic = Topic(name, partitions, configs, True,
                          LogConfig.from_props(configs, self.defaults), new_topic_id())
            self._replace(topic)
            return topic

    # ---- lookups (no lock) ------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def topic_id(self, name: str) -> str | None:
        topic = self._topics.get(name)
        return None if topic is None else topic.topic_id

    def by_id(self, topic_id: str) -> Topic | None:
        """The topic with this id (a str UUID), or None."""
        topics = self._topics
        cache = self._by_id
        if cache is None or cache[0] is not topics:
            cache = self._by_id = (topics, {t.topic_id: t for t in topics.values() if t.topic_id})
        return cache[1].get(topic_id)

    def partitions(self, name: str) -> int | None:
        topic = self._topics.get(name)
        return None if topic is None else topic.partitions

    def names(self, *, include_internal: bool = False) -> list[str]:
        return sorted(n for n, t in self._topics.items() if include_internal or not t.internal)

    def log_config(self, name: str) -> LogConfig:
        """What LogManager's `config_for` asks: the topic's effective config."""
        topic = self._topics.get(name)
        return self.defaults if topic is None else topic.log_config

    def require(self, name: str) -> Topic:
        validate_topic_name(name)
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return topic

    def describe(self, name: str) -> dict[str, str]:
        """Every effective setting of the topic (Kafka's DescribeConfigs)."""
        return self.require(name).log_config.to_props()

    # ---- changes (blocking: run in the executor) ---------------------------------------------

    def create(self, name: str, partitions: int, configs: Sequence[tuple[str, str | None]], *,
               validate_only: bool = False, admit: Callable[[int], None] | None = None) -> Topic | None:
        """Create a topic; with `validate_only` check everything and create nothing (None).
        `admit(partitions)` (raising StrataError to refuse) runs once every check has
        passed, validate_only included (the controller_mutation_rate quota counts
        validate-only creations, as Kafka's controller does)."""
        manager = self._require_manager()
        validate_topic_name(name)
        if partitions == -1:
            partitions = self.num_partitions
        if partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
        if partitions > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"number of partitions must be at most {MAX_PARTITIONS}")
        overrides: dict[str, str] = {}
        for key, value in _config_pairs(configs).items():
            if value is None:
                raise InvalidConfigError(f"null value not supported for topic config {key!r}")
            overrides[key] = value
        log_config = LogConfig.from_props(overrides, self.defaults)
        with self._lock:
            if name in self._topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            internal_topics.check_config(name, log_config)
            check_remote_storage_change(log_config, system_enabled=self.remote_storage_system_enable,
                                        was_enabled=False)
            self._finish_deletions()
            if name in self._deleting:
                raise TopicAlreadyExistsError(f"topic {name!r} is marked for deletion")
            for other in self._topics:
                if has_collision(name, other):
                    raise InvalidTopicError(
                        f"topic {name!r} collides with existing topic {other!r} ('.' and '_' collide)")
            if admit is not None:
                admit(partitions)
            if validate_only:
                return None
            created = []
            try:
                for partition in range(partitions):
                    manager.get_or_create_log(name, partition, log_config)
                    created.append(partition)
                topic = Topic(name, partitions, MappingProxyType(dict(overrides)), False, log_config,
                              new_topic_id())
                self._replace(topic)
            except BaseException as e:
                # Whole or nothing: every partition made so far goes (a partition
                # that failed half-way removed its own directory), the registry is
                # as it was, and a disk error (EMFILE, ENOSPC, ...) is KAFKA_STORAGE_ERROR.
                for partition in created:
                    try:
                        manager.delete_log(name, partition)
                    except Exception:  # keep the first error; reconcile cleans up later
                        log.exception("create_rollback_failed", topic=name, partition=partition)
                if isinstance(e, OSError):
                    raise KafkaStorageError(f"cannot create topic {name!r}: {e.strerror or e}") from e
                raise
        log.info("topic_created", topic=name, partitions=partitions, configs=dict(overrides))
        return topic

    def delete(self, name: str, *, admit: Callable[[int], None] | None = None) -> Topic:
        """Delete a topic; `admit(partitions)` (raising StrataError to refuse) runs once
        it is found deletable."""
        self._require_manager()
        with self._lock:
            topic = self.require(name)
            if topic.internal:
                raise InvalidRequestError(f"topic {name!r} is internal and cannot be deleted")
            if admit is not None:
                admit(topic.partitions)
            topics = dict(self._topics)
            del topics[name]
            self._commit(topics, self._deleting + (name,), use_reserve=True)  # the commit point
            if self._delete_logs(name, range(topic.partitions)):
                self._finish_deletions()
        log.info("topic_deleted", topic=name, partitions=topic.partitions)
        return topic

    def _finish_deletions(self) -> None:
        """Clear "deleting" of names whose logs are all gone (lock held); a failed
        write leaves them there for the next change or start."""
        if not self._deleting:
            return
        manager = self._require_manager()
        remaining = tuple(n for n in self._deleting if manager.has_partition_directories(n))
        if remaining == self._deleting:
            return
        try:
            self._commit(self._topics, remaining, use_reserve=True)
        except KafkaStorageError as e:
            log.warning("registry_write_failed", path=self.path, error=str(e),
                        reason="topics stay marked deleting until the next change or start")

    def alter(self, name: str, changes: Sequence[tuple[str, str | None]], *,
              validate_only: bool = False) -> Topic:
        """Change overrides (None removes one); `validate_only` checks and changes nothing."""
        manager = self._require_manager()
        with self._lock:
            topic = self.require(name)
            overrides = dict(topic.configs)
            for key, value in _config_pairs(changes).items():
                if value is None:
                    if key not in LogConfig().to_props():
                        raise InvalidConfigError(f"unknown topic config {key!r}")
                    overrides.pop(key, None)
                else:
                    overrides[key] = value
            log_config = LogConfig.from_props(overrides, self.defaults)
            internal_topics.check_config(name, log_config)
            check_remote_storage_change(log_config, system_enabled=self.remote_storage_system_enable,
                                        was_enabled=topic.log_config.remote_storage_enable)
            altered = replace(topic, configs=MappingProxyType(overrides), log_config=log_config)
            if validate_only:
                return altered
            self._replace(altered)
            for partition in range(topic.partitions):
                partition_log = manager.get_log(name, partition)
                if partition_log is not None:
                    partition_log.update_config(log_config)
        log.info("topic_altered", topic=name, configs=dict(changes))
        if (topic.log_config.remote_storage_enable and not log_config.remote_storage_enable
                and self.remote_storage_disabled is not None):
            self.remote_storage_disabled(altered)  # remote.log.delete.on.disable: its remote data goes
        return altered

    def set_defaults(self, defaults: LogConfig, *, validate_only: bool = False) -> None:
        """Rebuild every topic's LogConfig over new broker defaults (see the module docstring)."""
        with self._lock:
            rebuilt = {}
            for name, topic in self._topics.items():
                try:
                    log_config = LogConfig.from_props(topic.configs, defaults)
                    internal_topics.check_config(name, log_config)
                except InvalidConfigError as e:
                    raise InvalidConfigError(f"topic {name!r} would be invalid: {e}") from None
                if log_config != topic.log_config:
                    rebuilt[name] = replace(topic, log_config=log_config)
            if validate_only:
                return
            self.defaults = defaults
            self._publish({**self._topics, **rebuilt}, self._deleting)
            manager = self._manager
            for topic in rebuilt.values():
                for partition in range(topic.partitions):
                    partition_log = None if manager is None else manager.get_log(topic.name, partition)
                    if partition_log is not None:
                        partition_log.update_config(topic.log_config)
        log.info("topic_defaults_changed", topics=sorted(rebuilt))

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False,
                       check: Callable[[Topic], None] | None = None) -> Topic:
        """Grow `name` to `count` partitions (see the module docstring); with
        `validate_only` check everything and return the grown Topic unchanged on disk.
        `check(topic)` (raising StrataError) runs under the lock after the count checks,
        with the topic as it is then (the Kafka listener checks replica assignments)."""
        manager = self._require_manager()
        with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
            if topic.internal:
                raise InvalidRequestError(
                    f"the partition count of the internal topic {name!r} is fixed: a group's "
                    f"offsets (or a transactional id's state) live in the partition its id hashes to")
            current = topic.partitions
            if count == current:
                raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
            if count < current:
                raise InvalidPartitionsError(f"The topic {name} currently has {current} partition(s); "
                                             f"{count} would not be an increase.")
            if count > MAX_PARTITIONS:
                raise InvalidPartitionsError(f"number of partitions must be at most {MAX_PARTITIONS}")
            if check is not None:
                check(topic)
            grown = replace(topic, partitions=count)
            if validate_only:
                return grown
            topics = dict(self._topics)
            topics[name] = grown
            self._write(topics, self._deleting)  # the commit point
            created = []
            try:
                for partition in range(current, count):
                    manager.get_or_create_log(name, partition, topic.log_config)
                    created.append(partition)
            except BaseException as e:
                self._undo_growth(topic, grown, created)
                if isinstance(e, OSError):
                    raise KafkaStorageError(
                        f"cannot create partitions of topic {name!r}: {e.strerror or e}") from e
                raise
            self._publish(topics, self._deleting)
        log.info("topic_partitions_added", topic=name, partitions=count, previous=current)
        return grown

    def _undo_growth(self, topic: Topic, grown: Topic, created: list[int]) -> None:
        """A growth failed after its registry write: delete the logs it made and write
        the old count back (lock held). If that write fails, the grown count stands in
        file and memory (partitions without a log answer UNKNOWN_TOPIC_OR_PARTITION),
        and the next start creates the missing logs."""
        manager = self._require_manager()
        for partition in created:
            try:
                manager.delete_log(topic.name, partition)
            except Exception:  # keep the first error; reconcile cleans up later
                log.exception("grow_rollback_failed", topic=topic.name, partition=partition)
        try:
            self._commit(self._topics, self._deleting, use_reserve=True)
        except KafkaStorageError as e:
            topics = dict(self._topics)
            topics[grown.name] = grown
            log.error("grow_rollback_write_failed", topic=topic.name, error=str(e),
                      reason="the grown count stands; the next start creates the missing logs")
            self._publish(topics, self._deleting)

    # ---- internals ------------------------------------------------------------------------

    def _require_manager(self) -> LogManager:
        if self._manager is None:
            raise RuntimeError("TopicRegistry.reconcile() has not run")
        return self._manager

    def _replace(self, topic: Topic) -> None:
        """Write the registry with `topic` in it; only then publish it (lock held)."""
        topics = dict(self._topics)
        topics[topic.name] = topic
        self._commit(topics, self._deleting)

    def _commit(self, topics: Mapping[str, Topic], deleting: tuple[str, ...], *,
                use_reserve: bool = False) -> None:
        """Write the registry file holding `topics` and `deleting`, then (only when
        the write worked) make them the registry's state (lock held). `use_reserve`:
        a change that frees space may use the space reserve on a full disk."""
        self._write(topics, deleting, use_reserve=use_reserve)
        self._publish(topics, deleting)

    def _write(self, topics: Mapping[str, Topic], deleting: tuple[str, ...], *,
               use_reserve: bool = False) -> None:
        """Write the registry file holding `topics` and `deleting` (lock held);
        KafkaStorageError when it cannot be written."""
        doc = {"version": FORMAT_VERSION,
               "topics": {name: topics[name].to_json() for name in sorted(topics)},
               "deleting": list(deleting)}
        manager = self._manager
        write_document(self.path, "topic registry", doc,
                       reserve=manager.space_reserve if use_reserve and manager is not None else None)

    def _publish(self, topics: Mapping[str, Topic], deleting: tuple[str, ...]) -> None:
        """Make `topics` and `deleting` the registry's state (lock held)."""
        self._topics = MappingProxyType(dict(topics))
        self._deleting = tuple(deleting)


def _config_pairs(pairs: Iterable[tuple[str, str | None]]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidRequestError(f"duplicate config key {key!r}")
        out[key] = value
    return out
