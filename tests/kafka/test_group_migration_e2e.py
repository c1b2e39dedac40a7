"""Online conversion of a group between the classic protocol and the consumer
protocol (Kafka 4's group.consumer.migration.policy, default bidirectional), end to
end: the real broker process and confluent-kafka consumers with
group.protocol=classic and group.protocol=consumer in one group (and a kafka-python
classic consumer beside a consumer-protocol one).

An `Owners` ledger, fed by every consumer's rebalance callbacks (which librdkafka
runs inside poll, before an eager member rejoins and after any member is given
partitions), checks that no partition is ever held by two members at once; the
messages received check that none is lost; committed offsets are read back after
each conversion. Deadlines are failure guards, not speed assumptions.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import TopicPartition
from kio.index import load_request_schema

from broker.kafka.codec import make, nested
from broker.kafka.groups.consumer_protocol import encode_assignment
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.test_groups_e2e import GROUP_ARGS, confluent_consumer, poll_until, produce

PARTITIONS = 6


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("migration-broker"), *GROUP_ARGS,
                            "--set", "broker.rack=rack-1")
    try:
        yield process.start()
        failures = [e for e in process.log_events()
                    if e.get("event") in ("kafka_request_failed", "group_timer_failed")]
        assert not failures, failures
    finally:
        process.close()


class Owners:
    """Who holds each partition, as the consumers' rebalance callbacks say."""

    def __init__(self):
        self.owner: dict[int, str] = {}
        self.events: list[tuple[str, str, tuple[int, ...]]] = []

    def callbacks(self, name: str) -> dict:
        def on_assign(consumer, partitions):
            self.events.append((name, "assign", tuple(p.partition for p in partitions)))
            for p in partitions:
                holder = self.owner.get(p.partition)
                assert holder in (None, name), f"partition {p.partition} given to {name} while {holder} holds it: " \
                                               f"{self.events}"
                self.owner[p.partition] = name

        def on_revoke(consumer, partitions):
            self.events.append((name, "revoke", tuple(p.partition for p in partitions)))
            for p in partitions:
                if self.owner.get(p.partition) == name:
                    del self.owner[p.partition]

        return {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_revoke}

    def of(self, name: str) -> set[int]:
        return {p for p, holder in self.owner.items() if holder == name}


def group_type(bootstrap: str, group: str) -> str | None:
    """The type ListGroups (v5, with a types filter) gives the group."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for kind in (ConsumerGroupType.CLASSIC, ConsumerGroupType.CONSUMER):
        listed = admin.list_consumer_groups(types={kind}, request_timeout=30).result()
        if group in {g.group_id for g in listed.valid}:
            return kind.name.lower()
    return None


def committed(consumer, topic: str) -> dict[int, int]:
    got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])  # eager and cooperative classic members
def test_classic_and_consumer_members_share_a_group_through_upgrade_and_downgrade(bootstrap, strategy):
    topic = create_topic(bootstrap, unique_name("mig"), PARTITIONS)
    produce(bootstrap, topic, 60, PARTITIONS)
    group = unique_name("group")
    owners = Owners()
    names = ("classic-1", "classic-2", "consumer-1")
    consumers = [confluent_consumer(bootstrap, group, "classic", **{"partition.assignment.strategy": strategy})
                 for _ in range(2)]
    received: dict[int, list] = {}

    def poll(members, done, guard=60.0):
        try:
            got = poll_until(members, done, guard)
        except AssertionError as e:
            raise AssertionError(f"{e}; rebalances: {owners.events}") from None
        for i, messages in got.items():
            received.setdefault(i, []).extend(messages)
        return got

    def values(now: dict | None = None) -> set[bytes]:
        """Every value received so far (`now`: what the current poll_until received)."""
        rounds = [received, now or {}]
        return {v for got in rounds for messages in got.values() for _, _, v in messages}

    try:
        for name, c in zip(names, consumers, strict=False):
            c.subscribe([topic], **owners.callbacks(name))
        poll(consumers, lambda r: len(owners.of("classic-1")) == len(owners.of("classic-2")) == 3
             and sum(len(m) for m in r.values()) >= 30)
        assert group_type(bootstrap, group) == "classic"
        for c in consumers:  # what each classic member consumed so far
            c.commit(asynchronous=False)
        before = committed(consumers[0], topic)
        assert before, "the classic members committed nothing"

        # a consumer-protocol member joins: the group becomes a consumer group online
        consumers.append(confluent_consumer(bootstrap, group, "consumer"))
        consumers[2].subscribe([topic], **owners.callbacks("consumer-1"))
        poll(consumers, lambda r: all(len(owners.of(n)) == 2 for n in names) and len(values(r)) == 60)
        assert group_type(bootstrap, group) == "consumer"
        assert {p: o for p, o in committed(consumers[2], topic).items() if p in before} == before  # offsets kept
        consumers[0].commit(asynchronous=False)  # a classic member commits with its member epoch
        produce(bootstrap, topic, 60, PARTITIONS, start=60)
        poll(consumers, lambda r: len(values(r)) == 120)

        # the consumer-protocol member leaves: back to a classic group, the classic members rebalance
        consumers.pop().close()
        for p in list(owners.of("consumer-1")):  # closing gave them up
            del owners.owner[p]
        poll(consumers, lambda r: len(owners.of("classic-1")) == len(owners.of("classic-2")) == 3)
        assert group_type(bootstrap, group) == "classic"
        produce(bootstrap, topic, 60, PARTITIONS, start=120)
        poll(consumers, lambda r: len(values(r)) == 180)
        assert values() == {b"m%d" % i for i in range(180)}  # none lost
        consumers[1].commit(asynchronous=False)
        assert committed(consumers[1], topic)
    finally:
        for c in consumers:
            c.close()


def test_broker_rack_and_member_rack_ids(bootstrap, wire):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    nodes = admin.describe_cluster(request_timeout=30).result().nodes
    assert [n.rack for n in nodes] == ["rack-1"]
    topic = create_topic(bootstrap, unique_name("rack"), 2)
    group = unique_name("group")
    c = confluent_consumer(bootstrap, group, "consumer", **{"client.rack": "rack-1"})
    try:
        c.subscribe([topic])
        poll_until([c], lambda r: len(c.assignment()) == 2)
        desc = wire().call(make(load_request_schema(69, 1), group_ids=(group,), include_authorized_operations=False))
        assert [m.rack_id for m in desc.groups[0].members] == ["rack-1"]
    finally:
        c.close()


def test_a_converted_group_with_a_classic_member_survives_a_restart(broker):
    """The classic member's metadata is in the consumer group's records: after a crash
    the classic member heartbeats on with its generation, beside the consumer member."""
    from tests.kafka.test_consumer_groups_e2e import heartbeat_request
    from tests.kafka.test_group_migration import subscription
    from tests.kafka.wire import KafkaWire

    process = broker(*GROUP_ARGS)
    topic = create_topic(process.bootstrap, unique_name("gmigdurable"), 2)
    group = unique_name("group")
    Join, Sync, Heartbeat = load_request_schema(11, 3), load_request_schema(14, 3), load_request_schema(12, 3)
    with KafkaWire(*process.kafka_address) as conn:
        joined = conn.call(make(Join, group_id=group, session_timeout=30_000, rebalance_timeout=30_000, member_id="",
                                group_instance_id=None, protocol_type="consumer",
                                protocols=(make(nested(Join, "protocols"), name="range",
                                                metadata=subscription((topic,))),)))
        assert joined.error_code == 0 and joined.leader == joined.member_id
        plan = encode_assignment({(topic, 0), (topic, 1)}, 1)
        synced = conn.call(make(Sync, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                                group_instance_id=None, assignments=(make(nested(Sync, "assignments"),
                                                                          member_id=joined.member_id,
                                                                          assignment=plan),)))
        assert synced.error_code == 0
        consumer_member = str(uuid.uuid4())
        upgraded = conn.call(heartbeat_request(group, consumer_member, 0, topic))
        assert upgraded.error_code == 0
    process.kill()
    process.restart()
    with KafkaWire(*process.kafka_address) as conn:
        beat = conn.call(make(Heartbeat, group_id=group, generation_id=joined.generation_id,
                              member_id=joined.member_id, group_instance_id=None))
        assert beat.error_code == 27  # REBALANCE_IN_PROGRESS: a known member, asked to give a partition up
        desc = conn.call(make(load_request_schema(69, 1), group_ids=(group,),
                              include_authorized_operations=False)).groups[0]
        assert sorted((m.member_type, m.member_id) for m in desc.members) == \
            [(0, joined.member_id), (1, consumer_member)]
        assert [tuple(t.partitions) for m in desc.members if m.member_type == 0
                for t in m.assignment.topic_partitions] == [(0, 1)]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python 3.0 reads its schemas with read_text
def test_a_kafka_python_classic_member_beside_a_consumer_protocol_member(bootstrap):
    """kafka-python (classic protocol only) keeps consuming while a librdkafka
    group.protocol=consumer member upgrades the group, shares it, and leaves it."""
    from kafka import KafkaConsumer

    topic = create_topic(bootstrap, unique_name("migkp"), 4)
    produce(bootstrap, topic, 40, 4)
    group = unique_name("group")
    classic = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                            auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=250)
    modern = None
    values: set[bytes] = set()

    def poll_both(done, guard=60.0):
        deadline = time.monotonic() + guard
        while not done():
            assert time.monotonic() < deadline, "gave up"
            for records in classic.poll(100).values():
                values.update(r.value for r in records)
            if modern is not None:
                message = modern.poll(0.1)
                if message is not None and message.error() is None:
                    values.add(message.value())
                assert not {tp.partition for tp in classic.assignment()} & {tp.partition for tp in modern.assignment()}

    try:
        poll_both(lambda: len(classic.assignment()) == 4 and len(values) == 40)
        modern = confluent_consumer(bootstrap, group, "consumer")
        modern.subscribe([topic])
        poll_both(lambda: len(classic.assignment()) == 2 and len(modern.assignment()) == 2)
        assert group_type(bootstrap, group) == "consumer"
        produce(bootstrap, topic, 40, 4, start=40)
        poll_both(lambda: len(values) == 80)
        modern.close()
        modern = None
        poll_both(lambda: len(classic.assignment()) == 4)
        assert group_type(bootstrap, group) == "classic"
    finally:
        classic.close()
        if modern is not None:
            modern.close()
