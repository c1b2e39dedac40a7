"""The core Kafka APIs over Strata's logs: one coroutine per API, every version.

Each handler takes the kio request of the version that arrived and builds the
response class of that version with `codec.make` (fields a version lacks are
dropped), so one body serves every supported version. See KAFKA.md for the
supported versions and the decisions; the notable ones:

- Metadata: this broker (node 0, the advertised host:port) leads every partition,
  is the only replica and the controller. Listing all topics includes
  `__consumer_offsets` with is_internal (as Kafka). Auto-creation (v4+:
  allow_auto_topic_creation; v0-3: always asked) needs auto.create.topics.enable;
  the topic is created synchronously and listed at once (Kafka answers
  LEADER_NOT_AVAILABLE until its controller has created it).
- Produce: each partition's records are appended as they arrived (the validator
  restamps base offsets, and timestamps for LogAppendTime), by the partition
  service's one policy (broker/partitions.py): inline on the loop when no fsync
  is due and the set is small enough, else through the partition's appender in
  the executor. acks 1 and -1 answer once the batch is in the
  log; -1 adds no fsync (one replica: the in-sync set is this log; durability
  follows flush.messages/flush.ms, as Kafka's). acks 0: no answer; if a partition
  failed, the connection is closed, as Kafka does so that the client notices.
  Other acks: INVALID_REQUIRED_ACKS. Batches with producerId >= 0 are appended;
  idempotence (sequence checks, duplicates answered with their original offset)
  is checked by Log.append itself, under the log's lock (storage/producer_state.py).
- Fetch: see `fetch`; fetch sessions (KIP-227) in fetch_sessions.py.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import structlog
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from kafka_format.batch import ATTRIBUTES_OFFSET, FIELD_OFFSET, PRODUCER_ID_OFFSET, TRANSACTIONAL_BIT
from kafka_format.errors import InvalidConfigError, InvalidRequestError, RecordValidationError, StrataError
from kafka_format.topic_names import validate_topic_name
from storage.config import BROKER_NAMES, LogConfig
from storage.config import KEYS as TOPIC_KEYS
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from storage.max_timestamp import max_timestamp_offset

from ..connection import CloseConnection
from ..group_configs import GroupConfigs
from ..partitions import READ_COMMITTED, IsolatedRead, append_outcome, strata_error
from ..security.authorizer import (
    ClusterAuthorizationError,
    GroupAuthorizationError,
    Op,
    Resource,
    TopicAuthorizationError,
)
from . import codec
from .acls import allowed, allowed_cluster
from .apis import DECLINE, ApiKey
from .authorized import CLUSTER_NAME, ResourceType
from .authorized import requested as authorized_field
from .codec import RecordsSplicer, has_field, make, nested
from .fetch_sessions import FetchContext, FetchSessions
from .state import KafkaState

log = structlog.get_logger("strata.kafka")

INT32_MAX = 2**31 - 1
# ListOffsets special timestamps (Kafka's ListOffsetsRequest)
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
# DescribeConfigs resource types and config sources (Kafka's ConfigResource.Type, ConfigSource)
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 32
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 1, 4, 5, 8
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
FINAL_EPOCH = -1
# A v2 batch header read from its attributes on: attributes, producerId, producerEpoch
TXN_FIELDS = struct.Struct(f">h{PRODUCER_ID_OFFSET - ATTRIBUTES_OFFSET - 2}xqh")
MAGIC_OFFSET = FIELD_OFFSET["magic"]

E = ErrorCode
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def _code(e: StrataError) -> int:
    return e.code


def _aborted(AbortedR: type | None, aborted) -> tuple:
    """A Fetch partition's `aborted_transactions` from (producerId, firstOffset) pairs."""
    if AbortedR is None or not aborted:
        return ()
    return tuple(make(AbortedR, producer_id=producer_id, first_offset=first) for producer_id, first in aborted)


def _record_errors(failure: StrataError | None, RecordErrorR: type | None) -> tuple[tuple, str | None]:
    """A failed partition's `record_errors` (Produce v8+) and `error_message`, as
    Kafka answers them: each record a RecordValidationError names, by its index in
    its batch, and the error's message; none and a null message for other errors
    (Kafka leaves generic messages out)."""
    if not isinstance(failure, RecordValidationError):
        return (), None
    if RecordErrorR is None:
        return (), str(failure)
    return tuple(make(RecordErrorR, batch_index=index, batch_index_error_message=message)
                 for index, message in failure.record_errors), str(failure)


class _Target:
    """One partition of a Produce/Fetch/ListOffsets request, resolved."""

    __slots__ = ("index", "log", "error", "failure", "offset", "max_bytes", "records", "result", "to_create",
                 "isolated")

    def __init__(self, index: int, log: Log | None = None, error: int = 0):
        self.index = index
        self.log = log
        self.error = error
        self.failure: StrataError | None = None  # the error behind `error`, when it has details to answer
        self.offset = 0  # Fetch: where to read from
        self.max_bytes = 0  # Fetch: partition_max_bytes
        self.records: Any = None  # Produce: the records to append
        self.result: Any = None
        self.to_create: str | None = None  # an internal topic whose log is created on first use
        self.isolated: IsolatedRead | None = None  # Fetch: the read's offsets and aborted transactions


class _FetchParams:
    """What a Fetch request asks, read once per request."""

    __slots__ = ("by_id", "replica", "max_wait_ms", "min_bytes", "budget", "isolation_level", "read_committed")

    def __init__(self, req, ctx, fetch_max_bytes: int):
        replica = getattr(req, "replica_id", -1)
        if has_field(type(req), "replica_state"):
            replica = req.replica_state.replica_id
        self.replica = replica
        self.by_id = ctx.api_version >= 13
        self.max_wait_ms = int(req.max_wait.total_seconds() * 1000)
        self.min_bytes = req.min_bytes
        self.budget = min(req.max_bytes if req.max_bytes >= 0 else 0, fetch_max_bytes, INT32_MAX - (1 << 20))
        self.isolation_level = getattr(req, "isolation_level", 0)
        self.read_committed = self.isolation_level == READ_COMMITTED


class CoreHandlers:
    def __init__(self, apis):
        self.apis = apis
        self.config = apis.config
        self.registry = apis.registry
        self.partitions = apis.partitions  # broker/partitions.py: shared with the native listener
        self.state: KafkaState | None = None  # set by the app once the data dir is locked
        self.fetch_sessions = FetchSessions(self.config.max_incremental_fetch_session_cache_slots,
                                            self.config.min_incremental_fetch_session_eviction_ms)
        self._claiming: asyncio.Lock | None = None

    def register_all(self) -> None:
        r = self.apis.register
        r(ApiKey.API_VERSIONS, self.api_versions, 0, 4)
        r(ApiKey.METADATA, self.metadata, 0, 13)
        r(ApiKey.PRODUCE, self.produce, 3, 13, now=self.produce_now)
        r(ApiKey.FETCH, self.fetch, 4, 18, now=self.fetch_now)
        r(ApiKey.LIST_OFFSETS, self.list_offsets, 1, 10)
        r(ApiKey.CREATE_TOPICS, self.create_topics, 2, 7)
        r(ApiKey.DELETE_TOPICS, self.delete_topics, 1, 6)
        r(ApiKey.DESCRIBE_CONFIGS, self.describe_configs, 1, 4)
        r(ApiKey.ALTER_CONFIGS, self.alter_configs, 0, 2)
        r(ApiKey.INCREMENTAL_ALTER_CONFIGS, self.incremental_alter_configs, 0, 1)
        r(ApiKey.DELETE_RECORDS, self.delete_records, 0, 2)
        r(ApiKey.INIT_PRODUCER_ID, self.init_producer_id, 0, 5)

    # ---- helpers ---------------------------------------------------------------------------------

    def _target(self, name: str | None, topic_id, partition: int, *, produce: bool = False) -> _Target:
        """A partition by topic name, or by topic id (name None), on the loop: the Log
        or an error code. Neither (log None, no error): an internal topic's log not
        created yet, named in `target.to_create` for `_create_log`."""
        target = _Target(partition)
        if name is None:
            known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
            if known is None:
                target.error = E.unknown_topic_id
                return target
            name = known.name
        try:
            target.log = self.partitions.open_log(name, partition, produce=produce)
        except StrataError as e:
            target.error = _code(e)
        if target.log is None and not target.error:
            target.to_create = name
        return target

    def _topic_name(self, name: str | None, topic) -> str:
        """A request topic's name, looked up by its id when it has none ("" when unknown)."""
        if name is not None:
            return name
        topic_id = getattr(topic, "topic_id", None)
        known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
        return known.name if known is not None else ""

    async def _resolve(self, name: str | None, topic_id, partition: int, *, produce: bool = False) -> _Target:
        """`_target`, creating an internal topic's log on first use."""
        target = self._target(name, topic_id, partition, produce=produce)
        if target.log is None and not target.error:
            await self._create_log(target)
        return target

    async def _create_log(self, target: _Target) -> None:
        """The log `_target` left to create (an internal topic's partition)."""
        assert target.to_create is not None
        try:
            target.log = await self.partitions.partition_log(target.to_create, target.index)
        except StrataError as e:
            target.error = _code(e)
        target.to_create = None

    async def _each_partition(self, ctx, topics, answer, operation: Op) -> tuple:
        """The per-topic, per-partition answers of a request addressed by topic name
        (ListOffsets, DeleteRecords): `answer(part, target, PartitionResponse)`; a
        topic the connection may not perform `operation` on is TOPIC_AUTHORIZATION_FAILED."""
        TopicR = nested(ctx.response_class, "topics")
        PartR = nested(TopicR, "partitions")
        out = []
        for topic in topics:
            parts = []
            permitted = allowed(ctx, operation, Resource.TOPIC, topic.name)
            for part in topic.partitions:
                if not permitted:
                    parts.append(await answer(part, _Target(part.partition_index,
                                                            error=E.topic_authorization_failed), PartR))
                    continue
                target = await self._resolve(topic.name, None, part.partition_index)
                parts.append(await answer(part, target, PartR))
            out.append(make(TopicR, name=topic.name, partitions=tuple(parts)))
        return tuple(out)

    # ---- ApiVersions -------------------------------------------------------------------------

    def _api_keys(self, response_class: type) -> tuple:
        key_class = nested(response_class, "api_keys")
        return tuple(make(key_class, api_key=k, min_version=lo, max_version=hi)
                     for k, lo, hi in self.apis.supported())

    async def api_versions(self, req, ctx):
        return make(ctx.response_class, error_code=E.none, api_keys=self._api_keys(ctx.response_class),
                    throttle_time=0)

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """KIP-511: an ApiVersions version the broker does not know is answered v0
        with UNSUPPORTED_VERSION and the supported versions (header v0)."""
        response_class = load_response_schema(ApiKey.API_VERSIONS, 0)
        response = make(response_class, error_code=E.unsupported_version,
                        api_keys=self._api_keys(response_class))
        return codec.encode_response(correlation_id, response)

    # ---- Metadata ----------------------------------------------------------------------------

    async def metadata(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        PartR = nested(TopicR, "partitions")
        host, port = ctx.advertised
        node = self.apis.node_id
        brokers = (make(nested(R, "brokers"), node_id=node, host=host, port=port, rack=None),)
        allow_auto = getattr(req, "allow_auto_topic_creation", True) and self.config.auto_create_topics
        requested = req.topics
        if requested is None or (ctx.api_version == 0 and not requested):
            # Every topic the connection may DESCRIBE; the others are left out.
            wanted: list[tuple[str | None, Any]] = [(n, None) for n in self.registry.names(include_internal=True)
                                                    if allowed(ctx, Op.DESCRIBE, Resource.TOPIC, n)]
        else:
            wanted = [(getattr(t, "name", None), getattr(t, "topic_id", None)) for t in requested]
            if ctx.api_version < 12 and any(name is None for name, _ in wanted):
                # As Kafka: v10-11 carry topic ids but their responses cannot name an
                # unknown one (the response's name is not nullable before v12).
                raise InvalidRequestError(f"topic name can not be null for version {ctx.api_version}")
        topics = []
        for name, topic_id in wanted:
            if name is None:
                known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
                if known is None:
                    topics.append(make(TopicR, error_code=E.unknown_topic_id, name=None,
                                       topic_id=topic_id, partitions=()))
                    continue
                name = known.name
            if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                topics.append(make(TopicR, error_code=E.topic_authorization_failed, name=name,
                                   topic_id=topic_id or codec.ZERO_UUID, partitions=()))
                continue
            try:
                validate_topic_name(name)
            except StrataError as e:
                topics.append(make(TopicR, error_code=_code(e), name=name, topic_id=codec.ZERO_UUID,
                                   partitions=()))
                continue
            known = self.registry.get(name)
            if known is None and allow_auto and not (allowed_cluster(ctx, Op.CREATE)
                                                     or allowed(ctx, Op.CREATE, Resource.TOPIC, name)):
                topics.append(make(TopicR, error_code=E.topic_authorization_failed, name=name,
                                   topic_id=codec.ZERO_UUID, partitions=()))
                continue
            if known is None and allow_auto:
                try:
                    await self.apis.blocking(self.partitions.auto_create_topic, name)
                except StrataError as e:
                    topics.append(make(TopicR, error_code=_code(e), name=name,
                                       topic_id=codec.ZERO_UUID, partitions=()))
                    continue
                known = self.registry.get(name)
            if known is None:
                topics.append(make(TopicR, error_code=E.unknown_topic_or_partition, name=name,
                                   topic_id=codec.ZERO_UUID, partitions=()))
                continue
            partitions = tuple(make(PartR, error_code=E.none, partition_index=p, leader_id=node,
                                    leader_epoch=0, replica_nodes=(node,), isr_nodes=(node,),
                                    offline_replicas=())
                               for p in range(known.partitions))
            topics.append(make(TopicR, error_code=E.none, name=name, topic_id=known.topic_id or None,
                               is_internal=known.internal, partitions=partitions,
                               topic_authorized_operations=authorized_field(
                                   getattr(req, "include_topic_authorized_operations", False),
                                   ResourceType.TOPIC, name, ctx)))
        cluster_id = self.state.cluster_id if self.state is not None else None
        return make(R, throttle_time=0, brokers=brokers, cluster_id=cluster_id, controller_id=node,
                    topics=tuple(topics), error_code=E.none,
                    cluster_authorized_operations=authorized_field(
                        getattr(req, "include_cluster_authorized_operations", False),
                        ResourceType.CLUSTER, CLUSTER_NAME, ctx))

    # ---- Produce -----------------------------------------------------------------------------

    def _produce_plan(self, req, ctx) -> list[tuple[Any, list[_Target]]]:
        """Every partition of a Produce resolved, on the loop (a produce never creates
        a log: internal topics refuse it first), its records in `records`."""
        acks = req.acks
        transactional_id = req.transactional_id
        by_id = not has_field(type(req.topic_data[0]), "name") if req.topic_data else False
        plan: list[tuple[Any, list[_Target]]] = []
        transactional_id = getattr(req, "transactional_id", None)
        refused = (TRANSACTIONAL_ID_AUTHORIZATION_FAILED if transactional_id is not None and not allowed(
            ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id) else 0)
        for topic in req.topic_data:
            name = None if by_id else topic.name
            denied = refused or (0 if allowed(ctx, Op.WRITE, Resource.TOPIC, self._topic_name(name, topic))
                                 else E.topic_authorization_failed)
            targets = []
            for part in topic.partition_data:
                if acks not in (0, 1, -1):
                    targets.append(_Target(part.index, error=E.invalid_required_acks))
                    continue
                if denied:
                    targets.append(_Target(part.index, error=denied))
                    continue
                target = self._target(name, getattr(topic, "topic_id", None), part.index, produce=True)
                if part.records is None:
                    target.error = target.error or E.corrupt_message
                elif transactional_id is not None and not target.error:
                    target.error = self._verify_transactional(transactional_id, target.log, part.records)
                target.records = part.records
                targets.append(target)
            plan.append((topic, targets))
        return plan

    def _verify_transactional(self, transactional_id: str, partition_log: Log | None, records) -> int:
        """The transaction coordinator's check of a transactional first write to a
        partition (broker/kafka/transactions: verify_produce); 0 for anything else."""
        transactions = getattr(self.apis, "transactions", None)
        if transactions is None or partition_log is None \
                or len(records) < ATTRIBUTES_OFFSET + TXN_FIELDS.size or records[MAGIC_OFFSET] != 2:
            return 0
        attributes, producer_id, epoch = TXN_FIELDS.unpack_from(records, ATTRIBUTES_OFFSET)
        if not attributes & TRANSACTIONAL_BIT or producer_id in partition_log.producer_state.ongoing:
            return 0
        return transactions.verify_produce(transactional_id, producer_id, epoch, partition_log.topic,
                                           partition_log.partition)

    def produce_now(self, req, ctx):
        """Produce without waiting (the fast path, KafkaApis.handle_now): when acks is
        1 or -1 and every partition's append runs inline by the partition service's
        policy, append them all on the loop and answer; else DECLINE, with nothing done."""
        if req.acks == 0:
            return DECLINE
        plan = self._produce_plan(req, ctx)
        partitions = self.partitions
        targets = [t for _, ts in plan for t in ts if not t.error]
        if not all(partitions.appends_inline(t.log, len(t.records)) for t in targets):
            return DECLINE
        throttle = self._throttle(ctx, "produce", plan)
        for t in targets:
            try:
                t.result = partitions.append_inline(t.log, t.records)
            except Exception as e:
                t.error = partitions.error_code(e, t.log)
                t.failure = strata_error(e)
            t.records = None
        return self._produce_response(ctx, plan, throttle)

    async def produce(self, req, ctx):
        plan = self._produce_plan(req, ctx)
        throttle = self._throttle(ctx, "produce", plan)
        # Each partition's append follows the partition service's one policy: inline
        # on the loop when cheap, else queued on the partition's appender; the
        # executor ones run meanwhile and are awaited below, in order.
        partitions = self.partitions
        for _, targets in plan:
            for target in targets:
                if not target.error:
                    target.result = partitions.start_append(target.log, target.records, append_outcome)
                    target.records = None
        for _, targets in plan:
            for target in targets:
                if not target.error:
                    started = target.result
                    done, target.error, target.failure = \
                        await started if isinstance(started, asyncio.Future) else started
                    target.result = done
        if req.acks == 0:
            if any(t.error for _, targets in plan for t in targets):
                log.info("kafka_acks0_produce_failed", peer=ctx.peer)
                raise CloseConnection()
            return None
        return self._produce_response(ctx, plan, throttle)

    def _throttle(self, ctx, kind: str, plan: list[tuple[Any, list[_Target]]]) -> int:
        """Client quotas (broker/quotas.py, through the partition service): the
        throttle time of this Produce (its record bytes) or Fetch (the record bytes
        it answers); the connection mutes itself that long after the reply."""
        quotas = self.partitions.quotas
        if quotas is None or not quotas.active:
            return 0
        if kind == "produce":
            nbytes = sum(len(t.records) for _, targets in plan for t in targets if t.records is not None)
        else:
            nbytes = sum(t.result.length for _, targets in plan for t in targets if t.result is not None)
        return self.partitions.throttle(ctx.connection, kind, ctx.client_id, nbytes)

    def _produce_response(self, ctx, plan: list[tuple[Any, list[_Target]]], throttle: int = 0):
        R = ctx.response_class
        TopicR = nested(R, "responses")
        PartR = nested(TopicR, "partition_responses")
        RecordErrorR = nested(PartR, "record_errors") if has_field(PartR, "record_errors") else None
        responses = []
        for topic, targets in plan:
            parts = []
            for t in targets:
                if t.error:
                    record_errors, message = _record_errors(t.failure, RecordErrorR)
                    parts.append(make(PartR, index=t.index, error_code=t.error, base_offset=-1,
                                      log_append_time=-1, log_start_offset=-1, record_errors=record_errors,
                                      error_message=message))
                else:
                    done = t.result
                    parts.append(make(PartR, index=t.index, error_code=E.none,
                                      base_offset=done.first_offset,
                                      log_append_time=done.log_append_time,
                                      log_start_offset=done.log_start_offset, record_errors=()))
            responses.append(make(TopicR, name=getattr(topic, "name", None),
                                  topic_id=getattr(topic, "topic_id", None),
                                  partition_responses=tuple(parts)))
        return make(R, responses=tuple(responses), throttle_time=throttle)

    # ---- Fetch -------------------------------------------------------------------------------

    async def fetch(self, req, ctx):
        """Kafka's fetch over the shared logs.

        - Sessions (fetch_sessions.py): an incremental fetch reads the partitions of
          its session that may have changed, answers those that did, and long-polls
          the session's one wake-up event.
        - Budget: min(max_bytes, fetch.max.bytes); each partition reads at most
          min(partition_max_bytes, what is left). Until some partition returned
          bytes, reads use min_one_message, so the first batch comes whole even past
          the limits (Kafka's minOneMessage); later partitions get whole batches
          that fit (a lone batch over the rest is cut, as Kafka's slice).
        - Answers at once with any error, with >= min_bytes, or when max_wait <= 0;
          otherwise waits for an append to one of the partitions (either protocol
          wakes PartitionWaiters), for max_wait, or for shutdown, then reads again.
        - The records are FileSlices spliced into kio's encoding and sent with sendfile.
        """
        fetch = _FetchParams(req, ctx, self.config.fetch_max_bytes)
        session = self.fetch_sessions.context(req, ctx.api_version, privileged=fetch.replica >= 0)
        if session.error:
            return self._fetch_refused(ctx, session.error)
        loop = self.apis.loop
        deadline = loop.time() + fetch.max_wait_ms / 1000
        while True:
            plan = self._fetch_plan(session.topics(), fetch, ctx)
            flat = [t for _, targets in plan for t in targets]
            for t in flat:
                if t.log is None and not t.error:
                    await self._create_log(t)
            may_wait = fetch.max_wait_ms > 0 and not self.apis.shutting_down
            events = self._watch(plan, session, may_wait)
            self._read_all(flat, fetch.budget, fetch.isolation_level)  # on the loop, as native FETCH reads
            remaining = deadline - loop.time()
            if not may_wait or self._fetch_complete(flat, fetch) or remaining <= 0 or not events:
                break
            _release(flat)
            await self.partitions.wait_for_append(events, remaining)
        try:
            return self._fetch_response(ctx, plan, fetch.read_committed, session)
        except BaseException:
            _release(flat)
            raise

    def fetch_now(self, req, ctx):
        """Fetch without waiting (the fast path, KafkaApis.handle_now): the answer
        when it needs no log created and no long poll; else DECLINE, with nothing
        held (the reads are released)."""
        fetch = _FetchParams(req, ctx, self.config.fetch_max_bytes)
        session = self.fetch_sessions.context(req, ctx.api_version, privileged=fetch.replica >= 0)
        if session.error:
            return self._fetch_refused(ctx, session.error)
        plan = self._fetch_plan(session.topics(), fetch, ctx)
        flat = [t for _, targets in plan for t in targets]
        if any(t.log is None and not t.error for t in flat):
            return DECLINE  # an internal topic's log to create: in the executor
        self._watch(plan, session, False)
        self._read_all(flat, fetch.budget, fetch.isolation_level)
        if (fetch.max_wait_ms > 0 and not self.apis.shutting_down and not self._fetch_complete(flat, fetch)
                and (session.incremental or any(t.log is not None for t in flat))):
            _release(flat)
            return DECLINE  # a long poll: the connection's task waits
        try:
            return self._fetch_response(ctx, plan, fetch.read_committed, session)
        except BaseException:
            _release(flat)
            raise

    def _watch(self, plan, session: FetchContext, may_wait: bool) -> list[asyncio.Event]:
        """The events a long poll waits on, taken before the reads: each partition's
        (`may_wait`); for an incremental fetch the session's one wake-up event, linked
        into every partition read, each partition keeping its own (fetch_sessions.py)."""
        if session.session is None:
            return [self.partitions.watch((t.log.topic, t.log.partition))
                    for _, targets in plan for t in targets if t.log is not None] if may_wait else []
        wake = session.session.wake
        for topic, targets in plan:
            for part, t in zip(topic.partitions, targets, strict=True):
                part.watching(None if t.log is None or t.error else
                              self.partitions.watch_into((t.log.topic, t.log.partition), wake))
        return [wake]

    @staticmethod
    def _fetch_refused(ctx, error: int):
        """The answer to a fetch its session refuses (Kafka's SessionErrorContext)."""
        return make(ctx.response_class, throttle_time=0, error_code=error, session_id=0, responses=())

    def _fetch_plan(self, topics, fetch: _FetchParams, ctx) -> list[tuple[Any, list[_Target]]]:
        """Every partition of a Fetch (the request's or its session's) resolved on the loop (`_target`);
        a topic the connection may not READ is TOPIC_AUTHORIZATION_FAILED."""
        plan: list[tuple[Any, list[_Target]]] = []
        for topic in topics:
            name = None if fetch.by_id else topic.topic
            permitted = allowed(ctx, Op.READ, Resource.TOPIC, self._topic_name(name, topic))
            targets = []
            for part in topic.partitions:
                if fetch.replica >= 0:  # a follower: there are none
                    targets.append(_Target(part.partition, error=E.not_leader_or_follower))
                    continue
                if not permitted:
                    targets.append(_Target(part.partition, error=E.topic_authorization_failed))
                    continue
                target = self._target(name, getattr(topic, "topic_id", None), part.partition)
                target.offset = part.fetch_offset
                target.max_bytes = max(part.partition_max_bytes, 0)
                targets.append(target)
            plan.append((topic, targets))
        return plan

    @staticmethod
    def _fetch_complete(flat: list[_Target], fetch: _FetchParams) -> bool:
        """Whether a fetch answers now: an error, or min_bytes read."""
        total = sum(t.result.length for t in flat if t.result is not None)
        return total >= fetch.min_bytes or any(t.error for t in flat)

    def _read_all(self, flat: list[_Target], budget: int, isolation_level: int) -> None:
        """Read every partition in order from the budget (on the loop: the partition
        service's read at the fetch's isolation level)."""
        min_one = True
        for t in flat:
            if t.error or t.log is None:
                continue
            t.isolated = None
            try:
                if t.offset == t.log.log_end_offset:
                    continue
                t.isolated = self.partitions.read_isolated(t.log, t.offset, min(t.max_bytes, budget),
                                                           isolation_level, min_one_message=min_one)
            except Exception as e:
                t.error = self.partitions.error_code(e, t.log)
                continue
            found = t.isolated.records
            if found.length:
                budget = max(budget - found.length, 0)
                min_one = False
                t.result = found
            else:
                found.release()

    def _fetch_response(self, ctx, plan, read_committed: bool, session: FetchContext):
        R = ctx.response_class
        TopicR = nested(R, "responses")
        PartR = nested(TopicR, "partitions")
        AbortedR = nested(PartR, "aborted_transactions") if has_field(PartR, "aborted_transactions") else None
        throttle = self._throttle(ctx, "fetch", plan)
        splicer = RecordsSplicer()
        responses = []
        for topic, targets in plan:
            parts = []
            for part, t in zip(topic.partitions, targets, strict=True):
                if t.error or t.log is None:
                    if not session.include(topic, part, False, t.error, -1, -1, -1):
                        continue
                    parts.append(make(PartR, partition_index=t.index, error_code=t.error or E.none,
                                      high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                      aborted_transactions=None, preferred_read_replica=-1,
                                      records=b""))
                    continue
                isolated = t.isolated
                if isolated is not None:
                    end, lso, aborted = isolated.high_watermark, isolated.last_stable_offset, isolated.aborted
                else:  # nothing read: at the log end
                    lso = t.log.last_stable_offset
                    end, aborted = t.log.log_end_offset, None
                if not session.include(topic, part, t.result is not None, E.none, end, lso, t.log.log_start_offset):
                    _release([t])
                    continue
                records = splicer.marker(t.result) if t.result is not None else b""
                t.result = None  # the splicer owns it now
                parts.append(make(PartR, partition_index=t.index, error_code=E.none, high_watermark=end,
                                  last_stable_offset=lso, log_start_offset=t.log.log_start_offset,
                                  aborted_transactions=_aborted(AbortedR, aborted) if read_committed else None,
                                  preferred_read_replica=-1, records=records))
            if parts or not session.incremental:
                responses.append(make(TopicR, topic=getattr(topic, "topic", None),
                                      topic_id=getattr(topic, "topic_id", None), partitions=tuple(parts)))
        error, session_id = session.finish(self.fetch_sessions.now_ms())
        if error:
            splicer.release()
            return [codec.encode_response(ctx.correlation_id, self._fetch_refused(ctx, error))]
        response = make(R, throttle_time=throttle, error_code=E.none, session_id=session_id,
                        responses=tuple(responses))
        try:
            if not splicer.slices:
                return [codec.encode_response(ctx.correlation_id, response)]
            return codec.encode_spliced(ctx.correlation_id, response, splicer)
        except BaseException:
            splicer.release()
            raise

    # ---- ListOffsets -------------------------------------------------------------------------

    async def list_offsets(self, req, ctx):
        isolation_level = getattr(req, "isolation_level", 0)

        async def answer(part, target, PartR):
            code, timestamp, offset = target.error, -1, -1
            if not code:
                try:
                    timestamp, offset = await self._offset_for(target.log, part.timestamp, isolation_level)
                except StrataError as e:
                    code = _code(e)
            return make(PartR, partition_index=part.partition_index, error_code=code,
                        timestamp=timestamp, offset=offset, leader_epoch=0 if offset >= 0 else -1)

        return make(ctx.response_class, throttle_time=0,
                    topics=await self._each_partition(ctx, req.topics, answer, Op.DESCRIBE))

    async def _offset_for(self, partition_log: Log, timestamp: int, isolation_level: int) -> tuple[int, int]:
        """(timestamp, offset) for a ListOffsets timestamp: -1 latest (the last stable
        offset for READ_COMMITTED), -2 earliest, -3 the largest timestamp, -4 earliest
        local (= earliest), -5 latest tiered (nothing is tiered: -1), else the first
        record at or after the timestamp."""
        if timestamp == LATEST_TIMESTAMP:
            if isolation_level == READ_COMMITTED:
                return -1, self.partitions.last_stable_offset(partition_log)
            return -1, partition_log.log_end_offset
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return -1, partition_log.log_start_offset
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1
        if timestamp == MAX_TIMESTAMP:
            found = await self.apis.blocking(max_timestamp_offset, partition_log)
            return (-1, -1) if found is None else (found.timestamp, found.offset)
        found = await self.apis.blocking(partition_log.offset_for_timestamp, timestamp)
        return (-1, -1) if found is None else (found.timestamp, found.offset)

    # ---- topics ------------------------------------------------------------------------------

    async def create_topics(self, req, ctx):
        R = ctx.response_class
        TopicR = nested(R, "topics")
        ConfigR = nested(TopicR, "configs") if has_field(TopicR, "configs") else None
        names = [t.name for t in req.topics]
        results = []
        for topic in req.topics:
            message = None
            created = None
            try:
                if names.count(topic.name) > 1:
                    raise InvalidRequestError(f"topic {topic.name!r} appears more than once in the request")
                if not (allowed_cluster(ctx, Op.CREATE) or allowed(ctx, Op.CREATE, Resource.TOPIC, topic.name)):
                    raise TopicAuthorizationError(f"not authorized to create topic {topic.name!r}")
                partitions = self._partitions_to_create(topic)
                configs = tuple((c.name, c.value) for c in topic.configs)
                created = await self.apis.blocking(self._create, topic.name, partitions, configs,
                                                   req.validate_only)
                code = E.none
            except StrataError as e:
                code, message = _code(e), str(e)
            if code:
                results.append(make(TopicR, name=topic.name, topic_id=None, error_code=code,
                                    error_message=message, num_partitions=-1, replication_factor=-1,
                                    configs=None))
                continue
            configs_out = None
            if ConfigR is not None:
                configs_out = tuple(
                    make(ConfigR, name=k, value=v, read_only=False,
                         config_source=self._topic_config_source(created, k), is_sensitive=False)
                    for k, v in created.log_config.to_props().items())
            results.append(make(TopicR, name=topic.name, topic_id=created.topic_id or None,
                                error_code=E.none, error_message=None, num_partitions=created.partitions,
                                replication_factor=1, configs=configs_out))
        return make(R, throttle_time=0, topics=tuple(results))

    def _partitions_to_create(self, topic) -> int:
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise InvalidRequestError("both numPartitions or replicationFactor and "
                                          "replicasAssignments were set")
            for a in topic.assignments:
                if tuple(a.broker_ids) != (self.apis.node_id,):
                    raise _InvalidReplicaAssignment(
                        f"partition {a.partition_index}: the only broker is {self.apis.node_id}")
            indexes = sorted(a.partition_index for a in topic.assignments)
            if indexes != list(range(len(indexes))):
                raise _InvalidReplicaAssignment("partitions must be numbered 0..n-1")
            return len(indexes)
        if topic.replication_factor not in (-1, 1):
            raise _InvalidReplicationFactor(
                f"replication factor {topic.replication_factor} is larger than the 1 available broker"
                if topic.replication_factor > 1 else
                "replication factor must be larger than 0, or -1 to use the default")
        return topic.num_partitions

    def _create(self, name: str, partitions: int, configs, validate_only: bool):
        """Executor side; returns the Topic (what it would be with validate_only)."""
        if validate_only:
            self.registry.create(name, partitions, configs, validate_only=True)
            from ..topics import Topic
            overrides = dict(configs)
            return Topic(name, self.registry.num_partitions if partitions == -1 else partitions,
                         overrides, False, LogConfig.from_props(overrides, self.registry.defaults))
        return self.registry.create(name, partitions, configs)

    async def delete_topics(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "responses")
        if has_field(type(req), "topics"):
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(name, None) for name in req.topic_names]
        results = []
        for name, topic_id in wanted:
            code, message = E.none, None
            if name is None:
                known = self.registry.by_id(str(topic_id)) if topic_id is not None else None
                if known is None:
                    results.append(make(ResultR, name=None, topic_id=topic_id, error_code=E.unknown_topic_id,
                                        error_message="unknown topic id"))
                    continue
                name = known.name
            known = self.registry.get(name)
            if not allowed(ctx, Op.DELETE, Resource.TOPIC, name):
                results.append(make(ResultR, name=name, topic_id=topic_id, error_code=E.topic_authorization_failed,
                                    error_message=None))
                continue
            try:
                await self.partitions.remove_topic(name)
            except StrataError as e:
                code, message = _code(e), str(e)
            results.append(make(ResultR, name=name,
                                topic_id=(known.topic_id if known is not None and known.topic_id else None),
                                error_code=code, error_message=message))
        return make(R, throttle_time=0, responses=tuple(results))

    # ---- configs -----------------------------------------------------------------------------

    def _topic_config_source(self, topic, key: str) -> int:
        if key in topic.configs:
            return DYNAMIC_TOPIC_CONFIG
        if any(self.config.source(name) != "default" for name, _ in BROKER_NAMES.get(key, ())):
            return STATIC_BROKER_CONFIG
        return DEFAULT_CONFIG

    async def describe_configs(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "results")
        EntryR = nested(ResultR, "configs")
        SynonymR = nested(EntryR, "synonyms") if has_field(EntryR, "synonyms") else None
        synonyms = getattr(req, "include_synonyms", False)
        kinds = {k.name: k.kind for k in TOPIC_KEYS}
        results = []
        for resource in req.resources:
            keys = resource.configuration_keys
            entries: list[tuple[str, str | None, int, bool, str]] = []  # name, value, source, ro, kind
            code, message = E.none, None
            try:
                _authorize_config(ctx, Op.DESCRIBE_CONFIGS, resource)
                if resource.resource_type == TOPIC_RESOURCE:
                    topic = self.registry.require(resource.resource_name)
                    for k, v in topic.log_config.to_props().items():
                        entries.append((k, v, self._topic_config_source(topic, k), False,
                                        kinds.get(k, "")))
                elif resource.resource_type == BROKER_RESOURCE:
                    if resource.resource_name not in ("", str(self.apis.node_id)):
                        raise InvalidRequestError(f"unexpected broker id {resource.resource_name!r}")
                    for k in sorted(self.config.values):
                        v = self.config.values[k]
                        if v is None:
                            continue
                        v = str(v).lower() if isinstance(v, bool) else str(v)
                        source = DEFAULT_CONFIG if self.config.source(k) == "default" else STATIC_BROKER_CONFIG
                        entries.append((k, v, source, True, ""))
                elif resource.resource_type == BROKER_LOGGER_RESOURCE:
                    pass
                elif resource.resource_type == GROUP_RESOURCE:
                    for k, v, overridden in self._group_configs().describe(resource.resource_name):
                        entries.append((k, v, GROUP_CONFIG if overridden else DEFAULT_CONFIG, False, "int"))
                else:
                    raise InvalidRequestError(f"unsupported resource type {resource.resource_type}")
            except StrataError as e:
                code, message, entries = _code(e), str(e), []
            if keys:  # null or empty: every config (Kafka's ConfigHelper)
                wanted = set(keys)
                entries = [e for e in entries if e[0] in wanted]
            configs = tuple(
                make(EntryR, name=n, value=v, read_only=ro, config_source=src, is_default=src == DEFAULT_CONFIG,
                     is_sensitive=False, config_type=CONFIG_TYPES.get(kind, 0), documentation=None,
                     synonyms=(make(SynonymR, name=n, value=v, source=src),)
                     if synonyms and SynonymR is not None else ())
                for n, v, src, ro, kind in entries)
            results.append(make(ResultR, error_code=code, error_message=message,
                                resource_type=resource.resource_type,
                                resource_name=resource.resource_name, configs=configs))
        return make(R, throttle_time=0, results=tuple(results))

    async def alter_configs(self, req, ctx):
        """Legacy AlterConfigs: the listed configs replace all of a topic's overrides."""
        async def alter_topic(resource) -> None:
            topic = self.registry.require(resource.resource_name)
            listed = {}
            for c in resource.configs:
                if c.name in listed:
                    raise InvalidRequestError(f"duplicate config key {c.name!r}")
                if c.value is None:
                    raise InvalidRequestError(f"null value not supported for {c.name!r}")
                listed[c.name] = c.value
            changes = list(listed.items()) + [(k, None) for k in topic.configs if k not in listed]
            await self.apis.blocking(self._alter, resource.resource_name, changes, req.validate_only)

        async def alter_group(resource) -> None:
            changes = [(c.name, c.value) for c in resource.configs]
            names = [name for name, _ in changes]
            for name, value in changes:
                if names.count(name) > 1:
                    raise InvalidRequestError(f"duplicate config key {name!r}")
                if value is None:
                    raise InvalidRequestError(f"null value not supported for {name!r}")
            await self.apis.blocking(self._alter_group, resource.resource_name, changes, True, req.validate_only)
        return await self._alter_each(req, ctx, alter_topic, alter_group)

    async def incremental_alter_configs(self, req, ctx):
        kinds = {k.name: k.kind for k in TOPIC_KEYS}

        async def alter_topic(resource) -> None:
            topic = self.registry.require(resource.resource_name)
            effective = topic.log_config.to_props()
            changes: dict[str, str | None] = {}
            for c in resource.configs:
                if c.name in changes:
                    raise InvalidRequestError(f"duplicate config key {c.name!r}")
                if c.name not in kinds:
                    raise InvalidConfigError(f"unknown topic config {c.name!r}")
                op = c.config_operation
                if op == SET:
                    if c.value is None:
                        raise InvalidRequestError(f"null value not supported for {c.name!r}")
                    changes[c.name] = c.value
                elif op == DELETE:
                    changes[c.name] = None
                elif op in (APPEND, SUBTRACT):
                    if kinds[c.name] != "list":
                        raise InvalidConfigError(f"config value append/subtract is not allowed for "
                                                 f"config key {c.name!r}: it is not a list")
                    current = [v for v in effective[c.name].split(",") if v]
                    items = [v for v in (c.value or "").split(",") if v]
                    if op == APPEND:
                        current += [v for v in items if v not in current]
                    else:
                        current = [v for v in current if v not in items]
                    changes[c.name] = ",".join(current)
                else:
                    raise InvalidRequestError(f"unknown config operation {op}")
            await self.apis.blocking(self._alter, resource.resource_name, list(changes.items()),
                                     req.validate_only)

        async def alter_group(resource) -> None:
            changes: dict[str, str | None] = {}
            for c in resource.configs:
                if c.name in changes:
                    raise InvalidRequestError(f"duplicate config key {c.name!r}")
                if c.config_operation == SET:
                    if c.value is None:
                        raise InvalidRequestError(f"null value not supported for {c.name!r}")
                    changes[c.name] = c.value
                elif c.config_operation == DELETE:
                    changes[c.name] = None
                elif c.config_operation in (APPEND, SUBTRACT):
                    raise InvalidConfigError(f"config value append/subtract is not allowed for "
                                             f"config key {c.name!r}: it is not a list")
                else:
                    raise InvalidRequestError(f"unknown config operation {c.config_operation}")
            await self.apis.blocking(self._alter_group, resource.resource_name, list(changes.items()), False,
                                     req.validate_only)
        return await self._alter_each(req, ctx, alter_topic, alter_group)

    def _alter(self, name: str, changes, validate_only: bool) -> None:
        self.registry.alter(name, changes, validate_only=validate_only)

    def _group_configs(self) -> GroupConfigs:
        if self.apis.group_configs is None:
            raise InvalidRequestError("group configs are not loaded yet")
        return self.apis.group_configs

    def _alter_group(self, group: str, changes, replace: bool, validate_only: bool) -> None:
        self._group_configs().alter(group, changes, replace=replace, validate_only=validate_only)

    async def _alter_each(self, req, ctx, apply_topic, apply_group) -> Any:
        R = ctx.response_class
        ResultR = nested(R, "responses")
        results = []
        for resource in req.resources:
            code, message = E.none, None
            try:
                _authorize_config(ctx, Op.ALTER_CONFIGS, resource)
                if resource.resource_type == TOPIC_RESOURCE:
                    await apply_topic(resource)
                elif resource.resource_type == GROUP_RESOURCE:
                    await apply_group(resource)
                elif resource.resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE):
                    raise InvalidRequestError("broker configs are static in Strata (server.properties, "
                                              "STRATA_* or --set, then restart)")
                else:
                    raise InvalidRequestError(f"unsupported resource type {resource.resource_type}")
            except StrataError as e:
                code, message = _code(e), str(e)
            results.append(make(ResultR, error_code=code, error_message=message,
                                resource_type=resource.resource_type,
                                resource_name=resource.resource_name))
        return make(R, throttle_time=0, responses=tuple(results))

    # ---- DeleteRecords -----------------------------------------------------------------------

    async def delete_records(self, req, ctx):
        async def answer(part, target, PartR):
            low, code = -1, target.error
            if not code:
                try:
                    low = await self.partitions.delete_records_before(target.log, part.offset)
                except StrataError as e:
                    code = self.partitions.error_code(e, target.log)
            return make(PartR, partition_index=part.partition_index, low_watermark=low, error_code=code)

        return make(ctx.response_class, throttle_time=0,
                    topics=await self._each_partition(ctx, req.topics, answer, Op.DELETE))

    # ---- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, req, ctx):
        R = ctx.response_class
        if req.transactional_id is not None and not allowed(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID,
                                                            req.transactional_id):
            return make(R, throttle_time=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                        producer_epoch=-1)
        if req.transactional_id is None and not may_write_idempotently(ctx):
            return make(R, throttle_time=0, error_code=E.cluster_authorization_failed, producer_id=-1,
                        producer_epoch=-1)
        if req.transactional_id is not None:
            # Served by broker/kafka/transactions, which replaces this handler; without
            # that module there is no coordinator and transactional producers are refused.
            log.info("kafka_transactions_unsupported", transactional_id=req.transactional_id,
                     peer=ctx.peer)
            return make(R, throttle_time=0, error_code=E.invalid_request, producer_id=-1,
                        producer_epoch=-1)
        producer_id = await self.next_producer_id()
        return make(R, throttle_time=0, error_code=E.none, producer_id=producer_id, producer_epoch=0)

    async def next_producer_id(self) -> int:
        assert self.state is not None
        while True:
            value = self.state.next_producer_id()
            if value is not None:
                return value
            if self._claiming is None:
                self._claiming = asyncio.Lock()
            async with self._claiming:
                await self.apis.blocking(self.state.claim_block)


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


def may_write_idempotently(ctx) -> bool:
    """InitProducerId without a transactional id, as Kafka: IDEMPOTENT_WRITE on the
    cluster, or WRITE on some topic."""
    if allowed_cluster(ctx, Op.IDEMPOTENT_WRITE):
        return True
    authorizer = ctx.apis.partitions.authorizer
    return authorizer.authorize_any(ctx.connection, Op.WRITE, Resource.TOPIC)


class _InvalidReplicationFactor(StrataError):
    code = 38


class _InvalidReplicaAssignment(StrataError):
    code = 39


def _release(flat: list[_Target]) -> None:
    for t in flat:
        if t.result is not None and hasattr(t.result, "release"):
            t.result.release()
            t.result = None


__all__ = ["CoreHandlers"]
