"""kill -9 during acknowledged produces, with damaged files between rounds.

Each round starts the real broker on the same data directory, produces over both
protocols at once (the native client and confluent-kafka with acks=all), kills
the broker with SIGKILL once both producers have acknowledgements in hand, then
damages the partition directories the way a crash or a bad disk leaves them:
a torn entry at the end of the active segment, garbage or missing index files,
an index cut to a length that is not whole entries. The next start must
succeed, and every record either producer saw acknowledged, in any round, must
read back at its acknowledged offset. The counts are bounded; nothing waits on
the wall clock except hang guards.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading

import pytest

from client import Admin, Consumer, Producer
from client.errors import StrataClientError

confluent_kafka = pytest.importorskip("confluent_kafka")

ROUNDS = 20
TOPIC = "kill-loop"
PARTITIONS = 2
ACKS_BEFORE_KILL = 150  # per protocol, per round
HANG_GUARD_S = 60.0
SERVE_ARGS = ("--set", "log.segment.bytes=65536", "--set", "log.index.interval.bytes=512")


class Acked:
    """Records a producer saw acknowledged: value -> (partition, offset)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[bytes, tuple[int, int]] = {}
        self.count_this_round = 0
        self.enough = threading.Event()
        self.stopped_by: BaseException | None = None  # what ended the producer early

    def add(self, value: bytes, partition: int, offset: int) -> None:
        with self.lock:
            self.records[value] = (partition, offset)
            self.count_this_round += 1
            if self.count_this_round >= ACKS_BEFORE_KILL:
                self.enough.set()

    def new_round(self) -> None:
        with self.lock:
            self.count_this_round = 0
            self.enough.clear()


def produce_native(address: tuple[str, int], round_no: int, acked: Acked, stop: threading.Event) -> None:
    """Send one record at a time and wait for its acknowledgement until the broker dies."""
    bootstrap = f"{address[0]}:{address[1]}"
    try:
        with Producer(bootstrap, linger_ms=0, retries=0) as producer:
            i = 0
            while not stop.is_set():
                value = b"native-%d-%d" % (round_no, i)
                future = producer.send(TOPIC, value, partition=i % PARTITIONS)
                try:
                    metadata = future.result(timeout=HANG_GUARD_S)
                except (StrataClientError, OSError, TimeoutError) as e:
                    acked.stopped_by = e  # the broker is gone: this record was never acknowledged
                    return
                acked.add(value, i % PARTITIONS, metadata.offset)
                i += 1
    except (StrataClientError, OSError):
        return  # close() after the kill cannot flush; everything acked is recorded


def produce_kafka(bootstrap: str, round_no: int, acked: Acked, stop: threading.Event) -> None:
    """confluent-kafka with acks=all; only successful delivery reports count."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retries": 0,
        "enable.idempotence": False, "message.timeout.ms": 5000, "socket.timeout.ms": 5000,
        "reconnect.backoff.max.ms": 200, "log_level": 0})

    def on_delivery(err, message) -> None:
        if err is None:
            acked.add(message.value(), message.partition(), message.offset())

    i = 0
    while not stop.is_set():
        with contextlib.suppress(BufferError):
            producer.produce(TOPIC, b"kafka-%d-%d" % (round_no, i), partition=i % PARTITIONS,
                             on_delivery=on_delivery)
        producer.poll(0.001)
        i += 1
    producer.poll(0.2)  # delivery reports of what was answered before the kill
    producer.purge()  # the rest was never answered: it fails without waiting for timeouts
    producer.flush(HANG_GUARD_S)


def damage(data_dir: str, rng: random.Random, round_no: int) -> list[str]:
    """Damage each partition directory one way, chosen by the round; returns what was done."""
    done = []
    for partition in range(PARTITIONS):
        directory = os.path.join(data_dir, f"{TOPIC}-{partition}")
        logs = sorted(f for f in os.listdir(directory) if f.endswith(".log"))
        active = os.path.join(directory, logs[-1])
        older = os.path.join(directory, logs[rng.randrange(len(logs))])
        kind = (round_no + partition) % 6
        if kind == 0:  # a torn entry: the first part of a real batch header and body
            with open(active, "rb") as f:
                head = f.read(200)
            if len(head) > 12:
                with open(active, "ab") as f:
                    f.write(head[: rng.randrange(12, len(head))])
            done.append(f"torn tail on {active}")
        elif kind == 1:  # garbage past the end of the active segment
            with open(active, "ab") as f:
                f.write(rng.randbytes(rng.randrange(1, 300)))
            done.append(f"garbage tail on {active}")
        elif kind == 2:  # an older segment's indexes gone
            for suffix in (".index", ".timeindex"):
                path = older[: -len(".log")] + suffix
                if os.path.exists(path):
                    os.unlink(path)
            done.append(f"indexes deleted for {older}")
        elif kind == 3:  # indexes cut to a length that is not whole entries
            for suffix, entry in ((".index", 8), (".timeindex", 12)):
                path = older[: -len(".log")] + suffix
                if os.path.exists(path) and os.path.getsize(path) >= entry:
                    os.truncate(path, os.path.getsize(path) - entry // 2)
            done.append(f"indexes cut short for {older}")
        elif kind == 4:  # an older segment's indexes overwritten with garbage
            for suffix in (".index", ".timeindex"):
                path = older[: -len(".log")] + suffix
                if os.path.exists(path):
                    size = os.path.getsize(path)
                    with open(path, "r+b") as f:
                        f.write(rng.randbytes(min(size, 4096)))
            done.append(f"garbage indexes for {older}")
        else:  # the active segment's indexes overwritten with garbage
            for suffix in (".index", ".timeindex"):
                path = active[: -len(".log")] + suffix
                if os.path.exists(path):
                    size = os.path.getsize(path)
                    with open(path, "r+b") as f:
                        f.write(rng.randbytes(min(size, 4096)))
            done.append(f"garbage indexes for {active}")
    return done


def read_everything(address: tuple[str, int]) -> dict[bytes, tuple[int, int]]:
    """Every record of the topic, value -> (partition, offset), read through the broker."""
    bootstrap = f"{address[0]}:{address[1]}"
    found: dict[bytes, tuple[int, int]] = {}
    with Admin(bootstrap) as admin:
        ends = {p: admin.offsets(TOPIC, p)[0] for p in range(PARTITIONS)}
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(TOPIC, range(PARTITIONS))
        next_offset = {p: 0 for p in range(PARTITIONS)}
        polls = 0
        while any(next_offset[p] < ends[p] for p in range(PARTITIONS)):
            polls += 1
            assert polls < 10_000, f"reading stalled at {next_offset} of {ends}"
            for record in consumer.poll(1000):
                found[record.value] = (record.partition, record.offset)
                next_offset[record.partition] = record.offset + 1
    return found


def read_at(address: tuple[str, int], partition: int, offset: int) -> bytes:
    """The value at one offset, fetched from that offset (an index lookup on the broker)."""
    with Consumer(f"{address[0]}:{address[1]}") as consumer:
        consumer.assign(TOPIC, [partition])
        consumer.seek(TOPIC, partition, offset)
        for _ in range(100):
            records = consumer.poll(1000)
            if records:
                assert records[0].offset == offset, f"asked for {offset}, got {records[0].offset}"
                return records[0].value
    raise AssertionError(f"nothing read at {TOPIC}-{partition} offset {offset}")


def test_kill_9_loop_with_damaged_files_loses_no_acknowledged_record(broker, tmp_path):
    rng = random.Random(1413)
    process = broker(*SERVE_ARGS, data_dir=tmp_path / "data")
    with Admin(f"{process.host}:{process.port}") as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    native_acked, kafka_acked = Acked(), Acked()
    history = []
    for round_no in range(ROUNDS):
        if round_no > 0:
            process.restart()  # must succeed, whatever the last round left behind
        native_acked.new_round()
        kafka_acked.new_round()
        stop = threading.Event()
        producers = [
            threading.Thread(target=produce_native, args=(process.address, round_no, native_acked, stop)),
            threading.Thread(target=produce_kafka, args=(process.bootstrap, round_no, kafka_acked, stop)),
        ]
        for thread in producers:
            thread.daemon = True  # a failed assertion never leaves the test process hanging
            thread.start()
        assert native_acked.enough.wait(HANG_GUARD_S), \
            f"round {round_no}: native producer stalled: {native_acked.stopped_by!r}; damage done: {history}"
        assert kafka_acked.enough.wait(HANG_GUARD_S), f"round {round_no}: Kafka producer stalled"
        if round_no % 4 == 3:
            process.stop()  # a clean stop now and then: the recovery point moves to the log end
        else:
            process.kill()  # while both producers still have requests in flight
        stop.set()
        for thread in producers:
            thread.join(HANG_GUARD_S)
            assert not thread.is_alive(), f"round {round_no}: a producer did not stop"
        history += damage(process.data_dir, rng, round_no)

    process.restart()
    found = read_everything(process.address)
    for name, acked in (("native", native_acked), ("kafka", kafka_acked)):
        lost = {v: where for v, where in acked.records.items() if found.get(v) != where}
        assert not lost, (f"{len(lost)} acknowledged {name} records lost or moved, e.g. "
                          f"{sorted(lost.items())[:5]}; damage done: {history}")
    assert len(native_acked.records) >= ROUNDS * ACKS_BEFORE_KILL
    assert len(kafka_acked.records) >= ROUNDS * ACKS_BEFORE_KILL
    every_acked = sorted({**native_acked.records, **kafka_acked.records}.items())
    for value, (partition, offset) in rng.sample(every_acked, 100):
        assert read_at(process.address, partition, offset) == value
    offsets = sorted(found.values())
    assert len(offsets) == len(set(offsets)), "two records at one offset"
