"""Configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

Contract: topics' configs are dynamic (the topic registry persists them), groups'
configs live in GroupConfigs, the broker's are static (described; altering one is
INVALID_REQUEST naming server.properties) but for Kafka's dynamic keys that do nothing
on one node and the log.* topic defaults (broker/config/dynamic_broker_configs.py, which also
holds the rule of precedence a topic config's value and source follow; a changed
default is swapped into every topic by TopicRegistry.set_defaults). Each resource needs DESCRIBE_CONFIGS /
ALTER_CONFIGS on itself (a broker's or its loggers': on the cluster); a refused
or invalid resource is answered alone and changes nothing. DescribeConfigs describes
every key Kafka 4.0 describes for a topic and for broker "0" (broker/config/kafka_keys.py),
read-only unless Strata takes the key at runtime, passwords sensitive and null.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.config.dynamic_broker_configs import (
    LOG_KEYS,
    NO_EFFECT,
    DynamicBrokerConfigs,
    config_synonyms,
    dynamic_keys,
)
from broker.config.group_configs import GroupConfigs
from broker.config.kafka_keys import BROKER_KEYS as KAFKA_BROKER_KEYS
from broker.config.kafka_keys import ONE_NODE_VALUES, broker_key_type
from broker.config.kafka_keys import TOPIC_KEYS as KAFKA_TOPIC_KEYS
from broker.config.keys import KEYS_BY_NAME as BROKER_KEY_DEFS
from broker.config.keys import config_text, default_props
from kafka_format.errors import InvalidConfigError, InvalidRequestError, StrataError
from storage.config import BROKER_NAMES, LogConfig
from storage.config import KEYS as TOPIC_KEYS
from storage.config import KEYS_BY_NAME as TOPIC_KEY_DEFS

from ..security.authorizer import (
    ClusterAuthorizationError,
    GroupAuthorizationError,
    Op,
    Resource,
    TopicAuthorizationError,
)
from .allowed import allowed, allowed_cluster
from .codec import has_field, make, nested
from .core_api import CoreApiBase, E, error_code_of

# DescribeConfigs resource types and config sources (Kafka's ConfigResource.Type, ConfigSource)
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 32
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 4, 5, 8
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
                "password": 9}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
SOURCE_CODES = {"dynamic_broker": DYNAMIC_BROKER_CONFIG, "dynamic_default": DYNAMIC_DEFAULT_BROKER_CONFIG,
                "static": STATIC_BROKER_CONFIG, "default": DEFAULT_CONFIG}
TOPIC_KINDS = {k.name: k.kind for k in TOPIC_KEYS}
TOPIC_DEFAULTS = LogConfig().to_props()  # Kafka's topic defaults: what APPEND / SUBTRACT start from


def topic_config_source(broker_configs: DynamicBrokerConfigs | None, config, topic, key: str) -> int:
    """A topic config's ConfigSource: its override, else where the broker default comes from
    (dynamic per-broker, dynamic cluster default, static, Kafka's default)."""
    if key in topic.configs:
        return DYNAMIC_TOPIC_CONFIG
    if broker_configs is not None:
        return SOURCE_CODES[broker_configs.log_source(key)]
    if any(config.source(name) != "default" for name, _ in BROKER_NAMES.get(key, ())):
        return STATIC_BROKER_CONFIG
    return DEFAULT_CONFIG


def broker_key_kind(name: str) -> str:
    """A dynamic broker key's ConfigDef type (a log.* default: its topic config's)."""
    if name in LOG_KEYS:
        return TOPIC_KINDS[LOG_KEYS[name]]
    return NO_EFFECT[name].partition(">=")[0]


def describe_kind(name: str, settable: frozenset[str]) -> str:
    """A broker key's ConfigDef type as DescribeConfigs gives it: Kafka's, else Strata's own."""
    kafka_kind = broker_key_type(name)
    if kafka_kind is not None:
        return kafka_kind
    if name in settable:
        return broker_key_kind(name)
    key = BROKER_KEY_DEFS.get(name)
    return key.kind if key is not None else ""


def documentation(resource_type: int, name: str) -> str:
    """A config's documentation (DescribeConfigs' IncludeDocumentation): Strata's text of a key it
    reads, else what the key is to Strata."""
    if resource_type == TOPIC_RESOURCE:
        if name in TOPIC_KEY_DEFS:
            return TOPIC_KEY_DEFS[name].doc
        if name in KAFKA_TOPIC_KEYS:
            return "Kafka's topic config, described with its value on one node; Strata does not implement it"
        return ""
    if resource_type == GROUP_RESOURCE:
        return "group config of Kafka's GroupConfig (broker/config/group_configs.py)"
    key = BROKER_KEY_DEFS.get(name)
    if key is not None:
        return key.doc
    for topic_key, candidates in BROKER_NAMES.items():
        if name in (candidate for candidate, _unit in candidates):
            return f"broker default of the topic config {topic_key}"
    if name in NO_EFFECT:
        return "Kafka's dynamic broker config: taken at runtime and kept; it changes nothing on one node"
    return "Kafka's broker config, described with its value on one node; Strata does not read it"


def listed_values(configs) -> dict[str, str]:
    """A legacy AlterConfigs resource's configs by key: a key named twice or without a
    value is INVALID_REQUEST."""
    listed: dict[str, str] = {}
    for c in configs:
        if c.name in listed:
            raise InvalidRequestError(f"duplicate config key {c.name!r}")
        if c.value is None:
            raise InvalidRequestError(f"null value not supported for {c.name!r}")
        listed[c.name] = c.value
    return listed


def incremental_changes(configs, kind: Callable[[str], str | None],
                        current: Callable[[str], str | None]) -> list[tuple[str, str | None]]:
    """One IncrementalAlterConfigs resource's operations as (key, new value, or None to
    delete), as Kafka's ConfigurationControlManager reads them: SET needs a value, DELETE
    drops the key, APPEND / SUBTRACT add or remove comma-separated items of a list key's
    `current` value: the resource's own value, else Kafka's default of the key (getParts;
    neither a broker default nor the cluster default's value), so APPEND of `compact` to a
    `cleanup.policy` the resource does not set gives `delete,compact`. `kind(key)` is the
    key's ConfigDef type ("list" allows APPEND / SUBTRACT), or None for a key its owner
    refuses by name (its value passes as given).
    A key named twice or an unknown operation is INVALID_REQUEST; APPEND / SUBTRACT on
    a key that is not a list INVALID_CONFIG."""
    changes: dict[str, str | None] = {}
    for c in configs:
        if c.name in changes:
            raise InvalidRequestError(f"duplicate config key {c.name!r}")
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise InvalidRequestError(f"null value not supported for {c.name!r}")
            changes[c.name] = c.value
        elif op == DELETE:
            changes[c.name] = None
        elif op in (APPEND, SUBTRACT):
            key_kind = kind(c.name)
            if key_kind is None:
                changes[c.name] = c.value
                continue
            if key_kind != "list":
                verb = "append" if op == APPEND else "subtract"
                raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {c.name}")
            items = [v for v in (current(c.name) or "").split(",") if v]
            given = [v for v in (c.value or "").split(",") if v]
            items = (items + [v for v in given if v not in items] if op == APPEND
                     else [v for v in items if v not in given])
            changes[c.name] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {op}")
    return list(changes.items())


class ConfigsApi(CoreApiBase):
    """DescribeConfigs, AlterConfigs, IncrementalAlterConfigs."""

    async def describe_configs(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "results")
        EntryR = nested(ResultR, "configs")
        SynonymR = nested(EntryR, "synonyms") if has_field(EntryR, "synonyms") else None
        synonyms = getattr(req, "include_synonyms", False)
        documented = getattr(req, "include_documentation", False)
        results = []
        for resource in req.resources:
            keys = resource.configuration_keys
            entries: list[tuple[str, str | None, int, bool, str]] = []  # name, value, source, ro, kind
            # name -> [(synonym, value, source)] (Kafka's synonyms; a key not listed: just itself)
            more: dict[str, list[tuple[str, str | None, int]]] = {}
            code: int = E.none
            message: str | None = None
            try:
                _authorize_config(ctx, Op.DESCRIBE_CONFIGS, resource)
                if resource.resource_type == TOPIC_RESOURCE:
                    entries.extend(self._topic_entries(resource.resource_name, more))
                elif resource.resource_type == BROKER_RESOURCE:
                    entries.extend(self._broker_entries(resource.resource_name, more))
                elif resource.resource_type == BROKER_LOGGER_RESOURCE:
                    pass
                elif resource.resource_type == GROUP_RESOURCE:
                    for k, v, overridden in self._group_configs().describe(resource.resource_name):
                        entries.append((k, v, GROUP_CONFIG if overridden else DEFAULT_CONFIG, False, "int"))
                else:
                    raise InvalidRequestError(f"unsupported resource type {resource.resource_type}")
            except StrataError as e:
                code, message, entries = error_code_of(e), str(e), []
            if keys:  # null or empty: every config (Kafka's ConfigHelper)
                wanted = set(keys)
                entries = [e for e in entries if e[0] in wanted]
            configs = tuple(
                make(EntryR, name=n, value=None if kind == "password" else v, read_only=ro, config_source=src,
                     is_default=src == DEFAULT_CONFIG, is_sensitive=kind == "password",
                     config_type=CONFIG_TYPES.get(kind, 0),
                     documentation=documentation(resource.resource_type, n) if documented else None,
                     synonyms=tuple(make(SynonymR, name=sn, value=None if kind == "password" else sv, source=ss)
                                    for sn, sv, ss in more.get(n, [(n, v, src)]))
                     if synonyms and SynonymR is not None else ())
                for n, v, src, ro, kind in entries)
            results.append(make(ResultR, error_code=code, error_message=message,
                                resource_type=resource.resource_type,
                                resource_name=resource.resource_name, configs=configs))
        return make(R, throttle_time=0, results=tuple(results))

    def _static_and_defaults(self) -> tuple[dict[str, str], dict[str, str]]:
        """The broker's static settings (Strata's keys given at start, and the Kafka keys it
        accepts without reading them) and the defaults: Strata's, then the value a Kafka key
        has on one node, then Kafka's default."""
        static = {k: config_text(v) for k, v in self.config.values.items()
                  if v is not None and self.config.source(k) != "default"}
        static.update({k: v for k, v in self.config.accepted.items() if k not in static})
        defaults = {k: default for k, (_kind, default) in KAFKA_BROKER_KEYS.items() if default is not None}
        defaults.update(ONE_NODE_VALUES)
        defaults.update(default_props())
        return static, defaults

    def _topic_entries(self, name: str, more: dict[str, list[tuple[str, str | None, int]]]) -> list[tuple]:
        """Every config of Kafka's LogConfig for topic `name`: the ones Strata implements with their
        value and source (the topic's override, else the broker default by its synonyms); the
        others, read-only, with the value their broker key gives (static, else its default)."""
        topic = self.registry.require(name)
        dynamic = self.apis.broker_configs
        entries: list[tuple] = []
        for k, v in topic.log_config.to_props().items():
            entries.append((k, v, topic_config_source(dynamic, self.config, topic, k), False, TOPIC_KINDS.get(k, "")))
            layers = [(k, v, DYNAMIC_TOPIC_CONFIG)] if k in topic.configs else []
            layers += [(b, bv, SOURCE_CODES[src])
                       for b, bv, src in (dynamic.log_synonyms(k) if dynamic is not None else ())]
            more[k] = layers  # none: Kafka's empty list (e.g. retention.ms by log.retention.hours)
        static, defaults = self._static_and_defaults()
        for k, (kind, default, broker_name) in KAFKA_TOPIC_KEYS.items():
            found = config_synonyms(broker_name, [(static, "static"), (defaults, "default")]) if broker_name else []
            more[k] = [(b, bv, SOURCE_CODES[src]) for b, bv, src in found]
            value, source = (found[0][1], SOURCE_CODES[found[0][2]]) if found else (default, DEFAULT_CONFIG)
            entries.append((k, value, source, True, kind))
        return sorted(entries)

    def _broker_entries(self, name: str, more: dict[str, list[tuple[str, str | None, int]]]) -> list[tuple]:
        """The broker's configs (`name` "": the cluster defaults set at runtime) as DescribeConfigs
        entries, each valued and sourced by the head of its synonyms, as Kafka's
        ConfigHelper: dynamic (this broker's, the default's), static, Kafka's defaults.
        Broker "0" describes every key of Kafka's broker ConfigDef too (one without a value:
        null). Fills `more` with every key's synonyms."""
        if name not in ("", str(self.apis.node_id)):
            raise InvalidRequestError(f"unexpected broker id {name!r}")
        static, defaults = self._static_and_defaults()
        dynamic = self.apis.broker_configs
        layers = [*(dynamic.dynamic_layers(per_broker=name != "") if dynamic is not None else ()),
                  (static, "static"), (defaults, "default")]
        settable = dynamic_keys()
        entries = []
        # "" (the cluster default): only what is set there, as Kafka's ConfigHelper
        described = set(dynamic.overrides("")) if name == "" and dynamic is not None else set(KAFKA_BROKER_KEYS).union(
            *(layer for layer, _source in layers))
        for k in sorted(described):
            found = config_synonyms(k, layers)
            more[k] = [(synonym, value, SOURCE_CODES[source]) for synonym, value, source in found]
            value, source = (found[0][1], SOURCE_CODES[found[0][2]]) if found else (None, DEFAULT_CONFIG)
            if k == "native.advertised.listeners" and not value and name:
                value = self.apis.native_bound  # unset: the native listeners as bound
            entries.append((k, value, source, k not in settable, describe_kind(k, settable)))
        return entries

    async def alter_configs(self, req, ctx):
        """Legacy AlterConfigs: the listed configs replace all of a topic's overrides."""
        async def alter_topic(resource) -> None:
            topic = self.registry.require(resource.resource_name)
            listed = listed_values(resource.configs)
            changes = list(listed.items()) + [(k, None) for k in topic.configs if k not in listed]
            await self.apis.blocking(self._alter, resource.resource_name, changes, req.validate_only)

        async def alter_group(resource) -> None:
            changes = list(listed_values(resource.configs).items())
            await self.apis.blocking(self._alter_group, resource.resource_name, changes, True, req.validate_only)

        async def alter_broker(resource) -> None:
            listed = listed_values(resource.configs)
            await self.apis.blocking(self._alter_broker, resource.resource_name, list(listed.items()), True,
                                     req.validate_only)
        return await self._alter_each(req, ctx, alter_topic, alter_group, alter_broker)

    async def incremental_alter_configs(self, req, ctx):
        async def alter_topic(resource) -> None:
            topic = self.registry.require(resource.resource_name)
            for c in resource.configs:
                if c.name not in TOPIC_KINDS:
                    raise InvalidConfigError(f"unknown topic config {c.name!r}")
            changes = incremental_changes(resource.configs, TOPIC_KINDS.get,
                                          lambda name: topic.configs.get(name, TOPIC_DEFAULTS.get(name)))
            await self.apis.blocking(self._alter, resource.resource_name, changes, req.validate_only)

        async def alter_group(resource) -> None:
            changes = incremental_changes(resource.configs, lambda _name: "value", lambda _name: None)
            await self.apis.blocking(self._alter_group, resource.resource_name, changes, False,
                                     req.validate_only)

        async def alter_broker(resource) -> None:
            configs = self._broker_configs()

            def kind(name: str) -> str | None:  # None: a key DynamicBrokerConfigs.alter refuses by name
                return broker_key_kind(name) if name in NO_EFFECT or name in LOG_KEYS else None

            changes = incremental_changes(resource.configs, kind,
                                          lambda name: configs.list_start(resource.resource_name, name))
            await self.apis.blocking(self._alter_broker, resource.resource_name, changes, False,
                                     req.validate_only)
        return await self._alter_each(req, ctx, alter_topic, alter_group, alter_broker)

    def _alter(self, name: str, changes, validate_only: bool) -> None:
        self.registry.alter(name, changes, validate_only=validate_only)

    def _group_configs(self) -> GroupConfigs:
        if self.apis.group_configs is None:
            raise InvalidRequestError("group configs are not loaded yet")
        return self.apis.group_configs

    def _alter_group(self, group: str, changes, replace: bool, validate_only: bool) -> None:
        self._group_configs().alter(group, changes, replace=replace, validate_only=validate_only)

    def _broker_configs(self) -> DynamicBrokerConfigs:
        if self.apis.broker_configs is None:
            raise InvalidRequestError("dynamic broker configs are not loaded yet")
        return self.apis.broker_configs

    def _alter_broker(self, name: str, changes, replace: bool, validate_only: bool) -> None:
        def apply(defaults, commit: bool) -> None:
            self.registry.set_defaults(defaults, validate_only=not commit)
        self._broker_configs().alter(name, changes, replace=replace, validate_only=validate_only, apply=apply)

    async def _alter_each(self, req, ctx, apply_topic, apply_group, apply_broker) -> Any:
        R = ctx.response_class
        ResultR = nested(R, "responses")
        results = []
        for resource in req.resources:
            code: int = E.none
            message: str | None = None
            try:
                _authorize_config(ctx, Op.ALTER_CONFIGS, resource)
                if resource.resource_type == TOPIC_RESOURCE:
                    await apply_topic(resource)
                elif resource.resource_type == GROUP_RESOURCE:
                    await apply_group(resource)
                elif resource.resource_type == BROKER_RESOURCE:
                    await apply_broker(resource)
                elif resource.resource_type == BROKER_LOGGER_RESOURCE:
                    raise InvalidRequestError("broker loggers are not configurable in Strata")
                else:
                    raise InvalidRequestError(f"unsupported resource type {resource.resource_type}")
            except StrataError as e:
                code, message = error_code_of(e), str(e)
            results.append(make(ResultR, error_code=code, error_message=message,
                                resource_type=resource.resource_type,
                                resource_name=resource.resource_name))
        return make(R, throttle_time=0, responses=tuple(results))


def _authorize_config(ctx, operation: Op, resource) -> None:
    """DescribeConfigs/AlterConfigs: the operation on the resource (a broker's or
    its loggers' configs: on the cluster), or the authorization error to answer."""
    kind = resource.resource_type
    if kind == TOPIC_RESOURCE and not allowed(ctx, operation, Resource.TOPIC, resource.resource_name):
        raise TopicAuthorizationError("Topic authorization failed.")
    if kind == GROUP_RESOURCE and not allowed(ctx, operation, Resource.GROUP, resource.resource_name):
        raise GroupAuthorizationError("Group authorization failed.")
    if kind in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE) and not allowed_cluster(ctx, operation):
        raise ClusterAuthorizationError("Cluster authorization failed.")
