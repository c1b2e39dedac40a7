"""The broker's configuration keys: Kafka's names, types, defaults and checks (`KEYS`),
the listener-scoped overrides and the environment names, and how a raw value is parsed.

Loading and precedence: broker/config/broker_config.py; the README table of these keys:
broker/config/readme_table.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.net.listeners import DEFAULT_PROTOCOL_MAP, list_complaint, map_complaint
from broker.security.principal import rules_complaint
from broker.security.sasl import DEFAULT_MECHANISMS, mechanisms_complaint
from broker.share.config import BROKER_DEFAULTS as SHARE_BROKER_DEFAULTS
from kafka_format.errors import InvalidConfigError
from storage.config import BROKER_NAMES, LONG_MAX, broker_name_defaults

INT_MAX = 2**31 - 1
ENV_PREFIX = "STRATA_"
DEFAULT_PORT = 9000
DEFAULT_KAFKA_PORT = 9092
DEFAULT_ADMIN_PORT = 9644
LOG_FORMATS = ("auto", "text", "json", "console")  # console: the older name of text
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class BrokerKey:
    name: str
    kind: str  # int | long | boolean | string
    default: Any
    check: Callable[[Any], str | None] | None
    doc: str


def _at_least(low: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}"


def _between(low: int, high: int) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def _jitter_complaint(v: str) -> str | None:
    try:
        value = float(v)
    except ValueError:
        return "is not a valid double"
    return None if 0.0 <= value <= 0.5 else "must be between 0.0 and 0.5"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _store_type(v: str) -> str | None:
    return None if v.upper() in ("JKS", "PEM", "PKCS12") else "must be JKS, PKCS12 or PEM"


def _non_empty(v: str) -> str | None:
    return None if v else "must not be empty"


def _not_zero_or_below_minus_one(v: int) -> str | None:
    return None if v == -1 or v > 0 else "must be -1 (no bound) or positive"


def _overrides_complaint(v: str) -> str | None:
    from broker.net.connection_limits import parse_overrides

    try:
        parse_overrides(v)
    except ValueError as e:
        return str(e)
    return None


def _assignors_complaint(value: str) -> str | None:
    from broker.kafka.groups.assignors import ASSIGNORS, CLASS_NAMES, assignor_name

    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        return "must name at least one assignor"
    unknown = [n for n in names if assignor_name(n) is None]
    if unknown:
        known = ", ".join((*ASSIGNORS, *CLASS_NAMES))
        return f"names unknown assignor(s) {', '.join(unknown)} (known: {known})"
    return None


AUTHORIZER_CLASSES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "kafka.security.authorizer.AclAuthorizer")


_SHARE_DOCS = {
    "group.share.record.lock.duration.ms": "default of the group config share.record.lock.duration.ms",
    "group.share.min.record.lock.duration.ms": "smallest share.record.lock.duration.ms a group config may set",
    "group.share.max.record.lock.duration.ms": "largest share.record.lock.duration.ms a group config may set",
    "group.share.delivery.count.limit": "default of share.delivery.count.limit (deliveries before archiving)",
    "group.share.max.size": "most members a share group may have (else GROUP_MAX_SIZE_REACHED)",
    "group.share.max.share.sessions": "most share sessions of the broker (else SHARE_SESSION_LIMIT_REACHED)",
}
KEYS: tuple[BrokerKey, ...] = (
    # ---- listening ----
    BrokerKey("host.name", "string", "0.0.0.0", _non_empty,
              "address to listen on (Kafka's legacy host.name; CLI --host)"),
    BrokerKey("port", "int", DEFAULT_PORT, _between(0, 65535),
              "TCP port of the native protocol, 0 = any free port (CLI --port)"),
    BrokerKey("kafka.port", "int", DEFAULT_KAFKA_PORT, _between(-1, 65535),
              "Strata: TCP port of Apache Kafka's wire protocol on host.name, 0 = any free port, "
              "-1 = no Kafka listener (CLI --kafka-port)"),
    BrokerKey("listeners", "string", "", list_complaint,
              "Kafka-protocol listeners, NAME://HOST:PORT,... (HOST empty = every address, port 0 = "
              "any); empty = PLAINTEXT://host.name:kafka.port"),
    BrokerKey("native.listeners", "string", "", list_complaint,
              "Strata: native-protocol listeners in the form of listeners; empty = PLAINTEXT://host.name:port"),
    BrokerKey("advertised.listeners", "string", "", list_complaint,
              "what Metadata/FindCoordinator tell a client connected to each Kafka listener, "
              "NAME://HOST:PORT,...; a listener without one advertises its bound address (a wildcard "
              "host replaced by this machine's canonical name); port 0 = the bound port"),
    BrokerKey("native.advertised.listeners", "string", "", list_complaint,
              "Strata: the address clients reach each native listener at, NAME://HOST:PORT,... as "
              "advertised.listeners (e.g. a container's published port); a listener without one tells its "
              "bound address; port 0 = the bound port. The `strata` command line reads it (DESCRIBE_LISTENERS, "
              "DescribeConfigs of the broker) to go from one listener to the other"),
    BrokerKey("listener.security.protocol.map", "string", DEFAULT_PROTOCOL_MAP, map_complaint,
              "listener name -> security protocol, NAME:PROTOCOL,... (PLAINTEXT, SSL, SASL_PLAINTEXT, "
              "SASL_SSL)"),
    # ---- TLS (broker/net/tls.py); each also as listener.name.<name>.ssl.* for one listener ----
    BrokerKey("ssl.keystore.type", "string", "JKS", _store_type,
              "JKS (Java's keystore, read with pyjks), PKCS12 or PEM"),
    BrokerKey("ssl.keystore.location", "string", None, None,
              "the keystore file: JKS, PKCS12 or PEM (private key and certificate chain)"),
    BrokerKey("ssl.keystore.password", "string", None, None, "password of a JKS or PKCS12 keystore"),
    BrokerKey("ssl.key.password", "string", None, None,
              "password of the (encrypted) private key; a JKS keystore's key: the keystore password "
              "when not set"),
    BrokerKey("ssl.keystore.certificate.chain", "string", None, None,
              "inline PEM certificate chain (with ssl.keystore.key, instead of ssl.keystore.location)"),
    BrokerKey("ssl.keystore.key", "string", None, None, "inline PEM private key"),
    BrokerKey("ssl.truststore.type", "string", "JKS", _store_type,
              "JKS, PKCS12 or PEM"),
    BrokerKey("ssl.truststore.location", "string", None, None,
              "the CAs client certificates must chain to: a JKS, PKCS12 or PEM file"),
    BrokerKey("ssl.truststore.password", "string", None, None,
              "password of a PKCS12 truststore; a JKS truststore's integrity is checked with it when set"),
    BrokerKey("ssl.truststore.certificates", "string", None, None, "inline PEM trusted certificates"),
    BrokerKey("ssl.client.auth", "string", "none", _one_of("none", "requested", "required"),
              "client certificates: none, requested (verified when sent) or required"),
    BrokerKey("ssl.enabled.protocols", "string", "TLSv1.2,TLSv1.3", _non_empty,
              "TLS versions accepted (TLSv1.2, TLSv1.3)"),
    BrokerKey("ssl.cipher.suites", "string", "", None,
              "cipher suites (Kafka's IANA names or OpenSSL's); empty = OpenSSL's defaults"),
    BrokerKey("ssl.protocol", "string", "TLSv1.3", None,
              "accepted for Kafka compatibility; ssl.enabled.protocols chooses the versions"),
    BrokerKey("ssl.endpoint.identification.algorithm", "string", "https", None,
              "accepted for Kafka compatibility (a client-side check; the broker does not use it)"),
    BrokerKey("ssl.reload.interval.ms", "long", 5_000, _at_least(1),
              "Strata: how often keystore and truststore files are checked for changes; a change "
              "reloads them for new connections"),
    BrokerKey("ssl.principal.mapping.rules", "string", "DEFAULT", rules_complaint,
              "client certificate subject -> principal name: DEFAULT and RULE:pattern/replacement/[LU], "
              "comma-separated, first match wins"),
    # ---- SASL (broker/security/sasl.py); each also as listener.name.<name>.<key> ----
    BrokerKey("sasl.enabled.mechanisms", "string", DEFAULT_MECHANISMS, mechanisms_complaint,
              "SASL mechanisms a SASL_* listener offers (Strata: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; "
              "Kafka's default GSSAPI is not implemented)"),
    BrokerKey("sasl.jaas.config", "string", None, None,
              "JAAS line; PlainLoginModule's user_<name>=\"<password>\" options are the PLAIN users "
              "(also listener.name.<l>.plain.sasl.jaas.config)"),
    BrokerKey("connections.max.reauth.ms", "long", 0, _at_least(0),
              "SASL session lifetime: a client re-authenticates on its connection within it, or the "
              "connection is closed (0 = no re-authentication)"),
    BrokerKey("connection.failed.authentication.delay.ms", "int", 100, _at_least(0),
              "delay before a failed authentication is answered and the connection closed"),
    # ---- authorization (broker/security/authorizer.py) ----
    BrokerKey("authorizer.class.name", "string", "", _one_of("", *AUTHORIZER_CLASSES),
              "ACLs on both protocols when set to Kafka's StandardAuthorizer or AclAuthorizer class "
              "name; empty = no authorization"),
    BrokerKey("super.users", "string", "", None,
              "principals allowed everything, semicolon-separated (User:admin;User:CN=ops)"),
    BrokerKey("allow.everyone.if.no.acl.found", "boolean", False, None,
              "with an authorizer: a resource no ACL matches is open to everyone"),
    BrokerKey("admin.port", "int", DEFAULT_ADMIN_PORT, _between(-1, 65535),
              "Strata: HTTP port on host.name for Prometheus metrics (/metrics) and health checks "
              "(/health/live, /health/ready), 0 = any free port, -1 = off"),
    BrokerKey("socket.request.max.bytes", "int", 104_857_600, _at_least(1),
              "largest request frame; a larger one is answered INVALID_REQUEST and the connection closed"),
    BrokerKey("queued.max.request.bytes", "long", 104_857_600, _not_zero_or_below_minus_one,
              "bytes of requests being received or waiting for their answer, broker-wide; when "
              "spent the broker stops reading from connections until requests are answered "
              "(-1 = no bound, Kafka's default; Strata bounds by default)"),
    BrokerKey("connections.max.idle.ms", "long", 600_000, _at_least(-1),
              "close a connection after this long without a request or a reply (-1 = never)"),
    BrokerKey("max.connections", "int", INT_MAX, _at_least(0),
              "most connections the broker accepts over both listeners; more are closed at once"),
    BrokerKey("max.connections.per.ip", "int", INT_MAX, _at_least(0),
              "most connections from one IP address; more are closed at once"),
    BrokerKey("max.connections.per.ip.overrides", "string", "", _overrides_complaint,
              "per-IP (or host name) exceptions to max.connections.per.ip: host:count,host:count"),
    BrokerKey("max.connection.creation.rate", "int", INT_MAX, _at_least(0),
              "new connections per second the broker accepts over both listeners; faster ones wait "
              "(also listener.name.<l>.max.connection.creation.rate for one listener)"),
    BrokerKey("quota.window.num", "int", 11, _at_least(1),
              "samples client quota rates are measured over (client quotas: broker/core/quotas.py)"),
    BrokerKey("quota.window.size.seconds", "int", 1, _at_least(1),
              "length of each client quota rate sample"),
    BrokerKey("controller.quota.window.num", "int", 11, _at_least(1),
              "samples of the controller_mutation_rate quota: its token bucket holds up to "
              "rate x samples x sample size partition mutations"),
    BrokerKey("controller.quota.window.size.seconds", "int", 1, _at_least(1),
              "length of each controller_mutation_rate sample"),
    BrokerKey("num.io.threads", "int", 8, _at_least(1),
              "threads doing blocking storage work (appends, reads, flushes, topic changes)"),
    BrokerKey("num.recovery.threads.per.data.dir", "int", 1, _at_least(1),
              "threads that open and recover logs at startup and flush and close them at shutdown; "
              "more help where the disk is slow (the work is otherwise Python, one core at a time)"),
    BrokerKey("fetch.max.bytes", "int", 57_671_680, _at_least(1024),
              "most message-set bytes one FETCH or MULTIFETCH response carries"),
    BrokerKey("max.incremental.fetch.session.cache.slots", "int", 1000, _at_least(0),
              "most Kafka fetch sessions (KIP-227) the broker keeps; 0 declines every session"),
    BrokerKey("min.incremental.fetch.session.eviction.ms", "int", 120_000, _at_least(0),
              "how long a fetch session lives before a new one may evict it"),
    BrokerKey("connection.max.queued.requests", "int", 16, _at_least(1),
              "Strata: requests read from one connection and not yet answered before "
              "the broker stops reading from it"),
    BrokerKey("connection.write.buffer.bytes", "int", 262_144, _between(1, INT_MAX),
              "Strata: a connection's write buffer high-water mark; above it the broker "
              "stops reading from that connection until the buffer drains to a quarter"),
    BrokerKey("shutdown.timeout.ms", "long", 10_000, _at_least(0),
              "Strata: how long a graceful shutdown waits for in-flight requests"),
    # ---- data ----
    BrokerKey("log.dirs", "string", None, None,
              "the data directory (one; CLI --data-dir wins); beats log.dir"),
    BrokerKey("log.dir", "string", None, None, "the data directory when log.dirs is not set"),
    BrokerKey("log.max.open.files", "int", 0, _at_least(0),
              "Strata: most segment and index files held open at once; the least recently used idle "
              "ones are closed and reopen on use. 0 = half the soft RLIMIT_NOFILE (raised to the hard "
              "limit at start)"),
    BrokerKey("num.partitions", "int", 1, _at_least(1),
              "partitions of a topic created with partitions = -1 or auto-created"),
    BrokerKey("auto.create.topics.enable", "boolean", True, None,
              "a Metadata request that allows it creates unknown topics (Kafka's, and the native "
              "METADATA from version 2: the clients, the CLI's produce and the Spark sink ask for "
              "it); as in Kafka, a produce itself never creates a topic"),
    BrokerKey("offsets.topic.num.partitions", "int", 50, _at_least(1),
              "partitions of __consumer_offsets (fixed when the topic is first created)"),
    BrokerKey("offset.metadata.max.bytes", "int", 4096, _at_least(0),
              "largest metadata string of a committed offset"),
    # ---- transactions (Kafka listener: broker/kafka/transactions/) ----
    BrokerKey("transaction.state.log.num.partitions", "int", 50, _at_least(1),
              "partitions of __transaction_state (fixed when the topic is first created)"),
    BrokerKey("transaction.max.timeout.ms", "int", 900_000, _at_least(1),
              "largest transaction.timeout.ms a producer may ask for (else INVALID_TRANSACTION_TIMEOUT)"),
    BrokerKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000, _at_least(1),
              "how often the coordinator aborts transactions open longer than their timeout"),
    BrokerKey("transactional.id.expiration.ms", "int", 604_800_000, _at_least(1),
              "a transactional id without a transaction for this long is forgotten"),
    BrokerKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3_600_000, _at_least(1),
              "how often the coordinator forgets expired transactional ids"),
    # ---- consumer groups (Kafka listener) ----
    BrokerKey("broker.rack", "string", None, None,
              "rack of this broker: Metadata and DescribeCluster answer it, and consumer-group assignors "
              "match it against members' rack ids"),
    BrokerKey("group.min.session.timeout.ms", "int", 6000, _at_least(0),
              "smallest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT)"),
    BrokerKey("group.max.session.timeout.ms", "int", 1_800_000, _at_least(0),
              "largest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT)"),
    BrokerKey("group.initial.rebalance.delay.ms", "int", 3000, _at_least(0),
              "how long the first rebalance of an empty group waits for more members to join"),
    BrokerKey("group.max.size", "int", INT_MAX, _at_least(1),
              "most members a consumer group may have (else GROUP_MAX_SIZE_REACHED)"),
    BrokerKey("group.consumer.session.timeout.ms", "int", 45_000, _at_least(1),
              "default of the group config consumer.session.timeout.ms (consumer-protocol groups)"),
    BrokerKey("group.consumer.min.session.timeout.ms", "int", 45_000, _at_least(1),
              "smallest consumer.session.timeout.ms a group config may set"),
    BrokerKey("group.consumer.max.session.timeout.ms", "int", 60_000, _at_least(1),
              "largest consumer.session.timeout.ms a group config may set"),
    BrokerKey("group.consumer.heartbeat.interval.ms", "int", 5_000, _at_least(1),
              "default of the group config consumer.heartbeat.interval.ms (consumer-protocol groups)"),
    BrokerKey("group.consumer.min.heartbeat.interval.ms", "int", 5_000, _at_least(1),
              "smallest consumer.heartbeat.interval.ms a group config may set"),
    BrokerKey("group.consumer.max.heartbeat.interval.ms", "int", 15_000, _at_least(1),
              "largest consumer.heartbeat.interval.ms a group config may set"),
    # Share groups (KIP-932): the defaults and bounds of the share.* group configs
    # (broker/share/config.py) and the share coordinator's snapshot interval.
    *(BrokerKey(name, "int", default, _at_least(1), _SHARE_DOCS.get(name, "share groups (KIP-932): Kafka's setting"))
      for name, default in SHARE_BROKER_DEFAULTS.items()),
    BrokerKey("group.consumer.assignors", "string", "uniform,range", _assignors_complaint,
              "server-side assignors of consumer-protocol groups, the first the default: uniform, range or "
              "Kafka's class names of them (org.apache.kafka.coordinator.group.assignor.UniformAssignor, "
              "RangeAssignor)"),
    BrokerKey("group.consumer.max.size", "int", INT_MAX, _at_least(1),
              "most members a consumer-protocol group may have (else GROUP_MAX_SIZE_REACHED)"),
    BrokerKey("group.consumer.migration.policy", "string", "bidirectional",
              lambda v: _one_of("disabled", "upgrade", "downgrade", "bidirectional")(v.lower()),
              "whether a group with members changes protocol online (any case): upgrade (a classic group "
              "becomes a consumer group when a member joins with ConsumerGroupHeartbeat), downgrade (a "
              "consumer group becomes classic when its last consumer-protocol member leaves and classic "
              "members remain), bidirectional (both) or disabled; empty groups always change"),
    # ---- periodic tasks ----
    BrokerKey("log.flush.scheduler.interval.ms", "long", LONG_MAX, _at_least(1),
              "how often logs are checked for flush.ms (the task runs at least every second)"),
    BrokerKey("log.flush.offset.checkpoint.interval.ms", "int", 60_000, _at_least(0),
              "how often the recovery-point and log-start checkpoints are written"),
    BrokerKey("log.initial.task.delay.ms", "long", 30_000, _at_least(0),
              "delay before the first periodic task runs"),
    BrokerKey("log.retention.check.interval.ms", "long", 300_000, _at_least(1),
              "how often the retention pass runs over every log"),
    # ---- tiered storage (storage/remote/, broker/core/tiering.py) ----
    BrokerKey("remote.log.storage.system.enable", "boolean", False, None,
              "tiered storage on this broker: topics may set remote.storage.enable (needs rsm.config.url)"),
    BrokerKey("remote.log.manager.task.interval.ms", "long", 30_000, _at_least(1),
              "how often each tiered partition's rolled segments are copied to the remote store and its "
              "local and remote retention run"),
    BrokerKey("remote.log.manager.task.retry.backoff.ms", "long", 500, _at_least(1),
              "first delay before a failed remote store operation is tried again"),
    BrokerKey("remote.log.manager.task.retry.backoff.max.ms", "long", 30_000, _at_least(1),
              "longest delay between tries of a failed remote store operation"),
    BrokerKey("remote.log.manager.task.retry.jitter", "string", "0.2", _jitter_complaint,
              "random fraction added to or taken from each retry delay (0.0 to 0.5)"),
    BrokerKey("rsm.config.url", "string", "", None,
              "where the remote store is: s3://bucket/prefix, or file:///path for a mounted volume"),
    BrokerKey("rsm.config.s3.endpoint", "string", "", None,
              "an S3-compatible server's http(s) URL (MinIO, moto); empty for AWS"),
    BrokerKey("rsm.config.s3.region", "string", "", None,
              "the S3 region (empty: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1)"),
    BrokerKey("rsm.config.fetch.chunk.bytes", "long", 8 * 1024 * 1024, _at_least(4096),
              "Strata: size of the ranged reads a fetch of remote data makes"),
    BrokerKey("rsm.config.cache.bytes", "long", 64 * 1024 * 1024, _at_least(4096),
              "Strata: memory for cached remote index and data chunks"),
    BrokerKey("rsm.config.fetch.readahead.bytes", "long", 32 * 1024 * 1024, _at_least(0),
              "Strata: how far past each remote read the next chunks are read into the cache "
              "(at most half of rsm.config.cache.bytes is used)"),
    BrokerKey("rsm.config.fetch.threads", "long", 4, _at_least(1),
              "Strata: how many ranged reads of the remote store a broker makes at once"),
    # ---- log compaction (storage/log_cleaner.py) ----
    BrokerKey("log.cleaner.enable", "boolean", True, None,
              "run the log cleaner, which compacts topics whose cleanup.policy contains compact"),
    BrokerKey("log.cleaner.backoff.ms", "long", 15_000, _at_least(0),
              "how long the cleaner sleeps when no log needs cleaning"),
    BrokerKey("log.cleaner.dedupe.buffer.size", "long", 134_217_728, _at_least(1024 * 1024),
              "memory for the cleaner's key -> offset map (exact keys; at most 128 bytes a key of up to "
              "16 bytes, plus the bytes of longer keys)"),
    BrokerKey("log.cleaner.io.buffer.size", "int", 524_288, _at_least(4096),
              "how much of a segment the cleaner reads at a time (it stops between reads at shutdown)"),
    # ---- logging ----
    BrokerKey("log.format", "string", "auto", _one_of(*LOG_FORMATS),
              "Strata: log output: text (human-readable key=value; console is the same), json "
              "(one object a line), or auto (text on a terminal, json otherwise)"),
    BrokerKey("log.level", "string", "info", _one_of(*LOG_LEVELS), "Strata: least level logged"),
)

# Broker-level names of topic defaults, e.g. log.segment.bytes, log.retention.hours.
LOG_DEFAULT_KEYS: tuple[str, ...] = tuple(name for candidates in BROKER_NAMES.values()
                                          for name, _unit in candidates)
KEYS_BY_NAME: dict[str, BrokerKey] = {k.name: k for k in KEYS}
ALL_KEYS: frozenset[str] = frozenset(KEYS_BY_NAME) | frozenset(LOG_DEFAULT_KEYS)


def config_text(value: Any) -> str:
    """A setting's value as Kafka writes it (ConfigDef.convertToString): lists
    comma-separated, booleans lower-case."""
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# Keys whose values are secrets (passwords, JAAS configs, inline PEM keys and certificates):
# logged as "[hidden]".
SECRET_SUFFIXES = ("password", "sasl.jaas.config", "ssl.keystore.key", "ssl.keystore.certificate.chain",
                   "ssl.truststore.certificates")


def is_secret(key: str) -> bool:
    return key.endswith(SECRET_SUFFIXES)


def default_props() -> dict[str, str]:
    """Every setting's default as Kafka describes it (DEFAULT_CONFIG), settings without
    one left out: the broker keys' and the log.* names' (broker_name_defaults)."""
    defaults = {key.name: key.default for key in KEYS}
    defaults.update(broker_name_defaults())
    return {name: config_text(value) for name, value in defaults.items() if value is not None}

# No key contains '_', so the environment name maps back to exactly one key.
ENV_NAMES: dict[str, str] = {ENV_PREFIX + name.replace(".", "_").upper(): name for name in ALL_KEYS}
LISTENER_PREFIX = "listener.name."
ENV_LISTENER_PREFIX = ENV_PREFIX + "LISTENER_NAME_"


LISTENER_SCOPED = ("ssl.", "sasl.", "connections.max.reauth.ms", "max.connection.creation.rate")
SASL_MECHANISM_PREFIXES = ("plain.", "scram-sha-256.", "scram-sha-512.")  # <mechanism>.sasl.jaas.config


def listener_override(key: str) -> tuple[str, BrokerKey] | None:
    """`listener.name.<listener>.ssl.*` (also sasl.*, connections.max.reauth.ms and
    `<mechanism>.sasl.jaas.config`) -> (the key with the listener name lower-cased,
    as Kafka looks it up; the key it overrides), else None."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    name, dot, sub = key[len(LISTENER_PREFIX):].partition(".")
    sub_lower = sub.lower()
    for prefix in SASL_MECHANISM_PREFIXES:
        if sub_lower == prefix + "sasl.jaas.config":
            return f"{LISTENER_PREFIX}{name.lower()}.{sub_lower}", KEYS_BY_NAME["sasl.jaas.config"]
    setting = KEYS_BY_NAME.get(sub)
    if not dot or not name or setting is None or not sub.startswith(LISTENER_SCOPED):
        return None
    return f"{LISTENER_PREFIX}{name.lower()}.{sub}", setting


def env_listener_key(env_name: str) -> str | None:
    """STRATA_LISTENER_NAME_<LISTENER>_SSL_KEYSTORE_LOCATION -> listener.name.<listener>.ssl.keystore.location"""
    if not env_name.startswith(ENV_LISTENER_PREFIX):
        return None
    rest = env_name[len(ENV_LISTENER_PREFIX):]
    for prefix in SASL_MECHANISM_PREFIXES:
        name = prefix + "sasl.jaas.config"
        suffix = "_" + name.replace(".", "_").replace("-", "_").upper()
        if rest.endswith(suffix) and len(rest) > len(suffix):
            return f"{LISTENER_PREFIX}{rest[:-len(suffix)].lower()}.{name}"
    for name in KEYS_BY_NAME:
        suffix = "_" + name.replace(".", "_").upper()
        if name.startswith(LISTENER_SCOPED) and rest.endswith(suffix) and len(rest) > len(suffix):
            return f"{LISTENER_PREFIX}{rest[:-len(suffix)].lower()}.{name}"
    return None


def check_group_consumer(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """Kafka's GroupCoordinatorConfig checks: each group.consumer.* default lies
    within its min..max, and the heartbeat interval is below the session timeout."""
    def fail(key: str, message: str) -> None:
        raise InvalidConfigError(f"{key}: {message} ({sources.get(key, 'default')})")

    for kind in ("session.timeout.ms", "heartbeat.interval.ms"):
        default, low, high = (f"group.consumer.{kind}", f"group.consumer.min.{kind}",
                              f"group.consumer.max.{kind}")
        if values[high] < values[low]:
            fail(high, f"must be greater than or equal to {low}")
        if not values[low] <= values[default] <= values[high]:
            fail(default, f"must be between {low} and {high} ({values[low]}..{values[high]})")
    if values["group.consumer.heartbeat.interval.ms"] >= values["group.consumer.session.timeout.ms"]:
        fail("group.consumer.heartbeat.interval.ms", "must be less than group.consumer.session.timeout.ms")


# ---- values ------------------------------------------------------------------------------

def parse_value(key: BrokerKey, raw: Any, origin: str) -> Any:
    text = raw.strip() if isinstance(raw, str) else raw
    value: int | bool | str
    try:
        if key.kind in ("int", "long"):
            if isinstance(text, bool):
                raise ValueError
            value = int(text)
            high = INT_MAX if key.kind == "int" else LONG_MAX
            if not -high - 1 <= value <= high:
                raise ValueError
        elif key.kind == "boolean":
            if isinstance(text, bool):
                value = text
            elif str(text).lower() in ("true", "false"):
                value = str(text).lower() == "true"
            else:
                raise ValueError
        else:
            value = str(text)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key.name}: {raw!r} is not a valid {key.kind} ({origin})") from None
    complaint = key.check(value) if key.check else None
    if complaint:
        raise InvalidConfigError(f"{key.name}: {value!r} {complaint} ({origin})")
    return value
