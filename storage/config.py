"""Topic-level log configuration, with Kafka's names, defaults and validation.

A `LogConfig` is immutable: altering a topic builds a new one and the log swaps
it in whole, so a reader never sees half of an update. Values arrive as strings
(from a properties file, the wire or the command line) or as Python values, and
are checked here once; the rest of storage trusts them.

Broker-level `log.*` names give the defaults for topics that do not override a
setting; `broker_log_defaults()` maps them onto topic-level names the way Kafka
does (for example `log.roll.ms` beats `log.roll.hours`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from kafka_format.codecs import Codec
from kafka_format.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CODEC_OF_TYPE = {"uncompressed": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY,
                 "lz4": Codec.LZ4, "zstd": Codec.ZSTD}


class Target(NamedTuple):
    """The codec compression.type stores every record batch with (storage/recompress.py)."""

    codec: Codec
    level: int | None  # None: the codec's default


@dataclass(frozen=True)
class ConfigKey:
    name: str  # Kafka's topic-level name
    attr: str  # the LogConfig attribute
    kind: str  # int | long | double | string | list | boolean
    default: Any
    check: Callable[[Any], str | None]  # returns a complaint, or None when valid
    doc: str


def _at_least(low: int | float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}"


def _between(low: float, high: float) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "must be between 1 and 9, or -1 (the codec's default, 6)"


def _no_check(v: Any) -> str | None:
    return None


def _policies(v: tuple[str, ...]) -> str | None:
    if not v:
        return "must name at least one of delete, compact"
    bad = [p for p in v if p not in CLEANUP_POLICIES]
    return f"unknown policy {bad[0]!r}; use delete, compact or both" if bad else None


KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("cleanup.policy", "cleanup_policy", "list", ("delete",), _policies,
              "delete, compact, or both"),
    ConfigKey("compression.gzip.level", "compression_gzip_level", "int", -1, _gzip_level,
              "gzip level used when compression.type is gzip (-1: 6)"),
    ConfigKey("compression.lz4.level", "compression_lz4_level", "int", 9, _between(1, 17),
              "lz4 level used when compression.type is lz4"),
    ConfigKey("compression.type", "compression_type", "string", "producer", _one_of(*COMPRESSION_TYPES),
              "producer keeps each batch's codec; uncompressed, gzip, snappy, lz4 or zstd "
              "recompress batches of another codec on append"),
    ConfigKey("compression.zstd.level", "compression_zstd_level", "int", 3, _between(-131072, 22),
              "zstd level used when compression.type is zstd"),
    ConfigKey("delete.retention.ms", "delete_retention_ms", "long", 86_400_000, _at_least(0),
              "how long tombstones survive compaction"),
    ConfigKey("file.delete.delay.ms", "file_delete_delay_ms", "long", 60_000, _at_least(0),
              "delay before a deleted segment's files are removed"),
    ConfigKey("flush.messages", "flush_messages", "long", LONG_MAX, _at_least(1),
              "fsync after this many messages"),
    ConfigKey("flush.ms", "flush_ms", "long", LONG_MAX, _at_least(0),
              "fsync when the last flush is older than this"),
    ConfigKey("index.interval.bytes", "index_interval_bytes", "int", 4096, _at_least(0),
              "bytes between offset index entries"),
    ConfigKey("local.retention.bytes", "local_retention_bytes", "long", -2, _at_least(-2),
              "largest size of the local part of a tiered partition log before copied segments go "
              "from the local disk (-2: retention.bytes, -1: no limit)"),
    ConfigKey("local.retention.ms", "local_retention_ms", "long", -2, _at_least(-2),
              "age after which copied segments of a tiered topic go from the local disk "
              "(-2: retention.ms, -1: keep forever)"),
    ConfigKey("max.compaction.lag.ms", "max_compaction_lag_ms", "long", LONG_MAX, _at_least(1),
              "a record stays uncompacted at most this long"),
    ConfigKey("max.message.bytes", "max_message_bytes", "int", 1_048_588, _at_least(0),
              "largest entry (record batch or classic message) accepted"),
    ConfigKey("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "long", LONG_MAX,
              _at_least(0), "largest amount a CreateTime record's timestamp may lie ahead of the broker's "
              "clock (Long.MAX: message.timestamp.difference.max.ms)"),
    ConfigKey("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "long", LONG_MAX,
              _at_least(0), "largest amount a CreateTime record's timestamp may lie behind the broker's "
              "clock (Long.MAX: message.timestamp.difference.max.ms)"),
    ConfigKey("message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", "long", LONG_MAX,
              _at_least(0), "deprecated: the window's both sides where before/after.max.ms are Long.MAX"),
    ConfigKey("message.timestamp.type", "message_timestamp_type", "string", "CreateTime",
              _one_of(*TIMESTAMP_TYPES), "CreateTime or LogAppendTime"),
    ConfigKey("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "double", 0.5,
              _between(0.0, 1.0), "dirty share of the log that makes it eligible for cleaning"),
    ConfigKey("min.compaction.lag.ms", "min_compaction_lag_ms", "long", 0, _at_least(0),
              "a record stays uncompacted at least this long"),
    ConfigKey("remote.log.copy.disable", "remote_log_copy_disable", "boolean", False, _no_check,
              "a tiered topic copies no more segments; what is in the remote store stays readable"),
    ConfigKey("remote.log.delete.on.disable", "remote_log_delete_on_disable", "boolean", False, _no_check,
              "turning remote.storage.enable off deletes the topic's remote data"),
    ConfigKey("remote.storage.enable", "remote_storage_enable", "boolean", False, _no_check,
              "tiered storage: rolled segments are copied to the remote store (needs the broker's "
              "remote.log.storage.system.enable)"),
    ConfigKey("retention.bytes", "retention_bytes", "long", -1, _at_least(-1),
              "largest size of the partition log before old segments go (-1: no limit)"),
    ConfigKey("retention.ms", "retention_ms", "long", 604_800_000, _at_least(-1),
              "age after which segments go (-1: keep forever)"),
    ConfigKey("segment.bytes", "segment_bytes", "int", 1_073_741_824, _at_least(14),
              "segment file size before a roll"),
    ConfigKey("segment.index.bytes", "segment_index_bytes", "int", 10_485_760, _at_least(12),
              "size each index file is preallocated to"),
    ConfigKey("segment.jitter.ms", "segment_jitter_ms", "long", 0, _at_least(0),
              "random jitter subtracted from segment.ms"),
    ConfigKey("segment.ms", "segment_ms", "long", 604_800_000, _at_least(1),
              "segment age before a roll"),
)

KEYS_BY_NAME: dict[str, ConfigKey] = {k.name: k for k in KEYS}


def _parse(key: ConfigKey, raw: Any) -> Any:
    """Turn a string or Python value into the key's type, or raise InvalidConfigError."""
    try:
        if key.kind in ("int", "long"):
            if isinstance(raw, (bool, float)):
                raise ValueError
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
            high = INT_MAX if key.kind == "int" else LONG_MAX
            if not -high - 1 <= value <= high:
                raise ValueError
            return value
        if key.kind == "double":
            return float(raw.strip()) if isinstance(raw, str) else float(raw)
        if key.kind == "list":
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            names = {str(i).strip() for i in items if str(i).strip()}
            # Kafka's order (delete before compact) so equal sets compare and print equal.
            return tuple(sorted(names, key=lambda n: (CLEANUP_POLICIES.index(n)
                                                      if n in CLEANUP_POLICIES else len(CLEANUP_POLICIES), n)))
        if key.kind == "boolean":
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError
            return text == "true"
        return str(raw).strip()
    except InvalidConfigError:
        raise
    except (ValueError, TypeError):
        raise InvalidConfigError(f"{key.name}: {raw!r} is not a valid {key.kind}") from None


def _format(key: ConfigKey, value: Any) -> str:
    if key.kind == "list":
        return ",".join(value)
    if key.kind == "boolean":
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class LogConfig:
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_type: str = "producer"
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_storage_enable: bool = False

    # ---- building ---------------------------------------------------------------

    @classmethod
    def from_props(cls, props: Mapping[str, Any], defaults: LogConfig | None = None) -> LogConfig:
        """A config with `props` (Kafka names) laid over `defaults`.

        Unknown names and bad values raise InvalidConfigError naming the key."""
        base = defaults or cls()
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            key = KEYS_BY_NAME.get(name)
            if key is None:
                raise InvalidConfigError(f"unknown topic config {name!r}")
            value = _parse(key, raw)
            complaint = key.check(value)
            if complaint:
                raise InvalidConfigError(f"{name}: {_format(key, value)} {complaint}")
            changes[key.attr] = value
        config = dataclasses.replace(base, **changes)
        _check_together(config)
        return config

    # ---- reading ----------------------------------------------------------------

    def to_props(self) -> dict[str, str]:
        """Every effective setting, Kafka names to strings, sorted by name."""
        return {k.name: _format(k, getattr(self, k.attr)) for k in KEYS}

    # The rules below are read on every append (storage/validator.py): each is worked
    # out once per config, on first use (a config never changes; altering a topic
    # builds a new one).

    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far behind the clock a CreateTime timestamp may be: before.max.ms,
        or the deprecated difference.max.ms while before.max.ms is Long.MAX (Kafka's
        LogConfig)."""
        before = self.message_timestamp_before_max_ms
        return before if before != LONG_MAX else self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far ahead of the clock a CreateTime timestamp may be (as before)."""
        after = self.message_timestamp_after_max_ms
        return after if after != LONG_MAX else self.message_timestamp_difference_max_ms

    @cached_property
    def timestamp_window(self) -> tuple[int, int] | None:
        """The CreateTime timestamp window (before, after) in ms around the broker's
        clock, or None when every timestamp is accepted (LogAppendTime, or both
        sides Long.MAX)."""
        before, after = self.timestamp_before_max_ms, self.timestamp_after_max_ms
        if self.log_append_time or before == after == LONG_MAX:
            return None
        return before, after

    @cached_property
    def compression_target(self) -> Target | None:
        """The codec and level every record batch is stored with, or None for
        `producer` (each batch keeps its own)."""
        codec = CODEC_OF_TYPE.get(self.compression_type)
        if codec is None:
            return None
        level = {Codec.GZIP: self.compression_gzip_level, Codec.LZ4: self.compression_lz4_level,
                 Codec.ZSTD: self.compression_zstd_level}.get(codec)
        return Target(codec, None if level == -1 else level)

    @property
    def max_index_entries_bytes(self) -> int:
        return self.segment_index_bytes

    @property
    def effective_local_retention_ms(self) -> int:
        """local.retention.ms, or retention.ms where it is -2 (Kafka's localRetentionMs)."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """local.retention.bytes, or retention.bytes where it is -2 (Kafka's localRetentionBytes)."""
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes


def _check_together(config: LogConfig) -> None:
    """Rules across keys (one key's own rules are in its ConfigKey)."""
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        raise InvalidConfigError("min.compaction.lag.ms must not be larger than max.compaction.lag.ms")
    if config.remote_storage_enable:
        _check_tiered(config)


def _invalid_value(name: str, value: int, message: str) -> InvalidConfigError:
    """Kafka's ConfigException(name, value, message) text."""
    return InvalidConfigError(f"Invalid value {value} for configuration {name}: {message}")


def _check_tiered(config: LogConfig) -> None:
    """Kafka's LogConfig rules for a topic with remote.storage.enable=true (its
    validateTopicLogConfigValues): no compaction, local retention within total
    retention, and with remote.log.copy.disable local retention equal to the total.
    Whether the broker allows tiering at all (remote.log.storage.system.enable) and
    turning tiering off are checked by `check_remote_storage_change`, which knows the broker
    and the topic's previous config."""
    if config.compact:
        raise InvalidConfigError("Remote log storage is unsupported for the compacted topics")
    for name, local, total_name, total, forever in (
            ("local.retention.bytes", config.local_retention_bytes, "retention.bytes", config.retention_bytes,
             config.retention_bytes <= -1),
            ("local.retention.ms", config.local_retention_ms, "retention.ms", config.retention_ms,
             config.retention_ms == -1)):
        if forever or local == -2:
            continue
        if local == -1:
            raise _invalid_value(name, local, f"Value must not be -1 as {total_name} value is set as {total}.")
        if local > total:
            raise _invalid_value(name, local, f"Value must not be more than {total_name} property value: {total}")
    if config.remote_log_copy_disable:
        for local_name, local, total_name, total in (
                ("local.retention.bytes", config.local_retention_bytes, "retention.bytes", config.retention_bytes),
                ("local.retention.ms", config.local_retention_ms, "retention.ms", config.retention_ms)):
            if local != -2 and local != total:
                raise InvalidConfigError(
                    f"When `remote.log.copy.disable` is set to true, the `{local_name}` and `{total_name}` must be "
                    "set to the identical value because there will be no more logs copied to the remote storage.")


def check_remote_storage_change(config: LogConfig, *, system_enabled: bool, was_enabled: bool) -> None:
    """The broker's part of Kafka's topic validation, for a create (was_enabled False) or
    an alter of a topic's config: remote.storage.enable needs the broker's
    remote.log.storage.system.enable, and turning it off needs
    remote.log.delete.on.disable. Raises InvalidConfigError with Kafka's texts."""
    if config.remote_storage_enable and not system_enabled:
        raise InvalidConfigError("Tiered Storage functionality is disabled in the broker. "
                                 "Topic cannot be configured with remote log storage.")
    if was_enabled and not config.remote_storage_enable and not config.remote_log_delete_on_disable:
        raise InvalidConfigError(
            "It is invalid to disable remote storage without deleting remote data. If you want to keep the "
            "remote data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. "
            "If you want to disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")


# Broker-level names that set a topic-level default. Where several broker names
# feed one topic name, the first present wins (Kafka: ms beats minutes beats hours).
BROKER_NAMES: dict[str, tuple[tuple[str, int], ...]] = {
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.difference.max.ms": (("log.message.timestamp.difference.max.ms", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                     ("log.retention.hours", 3_600_000)),
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
}


def _negative(raw: Any) -> bool:
    try:
        return int(str(raw).strip()) < 0
    except ValueError:
        return False  # left for the usual check, which names the key


def broker_name_defaults() -> dict[str, Any]:
    """Kafka's defaults of the broker-level names: each topic default's value, in its unit,
    on its last broker name; the earlier, finer names (log.retention.ms, log.roll.ms) have
    none, as in Kafka."""
    defaults: dict[str, Any] = {}
    for topic_name, candidates in BROKER_NAMES.items():
        name, unit = candidates[-1]
        value = KEYS_BY_NAME[topic_name].default
        defaults[name] = value if unit == 1 else value // unit
    return defaults


def broker_log_defaults(broker_props: Mapping[str, Any]) -> LogConfig:
    """The topic defaults that broker-level `log.*` settings give.

    Raises InvalidConfigError naming the broker setting when a value is bad."""
    props: dict[str, Any] = {}
    for topic_name, candidates in BROKER_NAMES.items():
        for broker_name, unit in candidates:
            if broker_name not in broker_props:
                continue
            raw = broker_props[broker_name]
            if unit != 1:
                try:
                    raw = int(str(raw).strip()) * unit
                except ValueError:
                    raise InvalidConfigError(f"{broker_name}: {raw!r} is not a valid long") from None
            if topic_name == "retention.ms" and _negative(raw):
                raw = -1  # Kafka's logRetentionTimeMillis: any negative broker value means forever
            props[topic_name] = raw
            break
    try:
        return LogConfig.from_props(props)
    except InvalidConfigError as e:
        # Say which broker name the user wrote, not the topic-level one.
        msg = str(e)
        for topic_name, candidates in BROKER_NAMES.items():
            if msg.startswith(topic_name + ":"):
                present = next(b for b, _ in candidates if b in broker_props)
                raise InvalidConfigError(present + msg[len(topic_name):]) from None
        raise
