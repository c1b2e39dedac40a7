"""Restart after kill -9 with idempotent producers, against the real broker process.

Several partitions get records from confluent-kafka producers with
enable.idempotence=true and, on partition 0, from hand-built idempotent Produce
requests (kio). A clean stop leaves producer-state snapshots at every log end
and the recovery points there; after a restart more records are produced (not
flushed) and the broker is killed with SIGKILL. The next start must recover every
log from its snapshot (not from offset 0), log its progress as
"N/M logs recovered", and keep the producer state: a retried batch is answered
with its original offset and written once, the sequences continue, a gap is
refused, and every partition holds each record exactly once, in order.
"""

from __future__ import annotations

import os
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import TopicPartition  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.kafka.conftest import create_topic, unique_name  # noqa: E402
from tests.kafka.test_confluent import consume, produce  # noqa: E402
from tests.kafka.test_idempotence import batch, init_pid, send  # noqa: E402
from tests.kafka.wire import KafkaWire  # noqa: E402

PARTITIONS = 4
BEFORE_STOP = 30  # records per partition from confluent-kafka before the clean stop
BEFORE_KILL = 12  # and after the restart, before kill -9
IDEMPOTENT = {"enable.idempotence": True, "acks": "all", "linger.ms": 1}
HANG_GUARD_S = 60.0


def produce_round(bootstrap: str, topic: str, tag: str, count: int) -> None:
    messages = [(None, f"{tag}-{p}-{i}".encode(), p) for p in range(PARTITIONS) for i in range(count)]
    produce(bootstrap, topic, messages, **IDEMPOTENT)


def test_kill_9_keeps_idempotent_producer_state_and_recovers_from_snapshots(tmp_path):
    broker = BrokerProcess(tmp_path / "data", "--set", "num.recovery.threads.per.data.dir=3",
                           "--set", "offsets.topic.num.partitions=3")
    with broker.start():
        topic = create_topic(broker.bootstrap, unique_name("restart"), PARTITIONS)
        produce_round(broker.bootstrap, topic, "a", BEFORE_STOP)
        with KafkaWire(*broker.kafka_address) as conn:
            pid = init_pid(conn)
            for seq in range(0, 10, 2):
                assert send(conn, topic, batch(pid, seq, tag=b"w")) == (ErrorCode.none, BEFORE_STOP + seq)
        snapshot_end = BEFORE_STOP + 10
        assert broker.stop() == 0  # clean: snapshots at every log end, recovery points there

        broker.restart()
        produce_round(broker.bootstrap, topic, "b", BEFORE_KILL)
        with KafkaWire(*broker.kafka_address) as conn:
            for seq in range(10, 16, 2):
                code, offset = send(conn, topic, batch(pid, seq, tag=b"w"))
                assert code == ErrorCode.none
            last_offset = offset
        broker.kill()

        broker.restart()
        events = broker.log_events()
        last_start = max(i for i, e in enumerate(events) if e.get("event") == "logs_recovering")
        this_start = events[last_start:]
        assert this_start[0]["clean_shutdown"] is False
        progress = [e for e in this_start if e.get("event") == "logs_recovered"]
        total = this_start[0]["logs"]
        assert total >= PARTITIONS
        assert progress and progress[-1]["progress"] == f"{total}/{total}"
        assert progress[-1]["bytes"] > 0 and "elapsed_ms" in progress[-1]
        # Partition 0's producer state came from the clean stop's snapshot, not from offset 0.
        loaded = [e for e in this_start if e.get("event") == "producer_state_loaded"
                  and e.get("log") == f"{topic}-0"]
        assert loaded and loaded[-1]["from_offset"] == snapshot_end

        with KafkaWire(*broker.kafka_address) as conn:
            assert send(conn, topic, batch(pid, 14, tag=b"w")) == (ErrorCode.none, last_offset)  # deduped
            code, _ = send(conn, topic, batch(pid, 20, tag=b"w"))
            assert code == ErrorCode.out_of_order_sequence_number
            code, next_offset = send(conn, topic, batch(pid, 16, tag=b"w"))  # the sequence continues
            assert (code, next_offset) == (ErrorCode.none, last_offset + 2)
        produce_round(broker.bootstrap, topic, "c", 5)  # new idempotent producers still work

        expected = {p: [f"{tag}-{p}-{i}".encode() for tag, count in (("a", BEFORE_STOP), ("b", BEFORE_KILL),
                                                                     ("c", 5)) for i in range(count)]
                    for p in range(PARTITIONS)}
        wire_values = [b"w%d" % i for i in range(18)]
        for p in range(PARTITIONS):
            want = len(expected[p]) + (len(wire_values) if p == 0 else 0)
            got = [m.value() for m in consume(broker.bootstrap, [TopicPartition(topic, p, 0)], want)]
            if p == 0:
                assert sorted(v for v in got if v.startswith(b"w")) == sorted(wire_values)
                got = [v for v in got if not v.startswith(b"w")]
            assert got == expected[p]  # every record once, in order
        assert broker.stop() == 0


def checkpointed_recovery_point(data_dir, topic: str) -> int | None:
    try:
        with open(os.path.join(data_dir, "recovery-point-offset-checkpoint")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    for line in lines[2:]:
        name, partition, offset = line.split()
        if (name, partition) == (topic, "0"):
            return int(offset)
    return None


def test_kill_9_recovers_from_the_snapshot_written_at_the_recovery_point_checkpoint(tmp_path):
    """With a flush after every append and a fast checkpoint, the periodic checkpoint
    writes a snapshot at each log's recovery point; after kill -9 the start replays
    only what came after it (no clean stop in between)."""
    broker = BrokerProcess(tmp_path / "data", "--set", "log.flush.interval.messages=1",
                           "--set", "log.flush.offset.checkpoint.interval.ms=100",
                           "--set", "log.initial.task.delay.ms=0")
    with broker.start():
        topic = create_topic(broker.bootstrap, unique_name("checkpoint"), 1)
        with KafkaWire(*broker.kafka_address) as conn:
            pid = init_pid(conn)
            for seq in range(0, 20, 2):
                assert send(conn, topic, batch(pid, seq, tag=b"w")) == (ErrorCode.none, seq)
            snapshot = os.path.join(broker.data_dir, f"{topic}-0", f"{20:020d}.snapshot")
            deadline = time.monotonic() + HANG_GUARD_S
            while not (os.path.exists(snapshot) and checkpointed_recovery_point(broker.data_dir, topic) == 20):
                assert time.monotonic() < deadline, "no checkpoint with its snapshot at offset 20"
                time.sleep(0.05)
            broker.kill()
        broker.restart()
        events = broker.log_events()
        this_start = events[max(i for i, e in enumerate(events) if e.get("event") == "logs_recovering"):]
        assert this_start[0]["clean_shutdown"] is False
        assert not [e for e in this_start if e.get("event") == "producer_state_rebuild"]
        with KafkaWire(*broker.kafka_address) as conn:
            assert send(conn, topic, batch(pid, 18, tag=b"w")) == (ErrorCode.none, 18)  # deduped
            assert send(conn, topic, batch(pid, 20, tag=b"w")) == (ErrorCode.none, 20)
        assert broker.stop() == 0
