"""The group APIs through KafkaApis.handle (kio frames in, frames out) on a broker
started in the test's own loop (real LogManager and `__consumer_offsets` in tmp_path):
every registered version decodes and answers, OffsetCommit/OffsetFetch share their
offsets with the native GroupOffsets, and shutdown answers parked requests."""

from __future__ import annotations

import asyncio
import itertools
import struct
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema

from broker.app import BrokerApp
from broker.kafka.codec import make, nested
from broker.net.listeners import ConnectionContext
from broker.state.group_offsets import decode_key, decode_value, partition_for
from broker.state.topic_registry import OFFSETS_TOPIC
from kafka_format import iter_entries
from tests.kafka.wire import decode, encode

GUARD = 10.0
PEER = ConnectionContext(None, ("127.0.0.1", 40000))
JOIN, SYNC, HEARTBEAT, LEAVE = 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 16, 15, 42, 47
_ids = itertools.count(1)


def request(api_key: int, version: int, **values):
    return make(load_request_schema(api_key, version), **values)


def entity(api_key: int, version: int, *path: str, **values):
    cls = load_request_schema(api_key, version)
    for name in path:
        cls = nested(cls, name)
    return make(cls, **values)


async def call(broker: BrokerApp, req):
    cid = next(_ids)
    parts = await asyncio.wait_for(broker.kafka.handle(encode(req, cid)[4:], PEER), GUARD)
    data = b"".join(bytes(p) for p in parts)
    cls = load_response_schema(type(req).__api_key__, type(req).__version__)
    got, response = decode(cls, data[4:])
    assert got == cid
    return response


async def create_topic(broker: BrokerApp, name: str, partitions: int):
    return await broker.kafka.blocking(broker.registry.create, name, partitions, ())


async def join_v(broker, version, group, member_id="", protocols=(("range", b"meta"),), session=6000,
                 instance=None):
    protos = tuple(entity(JOIN, version, "protocols", name=n, metadata=m) for n, m in protocols)
    return await call(broker, request(JOIN, version, group_id=group, session_timeout=session,
                                      rebalance_timeout=session, member_id=member_id, group_instance_id=instance,
                                      protocol_type="consumer", protocols=protos, reason="test"))


async def test_find_coordinator_every_version(app):
    broker = await app()
    host, port = broker.kafka.advertised
    for version in range(0, 7):
        if version >= 4:
            response = await call(broker, request(FIND_COORDINATOR, version, key_type=0,
                                                  coordinator_keys=("g1", "g2")))
            assert [(x.key, x.node_id, x.host, x.port, x.error_code) for x in response.coordinators] == \
                [("g1", 0, host, port, 0), ("g2", 0, host, port, 0)]
            txn = await call(broker, request(FIND_COORDINATOR, version, key_type=1, coordinator_keys=("t",)))
            assert [(x.node_id, x.host, x.port, x.error_code) for x in txn.coordinators] == [(0, host, port, 0)]
            share = await call(broker, request(FIND_COORDINATOR, version, key_type=2, coordinator_keys=("s",)))
            assert share.coordinators[0].error_code == 42  # INVALID_REQUEST: not groupId:topicId:partition
            key = f"g1:{uuid.uuid4()}:0"  # the share coordinator of a share partition: this node
            share = await call(broker, request(FIND_COORDINATOR, version, key_type=2, coordinator_keys=(key,)))
            assert [(x.node_id, x.host, x.port, x.error_code) for x in share.coordinators] == [(0, host, port, 0)]
        else:
            response = await call(broker, request(FIND_COORDINATOR, version, key="g1", key_type=0))
            assert (response.error_code, response.node_id, response.host, response.port) == (0, 0, host, port)


async def test_api_versions_lists_the_group_apis(app):
    broker = await app()
    supported = {key: (low, high) for key, low, high in broker.kafka.supported()}
    assert {key: supported.get(key) for key in (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47)} == {
        8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6),
        16: (0, 5), 42: (0, 2), 47: (0, 0)}


@pytest.mark.parametrize("version", range(0, 10))
async def test_join_sync_heartbeat_leave_every_version(app, version):
    broker = await app()
    group = f"g-v{version}"
    join_version = max(version, 2)  # JoinGroup starts at v2 (Kafka 4)
    first = await join_v(broker, join_version, group)
    if join_version >= 4:
        assert first.error_code == 79  # MEMBER_ID_REQUIRED
        first = await join_v(broker, join_version, group, first.member_id)
    assert first.error_code == 0 and first.generation_id == 1
    assert first.leader == first.member_id and first.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in first.members] == [(first.member_id, b"meta")]
    member = first.member_id
    sync_version = min(version, 5)
    assignment = entity(SYNC, sync_version, "assignments", member_id=member, assignment=b"assign")
    synced = await call(broker, request(SYNC, sync_version, group_id=group, generation_id=1, member_id=member,
                                        protocol_type="consumer", protocol_name="range",
                                        assignments=(assignment,)))
    assert synced.error_code == 0 and synced.assignment == b"assign"
    hb_version = min(version, 4)
    beat = await call(broker, request(HEARTBEAT, hb_version, group_id=group, generation_id=1, member_id=member))
    assert beat.error_code == 0
    stale = await call(broker, request(HEARTBEAT, hb_version, group_id=group, generation_id=9, member_id=member))
    assert stale.error_code == 22  # ILLEGAL_GENERATION
    leave_version = min(version, 5)
    if leave_version >= 3:
        who = entity(LEAVE, leave_version, "members", member_id=member, reason="bye")
        left = await call(broker, request(LEAVE, leave_version, group_id=group, members=(who,)))
        assert left.error_code == 0 and [(m.member_id, m.error_code) for m in left.members] == [(member, 0)]
    else:
        left = await call(broker, request(LEAVE, leave_version, group_id=group, member_id=member))
        assert left.error_code == 0
        again = await call(broker, request(LEAVE, leave_version, group_id=group, member_id=member))
        assert again.error_code == 25  # UNKNOWN_MEMBER_ID, at the top for old versions
    assert broker.kafka.groups.groups[group].state == "Empty"


async def test_list_and_describe_every_version(app):
    broker = await app()
    joined = await join_v(broker, 3, "described", protocols=(("roundrobin", b"rr"),))
    member = joined.member_id
    await call(broker, request(SYNC, 3, group_id="described", generation_id=1, member_id=member,
                               assignments=(entity(SYNC, 3, "assignments", member_id=member, assignment=b"A"),)))
    await broker.kafka.blocking(broker.handlers.offsets.commit, "offsets-only", OFFSETS_TOPIC, 0, 1, None)
    for version in range(0, 6):
        listed = await call(broker, request(LIST_GROUPS, version))
        rows = {g.group_id: g for g in listed.groups}
        assert rows["described"].protocol_type == "consumer" and rows["offsets-only"].protocol_type == ""
        if version >= 4:
            assert rows["described"].group_state == "Stable" and rows["offsets-only"].group_state == "Empty"
            stable = await call(broker, request(LIST_GROUPS, version, states_filter=("STABLE",)))
            assert [g.group_id for g in stable.groups] == ["described"]
        if version >= 5:
            assert rows["described"].group_type == "classic"
    for version in range(0, 7):
        described = await call(broker, request(DESCRIBE_GROUPS, version, groups=("described", "missing"),
                                               include_authorized_operations=True))
        found, missing = described.groups
        assert (found.error_code, found.group_state, found.protocol_type, found.protocol_data) == \
            (0, "Stable", "consumer", "roundrobin")
        assert [(m.member_id, m.client_host, m.member_metadata, m.member_assignment) for m in found.members] == \
            [(member, "/127.0.0.1", b"rr", b"A")]
        assert missing.group_state == "Dead"
        assert missing.error_code == (69 if version >= 6 else 0)  # GROUP_ID_NOT_FOUND from v6


async def test_offset_commit_and_fetch_every_version_share_the_native_offsets(app):
    broker = await app()
    topic = await create_topic(broker, "orders", 3)
    offsets = broker.handlers.offsets
    for version in range(2, 11):
        group = f"simple-v{version}"
        topic_ref = dict(topic_id=uuid.UUID(topic.topic_id)) if version >= 10 else dict(name="orders")
        parts = tuple(entity(OFFSET_COMMIT, version, "topics", "partitions", partition_index=p,
                             committed_offset=10 * version + p, committed_leader_epoch=-1,
                             committed_metadata=f"m{p}") for p in range(3))
        committed = await call(broker, request(
            OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            retention_time=-1, topics=(entity(OFFSET_COMMIT, version, "topics", partitions=parts, **topic_ref),)))
        assert [p.error_code for p in committed.topics[0].partitions] == [0, 0, 0]
        # the native side sees the Kafka commits ...
        assert [offsets.fetch(group, "orders", p).offset for p in range(3)] == [10 * version + p for p in range(3)]
    # ... and every OffsetFetch version sees a native commit
    await broker.kafka.blocking(offsets.commit, "native", "orders", 1, 77, "from-native")
    for version in range(1, 11):
        topic_ref = dict(topic_id=uuid.UUID(topic.topic_id)) if version >= 10 else dict(name="orders")
        if version >= 8:
            wanted = entity(OFFSET_FETCH, version, "groups", "topics", partition_indexes=(0, 1), **topic_ref)
            response = await call(broker, request(OFFSET_FETCH, version, groups=(
                entity(OFFSET_FETCH, version, "groups", group_id="native", topics=(wanted,)),
                entity(OFFSET_FETCH, version, "groups", group_id="simple-v9", topics=None))))
            native, everything = response.groups
            parts = native.topics[0].partitions
            assert [(p.committed_offset, p.metadata) for p in everything.topics[0].partitions] == \
                [(90, "m0"), (91, "m1"), (92, "m2")]
        else:
            wanted = entity(OFFSET_FETCH, version, "topics", name="orders", partition_indexes=(0, 1))
            response = await call(broker, request(OFFSET_FETCH, version, group_id="native", topics=(wanted,)))
            parts = response.topics[0].partitions
        assert [(p.partition_index, p.committed_offset, p.error_code) for p in parts] == \
            [(0, -1, 0), (1, 77, 0)]
        assert parts[1].metadata == "from-native"


async def test_offset_commit_errors(app):
    broker = await app("offset.metadata.max.bytes=8")
    await create_topic(broker, "small", 1)

    async def commit(group, generation=-1, member="", topic="small", partition=0, metadata="", version=8,
                     topic_id=None):
        ref = dict(topic_id=topic_id) if version >= 10 else dict(name=topic)
        part = entity(OFFSET_COMMIT, version, "topics", "partitions", partition_index=partition,
                      committed_offset=5, committed_metadata=metadata)
        response = await call(broker, request(OFFSET_COMMIT, version, group_id=group,
                                              generation_id_or_member_epoch=generation, member_id=member,
                                              topics=(entity(OFFSET_COMMIT, version, "topics", partitions=(part,),
                                                             **ref),)))
        return response.topics[0].partitions[0].error_code

    assert await commit("g", topic="nope") == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert await commit("g", partition=4) == 3
    assert await commit("g", metadata="far too long") == 12  # OFFSET_METADATA_TOO_LARGE
    assert await commit("g", version=10, topic_id=uuid.uuid4()) == 100  # UNKNOWN_TOPIC_ID
    assert await commit("") == 24  # INVALID_GROUP_ID
    assert await commit("g", generation=3, member="m") == 22  # ILLEGAL_GENERATION: no such group
    joined = await join_v(broker, 3, "active")
    assert await commit("active") == 25  # UNKNOWN_MEMBER_ID: simple commits only to empty groups
    assert await commit("active", generation=1, member=joined.member_id) == 27  # REBALANCE_IN_PROGRESS
    await call(broker, request(SYNC, 3, group_id="active", generation_id=1, member_id=joined.member_id))
    assert await commit("active", generation=1, member=joined.member_id) == 0
    assert await commit("active", generation=2, member=joined.member_id) == 22


async def test_commits_are_one_batch_in_kafkas_layout_and_survive_a_restart(app):
    broker = await app()
    await create_topic(broker, "kept", 4)
    parts = tuple(entity(OFFSET_COMMIT, 8, "topics", "partitions", partition_index=p, committed_offset=100 + p,
                         committed_metadata=None if p == 0 else "x") for p in range(4))
    response = await call(broker, request(OFFSET_COMMIT, 8, group_id="durable", generation_id_or_member_epoch=-1,
                                          member_id="", topics=(entity(OFFSET_COMMIT, 8, "topics", name="kept",
                                                                       partitions=parts),)))
    assert all(p.error_code == 0 for p in response.topics[0].partitions)
    log = broker.manager.get_log(OFFSETS_TOPIC, partition_for("durable", 5))
    with log.read(0, 1 << 20) as chunk:
        batches = list(iter_entries(chunk.read()))
    assert len(batches) == 1  # one request, one batch, as Kafka writes it
    records = list(batches[0].records())
    assert [decode_key(r.key) for r in records] == [("durable", "kept", p) for p in range(4)]
    assert [decode_value(r.value)[:2] for r in records] == [(100, ""), (101, "x"), (102, "x"), (103, "x")]
    await broker.shutdown()

    again = await app()
    fetched = await call(again, request(OFFSET_FETCH, 7, group_id="durable", topics=None))
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in fetched.topics[0].partitions] == \
        [(0, 100, ""), (1, 101, "x"), (2, 102, "x"), (3, 103, "x")]
    assert again.handlers.offsets.fetch("durable", "kept", 0).metadata is None  # the native view keeps null


async def test_delete_groups_and_offset_delete(app):
    broker = await app()
    await create_topic(broker, "d1", 2)
    await create_topic(broker, "d2", 1)
    offsets = broker.handlers.offsets
    for topic, p in (("d1", 0), ("d1", 1), ("d2", 0)):
        await broker.kafka.blocking(offsets.commit, "idle", topic, p, 5, None)
    deleted = await call(broker, request(OFFSET_DELETE, 0, group_id="idle", topics=(
        entity(OFFSET_DELETE, 0, "topics", name="d1",
               partitions=(entity(OFFSET_DELETE, 0, "topics", "partitions", partition_index=1),
                           entity(OFFSET_DELETE, 0, "topics", "partitions", partition_index=9))),)))
    assert deleted.error_code == 0
    assert [p.error_code for p in deleted.topics[0].partitions] == [0, 3]
    assert offsets.fetch("idle", "d1", 1) is None and offsets.fetch("idle", "d1", 0) is not None

    # a consumer group with members: only offsets of topics it does not subscribe to go
    subscription = struct.pack(">hih", 0, 1, 2) + b"d2" + struct.pack(">i", -1)  # ConsumerProtocol v0
    joined = await join_v(broker, 3, "busy", protocols=(("range", subscription),))
    for topic, p in (("d1", 0), ("d2", 0)):
        await broker.kafka.blocking(offsets.commit, "busy", topic, p, 5, None)
    busy = await call(broker, request(OFFSET_DELETE, 0, group_id="busy", topics=tuple(
        entity(OFFSET_DELETE, 0, "topics", name=name,
               partitions=(entity(OFFSET_DELETE, 0, "topics", "partitions", partition_index=0),))
        for name in ("d1", "d2"))))
    assert busy.error_code == 0
    assert [t.partitions[0].error_code for t in busy.topics] == [0, 86]  # GROUP_SUBSCRIBED_TO_TOPIC
    assert offsets.fetch("busy", "d1", 0) is None and offsets.fetch("busy", "d2", 0) is not None
    opaque = await join_v(broker, 3, "opaque", protocols=(("x", b"?"),))
    refused = await call(broker, request(OFFSET_DELETE, 0, group_id="opaque", topics=()))
    assert refused.error_code == 68  # NON_EMPTY_GROUP
    await call(broker, request(LEAVE, 0, group_id="opaque", member_id=opaque.member_id))
    response = await call(broker, request(DELETE_GROUPS, 2, groups_names=("idle", "busy", "nobody")))
    assert [(r.group_id, r.error_code) for r in response.results] == [("idle", 0), ("busy", 68), ("nobody", 69)]
    assert offsets.committed_for("idle") == {}
    assert offsets.fetch("busy", "d2", 0) is not None
    await call(broker, request(LEAVE, 0, group_id="busy", member_id=joined.member_id))
    response = await call(broker, request(DELETE_GROUPS, 0, groups_names=("busy",)))
    assert response.results[0].error_code == 0
    assert "busy" not in broker.kafka.groups.groups and offsets.committed_for("busy") == {}
    listed = await call(broker, request(LIST_GROUPS, 0))
    assert [g.group_id for g in listed.groups] == ["opaque"]  # Empty, still known


async def test_shutdown_answers_a_parked_join(app):
    broker = await app("group.initial.rebalance.delay.ms=600000")
    parked = asyncio.ensure_future(join_v(broker, 3, "slow"))
    await asyncio.sleep(0.05)
    assert not parked.done()
    broker.kafka.begin_shutdown()
    response = await asyncio.wait_for(parked, GUARD)
    assert response.error_code == 16  # NOT_COORDINATOR: the client looks for the coordinator again


async def test_empty_group_id_is_invalid_everywhere(app):
    broker = await app()
    assert (await join_v(broker, 5, "")).error_code == 24
    assert (await call(broker, request(SYNC, 5, group_id="", generation_id=1, member_id="m"))).error_code == 24
    assert (await call(broker, request(HEARTBEAT, 4, group_id="", generation_id=1, member_id="m"))).error_code == 24
    assert (await call(broker, request(LEAVE, 1, group_id="", member_id="m"))).error_code == 24
    fetched = await call(broker, request(OFFSET_FETCH, 8, groups=(
        entity(OFFSET_FETCH, 8, "groups", group_id="", topics=None),)))
    assert fetched.groups[0].error_code == 24
    assert (await call(broker, request(OFFSET_FETCH, 5, group_id="", topics=None))).error_code == 24
    old = await call(broker, request(OFFSET_FETCH, 1, group_id="", topics=(
        entity(OFFSET_FETCH, 1, "topics", name="t", partition_indexes=(0,)),)))
    assert old.topics[0].partitions[0].error_code == 24
