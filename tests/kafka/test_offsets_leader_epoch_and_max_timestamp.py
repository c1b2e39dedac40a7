"""Committed offsets carry their leader epoch, and ListOffsets MAX_TIMESTAMP answers the
record with the largest timestamp, end to end with confluent-kafka against the broker process."""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    OffsetSpec,
)

from client import Admin as NativeAdmin
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import commit, committed

TIMEOUT = 30


def native_bootstrap(broker) -> str:
    return f"{broker.host}:{broker.port}"


# ---- the committed leader epoch -------------------------------------------------------------

def test_offset_fetch_answers_the_committed_leader_epoch(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        broker.start()
        with NativeAdmin(native_bootstrap(broker)) as native:
            native.create_topic("epochs", 3)
            native.commit("g-epoch", "epochs", 2, 9, "native")  # the native commit: no epoch
        commit(broker.bootstrap, "g-epoch", [TopicPartition("epochs", 0, 5, leader_epoch=7),
                                             TopicPartition("epochs", 1, 6)])
        asked = [TopicPartition("epochs", p) for p in range(3)]
        got = committed(broker.bootstrap, "g-epoch", asked)
        assert [(tp.offset, tp.leader_epoch) for tp in got] == [(5, 7), (6, None), (9, None)]

        broker.restart()  # the epoch is in the __consumer_offsets record, not only in memory
        got = committed(broker.bootstrap, "g-epoch", asked)
        assert [(tp.offset, tp.leader_epoch) for tp in got] == [(5, 7), (6, None), (9, None)]
        with NativeAdmin(native_bootstrap(broker)) as native:
            assert native.committed("g-epoch", "epochs", 0) == (5, "")  # one store for both protocols
            assert native.committed("g-epoch", "epochs", 2) == (9, "native")


# ---- ListOffsets MAX_TIMESTAMP ---------------------------------------------------------------

def test_max_timestamp_is_the_record_not_its_batch_end(bootstrap, new_topic):
    topic = new_topic()
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "compression.type": "lz4"})
    for i, delta in enumerate([1, 5, 9, 2, 9, 3]):  # one batch: the largest, 9, first at offset 2
        producer.produce(topic, value=b"m%d" % i, timestamp=base + delta)
    producer.flush(TIMEOUT)
    producer.produce(topic, value=b"later", timestamp=base + 4)  # a later batch with a smaller timestamp
    producer.flush(TIMEOUT)
    tp = TopicPartition(topic, 0)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(TIMEOUT)
    assert (found.offset, found.timestamp) == (2, base + 9)
    latest = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(TIMEOUT)
    assert latest.offset == 7
