"""A full disk, end to end: the real broker on a small tmpfs data directory.

The test fills the disk with produces over both protocols (the native client and
confluent-kafka) until appends fail, and checks what an operator and a client
see: KAFKA_STORAGE_ERROR (56), never UNKNOWN_SERVER_ERROR (-1); one
`storage_error` log line per episode, not one per request; reads keep working;
deleting a topic and DELETE_RECORDS succeed on the full disk and free space
(the registry and checkpoint writes they need use the space reserve); appends
resume without a restart (`storage_recovered`); after a clean stop and a start,
every acknowledged record is intact at its offset and the registry agrees with
the directories. Skipped where mounting a tmpfs is refused (not root, a
container without CAP_SYS_ADMIN).
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from client import Admin, Consumer, Producer
from client.errors import StrataClientError

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

STORAGE_ERROR = 56
DISK_MB = 24
RECORD = 32 * 1024
SERVE_ARGS = ("--set", "log.segment.bytes=1048576", "--set", "log.segment.delete.delay.ms=0",
              "--set", "log.retention.check.interval.ms=100",
              "--set", "log.flush.scheduler.interval.ms=100",
              "--set", "log.initial.task.delay.ms=0", "--set", "offsets.topic.num.partitions=1")
HANG_GUARD_S = 30.0


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def value(tag: str, i: int) -> bytes:
    head = b"%s-%06d-" % (tag.encode(), i)  # unique within its first 64 bytes
    return head + bytes([i % 251]) * (RECORD - len(head))


def fill_native(bootstrap: str, topic: str, tag: str, acked: dict[bytes, int]) -> StrataClientError:
    """Produce until an append fails, then with ever smaller records until those
    fail too: the disk is full to the last page. Returns the first failure."""
    first = None
    i = 0
    with Producer(bootstrap, linger_ms=0, retries=0) as producer:
        for size in (RECORD, 4096, 512, 64):
            for _ in range(10_000):
                v = value(tag, i)[:size]
                i += 1
                try:
                    acked[v] = producer.send(topic, v, partition=0).result(timeout=HANG_GUARD_S).offset
                except StrataClientError as e:
                    first = first or e
                    break
            else:
                raise AssertionError("the disk never filled")
    assert first is not None
    return first


def produce_kafka(bootstrap: str, topic: str, tag: str, count: int, acked: dict[bytes, int]) -> list:
    """confluent-kafka, no retries: the error of every record not acknowledged."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                         "retries": 0, "enable.idempotence": False,
                                         "message.timeout.ms": 10000, "log_level": 0})
    errors = []

    def on_delivery(err, message) -> None:
        if err is None:
            acked[message.value()] = message.offset()
        else:
            errors.append(err)

    for i in range(count):
        producer.produce(topic, value(tag, i), partition=0, on_delivery=on_delivery)
        producer.flush(HANG_GUARD_S)
    return errors


def events(process, name: str) -> list[dict]:
    return [e for e in process.log_events() if e.get("event") == name]


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def appends_work(bootstrap: str, topic: str, tag: str, acked: dict[bytes, int]) -> bool:
    with Producer(bootstrap, linger_ms=0, retries=0) as producer:
        v = value(tag, 0)
        try:
            acked[v] = producer.send(topic, v, partition=0).result(timeout=HANG_GUARD_S).offset
        except StrataClientError as e:
            assert e.code == STORAGE_ERROR, e
            return False
    return True


def read_partition(bootstrap: str, topic: str) -> dict[bytes, int]:
    with Admin(bootstrap) as admin:
        start, end = admin.offsets(topic, 0, time=-2)[0], admin.offsets(topic, 0)[0]
    found: dict[bytes, int] = {}
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(topic, [0])
        consumer.seek(topic, 0, start)
        polls = 0
        while start < end:
            polls += 1
            assert polls < 1000, f"reading {topic} stalled at {start} of {end}"
            for record in consumer.poll(1000):
                found[record.value] = record.offset
                start = record.offset + 1
    return found


def test_full_disk_answers_56_frees_space_and_recovers(broker, small_disk):
    data_dir = small_disk / "data"
    process = broker(*SERVE_ARGS, data_dir=data_dir)
    native = f"{process.host}:{process.port}"
    with Admin(native) as admin:
        for topic in ("fill", "kfill", "victim"):
            admin.create_topic(topic, partitions=1)
    assert os.path.getsize(data_dir / ".strata-space-reserve") == 4 * 1024 * 1024
    acked: dict[str, dict[bytes, int]] = {"fill": {}, "kfill": {}, "victim": {}}
    with Producer(native, linger_ms=0) as producer:
        for i in range(96):  # 3 MiB that deleting the topic gives back
            v = value("victim", i)
            acked["victim"][v] = producer.send("victim", v, partition=0).result(timeout=HANG_GUARD_S).offset

    # Episode 1: the native producer fills the disk, confluent-kafka meets it too.
    # (Filling with ever smaller records ends and starts episodes: a small append
    # that fits ends one; each episode logs one line, counted below.)
    failure = fill_native(native, "fill", "n1", acked["fill"])
    assert failure.code == STORAGE_ERROR, failure
    episodes = len(events(process, "storage_error"))
    assert episodes >= 1 and len(events(process, "storage_recovered")) == episodes - 1
    for _ in range(5):
        assert not appends_work(native, "fill", "again", acked["fill"])
    errors = produce_kafka(process.bootstrap, "kfill", "k1", 5, acked["kfill"])
    assert errors and all(err.code() == KafkaError.KAFKA_STORAGE_ERROR for err in errors), errors
    assert len(events(process, "storage_error")) == episodes  # ten more failures, no more lines
    assert not events(process, "request_failed")

    # Reads keep working on the full disk.
    assert read_partition(native, "fill") == acked["fill"]
    assert read_partition(native, "victim") == acked["victim"]

    # Deleting a topic works on the full disk and frees its space: appends resume.
    with Admin(native) as admin:
        admin.delete_topic("victim")
        assert "victim" not in admin.list_topics()
    acked.pop("victim")
    assert not os.path.exists(data_dir / "victim-0")
    assert len(events(process, "space_reserve_used")) == 1  # the registry write needed it
    wait_for(lambda: events(process, "space_reserve_restored"), "the space reserve to come back")
    assert appends_work(native, "fill", "after-delete", acked["fill"])
    wait_for(lambda: len(events(process, "storage_recovered")) == episodes, "storage_recovered")
    assert produce_kafka(process.bootstrap, "kfill", "k2", 3, acked["kfill"]) == []

    # Episode 2: full again; DELETE_RECORDS (Kafka's protocol) frees whole segments.
    failure = fill_native(native, "fill", "n2", acked["fill"])
    assert failure.code == STORAGE_ERROR, failure
    wait_for(lambda: len(events(process, "storage_error")) > episodes, "the next storage_error")
    episodes = len(events(process, "storage_error"))
    errors = produce_kafka(process.bootstrap, "kfill", "k3", 3, acked["kfill"])
    assert errors and all(err.code() == KafkaError.KAFKA_STORAGE_ERROR for err in errors), errors
    assert len(events(process, "storage_error")) == episodes
    cut = sorted(acked["fill"].values())[len(acked["fill"]) // 2]
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for future in admin.delete_records([TopicPartition("fill", 0, cut)], request_timeout=10).values():
        assert future.result(timeout=HANG_GUARD_S).low_watermark == cut
    acked["fill"] = {v: o for v, o in acked["fill"].items() if o >= cut}
    assert len(events(process, "space_reserve_used")) == 2  # the checkpoint write needed it
    wait_for(lambda: appends_work(native, "fill", "after-delete-records", acked["fill"]), "appends to resume")
    assert len(events(process, "storage_recovered")) == episodes
    assert len(events(process, "storage_error")) == episodes
    assert not events(process, "request_failed")

    # Everything acknowledged is intact after a clean stop and a start.
    assert process.stop() == 0
    process.restart()
    native = f"{process.host}:{process.port}"
    with Admin(native) as admin:
        assert sorted(admin.list_topics()) == ["fill", "kfill"]
        assert admin.offsets("fill", 0, time=-2)[0] == cut
    for topic, records in acked.items():
        found = read_partition(native, topic)
        assert {v: found.get(v) for v in records} == records, topic
    directories = {n for n in os.listdir(data_dir) if os.path.isdir(data_dir / n)}
    assert directories - {"__consumer_offsets-0"} == {"fill-0", "kfill-0"}
    assert not events(process, "request_failed")


def test_clean_stop_and_start_on_a_full_disk_then_space_returns(broker, small_disk):
    data_dir = small_disk / "data"
    process = broker(*SERVE_ARGS, data_dir=data_dir)
    native = f"{process.host}:{process.port}"
    with Admin(native) as admin:
        admin.create_topic("fill", partitions=1)
    acked: dict[bytes, int] = {}
    assert fill_native(native, "fill", "f", acked).code == STORAGE_ERROR

    # The shutdown checkpoints need room: the space reserve gives it, the stop is clean.
    assert process.stop() == 0
    assert [e["operation"] for e in events(process, "space_reserve_used")] == ["shutdown checkpoint"]
    assert (data_dir / ".kafka_cleanshutdown").exists()

    # A start on the full disk works (closing gave back the blocks the active segment
    # had reserved ahead, so fill it again to the last page), reads work.
    process.restart()
    native = f"{process.host}:{process.port}"
    assert events(process, "logs_loaded")[-1]["clean_shutdown"] is True
    assert read_partition(native, "fill") == acked
    assert fill_native(native, "fill", "g", acked).code == STORAGE_ERROR
    assert read_partition(native, "fill") == acked

    # The volume grows (space returns): appends resume without a restart.
    done = subprocess.run(["mount", "-o", f"remount,size={DISK_MB + 8}m", str(small_disk)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: appends_work(native, "fill", "grown", acked), "appends to resume")
    wait_for(lambda: os.path.exists(data_dir / ".strata-space-reserve"), "the space reserve")
    assert os.path.getsize(data_dir / ".strata-space-reserve") == 4 * 1024 * 1024
    assert process.stop() == 0
    process.restart()
    found = read_partition(f"{process.host}:{process.port}", "fill")
    assert {v: found.get(v) for v in acked} == acked
    assert not events(process, "request_failed")
