"""Per-group configs (Kafka 4.0's GROUP config resource, resource type 32).

Keys (Kafka's GroupConfig), each an int with its default and bounds from the
broker's group.consumer.* settings:

    consumer.session.timeout.ms     default group.consumer.session.timeout.ms,
                                    within group.consumer.{min,max}.session.timeout.ms
    consumer.heartbeat.interval.ms  default group.consumer.heartbeat.interval.ms,
                                    within group.consumer.{min,max}.heartbeat.interval.ms

and the session timeout must stay above the heartbeat interval; and the share-group
keys (broker/share/config.py: share.auto.offset.reset, share.isolation.level,
share.record.lock.duration.ms, share.delivery.count.limit, share.session.timeout.ms,
share.heartbeat.interval.ms, share.partition.max.record.locks) with their defaults
and bounds from the broker's group.share.* settings. Any group name may carry
configs, whether or not the group exists (as in Kafka).

Stored in `<data-dir>/group-configs.json`, replaced whole (write-temp, fsync,
rename: broker/state/json_files.py `write_document`):

    {"version": 1, "groups": {"my-group": {"consumer.session.timeout.ms": "50000"}}}

Contract:
- `GroupConfigs.open(data_dir, broker_config)` (blocking) reads the file, or starts
  empty when there is none; an unreadable file is InvalidConfigError.
- `describe(group)`: [(name, value, overridden)] of every key, in name order.
- `effective(group)`: {name: int}, the values a group coordinator applies.
- `alter(group, changes, replace=False, validate_only=False)` (blocking): `changes`
  are (name, value or None = back to the default); `replace` drops the overrides
  not listed (legacy AlterConfigs). The result is validated whole (unknown name,
  bad number, bounds: InvalidConfigError, Kafka's INVALID_CONFIG) and written
  before memory changes: a failure changes nothing (a failed write is
  KafkaStorageError).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.state.json_files import read_string_maps, write_document
from kafka_format.errors import InvalidConfigError, InvalidRequestError

from ..share import config as share_config
from ..share.errors import ShareError

CONFIG_FILE = "group-configs.json"
REMEDY = ("restore it from a backup, or move it away to start with the broker's defaults "
          "for every group (then set the overrides again)")
FORMAT_VERSION = 1
INT_MAX = 2**31 - 1
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True)
class GroupKey:
    name: str
    default_key: str  # the broker setting that gives the default
    min_key: str
    max_key: str


KEYS: tuple[GroupKey, ...] = (
    GroupKey(HEARTBEAT_INTERVAL, "group.consumer.heartbeat.interval.ms",
             "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    GroupKey(SESSION_TIMEOUT, "group.consumer.session.timeout.ms",
             "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
)
KEYS_BY_NAME = {k.name: k for k in KEYS}


def _parse_int(name: str, value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                 f"Not a number of type INT") from None
    if number > INT_MAX:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT")
    if number < 1:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Value must be at least 1")
    return number


class GroupConfigs:
    def __init__(self, path: str, broker: Mapping[str, Any], overrides: dict[str, dict[str, str]]):
        self.path = path
        self._broker = broker  # the broker settings: defaults and bounds
        self._overrides = overrides  # group -> {name: value as given}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, data_dir: str, broker: Mapping[str, Any]) -> GroupConfigs:
        """`broker`: the broker's settings by name (BrokerConfig.values)."""
        path = os.path.join(data_dir, CONFIG_FILE)
        groups = read_string_maps(path, FORMAT_VERSION, "group configs", REMEDY, "groups")
        return cls(path, broker, groups)

    # ---- reading ----

    def _default(self, key: GroupKey) -> int:
        return int(self._broker[key.default_key])

    def describe(self, group: str) -> list[tuple[str, str, bool]]:
        _check_name(group)
        own = self._overrides.get(group, {})
        rows = [(k.name, str(_parse_int(k.name, own[k.name])) if k.name in own else str(self._default(k)),
                 k.name in own) for k in KEYS]
        rows += [(name, own[name] if name in own else self._share_default(name), name in own)
                 for name in share_config.GROUP_KEYS]
        return sorted(rows)

    def _share_default(self, name: str) -> str:
        """The broker's default of a share.* key (its group.share.* setting, else Kafka's)."""
        if name == share_config.AUTO_OFFSET_RESET:
            return share_config.LATEST
        if name == share_config.ISOLATION_LEVEL:
            return share_config.READ_UNCOMMITTED
        default_key = share_config.GROUP_DEFAULT_KEYS[name]
        return str(self._broker.get(default_key, share_config.BROKER_DEFAULTS[default_key]))

    def effective(self, group: str) -> dict[str, int]:
        own = self._overrides.get(group, {})
        return {k.name: _parse_int(k.name, own[k.name]) if k.name in own else self._default(k) for k in KEYS}

    def overrides(self, group: str) -> dict[str, str]:
        return dict(self._overrides.get(group, {}))

    # ---- changing ----

    def alter(self, group: str, changes: Iterable[tuple[str, str | None]], *, replace: bool = False,
              validate_only: bool = False) -> None:
        _check_name(group)
        with self._lock:
            merged = {} if replace else dict(self._overrides.get(group, {}))
            for name, value in changes:
                if name not in KEYS_BY_NAME and name not in share_config.GROUP_KEYS:
                    raise InvalidConfigError(f"Unknown group config name: {name}")
                if value is None:
                    merged.pop(name, None)
                elif name in KEYS_BY_NAME:
                    merged[name] = str(_parse_int(name, value))
                else:
                    merged[name] = value.strip()
            self._validate(merged)
            if validate_only:
                return
            groups = dict(self._overrides)
            if merged:
                groups[group] = merged
            else:
                groups.pop(group, None)
            if groups != self._overrides:
                doc = {"version": FORMAT_VERSION, "groups": groups}
                write_document(self.path, "group configs", doc, sort_keys=True)
            self._overrides = groups

    def _validate(self, merged: Mapping[str, str]) -> None:
        """Kafka's GroupConfig.validateValues over the merged values."""
        values = {k.name: int(merged[k.name]) if k.name in merged else self._default(k) for k in KEYS}
        for k in KEYS:
            if values[k.name] < self._broker[k.min_key]:
                raise InvalidConfigError(f"{k.name} must be greater than or equal to {k.min_key}")
            if values[k.name] > self._broker[k.max_key]:
                raise InvalidConfigError(f"{k.name} must be less than or equal to {k.max_key}")
        if values[SESSION_TIMEOUT] <= values[HEARTBEAT_INTERVAL]:
            raise InvalidConfigError(f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}")
        try:
            share_config.validate(self._broker, {k: v for k, v in merged.items() if k in share_config.GROUP_KEYS})
        except ShareError as e:
            raise InvalidConfigError(e.message) from None


def _check_name(group: str) -> None:
    if not group:
        raise InvalidRequestError("Group name must not be empty")
