"""Dynamic broker configs: Kafka's runtime-changeable broker keys, and the topic defaults they set.

`DynamicBrokerConfigs` keeps what AlterConfigs / IncrementalAlterConfigs set on a BROKER
resource ("0" this broker, "" the cluster default) in `<data-dir>/broker-configs.json`
(written through broker/state/json_files.py `write_document`): Kafka's DynamicLogConfig
keys, which are the topic defaults and apply at once, and the dynamic keys Strata does not
read, kept without effect; any other key is refused. It holds the one rule of precedence
for topic defaults (`log_defaults`, `log_source`) that both protocols use. The rules are in
broker/SERVER.md, "Configuration" (dynamic broker configs).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from broker.config.keys import ALL_KEYS, is_secret
from broker.state.json_files import read_string_maps, write_document
from kafka_format.errors import InvalidConfigError, InvalidRequestError, StrataError
from storage.config import BROKER_NAMES, LogConfig, broker_log_defaults

log = structlog.get_logger("strata.broker_configs")

CONFIG_FILE = "broker-configs.json"
FORMAT_VERSION = 1
CLUSTER_DEFAULT = ""

# Kafka's dynamic broker keys (DynamicBrokerConfig.AllDynamicConfigs) that Strata takes without
# reading, with their ConfigDef types; "int>=1" and the like carry Kafka's lower bound.
NO_EFFECT: dict[str, str] = {
    # DynamicThreadPool
    "num.io.threads": "int>=1",
    "num.replica.fetchers": "int>=1",
    "num.recovery.threads.per.data.dir": "int>=1",
    "background.threads": "int>=1",
    # SocketServer
    "num.network.threads": "int>=1",
    # LogCleaner
    "log.cleaner.threads": "int>=0",
    "log.cleaner.io.max.bytes.per.second": "double",
    "log.cleaner.io.buffer.load.factor": "double",
    # metrics
    "metric.reporters": "list",
    # DynamicProducerStateManagerConfig
    "producer.id.expiration.ms": "int>=1",
    "transaction.partition.verification.enable": "boolean",
    # DynamicListenerConfig: SASL (per broker)
    "sasl.mechanism.inter.broker.protocol": "string",
    "sasl.kerberos.service.name": "string",
    "sasl.kerberos.kinit.cmd": "string",
    "sasl.kerberos.ticket.renew.window.factor": "double",
    "sasl.kerberos.ticket.renew.jitter": "double",
    "sasl.kerberos.min.time.before.relogin": "long",
    "sasl.kerberos.principal.to.local.rules": "list",
    "sasl.login.refresh.window.factor": "double",
    "sasl.login.refresh.window.jitter": "double",
    "sasl.login.refresh.min.period.seconds": "short",
    "sasl.login.refresh.buffer.seconds": "short",
}
# Kafka's DynamicLogConfig keys Strata implements: the first broker synonym of each topic config
# it has (broker name -> topic config name).
LOG_KEYS: dict[str, str] = {candidates[0][0]: topic_key for topic_key, candidates in BROKER_NAMES.items()}
# Kafka's defaults of the list-typed NO_EFFECT keys (what APPEND / SUBTRACT start from when the
# resource does not set the key; the LOG_KEYS' defaults are broker/config/keys.py's default_props).
LIST_DEFAULTS: dict[str, str] = {"metric.reporters": "", "sasl.kerberos.principal.to.local.rules": "DEFAULT"}
# Keys Kafka takes only for one broker, never at the cluster default (its PerBrokerConfigs).
PER_BROKER = frozenset(k for k in NO_EFFECT if k.startswith("sasl."))
INT_RANGES = {"short": (-(2**15), 2**15 - 1), "int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def dynamic_keys() -> frozenset[str]:
    """The keys this broker takes at runtime: NO_EFFECT less every key Strata reads, and LOG_KEYS."""
    return frozenset(k for k in NO_EFFECT if k not in ALL_KEYS) | frozenset(LOG_KEYS)


def _check_log_value(key: str, value: str) -> str:
    """A log.* default's value checked by its topic config's rule, as Kafka's
    DynamicLogConfig does (so log.retention.ms below -1 is refused here, though a static
    negative value means forever)."""
    topic_key = LOG_KEYS[key]
    try:
        config = LogConfig.from_props({topic_key: value})
    except InvalidConfigError as e:
        complaint = str(e).removeprefix(f"{topic_key}: ")
        raise InvalidRequestError(f"Invalid value {value} for configuration {key}: {complaint}") from None
    return config.to_props()[topic_key]


def _check_value(key: str, value: str) -> str:
    if key in LOG_KEYS:
        return _check_log_value(key, value)
    kind, _, low = NO_EFFECT[key].partition(">=")
    text = value.strip()
    if kind in INT_RANGES:
        try:
            number = int(text)
        except ValueError:
            raise InvalidRequestError(f"Invalid value {value} for configuration {key}: "
                                      f"Not a number of type {kind.upper()}") from None
        lowest, highest = INT_RANGES[kind]
        if not lowest <= number <= highest:
            raise InvalidRequestError(f"Invalid value {value} for configuration {key}: "
                                      f"Not a number of type {kind.upper()}")
        if low and number < int(low):
            raise InvalidRequestError(f"Invalid value {value} for configuration {key}: "
                                      f"Value must be at least {low}")
        return str(number)
    if kind == "double":
        try:
            float(text)
        except ValueError:
            raise InvalidRequestError(f"Invalid value {value} for configuration {key}: "
                                      f"Not a number of type DOUBLE") from None
        return text
    if kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise InvalidRequestError(f"Invalid value {value} for configuration {key}: "
                                      f"Expected value to be either true or false")
        return text.lower()
    return value

REMEDY = ("restore it from a backup, or move it away to start with no dynamic broker configs "
          "(set them again with AlterConfigs)")


SOURCES = ("dynamic_broker", "dynamic_default", "static")
Layer = tuple[Mapping[str, str], str]  # settings by name, and their source


def synonym_names(name: str) -> list[str]:
    """A broker key's synonyms in Kafka's order (its brokerConfigSynonyms): the names
    one topic config's broker default goes by, e.g. log.retention.ms, .minutes, .hours."""
    for candidates in BROKER_NAMES.values():
        names = [candidate for candidate, _unit in candidates]
        if name in names:
            return names
    return [name]


def config_synonyms(name: str, layers: Iterable[Layer]) -> list[tuple[str, str, str]]:
    """Kafka's ConfigHelper.configSynonyms: (synonym, value, source) of every synonym of
    `name` set in each layer, layers highest first and in synonym order within a layer,
    from `name`'s own first entry on (a later synonym does not list an earlier one)."""
    names = synonym_names(name)
    found = [(synonym, layer[synonym], source) for layer, source in layers for synonym in names
             if synonym in layer]
    first = next((i for i, entry in enumerate(found) if entry[0] == name), len(found))
    return found[first:]


class DynamicBrokerConfigs:
    def __init__(self, path: str, node_id: int, brokers: dict[str, dict[str, str]],
                 static_log_props: Mapping[str, Any] | None = None,
                 default_props: Mapping[str, Any] | None = None):
        self.path = path
        self.node_id = node_id
        self._brokers = brokers  # "0" or "" -> {key: value}
        self._static = {k: str(v) for k, v in (static_log_props or {}).items()}
        self._kafka_defaults = {k: str(v) for k, v in (default_props or {}).items()}
        self._lock = threading.Lock()
        self._defaults = self._log_defaults_of(brokers)

    @classmethod
    def open(cls, data_dir: str, node_id: int, static_log_props: Mapping[str, Any] | None = None,
             default_props: Mapping[str, Any] | None = None) -> DynamicBrokerConfigs:
        """`static_log_props`: the log.* settings the broker's configuration gives;
        `default_props`: Kafka's defaults by name (described as DEFAULT_CONFIG)."""
        path = os.path.join(data_dir, CONFIG_FILE)
        brokers = read_string_maps(path, FORMAT_VERSION, "dynamic broker configs", REMEDY, "brokers")
        try:
            return cls(path, node_id, brokers, static_log_props, default_props)
        except StrataError as e:
            raise InvalidConfigError(f"{path}: {e} (change it with AlterConfigs on the broker, "
                                     f"or fix the static setting)") from None

    # ---- the topic defaults: the one rule of precedence -----------------------------------------

    def _layers(self, brokers: Mapping[str, Mapping[str, str]]) -> tuple[Mapping[str, str], ...]:
        """The log.* settings by source, highest first (SOURCES' order)."""
        own = brokers.get(str(self.node_id), {})
        default = brokers.get(CLUSTER_DEFAULT, {})
        return ({k: v for k, v in own.items() if k in LOG_KEYS},
                {k: v for k, v in default.items() if k in LOG_KEYS}, self._static)

    def _log_defaults_of(self, brokers: Mapping[str, Mapping[str, str]]) -> LogConfig:
        merged: dict[str, str] = {}
        for layer in reversed(self._layers(brokers)):
            merged.update(layer)
        try:
            return broker_log_defaults(merged)
        except InvalidConfigError as e:
            raise InvalidRequestError(str(e)) from None

    def log_defaults(self) -> LogConfig:
        return self._defaults

    def dynamic_layers(self, *, per_broker: bool = True) -> list[Layer]:
        """The dynamic settings by source, highest first: this broker's (unless
        `per_broker` is False: describing the cluster default), then the cluster default's."""
        own = self._brokers.get(str(self.node_id), {}) if per_broker else {}
        return [(own, "dynamic_broker"), (self._brokers.get(CLUSTER_DEFAULT, {}), "dynamic_default")]

    def log_synonyms(self, topic_key: str) -> list[tuple[str, str, str]]:
        """The synonyms of a topic config's broker default (Kafka's topic DescribeConfigs:
        its first broker name's config_synonyms, Kafka's defaults last as "default")."""
        candidates = BROKER_NAMES.get(topic_key)
        if not candidates:
            return []
        layers = [*self.dynamic_layers(), (self._static, "static"), (self._kafka_defaults, "default")]
        return config_synonyms(candidates[0][0], layers)

    def log_source(self, topic_key: str) -> str:
        synonyms = self.log_synonyms(topic_key)
        return synonyms[0][2] if synonyms else "default"

    def _check_name(self, name: str) -> None:
        if name == CLUSTER_DEFAULT:
            return
        try:
            node = int(name)
        except ValueError:
            raise InvalidRequestError(f"Node id must be an integer, but it is: {name}") from None
        if node != self.node_id:
            raise InvalidRequestError(f"Unexpected broker id, expected {self.node_id}, but received {name}")

    def overrides(self, name: str) -> dict[str, str]:
        """Broker `name`'s own overrides ("": the cluster default's)."""
        self._check_name(name)
        return dict(self._brokers.get(name, {}))

    def list_start(self, name: str, key: str) -> str | None:
        """What APPEND / SUBTRACT of `key` on resource `name` start from: the resource's own
        value, else Kafka's default (None: the key has none)."""
        self._check_name(name)
        own = self._brokers.get(name, {}).get(key)
        if own is not None:
            return own
        return self._kafka_defaults.get(key, LIST_DEFAULTS.get(key))

    def alter(self, name: str, changes: Iterable[tuple[str, str | None]], *, replace: bool = False,
              validate_only: bool = False,
              apply: Callable[[LogConfig, bool], None] | None = None) -> None:
        self._check_name(name)
        changes = list(changes)
        allowed = dynamic_keys()
        refused = sorted(k for k, _ in changes if k not in allowed)
        if refused:
            read = [k for k in refused if k in ALL_KEYS]
            if read:
                raise InvalidRequestError(
                    f"Cannot update these configs dynamically: {', '.join(read)} (Strata reads them at "
                    f"start: server.properties, STRATA_* or --set, then restart)")
            raise InvalidRequestError(f"Cannot update these configs dynamically: {', '.join(refused)}")
        if name == CLUSTER_DEFAULT:
            per_broker = sorted(k for k, _ in changes if k in PER_BROKER)
            if per_broker:
                raise InvalidRequestError("Cannot update these configs at default cluster level, broker id "
                                          f"must be specified: {', '.join(per_broker)}")
        with self._lock:
            merged = {} if replace else dict(self._brokers.get(name, {}))
            for key, value in changes:
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = _check_value(key, value)
            brokers = dict(self._brokers)
            if merged:
                brokers[name] = merged
            else:
                brokers.pop(name, None)
            defaults = self._log_defaults_of(brokers)
            changed = defaults != self._defaults
            if changed and apply is not None:
                try:
                    apply(defaults, False)
                except InvalidConfigError as e:
                    raise InvalidRequestError(str(e)) from None
            if validate_only:
                return
            if brokers != self._brokers:
                doc = {"version": FORMAT_VERSION, "brokers": brokers}
                write_document(self.path, "dynamic broker configs", doc, sort_keys=True)
            previous = self._brokers.get(name, {})
            self._brokers, self._defaults = brokers, defaults
            if changed and apply is not None:
                apply(defaults, True)
        _log_changes(name, previous, merged)


def _log_changes(name: str, old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """One `broker_config_changed` event per key of resource `name` whose value changed."""
    resource = "cluster default" if name == CLUSTER_DEFAULT else f"broker {name}"
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if is_secret(key):
            before, after = (None if v is None else "[hidden]" for v in (before, after))
        log.info("broker_config_changed", resource=resource, key=key, old=before, new=after)
