"""The data sources' options, checked once on the driver, as Spark's Kafka source does.

Contract:
- `read_options(options, streaming)` turns the (case-insensitive) option map
  of a read into a frozen, picklable `ReadOptions`, or raises OptionError with
  the message Spark's Kafka source gives for the same mistake (exactly one of
  subscribe / subscribePattern / assign; no `latest` start or `earliest` end in
  a batch query; no ending offsets in a stream; ...). `write_options(options)`
  does the same for a write.
- Client settings take Kafka's names with or without Spark's `kafka.` prefix:
  `bootstrap.servers` (or `kafka.bootstrap.servers`), `max.partition.fetch.bytes`,
  `request.timeout.ms`, and for writes `linger.ms`, `batch.size`,
  `compression.type`, `retries`, `retry.backoff.ms`.
- Security, as spark-sql-kafka passes them to its clients: `kafka.security.protocol`,
  `kafka.sasl.mechanism`, `kafka.sasl.username`/`kafka.sasl.password` or
  `kafka.sasl.jaas.config`, `kafka.ssl.ca.location` (or a PEM
  `kafka.ssl.truststore.location` with `kafka.ssl.truststore.type=PEM`),
  `kafka.ssl.certificate.location`/`kafka.ssl.key.location`/`kafka.ssl.key.password`,
  `kafka.ssl.endpoint.identification.algorithm`: checked on the driver (a bad one is
  an OptionError naming it) and carried as `security` to every connection (driver,
  executors, sink) (client/security.py, client/sasl.py).
- Every option of Spark's Kafka source (spark-sql-kafka) is honoured or refused
  with its name: READ_OPTIONS and WRITE_OPTIONS are the names honoured, REFUSED
  says why the others are not, and any other option (a `kafka.` client setting
  Strata has no use for, a misspelling) is refused naming it.
- `minOffsetsPerTrigger` and `maxTriggerDelay` (Spark's duration syntax, default
  15m) hold a micro-batch back until that many new offsets are there or the
  delay has passed since the last batch (source.py); at most `maxOffsetsPerTrigger`.
- `isolation.level` (Kafka's consumer setting, spark-sql-kafka's
  `kafka.isolation.level`): read_uncommitted (the default) or read_committed,
  under which "latest" is each partition's last stable offset (planning.py)
  and executors drop the records of aborted transactions (fetcher.py).
- An `OffsetSpec` says where a range starts or ends before the broker is asked:
  `earliest`, `latest`, `specific` (per partition, -2/-1 allowed), `timestamp`
  (one for every partition) or `timestamps` (per partition). Precedence as in
  Spark: `...OffsetsByTimestamp` > `...Timestamp` > `...Offsets`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import overload

from .offsets import (
    EARLIEST,
    LATEST,
    OptionError,
    PartitionOffsets,
    TopicPartition,
    format_tp,
    parse_assign,
    parse_partition_offsets,
)

__all__ = ["OptionError", "OffsetSpec", "ReadOptions", "WriteOptions", "read_options",
           "write_options", "normalize", "parse_bool", "DEFAULT_FETCH_BYTES"]

STRATEGIES = ("subscribe", "subscribepattern", "assign")
STRATEGY_NAMES = "subscribe, subscribePattern, assign"
DEFAULT_FETCH_BYTES = 4 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs default
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")  # Kafka's isolation.level values
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's maxTriggerDelay default, 15m
# Options of Spark's Kafka source that this source does not offer; refused, never ignored.
NO_GROUP = "the source reads offset ranges and commits nothing to the broker (no consumer group)"
UNSUPPORTED = {
    "auto.offset.reset": "set startingOffsets instead",
    "group.id": NO_GROUP,
    "groupidprefix": NO_GROUP,
    "enable.auto.commit": NO_GROUP,
    "key.deserializer": "keys are always binary (cast them in Spark)",
    "value.deserializer": "values are always binary (cast them in Spark)",
    "key.serializer": "keys are written as binary or UTF-8 strings",
    "value.serializer": "values are written as binary or UTF-8 strings",
    "interceptor.classes": "there is no Java client to intercept",
}
# Option names (normalized: lower case, no `kafka.` prefix) a read honours.
READ_OPTIONS = frozenset({
    "bootstrap.servers", *STRATEGIES, "startingoffsets", "endingoffsets", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "includeheaders", "failondataloss", "minpartitions",
    "maxrecordsperpartition", "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "max.partition.fetch.bytes", "request.timeout.ms", "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries", "fetchoffset.retryintervalms", "isolation.level",
})
# The client security settings both take (client/security.py; ssl.truststore.* is mapped).
SECURITY_OPTIONS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.truststore.location", "ssl.truststore.type",
})
READ_OPTIONS = READ_OPTIONS | SECURITY_OPTIONS
# ... and a write; `checkpointLocation` and `path` are Spark's own (a streaming query's).
WRITE_OPTIONS = frozenset({
    "bootstrap.servers", "topic", "linger.ms", "batch.size", "compression.type", "retries",
    "retry.backoff.ms", "request.timeout.ms", "checkpointlocation", "path", *SECURITY_OPTIONS,
})


def security_of(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The client security settings of normalized `options`, checked (OptionError)."""
    from client.sasl import sasl_credentials
    from client.security import ssl_context

    settings = {k: v for k, v in options.items() if k in SECURITY_OPTIONS}
    truststore = settings.pop("ssl.truststore.location", None)
    store_type = settings.pop("ssl.truststore.type", "PEM")
    if truststore:
        if store_type.upper() != "PEM":
            raise OptionError("option 'kafka.ssl.truststore.type': only PEM truststores are read (or set "
                              "kafka.ssl.ca.location)")
        settings.setdefault("ssl.ca.location", truststore)
    try:
        ssl_context(settings)
        sasl_credentials(settings)
    except ValueError as e:
        raise OptionError(f"option kafka.{e}") from None
    return tuple(sorted(settings.items()))


def check_known(raw: Mapping[str, str], known: frozenset[str], what: str) -> None:
    """Refuse, by the name the user gave, an option outside `known`."""
    for name in raw:
        key = normalize({name: ""}).popitem()[0]
        if key in UNSUPPORTED:
            raise OptionError(f"option '{name}' is not supported by the Strata source: {UNSUPPORTED[key]}")
        if key not in known:
            raise OptionError(f"option '{name}' is not supported by the Strata {what} (it takes: "
                              f"{', '.join(sorted(known))}; Kafka client settings with or without "
                              f"'kafka.')")


_DURATION_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                   "d": 86_400_000}


def parse_duration_ms(options: Mapping[str, str], key: str, name: str, default: int) -> int:
    """Spark's time strings (`JavaUtils.timeStringAsMs`): `15m`, `30s`, `500ms`, `1h`, `2d`;
    a bare number is milliseconds."""
    value = options.get(key)
    if value is None:
        return default
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(value).lower())
    if m is None or m.group(2) not in ("", *_DURATION_UNITS):
        raise OptionError(f"option '{name}' must be a duration such as 15m, 30s or 500ms, got {value!r}")
    return int(int(m.group(1)) * _DURATION_UNITS.get(m.group(2) or "ms", 1))


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Lower-case keys; Kafka client settings lose Spark's `kafka.` prefix."""
    out: dict[str, str] = {}
    for key, value in options.items():
        key = key.lower()
        if key.startswith("kafka."):
            key = key[len("kafka."):]
        out[key] = value
    return out


def parse_bool(options: Mapping[str, str], key: str, default: bool, name: str) -> bool:
    value = options.get(key)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {value!r}")
    return text == "true"


@overload
def parse_int(options: Mapping[str, str], key: str, name: str, *, minimum: int = 1,
              default: int) -> int: ...
@overload
def parse_int(options: Mapping[str, str], key: str, name: str, *, minimum: int = 1,
              default: None = None) -> int | None: ...
def parse_int(options: Mapping[str, str], key: str, name: str, *, minimum: int = 1,
              default: int | None = None) -> int | None:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise OptionError(f"option '{name}' must be {what}, got {value!r}")
    return number


@dataclass(frozen=True)
class OffsetSpec:
    kind: str  # earliest | latest | specific | timestamp | timestamps
    offsets: tuple[tuple[TopicPartition, int], ...] = ()  # specific / timestamps
    timestamp: int | None = None  # timestamp

    @property
    def per_partition(self) -> PartitionOffsets:
        return dict(self.offsets)

    def describe(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp}"
        return ", ".join(f"{format_tp(tp)}={v}" for tp, v in self.offsets)


def _timestamp(value: str, name: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be a timestamp in milliseconds since the epoch, "
                          f"got {value!r}") from None


def _offset_spec(options: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
    """From `<prefix>OffsetsByTimestamp`, `<prefix>Timestamp` or `<prefix>Offsets`."""
    by_timestamp = options.get(f"{prefix}offsetsbytimestamp")
    name_by_ts = f"{prefix}OffsetsByTimestamp"
    if by_timestamp is not None:
        stamps = parse_partition_offsets(by_timestamp, name_by_ts)
        return OffsetSpec("timestamps", tuple(sorted(stamps.items())))
    stamp = options.get(f"{prefix}timestamp")
    if stamp is not None:
        return OffsetSpec("timestamp", timestamp=_timestamp(stamp, f"{prefix}Timestamp"))
    text = options.get(f"{prefix}offsets")
    if text is None:
        return OffsetSpec(default)
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(word)
    offsets = parse_partition_offsets(text, f"{prefix}Offsets")
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(f"{prefix}Offsets: offset {offset} of {format_tp(tp)} is not valid "
                              f"(use -2 for earliest, -1 for latest)")
    return OffsetSpec("specific", tuple(sorted(offsets.items())))


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    strategy: str  # subscribe | subscribePattern | assign
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec | None = None  # batch only
    starting_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    security: tuple[tuple[str, str], ...] = ()  # client security settings (security_of)
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fetch_bytes: int = DEFAULT_FETCH_BYTES
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    fetch_retries: int = 3
    retry_interval_ms: int = 1000
    read_committed: bool = False  # isolation.level=read_committed

    def matches(self, topic: str) -> bool:
        """Does the subscription take `topic` (for subscribe / subscribePattern)?"""
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribePattern":
            assert self.pattern is not None  # _subscription sets it for subscribePattern
            return topic not in INTERNAL_TOPICS and re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


def bootstrap_of(options: Mapping[str, str]) -> str:
    bootstrap = options.get("bootstrap.servers")
    if not bootstrap or not bootstrap.strip():
        raise OptionError("option 'bootstrap.servers' (or 'kafka.bootstrap.servers') must be "
                          "specified: the broker's host:port")
    return bootstrap.strip()


def _subscription(options: Mapping[str, str]) -> dict:
    given = [key for key in STRATEGIES if key in options]
    if len(given) > 1:
        raise OptionError(f"Only one of the following options can be specified for the Strata "
                          f"source: {STRATEGY_NAMES}")
    if not given:
        raise OptionError(f"One of the following options must be specified for the Strata "
                          f"source: {STRATEGY_NAMES}")
    key, value = given[0], options[given[0]]
    if key == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"No topics to subscribe to as specified value for option "
                              f"'subscribe' is '{value}'")
        return {"strategy": "subscribe", "topics": topics}
    if key == "subscribepattern":
        pattern = value.strip()
        if not pattern:
            raise OptionError(f"Pattern to subscribe is empty as specified value for option "
                              f"'subscribePattern' is '{value}'")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern': bad regular expression "
                              f"{pattern!r}: {e}") from None
        return {"strategy": "subscribePattern", "pattern": pattern}
    assigned = tuple(parse_assign(value))
    if not assigned:
        raise OptionError(f"No topicpartitions to assign as specified value for option "
                          f"'assign' is '{value}'")
    return {"strategy": "assign", "assigned": assigned}


def read_options(raw: Mapping[str, str], streaming: bool) -> ReadOptions:
    check_known(raw, READ_OPTIONS, "source")
    options = normalize(raw)
    isolation = options.get("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise OptionError(f"Invalid value {options['isolation.level']} for configuration "
                          f"isolation.level: String must be one of: {', '.join(ISOLATION_LEVELS)}")
    subscription = _subscription(options)
    bootstrap = bootstrap_of(options)
    starting = _offset_spec(options, "starting", "latest" if streaming else "earliest")
    ending = None
    if streaming:
        for key, name in (("endingoffsets", "ending offset"),
                          ("endingoffsetsbytimestamp", "ending timestamp"),
                          ("endingtimestamp", "ending timestamp")):
            if key in options:
                raise OptionError(f"{name} not valid in streaming queries")
    else:
        if starting.kind == "latest":
            raise OptionError("starting offset can't be latest for batch queries on Strata")
        for tp, offset in starting.offsets if starting.kind == "specific" else ():
            if offset == LATEST:
                raise OptionError(f"startingOffsets for {format_tp(tp)} can't be latest for batch "
                                  f"queries on Strata")
        ending = _offset_spec(options, "ending", "latest")
        if ending.kind == "earliest":
            raise OptionError("ending offset can't be earliest for batch queries on Strata")
        for tp, offset in ending.offsets if ending.kind == "specific" else ():
            if offset == EARLIEST:
                raise OptionError(f"ending offset for {format_tp(tp)} can't be earliest for batch "
                                  f"queries on Strata")
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or "
                          f"'latest', got {strategy!r}")
    max_offsets = parse_int(options, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_offsets = parse_int(options, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise OptionError(f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
                          f"maxOffsetsPerTrigger({max_offsets}).")
    poll_timeout = parse_int(options, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    request_timeout = parse_int(options, "request.timeout.ms", "request.timeout.ms")
    return ReadOptions(
        bootstrap=bootstrap,
        security=security_of(options),
        **subscription,
        starting=starting,
        ending=ending,
        starting_strategy=strategy,
        include_headers=parse_bool(options, "includeheaders", False, "includeHeaders"),
        fail_on_data_loss=parse_bool(options, "failondataloss", True, "failOnDataLoss"),
        min_partitions=parse_int(options, "minpartitions", "minPartitions"),
        max_records_per_partition=parse_int(options, "maxrecordsperpartition",
                                            "maxRecordsPerPartition"),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=parse_duration_ms(options, "maxtriggerdelay", "maxTriggerDelay",
                                               DEFAULT_MAX_TRIGGER_DELAY_MS),
        fetch_bytes=parse_int(options, "max.partition.fetch.bytes", "max.partition.fetch.bytes",
                              default=DEFAULT_FETCH_BYTES),
        request_timeout_ms=poll_timeout or request_timeout or DEFAULT_REQUEST_TIMEOUT_MS,
        fetch_retries=parse_int(options, "fetchoffset.numretries", "fetchOffset.numRetries",
                                minimum=0, default=3),
        retry_interval_ms=parse_int(options, "fetchoffset.retryintervalms",
                                    "fetchOffset.retryIntervalMs", minimum=0, default=1000),
        read_committed=isolation == "read_committed",
    )


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None  # the `topic` option: wins over the column
    linger_ms: int = 5
    batch_size: int = 1024 * 1024
    compression: str = "none"
    retries: int = 5
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    security: tuple[tuple[str, str], ...] = ()  # client security settings (security_of)

    def producer_options(self) -> dict:
        return {"linger_ms": self.linger_ms, "max_batch_bytes": self.batch_size,
                "compression": self.compression, "retries": self.retries,
                "retry_backoff_ms": self.retry_backoff_ms,
                "request_timeout_ms": self.request_timeout_ms, "security": dict(self.security)}


COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def write_options(raw: Mapping[str, str]) -> WriteOptions:
    check_known(raw, WRITE_OPTIONS, "sink")
    options = normalize(raw)
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    compression = options.get("compression.type", "none").strip().lower()
    if compression not in COMPRESSIONS:
        raise OptionError(f"option 'compression.type' must be one of {', '.join(COMPRESSIONS)}, "
                          f"got {compression!r}")
    return WriteOptions(
        bootstrap=bootstrap_of(options),
        security=security_of(options),
        topic=topic.strip() if topic is not None else None,
        linger_ms=parse_int(options, "linger.ms", "linger.ms", minimum=0, default=5),
        batch_size=parse_int(options, "batch.size", "batch.size", default=1024 * 1024),
        compression=compression,
        retries=parse_int(options, "retries", "retries", minimum=0, default=5),
        retry_backoff_ms=parse_int(options, "retry.backoff.ms", "retry.backoff.ms", minimum=0,
                                   default=100),
        request_timeout_ms=parse_int(options, "request.timeout.ms", "request.timeout.ms",
                                     default=30_000),
    )
