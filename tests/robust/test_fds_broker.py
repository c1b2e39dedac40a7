"""Descriptors follow what is in use, not the number of segments: the real broker
under a low RLIMIT_NOFILE serves many partitions of several segments each.

The broker runs with a soft and hard limit of 160 descriptors, so its open-file
budget is 80 (log.max.open.files = 0: half the soft limit), while the topic has
about a thousand segment and index files (80 partitions). Every partition then gets a produce and
a fetch in turn, from its first offset (an index lookup in the oldest segment)
on; the data files the process holds open never pass the budget, and the broker
restarts (cleanly and after kill -9) and reads the same.
"""

from __future__ import annotations

import os

from client import Admin, Consumer, Producer

LIMIT = (160, 160)
BUDGET = LIMIT[0] // 2
TOPIC = "many"
PARTITIONS = 80
RECORDS_BEFORE = 3  # each one rolls a segment: segment.bytes is below two records
VALUE_BYTES = 600
TOPIC_CONFIGS = {"segment.bytes": "1024", "index.interval.bytes": "100"}


def value(partition: int, n: int) -> bytes:
    return b"%d-%d-" % (partition, n) + b"v" * VALUE_BYTES


def data_files_open(pid: int, data_dir: str) -> int:
    """How many of the broker's descriptors are segment or index files."""
    count = 0
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith(data_dir) and target.endswith((".log", ".index", ".timeindex")):
            count += 1
    return count


def read_partition(consumer: Consumer, partition: int, count: int) -> list[bytes]:
    consumer.assign(TOPIC, [partition])
    consumer.seek(TOPIC, partition, 0)
    got: list[bytes] = []
    for _ in range(100):
        # (records of the partition read before may still arrive)
        got.extend(r.value for r in consumer.poll(1000) if r.partition == partition)
        if len(got) >= count:
            break
    return got


def produce_and_fetch_each_in_turn(process, n: int) -> None:
    """One produce and one fetch (from offset 0) per partition, partition after partition."""
    bootstrap = f"{process.host}:{process.port}"
    with Producer(bootstrap, linger_ms=0) as producer, Consumer(bootstrap) as consumer:
        for p in range(PARTITIONS):
            producer.send_and_wait(TOPIC, value(p, n), partition=p)
            assert read_partition(consumer, p, n + 1) == [value(p, i) for i in range(n + 1)]
            if p % 20 == 0:
                assert data_files_open(process.pid, os.path.realpath(process.data_dir)) <= BUDGET


def test_many_segments_under_a_low_descriptor_limit(broker, tmp_path):
    process = broker(data_dir=tmp_path / "data", open_files_limit=LIMIT)
    [event] = [e for e in process.log_events() if e.get("event") == "open_files_limit"]
    assert (event["soft"], event["hard"], event["max_open_files"]) == (LIMIT[0], LIMIT[1], BUDGET)
    address = f"{process.host}:{process.port}"
    with Admin(address) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, configs=TOPIC_CONFIGS)
    with Producer(address, linger_ms=0) as producer:
        for n in range(RECORDS_BEFORE):
            for p in range(PARTITIONS):
                producer.send(TOPIC, value(p, n), partition=p)
            producer.flush()
    segment_files = sum(1 for _root, _dirs, names in os.walk(process.data_dir)
                        for name in names if name.endswith((".log", ".index", ".timeindex")))
    assert segment_files > 6 * BUDGET

    produce_and_fetch_each_in_turn(process, RECORDS_BEFORE)
    process.restart()
    produce_and_fetch_each_in_turn(process, RECORDS_BEFORE + 1)
    process.kill()
    process.start()
    produce_and_fetch_each_in_turn(process, RECORDS_BEFORE + 2)
    assert data_files_open(process.pid, os.path.realpath(process.data_dir)) <= BUDGET
    assert "Too many open files" not in process.stderr_text()
