"""Broker configuration: Kafka's broker names and defaults, loaded from four sources.

Contract:
- `BrokerConfig.load(config_file=..., overrides=[...], cli={...}, environ=...)`
  builds the configuration from, lowest precedence first:
      1. the defaults below (Kafka's, where Kafka has the setting);
      2. a `server.properties` file (Java properties syntax, see `parse_properties`);
      3. environment variables `STRATA_<NAME>`: the key upper-cased with `.` -> `_`
         (`log.retention.ms` -> `STRATA_LOG_RETENTION_MS`), for containers;
      4. the command line: `--set KEY=VALUE` (later wins), then the dedicated flags
         `--host` (`host.name`), `--port` (`port`) and `--data-dir` (beats `log.dirs`
         and `log.dir`).
  So: CLI > environment > file > defaults.
- Every key is checked: a bad value anywhere raises `InvalidConfigError` with one
  line naming the key and where it came from. Kafka keys that mean nothing on one
  node (`broker.id` 0, replication factors of 1, `controller.*`, `process.roles`,
  ...; broker/config/ignored_keys.py) are accepted and listed in `ignored` (key, origin,
  reason) for one log line each, their values in `accepted` (described by
  DescribeConfigs); asking for more than one node (a replication
  factor above 1, a node id other than 0) is an error. Other unknown keys (file,
  `--set`) are listed in `unknown` for a warning and otherwise ignored, as Kafka
  does; `strict=True` (`strata serve --strict`) refuses them. An unknown `STRATA_*`
  environment variable is not an error (the environment is shared with other
  programs, such as the `strata` client commands); it is reported in `ignored_env`
  so the broker can log a warning, unless it names a key accepted without effect
  (`STRATA_BROKER_ID=0`), which is treated as that key.
- Listeners and TLS: `listeners`, `native.listeners`, `advertised.listeners`,
  `native.advertised.listeners` and `listener.security.protocol.map` become `listeners` (ListenerSpecs, checked
  here: broker/net/listeners.py); the ssl.* keys are read per listener by
  broker/net/tls.py. Besides the keys below, `listener.name.<listener>.ssl.*` (and
  `.sasl.*`, `.connections.max.reauth.ms`, `.max.connection.creation.rate`,
  `.<mechanism>.sasl.jaas.config`)
  overrides one listener's key (stored with the listener name lower-cased,
  as Kafka looks it up; environment: STRATA_LISTENER_NAME_<LISTENER>_SSL_...).
- Broker-level `log.*` names that set topic defaults (`log.segment.bytes`,
  `log.retention.hours`, `message.max.bytes`, ...) are the ones storage maps in
  `storage.config.BROKER_NAMES`; `log_defaults` is the resulting LogConfig.
- The result is immutable. Typed attributes cover what the broker reads; `values`
  holds every key with its parsed value and `source(key)` says where it came from.

Strata-only settings (Kafka has no such name) are marked "Strata" in KEYS; the
native protocol has its own default port, 9000, so it never clashes with a Kafka
broker's 9092 on the same host.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.config.ignored_keys import ignored_reason, without_controller_listeners
from broker.config.keys import (
    ALL_KEYS,
    ENV_NAMES,
    ENV_PREFIX,
    KEYS,
    LISTENER_PREFIX,
    LOG_DEFAULT_KEYS,
    BrokerKey,
    check_group_consumer,
    env_listener_key,
    listener_override,
    parse_value,
)
from broker.config.properties import parse_properties
from broker.net.listeners import ListenerSpec, listener_specs
from kafka_format.errors import InvalidConfigError
from storage.config import LogConfig, broker_log_defaults

# ---- the configuration -------------------------------------------------------------

@dataclass(frozen=True)
class BrokerConfig:
    values: Mapping[str, Any]
    sources: Mapping[str, str]
    log_defaults: LogConfig
    ignored_env: tuple[str, ...] = ()
    data_dir: str = field(default="")
    ignored: tuple[tuple[str, str, str], ...] = ()  # (key, origin, reason): accepted, not read
    unknown: tuple[tuple[str, str], ...] = ()  # (key, origin): not known, ignored
    listeners: tuple[ListenerSpec, ...] = ()  # every listener of both protocols (broker/net/listeners.py)
    accepted: Mapping[str, str] = field(default_factory=dict)  # the ignored keys' values, as given

    # ---- loading ----

    @classmethod
    def load(cls, *, config_file: str | None = None, overrides: Iterable[str] = (),
             cli: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
             data_dir: str | None = None, strict: bool = False) -> BrokerConfig:
        """See the module contract. `cli` maps keys to values given by dedicated flags
        (None values are skipped); `data_dir` is `--data-dir`; `strict` refuses
        unknown keys."""
        raw: dict[str, tuple[Any, str]] = {}  # key -> (raw value, origin)

        if config_file is not None:
            try:
                with open(config_file, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise InvalidConfigError(f"cannot read config file {config_file}: {e.strerror}") from None
            except UnicodeDecodeError:
                raise InvalidConfigError(f"config file {config_file} is not UTF-8 text") from None
            for key, value in parse_properties(text, config_file).items():
                raw[key] = (value, config_file)

        ignored_env: list[str] = []
        environ = os.environ if environ is None else environ
        for env_name, value in sorted(environ.items()):
            if not env_name.startswith(ENV_PREFIX):
                continue
            env_key = ENV_NAMES.get(env_name) or env_listener_key(env_name)
            if env_key is None:
                # A Kafka key Strata accepts without reading (STRATA_BROKER_ID=0) is that key.
                kafka_name = env_name[len(ENV_PREFIX):].lower().replace("_", ".")
                if ignored_reason(kafka_name, value, f"environment {env_name}") is None:
                    ignored_env.append(env_name)
                    continue
                env_key = kafka_name
            raw[env_key] = (value, f"environment {env_name}")

        for item in overrides:
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise InvalidConfigError(f"--set expects KEY=VALUE, got {item!r}")
            raw[key.strip()] = (value, "--set")

        for key, value in (cli or {}).items():
            if value is not None:
                raw[key] = (value, "command line")

        controllers = str(raw.get("controller.listener.names", ("CONTROLLER", ""))[0])
        ignored: list[tuple[str, str, str]] = []
        accepted: dict[str, str] = {}
        unknown: list[tuple[str, str]] = []
        overrides_by_key: dict[str, tuple[str, BrokerKey]] = {}
        for key, (value, origin) in list(raw.items()):
            override = listener_override(key)
            if override is not None:
                overrides_by_key[key] = override
                continue
            if key in ALL_KEYS:
                continue
            del raw[key]
            reason = ignored_reason(key, value, origin)
            if reason is not None:
                ignored.append((key, origin, reason))
                accepted[key] = str(value).strip()
            elif strict:
                raise InvalidConfigError(f"unknown setting {key!r} ({origin}; refused by --strict)")
            else:
                unknown.append((key, origin))
        for listener_key in ("listeners", "advertised.listeners"):
            # KRaft's stock files bind and advertise the controller listener too; it is not
            # Kafka's data path, so it is neither bound nor advertised.
            if listener_key not in raw:
                continue
            value, origin = raw[listener_key]
            if isinstance(value, str):
                kept, dropped = without_controller_listeners(value, controllers)
                if dropped:
                    raw[listener_key] = (kept, origin)
                    ignored.append((f"{listener_key} {','.join(dropped)}", origin,
                                    "one node: Strata has no KRaft controller quorum"))

        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for setting in KEYS:
            if setting.name in raw:
                value, origin = raw[setting.name]
                values[setting.name] = parse_value(setting, value, origin)
                sources[setting.name] = origin
            else:
                values[setting.name] = setting.default
                sources[setting.name] = "default"
        for key, (normalized, setting) in overrides_by_key.items():
            value, origin = raw[key]
            parsed = parse_value(setting, value, origin)
            values[normalized] = parsed
            sources[normalized] = origin
        check_group_consumer(values, sources)
        listeners = listener_specs(values, sources)
        log_props = {}
        for name in LOG_DEFAULT_KEYS:
            if name in raw:
                log_props[name] = raw[name][0]
                values[name] = raw[name][0]
                sources[name] = raw[name][1]
        try:
            log_defaults = broker_log_defaults(log_props)
        except InvalidConfigError as e:
            bad = str(e).split(":", 1)[0]
            bad_origin = raw.get(bad, (None, None))[1]
            raise InvalidConfigError(f"{e} ({bad_origin})" if bad_origin else str(e)) from None

        if data_dir is not None:
            chosen, origin = data_dir, "--data-dir"
        elif values["log.dirs"] is not None:
            chosen, origin = values["log.dirs"], sources["log.dirs"]
        elif values["log.dir"] is not None:
            chosen, origin = values["log.dir"], sources["log.dir"]
        else:
            raise InvalidConfigError("no data directory: pass --data-dir or set log.dirs")
        dirs = [d.strip() for d in str(chosen).split(",") if d.strip()]
        if len(dirs) != 1:
            raise InvalidConfigError(
                f"log.dirs: Strata uses exactly one data directory, got {chosen!r} ({origin})")
        values["log.dirs"] = dirs[0]
        sources["log.dirs"] = origin
        return cls(values=values, sources=sources, log_defaults=log_defaults,
                   ignored_env=tuple(ignored_env), data_dir=os.path.abspath(dirs[0]),
                   ignored=tuple(ignored), unknown=tuple(unknown), listeners=listeners, accepted=accepted)

    # ---- reading ----

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")

    def log_props(self) -> dict[str, Any]:
        """The broker-level log.* settings given (the static topic defaults)."""
        return {k: self.values[k] for k in LOG_DEFAULT_KEYS if self.source(k) != "default"}


    def explicit(self) -> dict[str, str]:
        """Settings that are not defaults, for the startup log."""
        return {k: str(self.values[k]) for k in sorted(self.values) if self.sources.get(k) != "default"}

    @property
    def host(self) -> str:
        return self.values["host.name"]

    @property
    def port(self) -> int:
        return self.values["port"]

    @property
    def kafka_port(self) -> int:
        """The Kafka listener's port; -1 when there is none."""
        return self.values["kafka.port"]

    @property
    def admin_port(self) -> int:
        """The HTTP admin port (metrics, health); -1 when off."""
        return self.values["admin.port"]

    def kafka_advertised(self, bound_host: str, bound_port: int) -> tuple[str, int]:
        """(host, port) Metadata announces on the first Kafka listener, bound at
        (bound_host, bound_port): see broker/net/listeners.py."""
        from broker.net.listeners import KAFKA, Listener

        spec = next(s for s in self.listeners if s.protocol == KAFKA)
        return Listener(spec, address=(bound_host, bound_port)).advertised

    @property
    def socket_request_max_bytes(self) -> int:
        return self.values["socket.request.max.bytes"]

    @property
    def queued_max_request_bytes(self) -> int:
        return self.values["queued.max.request.bytes"]

    @property
    def connections_max_idle_ms(self) -> int:
        return self.values["connections.max.idle.ms"]

    @property
    def max_connections(self) -> int:
        return self.values["max.connections"]

    @property
    def max_connections_per_ip(self) -> int:
        return self.values["max.connections.per.ip"]

    @property
    def max_connections_per_ip_overrides(self) -> str:
        return self.values["max.connections.per.ip.overrides"]

    def listener_connection_rates(self, names: list[str]) -> dict[str, int]:
        """listener.name.<l>.max.connection.creation.rate of each listener that sets it."""
        rates = {}
        for name in names:
            value = self.values.get(f"{LISTENER_PREFIX}{name.lower()}.max.connection.creation.rate")
            if value is not None:
                rates[name.lower()] = int(value)
        return rates

    @property
    def num_partitions(self) -> int:
        return self.values["num.partitions"]

    @property
    def auto_create_topics(self) -> bool:
        return self.values["auto.create.topics.enable"]

    @property
    def offsets_topic_num_partitions(self) -> int:
        return self.values["offsets.topic.num.partitions"]

    @property
    def offset_metadata_max_bytes(self) -> int:
        return self.values["offset.metadata.max.bytes"]

    @property
    def group_min_session_timeout_ms(self) -> int:
        return self.values["group.min.session.timeout.ms"]

    @property
    def group_max_session_timeout_ms(self) -> int:
        return self.values["group.max.session.timeout.ms"]

    @property
    def group_initial_rebalance_delay_ms(self) -> int:
        return self.values["group.initial.rebalance.delay.ms"]

    @property
    def group_max_size(self) -> int:
        return self.values["group.max.size"]

    @property
    def fetch_max_bytes(self) -> int:
        return self.values["fetch.max.bytes"]

    @property
    def max_incremental_fetch_session_cache_slots(self) -> int:
        return self.values["max.incremental.fetch.session.cache.slots"]

    @property
    def min_incremental_fetch_session_eviction_ms(self) -> int:
        return self.values["min.incremental.fetch.session.eviction.ms"]

    @property
    def max_open_files(self) -> int:
        return self.values["log.max.open.files"]

    @property
    def num_io_threads(self) -> int:
        return self.values["num.io.threads"]

    @property
    def num_recovery_threads_per_data_dir(self) -> int:
        return self.values["num.recovery.threads.per.data.dir"]

    @property
    def max_queued_requests(self) -> int:
        return self.values["connection.max.queued.requests"]

    @property
    def write_buffer_high(self) -> int:
        return self.values["connection.write.buffer.bytes"]

    @property
    def shutdown_timeout_s(self) -> float:
        return self.values["shutdown.timeout.ms"] / 1000

    @property
    def flush_interval_ms(self) -> int:
        """log.flush.scheduler.interval.ms, run at least every second (Kafka's
        default, Long.MAX, would mean never checking flush.ms at all)."""
        return min(self.values["log.flush.scheduler.interval.ms"], 1000)

    @property
    def checkpoint_interval_ms(self) -> int:
        return self.values["log.flush.offset.checkpoint.interval.ms"]

    @property
    def retention_check_interval_ms(self) -> int:
        return self.values["log.retention.check.interval.ms"]

    @property
    def initial_task_delay_ms(self) -> int:
        return self.values["log.initial.task.delay.ms"]

    @property
    def cleaner_enable(self) -> bool:
        return self.values["log.cleaner.enable"]

    @property
    def cleaner_backoff_ms(self) -> int:
        return self.values["log.cleaner.backoff.ms"]

    @property
    def cleaner_dedupe_buffer_size(self) -> int:
        return self.values["log.cleaner.dedupe.buffer.size"]

    @property
    def cleaner_io_buffer_size(self) -> int:
        return self.values["log.cleaner.io.buffer.size"]

    @property
    def log_format(self) -> str:
        return self.values["log.format"]

    @property
    def log_level(self) -> str:
        return self.values["log.level"]
