"""Share-group settings: the group configs `share.*` (IncrementalAlterConfigs on
a GROUP resource) over the broker-level defaults `group.share.*`, as Kafka 4.2's
GroupConfig / ShareGroupConfig / GroupCoordinatorConfig.

    group config (broker default key, Kafka's default; bounds)
    share.session.timeout.ms          group.share.session.timeout.ms (45000;
                                      group.share.{min,max}.session.timeout.ms 45000, 60000)
    share.heartbeat.interval.ms       group.share.heartbeat.interval.ms (5000;
                                      group.share.{min,max}.heartbeat.interval.ms 5000, 15000)
    share.record.lock.duration.ms     group.share.record.lock.duration.ms (30000;
                                      group.share.{min,max}.record.lock.duration.ms 15000, 60000)
    share.delivery.count.limit        group.share.delivery.count.limit (5; 2..10)
    share.partition.max.record.locks  group.share.partition.max.record.locks (2000; 100..10000)
    share.auto.offset.reset           latest (earliest | latest | by_duration:<ISO-8601 duration>)
    share.isolation.level             read_uncommitted (read_committed | read_uncommitted)

`resolve(broker, group)` gives the effective ShareGroupSettings; a bad value
raises ShareError(INVALID_CONFIG) naming the key and the rule it breaks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import INVALID_CONFIG, ShareError

BROKER_DEFAULTS: dict[str, int] = {
    "group.share.session.timeout.ms": 45_000,
    "group.share.min.session.timeout.ms": 45_000,
    "group.share.max.session.timeout.ms": 60_000,
    "group.share.heartbeat.interval.ms": 5_000,
    "group.share.min.heartbeat.interval.ms": 5_000,
    "group.share.max.heartbeat.interval.ms": 15_000,
    "group.share.record.lock.duration.ms": 30_000,
    "group.share.min.record.lock.duration.ms": 15_000,
    "group.share.max.record.lock.duration.ms": 60_000,
    "group.share.delivery.count.limit": 5,
    "group.share.partition.max.record.locks": 2_000,
    "group.share.max.size": 200,
    "group.share.max.share.sessions": 2_000,
    "share.coordinator.snapshot.update.records.per.snapshot": 500,
}

SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
MAX_RECORD_LOCKS = "share.partition.max.record.locks"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"

# group config -> (broker default key, min key or fixed minimum, max key or fixed maximum)
_INT_KEYS: dict[str, tuple[str, str | int, str | int]] = {
    SESSION_TIMEOUT: ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
                      "group.share.max.session.timeout.ms"),
    HEARTBEAT_INTERVAL: ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
                         "group.share.max.heartbeat.interval.ms"),
    RECORD_LOCK_DURATION: ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
                           "group.share.max.record.lock.duration.ms"),
    DELIVERY_COUNT_LIMIT: ("group.share.delivery.count.limit", 2, 10),
    MAX_RECORD_LOCKS: ("group.share.partition.max.record.locks", 100, 10_000),
}
GROUP_KEYS = (*_INT_KEYS, AUTO_OFFSET_RESET, ISOLATION_LEVEL)
# share.* int key -> the group.share.* broker setting that is its default
GROUP_DEFAULT_KEYS = {key: default for key, (default, _, _) in _INT_KEYS.items()}

EARLIEST, LATEST, BY_DURATION = "earliest", "latest", "by_duration"
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"

# java.time.Duration.parse: PnDTnHnMn.nS, each part optional, a sign on the whole or on each part.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as java.time.Duration.parse reads it
    (`PT1H`, `P1DT2H30M`, `PT0.5S`); ValueError when it is not one."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or text.strip().upper().endswith("T") or not any(m.group(i) for i in range(2, 6)):
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as PT1H or P1DT2H")
    sign = -1 if m.group(1) == "-" else 1
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in range(2, 6))
    fraction = m.group(6) or ""
    frac_ms = int((fraction + "000")[:3]) if fraction else 0
    if seconds < 0 or (m.group(5) or "").startswith("-"):
        frac_ms = -frac_ms
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + frac_ms
    return sign * total


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """share.auto.offset.reset: `strategy` earliest, latest or by_duration (then `duration_ms`)."""

    strategy: str
    duration_ms: int = 0

    @classmethod
    def parse(cls, value: str) -> AutoOffsetReset:
        text = value.strip().lower()
        if text in (EARLIEST, LATEST):
            return cls(text)
        if text.startswith(BY_DURATION + ":"):
            try:
                ms = parse_duration_ms(value.strip()[len(BY_DURATION) + 1:])
            except ValueError as e:
                raise ShareError(INVALID_CONFIG, f"{AUTO_OFFSET_RESET}: {e}") from None
            if ms < 0:
                raise ShareError(INVALID_CONFIG, f"{AUTO_OFFSET_RESET}: the duration of {value!r} is negative")
            return cls(BY_DURATION, ms)
        raise ShareError(INVALID_CONFIG, f"{AUTO_OFFSET_RESET}: {value!r} is none of earliest, latest, "
                                         "by_duration:<ISO-8601 duration>")


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """The effective settings of one share group."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2_000
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset(LATEST)
    isolation_level: str = READ_UNCOMMITTED

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


def _broker_int(broker: Mapping[str, object], key: str) -> int:
    value = broker.get(key, BROKER_DEFAULTS[key])
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ShareError(INVALID_CONFIG, f"{key}: {value!r} is not an integer") from None


def _bound(broker: Mapping[str, object], bound: str | int) -> int:
    return bound if isinstance(bound, int) else _broker_int(broker, bound)


def validate(broker: Mapping[str, object], group: Mapping[str, str]) -> None:
    """Raise ShareError(INVALID_CONFIG) for an unknown share.* key or a value out of its bounds."""
    for key, value in group.items():
        if key in _INT_KEYS:
            _, lo_key, hi_key = _INT_KEYS[key]
            try:
                number = int(value)
            except (TypeError, ValueError):
                raise ShareError(INVALID_CONFIG, f"{key}: {value!r} is not an integer") from None
            lo, hi = _bound(broker, lo_key), _bound(broker, hi_key)
            if not lo <= number <= hi:
                raise ShareError(INVALID_CONFIG, f"{key}: {number} is not within [{lo}, {hi}]"
                                 + (f" ({lo_key}, {hi_key})" if isinstance(lo_key, str) else ""))
        elif key == AUTO_OFFSET_RESET:
            AutoOffsetReset.parse(value)
        elif key == ISOLATION_LEVEL:
            if value.strip().lower() not in (READ_COMMITTED, READ_UNCOMMITTED):
                raise ShareError(INVALID_CONFIG, f"{key}: {value!r} is neither read_committed nor read_uncommitted")
        else:
            raise ShareError(INVALID_CONFIG, f"{key} is not a share group config (known: {', '.join(GROUP_KEYS)})")


def resolve(broker: Mapping[str, object] | None = None, group: Mapping[str, str] | None = None) -> ShareGroupSettings:
    """The settings of a group with configs `group` on a broker with settings `broker`
    (a group config overrides its group.share.* default; absent keys take Kafka's defaults)."""
    broker = broker or {}
    group = {k: v for k, v in (group or {}).items() if k.startswith("share.")}
    validate(broker, group)
    ints = {key: int(group[key]) if key in group else _broker_int(broker, default)
            for key, (default, _, _) in _INT_KEYS.items()}
    return ShareGroupSettings(
        session_timeout_ms=ints[SESSION_TIMEOUT],
        heartbeat_interval_ms=ints[HEARTBEAT_INTERVAL],
        record_lock_duration_ms=ints[RECORD_LOCK_DURATION],
        delivery_count_limit=ints[DELIVERY_COUNT_LIMIT],
        max_record_locks=ints[MAX_RECORD_LOCKS],
        auto_offset_reset=AutoOffsetReset.parse(group.get(AUTO_OFFSET_RESET, LATEST)),
        isolation_level=group.get(ISOLATION_LEVEL, READ_UNCOMMITTED).strip().lower(),
    )


__all__ = ["AUTO_OFFSET_RESET", "BROKER_DEFAULTS", "BY_DURATION", "DELIVERY_COUNT_LIMIT", "EARLIEST",
           "GROUP_DEFAULT_KEYS", "GROUP_KEYS", "HEARTBEAT_INTERVAL", "ISOLATION_LEVEL", "LATEST", "MAX_RECORD_LOCKS",
           "READ_COMMITTED", "READ_UNCOMMITTED", "RECORD_LOCK_DURATION", "SESSION_TIMEOUT", "AutoOffsetReset",
           "ShareGroupSettings", "parse_duration_ms", "resolve", "validate"]
