"""Share groups (KIP-932) on the Kafka listener: ShareGroupHeartbeat (76, v1),
ShareGroupDescribe (77, v1), ShareFetch (78, v1-2) and ShareAcknowledge (79, v1-2),
the versions Kafka 4.2 serves; the offsets APIs (90-92) are share_group_offsets.py's.

The handlers stand on broker/share/ (SHARE.md there): `ShareGroup` membership and
its SimpleAssignor, the `ShareSessionCache`, and one `SharePartitionManager` over
a `ShareStateStore` of `__share_group_state` (registered as an internal topic on
first use and read back at the first request after a start). ShareFetch reads
the log through the core (`Reads.read_isolated`: read_committed stops at the
LSO and answers the aborted transactions), hands the batches to the manager,
which acquires records for the member, and waits in the core's one long poll
(`LongPoll.poll`) for ShareFetch's MaxWaitMs while nothing was acquired.

The share state changes in memory on the event loop (acquisition, acknowledgements,
releases, lock timeouts: no executor hop); only `__share_group_state` writes go to
the executor. One writer task writes the changes in rounds (`SharePartitionManager.
take_writes`), one round at a time in order; a request's acknowledgements of all its
partitions go in one round (with those of the requests that came meanwhile), and it
is answered only once that round is written: an answered acknowledgement survives a
crash. Acquisition writes nothing (as Kafka's); what it archived (aborted or
compacted records) or timed out is written by the next round.

A loop timer (`_timer`) applies acquisition-lock timeouts and member session
timeouts when they are due; expired members' records are released. A closed
connection (`connection_closed`, which broker/compose.py gives the Kafka listener's
server) ends the share sessions opened on it, and the records their members hold
become available at once (as Kafka's share session cache on a connection's close).

Authorization as Kafka's KafkaApis: READ on the group (GROUP_AUTHORIZATION_FAILED)
and READ on each topic (TOPIC_AUTHORIZATION_FAILED); ShareGroupDescribe and
DescribeShareGroupOffsets need DESCRIBE on the group. Errors are Kafka's codes
(broker/share/errors.py); nothing escapes as a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterable
from typing import Any

import structlog

from kafka_format.errors import StrataError

from ..core.types import READ_COMMITTED, READ_UNCOMMITTED
from ..core.waiting import Wait
from ..net.listeners import ConnectionContext
from ..security.authorizer import Op, Resource
from ..share import config as share_config
from ..share.errors import (
    GROUP_AUTHORIZATION_FAILED,
    GROUP_ID_NOT_FOUND,
    INVALID_REQUEST,
    NON_EMPTY_GROUP,
    UNKNOWN_TOPIC_ID,
    ShareError,
)
from ..share.group import ShareGroup, TopicInfo
from ..share.log_view import AbortedTxn, LogRead, StorageShareLog, batches_until
from ..share.manager import SharePartitionManager, WriteRound
from ..share.partition import AckBatch
from ..share.session import ShareSessionCache, TopicIdPartition
from ..share.state_store import DEFAULT_PARTITIONS, ShareStateStore
from ..state.internal_topics import SHARE_GROUP_STATE_TOPIC
from .allowed import allowed
from .codec import make, nested
from .request_types import NODE_ID, ApiKey
from .share_group_offsets import ShareGroupOffsets

log = structlog.get_logger("strata.share")
TOPIC_AUTHORIZATION_FAILED = 29
UNKNOWN_SERVER_ERROR = -1
ASSIGNOR_NAME = "simple"
TIMER_MAX_SLEEP_S = 1.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class ShareGroups:
    """The share groups of the broker and their handlers (the module's doc)."""

    def __init__(self, apis):
        self.apis = apis
        self.partitions = apis.partitions
        self.registry = apis.registry
        self.groups: dict[str, ShareGroup] = {}
        broker = self._broker_settings()
        self.sessions = ShareSessionCache(int(broker.get("group.share.max.share.sessions", 2000)))
        self.store = ShareStateStore(self._state_log, self._state_partitions(),
                                     snapshot_every=int(share_config.BROKER_DEFAULTS[
                                         "share.coordinator.snapshot.update.records.per.snapshot"]),
                                     on_append=lambda topic, p: None)
        self.manager = SharePartitionManager(self.store, self._share_log, self.settings_for, _now_ms)
        self._loaded = False
        self._timer_task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._timer_at = 0  # when the timer wakes next (ms)
        self._write_waiters: list[asyncio.Future] = []
        self._writer: asyncio.Task | None = None

    # ---- what the share machinery needs of the core ----------------------------------

    def _broker_settings(self) -> dict[str, Any]:
        values = self.apis.config.values
        return {k: values[k] for k in share_config.BROKER_DEFAULTS if k in values}

    def _state_partitions(self) -> int:
        count = self.registry.partitions(SHARE_GROUP_STATE_TOPIC)
        return count if count is not None else DEFAULT_PARTITIONS

    def _state_log(self, partition: int):
        if self.registry.get(SHARE_GROUP_STATE_TOPIC) is None:
            self.registry.ensure_internal_topic(DEFAULT_PARTITIONS, SHARE_GROUP_STATE_TOPIC)
        return self.partitions.internal_log(SHARE_GROUP_STATE_TOPIC, partition)

    def _share_log(self, topic_id: uuid.UUID, partition: int) -> StorageShareLog | None:
        topic = self.registry.by_id(str(topic_id))
        if topic is None or not 0 <= partition < topic.partitions:
            return None
        partition_log = self.partitions.open_log(topic.name, partition)
        return None if partition_log is None else StorageShareLog(partition_log)

    def settings_for(self, group_id: str) -> share_config.ShareGroupSettings:
        overrides: dict[str, str] = {}
        if self.apis.group_configs is not None:
            overrides = {k: v for k, v in self.apis.group_configs.overrides(group_id).items()
                         if k.startswith("share.")}
        try:
            return share_config.resolve(self._broker_settings(), overrides)
        except ShareError:
            return share_config.resolve(self._broker_settings(), {})

    def topic_info(self, name: str) -> TopicInfo | None:
        topic = self.registry.get(name)
        if topic is None or topic.internal or not topic.topic_id:
            return None
        return TopicInfo(uuid.UUID(topic.topic_id), topic.partitions)

    def _load(self) -> None:
        if not self._loaded:
            self.store.load(log_ for log_ in self.partitions.all_logs() if log_.topic == SHARE_GROUP_STATE_TOPIC)
            self._loaded = True

    async def ready(self) -> None:
        if not self._loaded:
            await self.apis.blocking(self._load)
        if self._timer_task is None:
            self._timer_task = asyncio.get_running_loop().create_task(self._timer())

    def group(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        settings = self.settings_for(group_id)
        if group is None or group.deleted:
            max_size = int(self._broker_settings().get("group.share.max.size", 200))
            group = self.groups[group_id] = ShareGroup(group_id, settings, max_size)
        if group.settings != settings:
            group.settings = settings
            self.manager.apply_settings(group_id)
        return group

    def share_group_ids(self) -> list[str]:
        """Every share group: those with members or loaded here, and those with stored state."""
        ids = {g for g, group in self.groups.items() if not group.deleted}
        ids |= {key.group_id for key in self.store.keys(None)}
        return sorted(ids)

    # ---- the timer ----------------------------------------------------------------------

    async def _timer(self) -> None:
        """Apply lock and session timeouts when due (sleeping at most TIMER_MAX_SLEEP_S)."""
        while not self.apis.shutting_down:
            deadlines = [d for d in (self.manager.next_deadline(),
                                     *(g.next_expiry_ms() for g in self.groups.values())) if d is not None]
            delay = TIMER_MAX_SLEEP_S
            if deadlines:
                delay = max(0.0, min(delay, (min(deadlines) - _now_ms()) / 1000))
            self._timer_at = _now_ms() + int(delay * 1000)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            try:
                await self._expire()
            except Exception as e:  # noqa: BLE001 - a failed round is logged; the next one tries again
                log.error("share_timeout_round_failed", error=str(e))

    async def _expire(self) -> None:
        now = _now_ms()
        released = False
        for group in list(self.groups.values()):
            gone = group.expire(now, self.topic_info)
            for member_id in gone:
                self.sessions.remove(group.group_id, member_id)
                released = self._release_now(group.group_id, member_id, None) or released
        deadline = self.manager.next_deadline()
        if deadline is not None and deadline <= now:
            for key in self.manager.apply_timeouts():
                self._notify(TopicIdPartition(key.topic_id, key.partition))
        if released or self.manager.has_changes():
            await self._write_state()

    def close(self) -> None:
        if self._timer_task is not None:
            self._timer_task.cancel()

    # ---- writing the share state ------------------------------------------------------

    async def _write_state(self) -> WriteRound:
        """Wait until a round taken after every change made so far is written; that round."""
        waiter = asyncio.get_running_loop().create_future()
        self._write_waiters.append(waiter)
        self._start_writer()
        return await waiter

    def _start_writer(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_rounds())

    def _kick_writes(self) -> None:
        """Write pending changes soon, answering nobody (what acquisition archived or timed out)."""
        if self.manager.has_changes():
            self._start_writer()

    async def _write_rounds(self) -> None:
        """Write rounds one at a time while changes or waiters are pending."""
        while self._write_waiters or self.manager.has_changes():
            waiters, self._write_waiters = self._write_waiters, []
            round_ = self.manager.take_writes()
            if round_.writes:
                try:
                    await self.apis.blocking(self.manager.write, round_)
                except Exception as e:  # noqa: BLE001 - the executor failed: the round's partitions failed
                    for w in round_.writes:
                        round_.failures.setdefault(w.key, e)
                except BaseException:  # cancelled (shutdown): nobody waits for an answer
                    for waiter in waiters:
                        waiter.cancel()
                    raise
            self.manager.settle(round_)
            for key, error in round_.failures.items():
                log.warning("share_state_write_failed", group=key.group_id, topic_id=str(key.topic_id),
                            partition=key.partition, error=str(error))
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(round_)

    # ---- connections --------------------------------------------------------------------

    def connection_closed(self, connection: ConnectionContext) -> None:
        """A Kafka connection closed: its share sessions end and their members' records
        are released now (written by the next round)."""
        for session in self.sessions.on_connection_closed(self._connection_id(connection)):
            self._release_now(session.group_id, session.member_id, session.partitions)
        self._kick_writes()

    @staticmethod
    def _connection_id(connection: ConnectionContext) -> str:
        return str(id(connection))

    def _notify(self, tp: TopicIdPartition) -> None:
        name = self.topic_name(tp.topic_id)
        if name is not None:
            self.partitions.waiters.notify((name, tp.partition))

    def _release_now(self, group_id: str, member_id: str, tps: Iterable[TopicIdPartition] | None) -> bool:
        """Release in memory what the member holds (in `tps`, else in the whole group),
        waking the fetches waiting on those partitions; whether anything was released."""
        tps = None if tps is None else list(tps)
        released = self.manager.release(group_id, member_id, tps)
        if released:
            for key in self.manager.loaded(group_id):
                tp = TopicIdPartition(key.topic_id, key.partition)
                if tps is None or tp in tps:
                    self._notify(tp)
        return released > 0

    # ---- ShareGroupHeartbeat ------------------------------------------------------------

    async def heartbeat(self, req, ctx):
        R = ctx.response_class
        try:
            if not allowed(ctx, Op.READ, Resource.GROUP, req.group_id):
                raise ShareError(GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
            if not req.group_id:
                raise ShareError(INVALID_REQUEST, "GroupId can't be empty.")
            for name in req.subscribed_topic_names or ():
                if not allowed(ctx, Op.DESCRIBE, Resource.TOPIC, name):
                    raise ShareError(TOPIC_AUTHORIZATION_FAILED, f"Topic authorization failed for {name}.")
            await self.ready()
            group = self.group(req.group_id)
            peer = ctx.peer[0] if isinstance(ctx.peer, tuple) and ctx.peer else str(ctx.peer or "")
            result = group.heartbeat(req.member_id, req.member_epoch, req.subscribed_topic_names, _now_ms(),
                                     self.topic_info, rack_id=req.rack_id, client_id=ctx.client_id or "",
                                     client_host="/" + peer)
        except ShareError as e:
            return make(R, throttle_time=0, error_code=e.code, error_message=e.message, member_id=None,
                        member_epoch=0, heartbeat_interval=0, assignment=None)
        for member_id in result.removed:
            # A member that leaves with a share session open closes it next (its final
            # ShareAcknowledge or ShareFetch applies its last acknowledgements, then releases
            # what it still holds); without one, its records are released now.
            if self.sessions.get(req.group_id, member_id) is None and \
                    self._release_now(req.group_id, member_id, None):
                await self._write_state()
        self._wake.set()
        assignment = None
        if result.assignment is not None:
            A = nested(R, "assignment")
            TP = nested(A, "topic_partitions")
            assignment = make(A, topic_partitions=tuple(
                make(TP, topic_id=topic_id, partitions=tuple(parts))
                for topic_id, parts in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))))
        return make(R, throttle_time=0, error_code=0, error_message=None, member_id=result.member_id,
                    member_epoch=result.member_epoch, heartbeat_interval=result.heartbeat_interval_ms,
                    assignment=assignment)

    # ---- ShareGroupDescribe -------------------------------------------------------------

    async def describe(self, req, ctx):
        R = ctx.response_class
        G = nested(R, "groups")
        M = nested(G, "members")
        A = nested(M, "assignment")
        TP = nested(A, "topic_partitions")
        await self.ready()
        out = []
        for group_id in req.group_ids:
            if not allowed(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
                out.append(make(G, error_code=GROUP_AUTHORIZATION_FAILED, error_message="Group authorization failed.",
                                group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0,
                                assignor_name="", members=(), authorized_operations=-2147483648))
                continue
            group = self.groups.get(group_id)
            if group is None or group.deleted:
                if group_id in self.share_group_ids():
                    group = self.group(group_id)
                else:
                    out.append(make(G, error_code=GROUP_ID_NOT_FOUND,
                                    error_message=f"Group {group_id} not found.", group_id=group_id,
                                    group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                                    members=(), authorized_operations=-2147483648))
                    continue
            members = []
            for member in group.members.values():
                parts = []
                for topic_id, ps in sorted(member.assignment.items(), key=lambda kv: str(kv[0])):
                    topic = self.registry.by_id(str(topic_id))
                    parts.append(make(TP, topic_id=topic_id, topic_name=topic.name if topic else "",
                                      partitions=tuple(sorted(ps))))
                members.append(make(M, member_id=member.member_id, rack_id=member.rack_id,
                                    member_epoch=member.member_epoch, client_id=member.client_id,
                                    client_host=member.client_host, subscribed_topic_names=member.subscribed,
                                    assignment=make(A, topic_partitions=tuple(parts))))
            out.append(make(G, error_code=0, error_message=None, group_id=group_id, group_state=group.state,
                            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                            assignor_name=ASSIGNOR_NAME, members=tuple(members),
                            authorized_operations=-2147483648))
        return make(R, throttle_time=0, groups=tuple(out))

    # ---- acknowledgements ----------------------------------------------------------------

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        if topic_id is None:
            return None
        topic = self.registry.by_id(str(topic_id))
        return None if topic is None or topic.internal else topic.name

    async def _acknowledge(self, ctx, group_id: str, member_id: str,
                           topics: Iterable[Any]) -> dict[TopicIdPartition, tuple[int, str | None]]:
        """Apply each partition's acknowledgements in memory, then wait until one round
        wrote them all; the error code and message per partition."""
        results: dict[TopicIdPartition, tuple[int, str | None]] = {}
        touched: list[TopicIdPartition] = []
        for topic in topics:
            name = self.topic_name(topic.topic_id)
            for part in topic.partitions:
                tp = TopicIdPartition(topic.topic_id, part.partition_index)
                if not part.acknowledgement_batches:
                    continue
                if name is None:
                    results[tp] = (UNKNOWN_TOPIC_ID, None)
                    continue
                if not allowed(ctx, Op.READ, Resource.TOPIC, name):
                    results[tp] = (TOPIC_AUTHORIZATION_FAILED, None)
                    continue
                batches = [AckBatch(b.first_offset, b.last_offset, tuple(int(t) for t in b.acknowledge_types))
                           for b in part.acknowledgement_batches]
                try:
                    if self.manager.loaded_partition(group_id, tp) is None:
                        await self.apis.blocking(self.manager.share_partition, group_id, tp)
                    touched.append(tp)
                    self.manager.apply_acknowledgements(group_id, member_id, tp, batches)
                    results[tp] = (0, None)
                except ShareError as e:
                    results[tp] = (e.code, e.message)
                except StrataError as e:
                    results[tp] = (int(e.code), str(e))
        if touched:
            round_ = await self._write_state()
            for tp in touched:
                error = round_.failure(group_id, tp)
                if error is not None and results.get(tp, (0, None))[0] == 0:
                    results[tp] = self._error_of(error)
        return results

    @staticmethod
    def _error_of(error: Exception) -> tuple[int, str | None]:
        if isinstance(error, ShareError):
            return error.code, error.message
        if isinstance(error, StrataError):
            return int(error.code), str(error)
        return UNKNOWN_SERVER_ERROR, str(error)

    async def _release(self, group_id: str, member_id: str, tps: Iterable[TopicIdPartition]) -> None:
        if self._release_now(group_id, member_id, tps):
            await self._write_state()

    def _check_group(self, ctx, group_id: str | None, member_id: str | None) -> None:
        if not group_id:
            raise ShareError(INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id:
            raise ShareError(INVALID_REQUEST, "MemberId can't be empty.")
        if not allowed(ctx, Op.READ, Resource.GROUP, group_id):
            raise ShareError(GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")

    # ---- ShareAcknowledge ---------------------------------------------------------------

    async def share_acknowledge(self, req, ctx):
        R = ctx.response_class
        T = nested(R, "responses")
        P = nested(T, "partitions")
        L = nested(P, "current_leader")
        try:
            self._check_group(ctx, req.group_id, req.member_id)
            await self.ready()
            context = self.sessions.acknowledge_context(req.group_id, req.member_id, req.share_session_epoch,
                                                        _now_ms())
        except ShareError as e:
            return make(R, throttle_time=0, error_code=e.code, error_message=e.message, acquisition_lock_timeout=0,
                        responses=(), node_endpoints=())
        results = await self._acknowledge(ctx, req.group_id, req.member_id, req.topics)
        if context.final and context.replaced is not None:
            await self._release(req.group_id, req.member_id, context.replaced.partitions)
        by_topic: dict[uuid.UUID, list] = {}
        for tp, (code, message) in results.items():
            by_topic.setdefault(tp.topic_id, []).append(
                make(P, partition_index=tp.partition, error_code=code, error_message=message,
                     current_leader=make(L, leader_id=NODE_ID, leader_epoch=0)))
        settings = self.settings_for(req.group_id)
        return make(R, throttle_time=0, error_code=0, error_message=None,
                    acquisition_lock_timeout=settings.record_lock_duration_ms,
                    responses=tuple(make(T, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                    node_endpoints=())

    # ---- ShareFetch ---------------------------------------------------------------------

    async def share_fetch(self, req, ctx):
        R = ctx.response_class
        T = nested(R, "responses")
        P = nested(T, "partitions")
        L = nested(P, "current_leader")
        AR = nested(P, "acquired_records")
        wanted = [TopicIdPartition(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
        forgotten = [TopicIdPartition(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions]
        has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        try:
            self._check_group(ctx, req.group_id, req.member_id)
            await self.ready()
            context = self.sessions.fetch_context(req.group_id, req.member_id, req.share_session_epoch, wanted,
                                                  forgotten, has_acks,
                                                  connection_id=self._connection_id(ctx.connection),
                                                  now_ms=_now_ms())
        except ShareError as e:
            return make(R, throttle_time=0, error_code=e.code, error_message=e.message, acquisition_lock_timeout=0,
                        responses=(), node_endpoints=())
        group_id, member_id = req.group_id, req.member_id
        acks = await self._acknowledge(ctx, group_id, member_id, req.topics)
        if context.replaced is not None:
            gone = context.replaced.partitions
            if context.session is not None:
                gone = gone - context.session.partitions
            await self._release(group_id, member_id, gone)
        if context.final or context.session is None:
            fetch_from: list[TopicIdPartition] = []
        else:
            fetch_from = sorted(context.session.partitions, key=lambda tp: (str(tp.topic_id), tp.partition))
            if fetch_from:  # each answer starts at the next partition: none waits behind a busy one
                turn = context.session.epoch % len(fetch_from)
                fetch_from = fetch_from[turn:] + fetch_from[:turn]
        settings = self.settings_for(group_id)
        isolation = READ_COMMITTED if settings.read_committed else READ_UNCOMMITTED
        max_records = req.max_records if getattr(req, "max_records", 0) and req.max_records > 0 else 500
        strict = getattr(req, "share_acquire_mode", 0) == 1
        max_bytes = max(0, req.max_bytes)  # 0: nothing is read, nothing acquired (as Kafka)
        errors: dict[TopicIdPartition, tuple[int, str | None]] = {}
        readable: list[tuple[TopicIdPartition, str]] = []
        for tp in fetch_from:
            name = self.topic_name(tp.topic_id)
            if name is None:
                errors[tp] = (UNKNOWN_TOPIC_ID, None)
            elif not allowed(ctx, Op.READ, Resource.TOPIC, name):
                errors[tp] = (TOPIC_AUTHORIZATION_FAILED, None)
            else:
                readable.append((tp, name))

        async def attempt(may_wait: bool):
            events = [self.partitions.long_poll.watch((name, tp.partition)) for tp, name in readable]
            got: dict[TopicIdPartition, tuple[bytes, list]] = {}
            budget = max_bytes
            left = max_records
            for tp, name in readable:
                if tp in errors or left <= 0 or budget <= 0:
                    continue
                try:
                    found = await self._acquire(group_id, member_id, tp, name, budget, isolation, left, strict)
                except ShareError as e:
                    errors[tp] = (e.code, e.message)
                    continue
                except StrataError as e:
                    errors[tp] = (int(e.code), str(e))
                    continue
                if found is not None:
                    got[tp] = found
                    break  # one partition's records per answer, as Kafka's share fetch answers
            if got or errors or not may_wait or max_bytes == 0:
                return got
            return Wait(events)

        max_wait = req.max_wait
        max_wait_ms = int(max_wait.total_seconds() * 1000) if hasattr(max_wait, "total_seconds") else int(max_wait)
        try:
            got = await self.partitions.long_poll.poll(attempt, max(0, max_wait_ms) if readable else 0)
        except StrataError as e:
            got = {}
            for tp, _ in readable:
                errors.setdefault(tp, (int(e.code), str(e)))
        by_topic: dict[uuid.UUID, list] = {}
        answered = set(got) | set(errors) | set(acks)
        if context.full:
            answered |= set(fetch_from)
        for tp in sorted(answered, key=lambda x: (str(x.topic_id), x.partition)):
            code, message = errors.get(tp, (0, None))
            ack_code, ack_message = acks.get(tp, (0, None))
            data, runs = got.get(tp, (b"", []))
            by_topic.setdefault(tp.topic_id, []).append(make(
                P, partition_index=tp.partition, error_code=code, error_message=message,
                acknowledge_error_code=ack_code, acknowledge_error_message=ack_message,
                current_leader=make(L, leader_id=NODE_ID, leader_epoch=0),
                records=data if runs else b"",
                acquired_records=tuple(make(AR, first_offset=r.first_offset, last_offset=r.last_offset,
                                            delivery_count=r.delivery_count) for r in runs)))
        return make(R, throttle_time=0, error_code=0, error_message=None,
                    acquisition_lock_timeout=settings.record_lock_duration_ms,
                    responses=tuple(make(T, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                    node_endpoints=())

    async def _acquire(self, group_id: str, member_id: str, tp: TopicIdPartition, name: str, max_bytes: int,
                       isolation: int, max_records: int, strict: bool) -> tuple[bytes, list] | None:
        """Read the partition from the share partition's next fetch offset (the core's
        isolated read) and acquire what it holds; None when nothing was acquired."""
        sp = self.manager.loaded_partition(group_id, tp)
        if sp is None:
            sp = await self.apis.blocking(self.manager.share_partition, group_id, tp)
        if not sp.can_acquire():
            return None
        offset = sp.next_fetch_offset()
        partition_log = await self.partitions.partition_log(name, tp.partition)
        if offset >= partition_log.log_end_offset:
            return None
        read = self.partitions.reads.read_isolated(partition_log, offset, max_bytes, isolation, min_one_message=True)
        try:
            data = read.records.read()
        finally:
            read.records.release()
        # Only the batches that may be acquired are summarized and sent (as Kafka slices
        # a share fetch's records to what it acquired).
        batches, size = batches_until(data, sp.read_end(max_records))
        if not batches:
            return None
        if size < len(data):
            data = data[:size]
        aborted = [AbortedTxn(pid, first) for pid, first in (read.aborted or ())]
        runs = self.manager.acquire(group_id, member_id, tp, LogRead(batches, aborted, offset), max_records, strict)
        self._kick_writes()
        if not runs:
            return None
        deadline = sp.next_lock_deadline()
        if deadline is not None and deadline < self._timer_at:
            self._wake.set()  # the timer sleeps past the new lock deadline
        return data, runs

    # ---- the groups APIs (ListGroups, DescribeGroups, DeleteGroups) -----------------------

    def metric_rows(self) -> list[tuple[str, str, int, Any, int]]:
        """(group, topic, partition, Counters, lag) of every loaded share partition (the metrics)."""
        rows = []
        for key, counters in self.manager.counters():
            name = self.topic_name(key.topic_id)
            if name is None:
                continue
            _, lag = self.manager.summary(key.group_id, TopicIdPartition(key.topic_id, key.partition))
            rows.append((key.group_id, name, key.partition, counters, lag))
        return rows

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group, for ListGroups."""
        out = []
        for group_id in self.share_group_ids():
            group = self.groups.get(group_id)
            out.append((group_id, group.state if group is not None else "Empty"))
        return out

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group (blocking: its state is deleted): an error code."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return NON_EMPTY_GROUP
        for key in self.store.keys(group_id):
            self.manager.delete_state(group_id, TopicIdPartition(key.topic_id, key.partition))
        if group is not None:
            group.delete()
        self.groups.pop(group_id, None)
        return 0


def register(apis, shares: ShareGroups) -> None:
    """Register the share-group APIs of `shares` at Kafka 4.2's versions."""
    apis.register(ApiKey.SHARE_GROUP_HEARTBEAT, shares.heartbeat, 1, 1)
    apis.register(ApiKey.SHARE_GROUP_DESCRIBE, shares.describe, 1, 1)
    apis.register(ApiKey.SHARE_FETCH, shares.share_fetch, 1, 2)
    apis.register(ApiKey.SHARE_ACKNOWLEDGE, shares.share_acknowledge, 1, 2)
    offsets = ShareGroupOffsets(shares)
    apis.register(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, offsets.describe_offsets, 0, 1)
    apis.register(ApiKey.ALTER_SHARE_GROUP_OFFSETS, offsets.alter_offsets, 0, 0)
    apis.register(ApiKey.DELETE_SHARE_GROUP_OFFSETS, offsets.delete_offsets, 0, 0)
    apis.on_shutdown(shares.close)


__all__ = ["ShareGroups", "register"]
