"""Consumer groups end to end: the real broker process driven over its Kafka port by
confluent-kafka (librdkafka), kafka-python, aiokafka and kcat.

The brokers here start rebalances at once (group.initial.rebalance.delay.ms=0) and
accept short sessions; clients heartbeat often so rebalances are noticed quickly
(consumer-protocol groups: group.consumer.heartbeat.interval.ms=500). Tests that
apply to both group protocols run with librdkafka's group.protocol=classic and
group.protocol=consumer (KIP-848). Deadlines are failure guards, not speed assumptions.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import time

import pytest

from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name

GROUP_ARGS = ("--set", "group.initial.rebalance.delay.ms=0", "--set", "group.min.session.timeout.ms=1000",
              "--set", "auto.create.topics.enable=true",
              "--set", "group.consumer.min.heartbeat.interval.ms=100",
              "--set", "group.consumer.heartbeat.interval.ms=500")
GUARD = 60.0
FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 250, "auto.offset.reset": "earliest",
        "enable.auto.commit": False}
# group.protocol=consumer: the broker sets the session timeout and heartbeat interval
FAST_CONSUMER = {"group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False}
PROTOCOLS = ("classic", "consumer")
both_protocols = pytest.mark.parametrize("protocol", PROTOCOLS)


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    """This module's broker (overrides tests/kafka/conftest.py's): group settings for tests."""
    process = BrokerProcess(tmp_path_factory.mktemp("groups-broker"), *GROUP_ARGS)
    try:
        yield process.start()
        failures = [e for e in process.log_events()
                    if e.get("event") in ("kafka_request_failed", "group_timer_failed")]
        assert not failures, failures
    finally:
        process.close()


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(topic, value=b"m%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def confluent_consumer(bootstrap: str, group: str, protocol: str = "classic", **extra):
    from confluent_kafka import Consumer

    settings = FAST_CONSUMER if protocol == "consumer" else FAST
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, **settings, **extra})


def poll_until(consumers, done, guard: float = GUARD) -> dict:
    """Poll every consumer in turn until `done(received)`; received maps a consumer's
    index to its (partition, offset, value) list."""
    received: dict[int, list] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + guard
    while not done(received):
        assert time.monotonic() < deadline, f"gave up; received {received}"
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.1)
            if message is None:
                continue
            assert message.error() is None, message.error()
            received[i].append((message.partition(), message.offset(), message.value()))
    return received


def assigned(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def committed(consumer, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import TopicPartition

    return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                   timeout=30)]


@both_protocols
def test_confluent_consumer_group_consumes_and_commits(bootstrap, protocol):
    topic = create_topic(bootstrap, unique_name("gc"), 4)
    produce(bootstrap, topic, 40, 4)
    group = unique_name("group")
    consumer = confluent_consumer(bootstrap, group, protocol)
    try:
        consumer.subscribe([topic])
        got = poll_until([consumer], lambda r: len(r[0]) >= 40)[0]
        assert sorted(v for _, _, v in got) == sorted(b"m%d" % i for i in range(40))
        assert assigned(consumer) == {0, 1, 2, 3}
        consumer.commit(asynchronous=False)
        assert committed(consumer, topic, 4) == [10, 10, 10, 10]
    finally:
        consumer.close()


@both_protocols
def test_two_members_share_the_partitions_and_one_takes_over_when_the_other_leaves(bootstrap, protocol):
    topic = create_topic(bootstrap, unique_name("gshare"), 4)
    group = unique_name("group")
    first, second = confluent_consumer(bootstrap, group, protocol), confluent_consumer(bootstrap, group, protocol)
    try:
        first.subscribe([topic])
        poll_until([first], lambda r: assigned(first) == {0, 1, 2, 3})
        second.subscribe([topic])
        poll_until([first, second], lambda r: len(assigned(first)) == 2 and len(assigned(second)) == 2)
        assert assigned(first) | assigned(second) == {0, 1, 2, 3}

        # each consumes exactly its own partitions
        produce(bootstrap, topic, 40, 4)
        got = poll_until([first, second], lambda r: len(r[0]) + len(r[1]) >= 40)
        assert {p for p, _, _ in got[0]} == assigned(first)
        assert {p for p, _, _ in got[1]} == assigned(second)
        assert sorted(v for i in (0, 1) for _, _, v in got[i]) == sorted(b"m%d" % i for i in range(40))

        second.close()  # LeaveGroup: the survivor gets everything without waiting for a session timeout
        started = time.monotonic()
        poll_until([first], lambda r: assigned(first) == {0, 1, 2, 3})
        assert time.monotonic() - started < 6.0  # well under the 6 s session timeout
    finally:
        first.close()


@both_protocols
def test_resume_from_committed_offsets_after_consumer_and_broker_restart(broker, protocol):
    process = broker(*GROUP_ARGS)
    topic = create_topic(process.bootstrap, unique_name("gresume"), 2)
    produce(process.bootstrap, topic, 20, 2)
    group = unique_name("group")

    def consume_some(bootstrap: str, count: int) -> list:
        consumer = confluent_consumer(bootstrap, group, protocol)
        try:
            consumer.subscribe([topic])
            got = []
            deadline = time.monotonic() + GUARD
            while len(got) < count:
                assert time.monotonic() < deadline, got
                message = consumer.poll(0.1)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                got.append((message.partition(), message.offset()))
                consumer.commit(message, asynchronous=False)  # commits offset + 1
            return got
        finally:
            consumer.close()

    first = consume_some(process.bootstrap, 6)
    second = consume_some(process.bootstrap, 6)  # a new consumer resumes after the commits
    assert not set(first) & set(second)
    process.restart()
    third = consume_some(process.bootstrap, 8)  # the commits outlived the broker
    everything = first + second + third
    assert sorted(everything) == sorted((p, o) for p in range(2) for o in range(10))


def group_events(process: BrokerProcess, group: str) -> list[dict]:
    """What the broker logged about `group`."""
    return [e for e in process.log_events() if e.get("group") == group]


def describe_events(process: BrokerProcess, group: str) -> str:
    """The same as text, one event a line, for failure messages (shown whole)."""
    return "\n".join(str(e) for e in group_events(process, group))


def test_kafka_python_group_consumption(kafka_broker, bootstrap, caplog):
    from kafka import KafkaConsumer, TopicPartition

    caplog.set_level(logging.DEBUG, logger="kafka.coordinator")  # shown if the test fails

    topic = create_topic(bootstrap, unique_name("gkp"), 2)
    produce(bootstrap, topic, 10, 2)
    group = unique_name("group")

    def run(expected: int, committed_after: int) -> list:
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=6000, heartbeat_interval_ms=250)
        try:
            got = []
            deadline = time.monotonic() + GUARD
            while len(got) < expected:
                assert time.monotonic() < deadline, f"{got}\n{describe_events(kafka_broker, group)}"
                # a long poll: kafka-python 3.0.12 loses a leader's rejoin that completes after
                # poll() timed out (need_rejoin() turns False once the assignment is computed,
                # so the finished join is never taken up and heartbeats stay disabled)
                for records in consumer.poll(timeout_ms=5000).values():
                    got.extend(r.value for r in records)
            consumer.commit()
            assert [consumer.committed(TopicPartition(topic, p)) for p in range(2)] == [committed_after] * 2
            return got
        finally:
            consumer.close()

    assert sorted(run(10, 5)) == sorted(b"m%d" % i for i in range(10))
    produce(bootstrap, topic, 10, 2, start=10)
    assert sorted(run(10, 10)) == sorted(b"m%d" % i for i in range(10, 20))  # resumed from the commit


def test_aiokafka_group_consumption(bootstrap):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = create_topic(bootstrap, unique_name("gaio"), 3)
    produce(bootstrap, topic, 12, 3)
    group = unique_name("group")

    async def run(expected: int) -> tuple[list, list]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=6000, heartbeat_interval_ms=250)
        await consumer.start()
        try:
            got = []
            deadline = time.monotonic() + GUARD
            while len(got) < expected:
                assert time.monotonic() < deadline, got
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
            await consumer.commit()
            offsets = [await consumer.committed(TopicPartition(topic, p)) for p in range(3)]
            return got, offsets
        finally:
            await consumer.stop()

    got, offsets = asyncio.run(run(12))
    assert sorted(got) == sorted(b"m%d" % i for i in range(12)) and offsets == [4, 4, 4]
    produce(bootstrap, topic, 3, 3, start=12)
    got, offsets = asyncio.run(run(3))
    assert sorted(got) == [b"m12", b"m13", b"m14"] and offsets == [5, 5, 5]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer(bootstrap):
    topic = create_topic(bootstrap, unique_name("gkcat"), 2)
    produce(bootstrap, topic, 10, 2)
    group = unique_name("group")
    done = subprocess.run(["kcat", "-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
                           "-e", "-q", "-f", "%p %o %s\n", topic],
                          capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.split())
    assert sorted(line for line in done.stdout.splitlines()) == \
        sorted(f"{i % 2} {i // 2} m{i}" for i in range(10)), lines
    # kcat commits what it consumed (auto commit on close): a second run finds nothing new
    consumer = confluent_consumer(bootstrap, group)
    try:
        assert committed(consumer, topic, 2) == [5, 5]
    finally:
        consumer.close()


@both_protocols
def test_list_and_describe_groups_with_confluent_admin(bootstrap, protocol):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    topic = create_topic(bootstrap, unique_name("gadmin"), 4)
    group = unique_name("group")
    consumer = confluent_consumer(bootstrap, group, protocol, **{"client.id": "described-client"})
    kind = ConsumerGroupType.CONSUMER if protocol == "consumer" else ConsumerGroupType.CLASSIC
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        consumer.subscribe([topic])
        poll_until([consumer], lambda r: assigned(consumer) == {0, 1, 2, 3})
        listed = admin.list_consumer_groups(request_timeout=30).result()
        states = {g.group_id: g.state for g in listed.valid}
        assert states[group] == ConsumerGroupState.STABLE
        only_empty = admin.list_consumer_groups(
            states={ConsumerGroupState.EMPTY}, request_timeout=30).result()
        assert group not in {g.group_id for g in only_empty.valid}
        of_kind = admin.list_consumer_groups(types={kind}, request_timeout=30).result()
        assert {g.group_id: g.type for g in of_kind.valid}[group] == kind
        other = ConsumerGroupType.CLASSIC if kind == ConsumerGroupType.CONSUMER else ConsumerGroupType.CONSUMER
        not_of_kind = admin.list_consumer_groups(types={other}, request_timeout=30).result()
        assert group not in {g.group_id for g in not_of_kind.valid}

        description = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == ("uniform" if protocol == "consumer" else "range")
        assert description.type == kind
        assert description.coordinator.id == 0
        (member,) = description.members
        assert member.client_id == "described-client"
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1, 2, 3}
    finally:
        consumer.close()
    description = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
    assert description.state == ConsumerGroupState.EMPTY and not description.members


def test_native_commits_and_kafka_commits_are_the_same_offsets(kafka_broker, bootstrap):
    from confluent_kafka import TopicPartition

    from client.admin import Admin

    topic = create_topic(bootstrap, unique_name("gnative"), 2)
    group = unique_name("group")
    native_bootstrap = "{}:{}".format(*kafka_broker.address)
    with Admin(native_bootstrap) as native:
        native.commit(group, topic, 0, 42, "from-native")
        consumer = confluent_consumer(bootstrap, group)
        try:
            (seen,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
            assert (seen.offset, seen.metadata) == (42, "from-native")
            # a Kafka commit (simple: the consumer has not joined) is what the native side reads
            consumer.commit(offsets=[TopicPartition(topic, 1, 7, metadata="from-kafka")], asynchronous=False)
        finally:
            consumer.close()
        offset, metadata = native.committed(group, topic, 1)
        # confluent-kafka sends the metadata's C string terminator too; the broker keeps what was sent
        assert (offset, metadata.rstrip("\x00")) == (7, "from-kafka")


def test_static_member_restart_keeps_its_partitions(kafka_broker, bootstrap):
    """A consumer with group.instance.id that comes back (librdkafka sends no
    LeaveGroup for static members) takes its place again at once: same generation,
    same partitions, no rebalance and no wait for its old session to expire."""
    topic = create_topic(bootstrap, unique_name("gstatic"), 2)
    group = unique_name("group")
    settings = {"group.instance.id": "instance-1", "session.timeout.ms": 30000}
    first = confluent_consumer(bootstrap, group, **settings)
    first.subscribe([topic])
    poll_until([first], lambda r: assigned(first) == {0, 1})
    first.close()

    produce(bootstrap, topic, 4, 2)
    started = time.monotonic()
    again = confluent_consumer(bootstrap, group, **settings)
    try:
        again.subscribe([topic])
        got = poll_until([again], lambda r: len(r[0]) >= 4)
        assert time.monotonic() - started < 15.0  # not the 30 s session timeout of the old member
        assert sorted(v for _, _, v in got[0]) == [b"m0", b"m1", b"m2", b"m3"]
        generations = {e["generation"] for e in group_events(kafka_broker, group)
                       if e["event"] == "group_generation"}
        assert generations == {1}, group_events(kafka_broker, group)
    finally:
        again.close()


def test_broker_stops_promptly_with_a_join_parked(broker):
    """Shutdown answers the parked JoinGroup (NOT_COORDINATOR) instead of waiting
    for the rebalance (here: a 60 s initial delay) or the 30 s shutdown timeout."""
    process = broker("--set", "group.initial.rebalance.delay.ms=60000", "--set", "shutdown.timeout.ms=30000",
                     "--set", "group.min.session.timeout.ms=1000")
    topic = create_topic(process.bootstrap, unique_name("gstop"), 1)
    group = unique_name("group")
    consumer = confluent_consumer(process.bootstrap, group)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + GUARD
        while not any(e["event"] == "group_member_added" for e in group_events(process, group)):
            assert time.monotonic() < deadline
            consumer.poll(0.1)
        started = time.monotonic()
        assert process.stop() == 0
        assert time.monotonic() - started < 10.0
        closed = [e for e in process.log_events() if e.get("event") == "group_coordinator_closed"]
        assert closed and closed[0]["answered"] == 1
    finally:
        consumer.close()


def test_a_silent_member_expires_and_its_partitions_move(kafka_broker, bootstrap, wire):
    """A member that stops heartbeating (here a bare kio client that joins, syncs
    and goes quiet) is removed after its session timeout; librdkafka's consumer
    then gets its partitions back in the next generation."""
    import struct
    import threading

    from kio.index import load_request_schema

    from broker.kafka.codec import make, nested

    topic = create_topic(bootstrap, unique_name("gexpire"), 4)
    group = unique_name("group")
    consumer = confluent_consumer(bootstrap, group)
    try:
        consumer.subscribe([topic])
        poll_until([consumer], lambda r: assigned(consumer) == {0, 1, 2, 3})

        JoinRequest = load_request_schema(11, 5)
        subscription = struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", -1)
        conn = wire()

        def join(member_id: str):
            protocol = make(nested(JoinRequest, "protocols"), name="range", metadata=subscription)
            return conn.call(make(JoinRequest, group_id=group, session_timeout=1500, rebalance_timeout=30000,
                                  member_id=member_id, protocol_type="consumer", protocols=(protocol,)))

        first = join("")
        assert first.error_code == 79  # MEMBER_ID_REQUIRED
        result = {}
        joining = threading.Thread(target=lambda: result.update(join=join(first.member_id)))
        joining.start()  # parked until the consumer rejoins, which it does on its next heartbeat
        poll_until([consumer], lambda r: not joining.is_alive() and len(assigned(consumer)) == 2)
        joined = result["join"]
        assert joined.error_code == 0 and joined.leader != joined.member_id
        synced = conn.call(make(load_request_schema(14, 3), group_id=group, generation_id=joined.generation_id,
                                member_id=joined.member_id, assignments=()))
        assert synced.error_code == 0 and synced.assignment  # the consumer (leader) gave it partitions
        # ... and now it is silent: after 1.5 s the broker drops it and the consumer takes over
        poll_until([consumer], lambda r: assigned(consumer) == {0, 1, 2, 3})
        expired = [e for e in group_events(kafka_broker, group) if e["event"] == "group_member_session_expired"]
        assert [e["member"] for e in expired] == [joined.member_id]
    finally:
        consumer.close()
