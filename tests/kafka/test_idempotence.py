"""Idempotent producers end to end, against the real broker process: confluent-kafka
with enable.idempotence and lz4, hand-built duplicate and out-of-order Produce
requests (kio), and producer state across a SIGTERM restart and a kill -9."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition
from kio.schema.errors import ErrorCode

from kafka_format import build_batch, iter_entries
from kafka_format.codecs import Codec
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.test_confluent import consume, produce
from tests.kafka.test_wire import fetch_request, only_partition, produce_request, request
from tests.kafka.wire import KafkaWire


def init_pid(conn) -> int:
    response = conn.call(request(22, 4, transactional_id=None, transaction_timeout=60_000,
                                 producer_id=-1, producer_epoch=-1))
    assert response.error_code == ErrorCode.none
    return response.producer_id


def batch(pid: int, seq: int, n: int = 2, epoch: int = 0, tag: bytes = b"m") -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(None, b"%s%d" % (tag, seq + i), now) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, codec=Codec.LZ4)


def send(conn, topic: str, records: bytes):
    (part,) = conn.call(produce_request(9, topic, 0, records)).responses[0].partition_responses
    return part.error_code, part.base_offset


def fetched(conn, topic: str):
    part = only_partition(conn.call(fetch_request(12, [(topic, 0, 0, 1 << 20)])))
    return [(e.base_offset, e.producer_id, e.base_sequence) for e in iter_entries(part.records)]


def test_confluent_idempotent_lz4_exactly_once_in_order(bootstrap, new_topic):
    topic = new_topic()
    n = 1000
    delivered = produce(bootstrap, topic, [(None, b"i%d" % i) for i in range(n)],
                        **{"enable.idempotence": True, "acks": "all", "compression.type": "lz4",
                           "max.in.flight.requests.per.connection": 5, "batch.num.messages": 37})
    assert [m.offset() for m in delivered] == list(range(n))
    got = consume(bootstrap, [TopicPartition(topic, 0, 0)], n)
    assert [m.value() for m in got] == [b"i%d" % i for i in range(n)]


def test_duplicate_batch_gets_its_original_offset(wire, new_topic):
    topic = new_topic()
    conn = wire()
    pid = init_pid(conn)
    assert send(conn, topic, batch(pid, 0)) == (ErrorCode.none, 0)
    assert send(conn, topic, batch(pid, 2)) == (ErrorCode.none, 2)
    assert send(conn, topic, batch(pid, 0)) == (ErrorCode.none, 0)  # a retry: not written again
    assert send(conn, topic, batch(pid, 2)) == (ErrorCode.none, 2)
    assert fetched(conn, topic) == [(0, pid, 0), (2, pid, 2)]


def test_gap_gets_out_of_order_sequence_number(wire, new_topic):
    topic = new_topic()
    conn = wire()
    pid = init_pid(conn)
    assert send(conn, topic, batch(pid, 0)) == (ErrorCode.none, 0)
    code, _ = send(conn, topic, batch(pid, 5))
    assert code == ErrorCode.out_of_order_sequence_number
    code, _ = send(conn, topic, batch(pid, 3, epoch=1))
    assert code == ErrorCode.out_of_order_sequence_number  # a new epoch starts at 0
    assert send(conn, topic, batch(pid, 0, epoch=1)) == (ErrorCode.none, 2)
    code, _ = send(conn, topic, batch(pid, 2, epoch=0))
    assert code == ErrorCode.invalid_producer_epoch
    assert [e[0] for e in fetched(conn, topic)] == [0, 2]


def test_state_survives_sigterm_and_kill_9(tmp_path):
    broker = BrokerProcess(tmp_path / "data", "--set", "auto.create.topics.enable=true")
    with broker.start():
        topic = create_topic(broker.bootstrap, unique_name("idem"))
        with KafkaWire(*broker.kafka_address) as conn:
            pid = init_pid(conn)
            for seq in range(0, 10, 2):
                assert send(conn, topic, batch(pid, seq)) == (ErrorCode.none, seq)
        assert broker.stop() == 0  # SIGTERM: a clean shutdown writes a snapshot at the log end
        assert (tmp_path / "data" / f"{topic}-0" / f"{10:020d}.snapshot").exists()
        broker.restart()
        with KafkaWire(*broker.kafka_address) as conn:
            assert send(conn, topic, batch(pid, 8)) == (ErrorCode.none, 8)  # still a duplicate
            code, _ = send(conn, topic, batch(pid, 11))
            assert code == ErrorCode.out_of_order_sequence_number
            assert send(conn, topic, batch(pid, 10)) == (ErrorCode.none, 10)
        broker.kill()  # kill -9: no snapshot at 12; state comes from the snapshot at 10 + the log
        broker.restart()
        with KafkaWire(*broker.kafka_address) as conn:
            assert send(conn, topic, batch(pid, 10)) == (ErrorCode.none, 10)
            assert send(conn, topic, batch(pid, 8)) == (ErrorCode.none, 8)
            assert send(conn, topic, batch(pid, 12)) == (ErrorCode.none, 12)
            assert [e[0] for e in fetched(conn, topic)] == list(range(0, 14, 2))
