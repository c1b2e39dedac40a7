"""Share groups (KIP-932) end to end: the real broker process, confluent-kafka's
ShareConsumer (librdkafka's share consumer), and kio-encoded requests (tests/kafka/wire.py)
for the answers a client library does not show: session epochs, error codes,
ShareGroupDescribe, the share-group offsets APIs, ListGroups/DescribeGroups/DeleteGroups,
ApiVersions' share.version feature, and durability across restarts (clean and kill -9).

Deadlines are failure guards, not speed assumptions.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from kio.index import load_request_schema

from broker.kafka.codec import make, nested
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.wire import KafkaWire

GUARD = 60.0
UNKNOWN_MEMBER_ID = 25
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
INVALID_REQUEST = 42
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
UNKNOWN_TOPIC_ID = 100


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("share-groups-broker"))
    try:
        yield process.start()
        failures = [e for e in process.log_events() if e.get("event") == "kafka_request_failed"]
        assert not failures, failures
    finally:
        process.close()


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(topic, value=b"m%d" % i, partition=0)
    assert producer.flush(30) == 0


def share_consumer(bootstrap: str, group: str, **extra):
    from confluent_kafka import ShareConsumer

    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **extra})


def poll_values(consumers, want: int, guard: float = GUARD, on_message=None) -> list[list[bytes]]:
    """Poll every consumer in turn until `want` records arrived in all; the values per consumer."""
    got: list[list[bytes]] = [[] for _ in consumers]
    deadline = time.monotonic() + guard
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got[i].append(m.value())
                if on_message is not None:
                    on_message(c, m)
    return got


def joined(bootstrap: str, group: str, topic: str, consumers, guard: float = GUARD) -> None:
    """Poll until the group's share partition exists (share.auto.offset.reset is latest:
    records produced before it are not delivered) and every consumer polled once."""
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + guard
    with KafkaWire(host, int(port)) as w:
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.2)
            if start_offset(w, group, topic) >= 0:
                return
    raise AssertionError(f"share group {group} never started on {topic}")


def start_offset(w: KafkaWire, group: str, topic: str) -> int:
    R = load_request_schema(90, 1)
    G = nested(R, "groups")
    T = nested(G, "topics")
    resp = w.call(make(R, groups=(make(G, group_id=group, topics=(make(T, topic_name=topic, partitions=(0,)),)),)))
    return resp.groups[0].topics[0].partitions[0].start_offset


# ---- kio requests ---------------------------------------------------------------------------------


def request(api_key: int, version: int, **values):
    return make(load_request_schema(api_key, version), **values)


def heartbeat(w: KafkaWire, group: str, member: str, epoch: int, topics=None):
    return w.call(request(76, 1, group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                          subscribed_topic_names=topics))


def share_fetch(w: KafkaWire, group: str, member: str, epoch: int, topic_id, partitions=(0,), acks=None,
                max_wait_ms: int = 0, version: int = 2):
    R = load_request_schema(78, version)
    T = nested(R, "topics")
    P = nested(T, "partitions")
    B = nested(P, "acknowledgement_batches")
    acks = acks or {}
    topics = () if topic_id is None else (make(T, topic_id=topic_id, partitions=tuple(
        make(P, partition_index=p, acknowledgement_batches=tuple(
            make(B, first_offset=f, last_offset=last, acknowledge_types=tuple(types))
            for f, last, types in acks.get(p, ()))) for p in partitions)),)
    return w.call(make(R, group_id=group, member_id=member, share_session_epoch=epoch, max_wait=max_wait_ms,
                       min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=topics,
                       forgotten_topics_data=()))


def share_ack(w: KafkaWire, group: str, member: str, epoch: int, topic_id, acks, version: int = 2):
    R = load_request_schema(79, version)
    T = nested(R, "topics")
    P = nested(T, "partitions")
    B = nested(P, "acknowledgement_batches")
    return w.call(make(R, group_id=group, member_id=member, share_session_epoch=epoch, topics=(
        make(T, topic_id=topic_id, partitions=tuple(
            make(P, partition_index=p, acknowledgement_batches=tuple(
                make(B, first_offset=f, last_offset=last, acknowledge_types=tuple(types))
                for f, last, types in batches)) for p, batches in acks.items())),)))


def topic_id_of(w: KafkaWire, topic: str) -> uuid.UUID:
    R = load_request_schema(3, 12)
    T = nested(R, "topics")
    resp = w.call(make(R, topics=(make(T, name=topic, topic_id=None),), allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False))
    return resp.topics[0].topic_id


def acquired(resp) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


def join_member(w: KafkaWire, group: str, topic: str) -> tuple[str, int]:
    member = str(uuid.uuid4())
    resp = heartbeat(w, group, member, 0, [topic])
    assert resp.error_code == 0, resp
    return member, resp.member_epoch


def acquire_all(w: KafkaWire, group: str, member: str, topic_id, want: int, epoch: int = 0) -> tuple[list, int]:
    """ShareFetch from session epoch `epoch` until `want` offsets are acquired; (runs, next epoch)."""
    runs: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + GUARD
    while sum(last - first + 1 for first, last, _ in runs) < want and time.monotonic() < deadline:
        resp = share_fetch(w, group, member, epoch, topic_id, max_wait_ms=200)
        assert resp.error_code == 0, resp
        runs += acquired(resp)
        epoch += 1
    return runs, epoch


# ---- real clients ------------------------------------------------------------------------------------


def test_share_consumer_receives_every_record_once(bootstrap):
    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    c = share_consumer(bootstrap, group)
    try:
        c.subscribe([topic])
        joined(bootstrap, group, topic, [c])
        produce(bootstrap, topic, 20)
        got = poll_values([c], 20)
        assert sorted(got[0]) == sorted(b"m%d" % i for i in range(20))
    finally:
        c.close()


def test_four_share_consumers_on_one_partition_split_the_records(bootstrap):
    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    consumers = [share_consumer(bootstrap, group) for _ in range(4)]
    try:
        for c in consumers:
            c.subscribe([topic])
        joined(bootstrap, group, topic, consumers)
        produce(bootstrap, topic, 200)
        got = poll_values(consumers, 200)
        values = [v for per in got for v in per]
        assert sorted(values) == sorted(b"m%d" % i for i in range(200))  # each once: no duplicates
    finally:
        for c in consumers:
            c.close()


def test_released_record_is_delivered_again_and_rejected_is_not(bootstrap):
    from confluent_kafka import AcknowledgeType

    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    c = share_consumer(bootstrap, group, **{"share.acknowledgement.mode": "explicit"})
    seen: list[bytes] = []
    try:
        c.subscribe([topic])
        joined(bootstrap, group, topic, [c])
        produce(bootstrap, topic, 3)

        def ack(consumer, m):
            seen.append(m.value())
            kind = {b"m0": AcknowledgeType.ACCEPT, b"m1": AcknowledgeType.RELEASE,
                    b"m2": AcknowledgeType.REJECT}[m.value()]
            consumer.acknowledge(m, kind if seen.count(m.value()) == 1 else AcknowledgeType.ACCEPT)

        deadline = time.monotonic() + GUARD
        while seen.count(b"m1") < 2 and time.monotonic() < deadline:
            for m in c.poll(0.3):
                assert m.error() is None, m.error()
                ack(c, m)
            c.commit_sync()
        assert seen.count(b"m1") == 2  # released: delivered again
        assert seen.count(b"m0") == 1 and seen.count(b"m2") == 1  # accepted / rejected: never again
    finally:
        c.close()


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(30)


HOLDING_CONSUMER = textwrap.dedent("""
    import sys
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", "log_level": 3})
    c.subscribe([topic])
    while True:
        got = [m.value().decode() for m in c.poll(0.2) if m.error() is None]
        if got:
            print(" ".join(got), flush=True)
            break
    sys.stdin.read()  # holds its records, acknowledging none, until it is killed
""")


def test_records_of_a_killed_consumer_come_back_when_its_connection_closes(kafka_broker, bootstrap):
    lock_ms = 60_000  # group.share.max.record.lock.duration.ms: a lock timeout would take this long
    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest",
                                         "share.record.lock.duration.ms": str(lock_ms)})
    produce(bootstrap, topic, 10)
    holder = subprocess.Popen([sys.executable, "-c", HOLDING_CONSUMER, bootstrap, group, topic],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = holder.stdout.readline().split() if holder.stdout is not None else []
        assert held, "the first consumer got no records"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    killed = time.monotonic()
    c = share_consumer(bootstrap, group)
    try:
        c.subscribe([topic])
        # Within half the lock duration: the records came back with the closed connection's
        # share session, not by the lock timeout.
        got = poll_values([c], 10, guard=lock_ms / 2000)
        assert time.monotonic() - killed < lock_ms / 1000
        assert sorted(got[0]) == sorted(b"m%d" % i for i in range(10))
    finally:
        c.close()
    metrics = scrape(kafka_broker)
    labels = f'partition="0",sharegroup="{group}",topic="{topic}"'
    assert metrics[f"strata_share_group_records_released_total{{{labels}}}"] >= len(held)
    assert metrics.get(f"strata_share_group_lock_timeouts_total{{{labels}}}", 0.0) == 0.0


# ---- the wire ----------------------------------------------------------------------------------------


def scrape(broker) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(broker.admin_url("/metrics"), timeout=30) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def test_share_session_epochs_and_acknowledgements_on_the_wire(kafka_broker, bootstrap, wire):
    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    w = wire()
    tid = topic_id_of(w, topic)
    member, _ = join_member(w, group, topic)
    first = share_fetch(w, group, member, 0, tid)  # opens the session; the SPSO is the log end (latest)
    assert first.error_code == 0 and acquired(first) == []
    produce(bootstrap, topic, 5)
    runs, epoch = acquire_all(w, group, member, tid, 5, epoch=1)
    assert runs == [(0, 4, 1)]
    # a wrong epoch, an acknowledge that opens no session, an unknown member's session
    assert share_fetch(w, group, member, epoch + 5, tid).error_code == INVALID_SHARE_SESSION_EPOCH
    assert share_ack(w, group, member, 0, tid, {0: [(0, 0, [1])]}).error_code == INVALID_SHARE_SESSION_EPOCH
    assert share_fetch(w, group, "nobody", 3, tid).error_code == SHARE_SESSION_NOT_FOUND
    # accept 0-1, release 2, reject 3; 4 stays acquired
    resp = share_ack(w, group, member, epoch, tid, {0: [(0, 1, [1]), (2, 2, [2]), (3, 3, [3])]})
    assert resp.error_code == 0
    assert [p.error_code for t in resp.responses for p in t.partitions] == [0]
    epoch += 1
    again, epoch = acquire_all(w, group, member, tid, 1, epoch=epoch)
    assert again == [(2, 2, 2)]  # the released record, second delivery
    # DescribeShareGroupOffsets: SPSO moved past the accepted and rejected records
    R = load_request_schema(90, 1)
    G = nested(R, "groups")
    T = nested(G, "topics")
    resp = w.call(make(R, groups=(make(G, group_id=group, topics=(make(T, topic_name=topic, partitions=(0,)),)),)))
    row = resp.groups[0].topics[0].partitions[0]
    assert row.error_code == 0 and row.start_offset == 2
    # the share-group metrics count what happened
    metrics = scrape(kafka_broker)
    labels = f'partition="0",sharegroup="{group}",topic="{topic}"'
    assert metrics[f"strata_share_group_records_acquired_total{{{labels}}}"] == 6.0  # 0-4, then 2 again
    assert metrics[f"strata_share_group_records_acknowledged_total{{{labels}}}"] == 2.0
    assert metrics[f"strata_share_group_records_released_total{{{labels}}}"] == 1.0
    assert metrics[f"strata_share_group_records_rejected_total{{{labels}}}"] == 1.0
    assert metrics[f"strata_share_group_lag{{{labels}}}"] == 2.0  # 2 and 4: delivered, not done
    # an unknown topic id is answered per partition
    bogus = share_fetch(w, group, member, epoch, uuid.uuid4())
    assert bogus.error_code == 0
    assert UNKNOWN_TOPIC_ID in [p.error_code for t in bogus.responses for p in t.partitions]


def test_heartbeat_errors_and_describe(bootstrap, wire):
    topic = create_topic(bootstrap, unique_name("sq"), 2)
    group = unique_name("sg")
    w = wire()
    assert heartbeat(w, group, "ghost", 3, None).error_code == UNKNOWN_MEMBER_ID
    assert heartbeat(w, group, "", 0, [topic]).error_code == INVALID_REQUEST
    member, epoch = join_member(w, group, topic)
    resp = heartbeat(w, group, member, epoch, None)
    assert resp.error_code == 0
    R = load_request_schema(77, 1)
    d = w.call(make(R, group_ids=(group, unique_name("none")), include_authorized_operations=False))
    described, missing = d.groups
    assert described.error_code == 0 and described.group_state == "Stable"
    assert described.assignor_name == "simple"
    assert [m.member_id for m in described.members] == [member]
    assert sorted(described.members[0].assignment.topic_partitions[0].partitions) == [0, 1]
    assert missing.error_code == GROUP_ID_NOT_FOUND


def test_list_describe_delete_groups_know_share_groups(bootstrap, wire):
    from confluent_kafka.admin import AdminClient

    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    w = wire()
    member, epoch = join_member(w, group, topic)
    R = load_request_schema(16, 5)
    listed = w.call(make(R, states_filter=(), types_filter=("share",)))
    assert (group, "share", "share", "Stable") in {(g.group_id, g.protocol_type, g.group_type, g.group_state)
                                                   for g in listed.groups}
    R = load_request_schema(15, 6)
    described = w.call(make(R, groups=(group,), include_authorized_operations=False)).groups[0]
    assert described.error_code == GROUP_ID_NOT_FOUND  # DescribeGroups describes classic groups only
    R = load_request_schema(42, 2)
    assert w.call(make(R, groups_names=(group,))).results[0].error_code == NON_EMPTY_GROUP
    assert heartbeat(w, group, member, -1, None).error_code == 0  # leaves
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_consumer_groups([group])[group].result(30)
    listed = w.call(make(load_request_schema(16, 5), states_filter=(), types_filter=("share",)))
    assert group not in {g.group_id for g in listed.groups}


def test_api_versions_advertise_share_apis_and_feature(wire):
    w = wire()
    R = load_request_schema(18, 4)
    resp = w.call(make(R, client_software_name="t", client_software_version="1"))
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[76] == (1, 1) and keys[77] == (1, 1)
    assert keys[78] == (1, 2) and keys[79] == (1, 2)
    assert keys[90] == (0, 1) and keys[91] == (0, 0) and keys[92] == (0, 0)
    assert [(f.name, f.max_version_level) for f in resp.finalized_features] == [("share.version", 1)]


def test_alter_and_delete_share_group_offsets(bootstrap, wire):
    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    produce(bootstrap, topic, 10)
    w = wire()
    R = load_request_schema(91, 0)
    T = nested(R, "topics")
    P = nested(T, "partitions")
    resp = w.call(make(R, group_id=group, topics=(make(T, topic_name=topic, partitions=(
        make(P, partition_index=0, start_offset=4),)),)))
    assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == 0
    tid = topic_id_of(w, topic)
    member, _ = join_member(w, group, topic)
    runs, epoch = acquire_all(w, group, member, tid, 6)
    assert runs[0][0] == 4  # the share partition starts at the altered offset
    R = load_request_schema(92, 0)
    T = nested(R, "topics")
    refused = w.call(make(R, group_id=group, topics=(make(T, topic_name=topic),)))
    assert refused.error_code == NON_EMPTY_GROUP
    share_fetch(w, group, member, -1, None)
    heartbeat(w, group, member, -1, None)
    deleted = w.call(make(R, group_id=group, topics=(make(T, topic_name=topic),)))
    assert deleted.error_code == 0 and deleted.responses[0].error_code == 0


# ---- durability ------------------------------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "kill9"])
def test_restart_keeps_answered_acknowledgements_and_redelivers_acquired(tmp_path, crash):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create_topic(broker.bootstrap, unique_name("sq"), 1)
        group = unique_name("sg")
        with KafkaWire(broker.host, broker.kafka_port) as w:
            tid = topic_id_of(w, topic)
            member, _ = join_member(w, group, topic)
            assert share_fetch(w, group, member, 0, tid).error_code == 0
            produce(broker.bootstrap, topic, 10)
            runs, epoch = acquire_all(w, group, member, tid, 10, epoch=1)
            assert runs == [(0, 9, 1)]
            # accept 0-3 and 6 (answered: written), reject 5; 4, 7, 8, 9 stay acquired
            resp = share_ack(w, group, member, epoch, tid, {0: [(0, 3, [1]), (5, 5, [3]), (6, 6, [1])]})
            assert resp.error_code == 0
            assert [p.error_code for t in resp.responses for p in t.partitions] == [0]
            if crash:
                broker.kill()
        broker.restart()
        with KafkaWire(broker.host, broker.kafka_port) as w:
            member, _ = join_member(w, group, topic)
            runs, _ = acquire_all(w, group, member, tid, 4)
            offsets = sorted(o for first, last, _ in runs for o in range(first, last + 1))
            assert offsets == [4, 7, 8, 9]  # acquired, never acknowledged: delivered again
            R = load_request_schema(90, 1)
            G = nested(R, "groups")
            resp = w.call(make(R, groups=(make(G, group_id=group, topics=None),)))
            assert resp.groups[0].topics[0].partitions[0].start_offset == 4
    finally:
        broker.close()


def test_group_config_share_auto_offset_reset_earliest(bootstrap):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    topic = create_topic(bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    produce(bootstrap, topic, 5)  # before the group exists
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)])
    found = next(iter(described.values())).result(30)
    assert found["share.auto.offset.reset"].value == "earliest"
    c = share_consumer(bootstrap, group)
    try:
        c.subscribe([topic])
        got = poll_values([c], 5)
        assert sorted(got[0]) == sorted(b"m%d" % i for i in range(5))
    finally:
        c.close()
