"""Client quotas, as Kafka's ClientQuotaManager: one policy for both protocols.

`ClientQuotas` keeps the quotas of `<data-dir>/client-quotas.json` (user, client-id and
ip entities, Kafka's keys), changes and describes them (AlterClientQuotas,
DescribeClientQuotas), and measures clients against them: `throttle_ms`, `unrecord`
and `max_fetch_bytes` for the byte-rate and request-time quotas (through
broker/core/charges.py), `ip_quota` for connection_creation_rate, `mutation_quota`
for controller_mutation_rate (KIP-599). The policy (precedence, windowed rates,
throttle caps, token buckets) is in broker/SERVER.md, "Client quotas".
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.security.principal import ANONYMOUS
from broker.state.json_files import damaged, read_document, write_document
from kafka_format.errors import InvalidRequestError, StrataError

QUOTAS_FILE = "client-quotas.json"
REMEDY = ("restore it from a backup, or move it away to start with no client quotas "
          "(then set them again: strata quotas --alter)")
FORMAT_VERSION = 1
USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
CLIENT_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, "request_percentage", "controller_mutation_rate")
IP_KEYS = ("connection_creation_rate",)
WHOLE_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, "connection_creation_rate")  # Kafka's LONG/INT keys
REQUEST_PERCENTAGE = "request_percentage"
CONNECTION_CREATION_RATE = "connection_creation_rate"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
MUTATION = "controller_mutation"  # the kind counted in `throttled`
THROTTLING_QUOTA_EXCEEDED = 89
KIND_KEYS = {"produce": PRODUCER_BYTE_RATE, "fetch": CONSUMER_BYTE_RATE, "request": REQUEST_PERCENTAGE}
PERCENT_PER_SECOND = 100.0  # Kafka's NanosToPercentagePerSecond, per second of handler time
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
MAX_RATES = 10_000  # rates kept before idle ones are dropped

Entity = tuple[tuple[str, str | None], ...]


class ThrottlingQuotaExceededError(StrataError):
    """A strict controller mutation quota refused a topic (Kafka's THROTTLING_QUOTA_EXCEEDED)."""

    code = THROTTLING_QUOTA_EXCEEDED

    def __init__(self, throttle_ms: int):
        super().__init__("The throttling quota has been exceeded.")
        self.throttle_ms = throttle_ms


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """An entity from (type, name) pairs, checked as Kafka's AlterClientQuotas does."""
    entity = tuple(sorted(pairs))
    types = [t for t, _ in entity]
    if not entity:
        raise InvalidRequestError("Invalid empty client quota entity")
    if len(set(types)) != len(types):
        raise InvalidRequestError(f"Duplicate entity type in client quota entity: {', '.join(types)}")
    for entity_type, name in entity:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidRequestError(f"Unhandled client quota entity type: {entity_type}")
        if name == "" and entity_type != CLIENT_ID:
            raise InvalidRequestError(f"Empty {entity_type} not supported")
    if IP in types and len(types) > 1:
        raise InvalidRequestError("Invalid quota entity combination, IP entity should not be combined with "
                                  "User or ClientId")
    return entity


def _check_value(entity: Entity, key: str, value: float) -> None:
    allowed = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
    if key not in allowed:
        raise InvalidRequestError(f"Invalid configuration key {key}" if key not in CLIENT_KEYS + IP_KEYS
                                  else f"{key} is not a quota of {'/'.join(t for t, _ in entity)} entities")
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequestError(f"Invalid value {value} for configuration {key}: must be positive")
    if key in WHOLE_KEYS and value != int(value):
        raise InvalidRequestError(f"Invalid value {value} for configuration {key}: must be a whole number")


@dataclass
class WindowedRate:
    """Kafka's Rate over a SampledStat: per-sample sums, oldest purged."""

    window_ms: int
    samples: int
    starts: list[float] = field(default_factory=list)  # each sample's start, ms
    sums: list[float] = field(default_factory=list)

    def record(self, value: float, now_ms: float) -> None:
        if not self.starts or now_ms >= self.starts[-1] + self.window_ms:
            self.starts.append(now_ms)
            self.sums.append(0.0)
        self.sums[-1] += value
        horizon = now_ms - self.samples * self.window_ms
        while len(self.starts) > 1 and self.starts[0] + self.window_ms <= horizon:
            del self.starts[0], self.sums[0]
        if len(self.starts) > self.samples:
            del self.starts[0], self.sums[0]

    def window_size_ms(self, now_ms: float) -> float:
        elapsed = now_ms - self.starts[0] if self.starts else 0.0
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def per_second(self, now_ms: float) -> float:
        return sum(self.sums) / (self.window_size_ms(now_ms) / 1000.0)


@dataclass
class TokenBucket:
    """Kafka's TokenBucket stat: `tokens` refill at the quota per second up to the burst."""

    tokens: float
    updated_ms: float
    quota: float = 0.0  # the quota and burst of the last refill
    burst: float = 0.0

    def refill(self, quota: float, burst: float, now_ms: float) -> float:
        self.tokens = min(burst, self.tokens + quota * max(0.0, now_ms - self.updated_ms) / 1000.0)
        self.updated_ms = max(self.updated_ms, now_ms)
        self.quota, self.burst = quota, burst
        return self.tokens

    def full_at(self, now_ms: float) -> bool:
        """Whether the bucket would be full by `now_ms` (a new one is)."""
        return self.tokens + self.quota * (now_ms - self.updated_ms) / 1000.0 >= self.burst


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict/Permissive
    ControllerMutationQuota; see the module contract). `record` may be called from
    the executor."""

    def __init__(self, quotas: ClientQuotas | None, principal: str, client_id: str | None, strict: bool):
        self.quotas = quotas
        self.principal = principal
        self.client_id = client_id
        self.strict = strict
        self._throttle_ms = 0
        self._recorded_ms = 0.0

    def record(self, permits: int) -> None:
        """Count `permits` partitions; raises ThrottlingQuotaExceededError when strict
        and the client's bucket is below zero (then nothing is counted)."""
        if self.quotas is None:
            return
        now = time.monotonic() * 1000.0
        accepted, throttle = self.quotas.record_mutation(self.principal, self.client_id, permits,
                                                         strict=self.strict, now_ms=now)
        if throttle:
            self._throttle_ms, self._recorded_ms = throttle, now
        if not accepted:
            raise ThrottlingQuotaExceededError(throttle)

    def throttle_ms(self, now_ms: float | None = None) -> int:
        """The throttle time to answer: the last one recorded, less the time since."""
        if not self._throttle_ms:
            return 0
        now = time.monotonic() * 1000.0 if now_ms is None else now_ms
        return max(0, round(self._throttle_ms - (now - self._recorded_ms)))


class ClientQuotas:
    """The stored quotas and the rates they are checked against (see the module contract)."""

    def __init__(self, path: str | None, quotas: dict[Entity, dict[str, float]], *,
                 window_samples: int = 11, window_seconds: int = 1,
                 mutation_window_samples: int = 11, mutation_window_seconds: int = 1):
        self.path = path
        self._quotas = quotas
        self._lock = threading.Lock()
        self.window_samples = window_samples
        self.window_ms = window_seconds * 1000
        self._rates: dict[tuple[str, str, str], WindowedRate] = {}
        self.request_quotas = _has_key(quotas, REQUEST_PERCENTAGE)
        self.active = bool(quotas)  # whether any quota is set (else nothing is counted)
        self.mutation_burst_seconds = mutation_window_samples * mutation_window_seconds
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._buckets_lock = threading.Lock()
        self.throttled = {kind: 0 for kind in (*KIND_KEYS, MUTATION)}  # responses given a throttle time
        self.throttle_ms_total = {kind: 0 for kind in (*KIND_KEYS, MUTATION)}

    @classmethod
    def open(cls, data_dir: str, *, window_samples: int = 11, window_seconds: int = 1,
             mutation_window_samples: int = 11, mutation_window_seconds: int = 1) -> ClientQuotas:
        path = os.path.join(data_dir, QUOTAS_FILE)
        doc = read_document(path, FORMAT_VERSION, "client quotas", REMEDY)
        quotas: dict[Entity, dict[str, float]] = {}
        try:
            for item in (doc or {}).get("quotas", []):
                entity = tuple(sorted((str(e["type"]), None if e["name"] is None else str(e["name"]))
                                      for e in item["entity"]))
                quotas[entity] = {str(k): float(v) for k, v in item["values"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise damaged(path, "client quotas", e, REMEDY) from None
        return cls(path, quotas, window_samples=window_samples, window_seconds=window_seconds,
                   mutation_window_samples=mutation_window_samples,
                   mutation_window_seconds=mutation_window_seconds)

    # ---- AlterClientQuotas / DescribeClientQuotas ----

    def check(self, entity: Entity, ops: Iterable[tuple[str, float | None]]) -> dict[str, float]:
        """The entity's quotas once `ops` ((key, value or None to remove)) apply; raises
        InvalidRequestError, changing nothing."""
        merged = dict(self._quotas.get(entity, {}))
        seen: set[str] = set()
        for key, value in ops:
            if key in seen:
                raise InvalidRequestError(f"Duplicate quota key {key} not updating quota for {entity}")
            seen.add(key)
            if value is None:
                if key not in CLIENT_KEYS + IP_KEYS:
                    raise InvalidRequestError(f"Invalid configuration key {key}")
                merged.pop(key, None)
            else:
                _check_value(entity, key, value)
                merged[key] = value
        return merged

    def alter(self, changes: dict[Entity, dict[str, float]], *, validate_only: bool = False) -> None:
        """Set each entity's quotas whole (an empty dict removes the entity), all at
        once: the file is replaced before they apply."""
        if validate_only or not changes:
            return
        with self._lock:
            quotas = dict(self._quotas)
            for entity, values in changes.items():
                if values:
                    quotas[entity] = dict(values)
                else:
                    quotas.pop(entity, None)
            if self.path is not None:
                doc = {"version": FORMAT_VERSION,
                       "quotas": [{"entity": [{"type": t, "name": n} for t, n in entity], "values": values}
                                  for entity, values in sorted(quotas.items(), key=lambda kv: repr(kv[0]))]}
                write_document(self.path, "client quotas", doc)
            self.request_quotas = _has_key(quotas, REQUEST_PERCENTAGE)
            self.active = bool(quotas)
            self._quotas = quotas  # one reference swap: readers see the old or the new whole

    def describe(self, components: Iterable[tuple[str, int, str | None]], strict: bool) -> list[tuple[Entity, dict]]:
        components = list(components)
        types = [t for t, _, _ in components]
        if len(set(types)) != len(types):
            raise InvalidRequestError("Duplicate entity type in filter")
        for entity_type, match_type, _ in components:
            if entity_type not in (USER, CLIENT_ID, IP):
                raise InvalidRequestError(f"Custom entity type {entity_type!r} not supported")
            if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise InvalidRequestError(f"Unknown match type {match_type}")
        out = []
        for entity, values in sorted(self._quotas.items(), key=lambda kv: repr(kv[0])):
            names = dict(entity)
            if strict and set(names) != set(types):
                continue
            if all(_matches(names, c) for c in components):
                out.append((entity, dict(values)))
        return out

    # ---- enforcement ----

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        """(quota, user tag, client-id tag) of the entity that sets `key` for this
        client, in Kafka's order of precedence, or None."""
        quotas = self._quotas
        if not quotas:
            return None
        for u, c in ((user, client_id), (user, None), (user, _ABSENT), (None, client_id), (None, None),
                     (None, _ABSENT), (_ABSENT, client_id), (_ABSENT, None)):
            entity: Entity = tuple(sorted((kind, name) for kind, name in ((CLIENT_ID, c), (USER, u))
                                          if not isinstance(name, _Absent)))
            value = quotas.get(entity, {}).get(key)
            if value is not None:
                return value, "" if u is _ABSENT else user, "" if c is _ABSENT else client_id
        return None

    def throttle_ms(self, kind: str, principal: str, client_id: str | None, amount: float,
                    now_ms: float | None = None) -> int:
        """Record `amount` (bytes; seconds of handler time for `request`) of a `kind`
        request and return the throttle time (ms) due."""
        found = self._rate_for(kind, principal, client_id, now_ms)
        if found is None:
            return 0
        quota, rate, now = found
        rate.record(amount * PERCENT_PER_SECOND if kind == "request" else amount, now)
        observed = rate.per_second(now)
        if observed <= quota:
            return 0
        throttle = round((observed - quota) / quota * rate.window_size_ms(now))
        cap = self.window_ms if kind == "request" else self.window_ms * self.window_samples
        throttle = min(throttle, cap)
        self.count_throttle(kind, throttle)
        return throttle

    def unrecord(self, kind: str, principal: str, client_id: str | None, amount: float,
                 now_ms: float | None = None) -> None:
        """Take back `amount` that `throttle_ms` recorded (a throttled Fetch answers no bytes)."""
        found = self._rate_for(kind, principal, client_id, now_ms)
        if found is not None:
            _, rate, now = found
            rate.record(-(amount * PERCENT_PER_SECOND if kind == "request" else amount), now)

    def max_fetch_bytes(self, principal: str, client_id: str | None) -> int | None:
        """The most one Fetch may answer under the client's consumer quota (Kafka's
        getMaxValueInQuotaWindow), None when none applies."""
        if not self._quotas:
            return None
        found = self.quota_for(CONSUMER_BYTE_RATE, _user_of(principal), client_id or "")
        if found is None:
            return None
        return int(found[0] * (self.window_samples - 1) * self.window_ms / 1000)

    def mutation_quota(self, principal: str, client_id: str | None, *, strict: bool) -> MutationQuota:
        """A request's controller mutation quota: strict for request versions that can
        answer THROTTLING_QUOTA_EXCEEDED, permissive for the others."""
        return MutationQuota(self, principal, client_id, strict)

    def record_mutation(self, principal: str, client_id: str | None, permits: float, *, strict: bool,
                        now_ms: float | None = None) -> tuple[bool, int]:
        """(accepted, throttle ms) of `permits` partitions created or deleted by the
        client: Kafka's StrictControllerMutationQuota (a bucket below zero refuses,
        with the time it needs to reach zero; else the permits are taken, no
        throttle) or PermissiveControllerMutationQuota (the permits are taken; the
        time the bucket then needs to reach zero, 0 when it is not below)."""
        if not self._quotas:
            return True, 0
        found = self.quota_for(CONTROLLER_MUTATION_RATE, _user_of(principal), client_id or "")
        if found is None:
            return True, 0
        quota, user_tag, client_tag = found
        burst = quota * self.mutation_burst_seconds
        now = time.monotonic() * 1000.0 if now_ms is None else now_ms
        with self._buckets_lock:
            bucket = self._buckets.get((user_tag, client_tag))
            if bucket is None:
                if len(self._buckets) >= MAX_RATES:
                    self._forget_full_buckets(now)
                bucket = self._buckets[(user_tag, client_tag)] = TokenBucket(burst, now)
            tokens = bucket.refill(quota, burst, now)
            if strict and tokens < 0:
                return False, round(-tokens / quota * 1000)
            bucket.tokens = min(burst, tokens - permits)
            if strict or bucket.tokens >= 0:
                return True, 0
            return True, round(-bucket.tokens / quota * 1000)

    def count_throttle(self, kind: str, throttle_ms: int) -> None:
        """Count a response a quota of `kind` gave `throttle_ms` (the metrics)."""
        self.throttled[kind] += 1
        self.throttle_ms_total[kind] += throttle_ms

    def _forget_full_buckets(self, now_ms: float) -> None:
        """Drop the buckets that have refilled whole: a new one starts full, so
        client ids that come and go do not pile up (lock held)."""
        for key, bucket in list(self._buckets.items()):
            if bucket.full_at(now_ms):
                del self._buckets[key]

    def ip_quota(self, ip: str) -> float | None:
        """The `connection_creation_rate` of an IP: its own entity's, else the default IP's."""
        quotas = self._quotas
        if not quotas:
            return None
        for name in (ip, None):
            value = quotas.get(((IP, name),), {}).get(CONNECTION_CREATION_RATE)
            if value is not None:
                return value
        return None

    def _rate_for(self, kind: str, principal: str, client_id: str | None,
                  now_ms: float | None) -> tuple[float, WindowedRate, float] | None:
        """(quota, rate, now) of the entity whose `kind` quota applies to the client, or None."""
        if not self._quotas:
            return None
        found = self.quota_for(KIND_KEYS[kind], _user_of(principal), client_id or "")
        if found is None:
            return None
        quota, user_tag, client_tag = found
        now = time.monotonic() * 1000.0 if now_ms is None else now_ms
        rate = self._rates.get((kind, user_tag, client_tag))
        if rate is None:
            if len(self._rates) >= MAX_RATES:
                self._forget_idle(now)
            rate = self._rates[(kind, user_tag, client_tag)] = WindowedRate(self.window_ms, self.window_samples)
        return quota, rate, now

    def _forget_idle(self, now_ms: float) -> None:
        """Drop the rates of clients with no sample left in the window (Kafka expires
        idle quota sensors), so client ids that come and go do not pile up."""
        span = self.window_ms * self.window_samples
        for key, rate in list(self._rates.items()):
            if not rate.starts or rate.starts[-1] + span <= now_ms:
                del self._rates[key]


def _user_of(principal: str) -> str:
    return principal.partition(":")[2] if principal.startswith("User:") else principal


def _has_key(quotas: dict[Entity, dict[str, float]], key: str) -> bool:
    return any(key in values for values in quotas.values())


class _Absent:
    """The entity type is not part of the entity (unlike None: its default)."""

    __slots__ = ()


_ABSENT = _Absent()


def _matches(names: dict[str, str | None], component: tuple[str, int, str | None]) -> bool:
    entity_type, match_type, match = component
    if entity_type not in names:
        return False
    name = names[entity_type]
    if match_type == MATCH_EXACT:
        return name == match and name is not None
    if match_type == MATCH_DEFAULT:
        return name is None
    return name is not None


__all__ = ["ANONYMOUS", "CLIENT_ID", "CONNECTION_CREATION_RATE", "CONTROLLER_MUTATION_RATE", "ClientQuotas", "Entity",
           "IP", "MUTATION", "MutationQuota", "THROTTLING_QUOTA_EXCEEDED", "ThrottlingQuotaExceededError",
           "TokenBucket", "USER", "WindowedRate", "entity_of"]
