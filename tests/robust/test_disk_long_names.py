"""Topics with names of the longest legal length (249 characters), end to end.

A partition directory `<topic>-<partition>` of such a topic fits the 255-byte
file name limit, but its `-delete` name, `<topic>-<partition>.<uuid>-delete`,
would not: Kafka cuts the topic part short (LocalLog.logDeleteDirName), and so
does Strata (storage/names.py). Each test runs the real broker: create, produce,
delete (answered as a success), a clean stop, a start that works, the topic gone
and nothing of it left in the data directory. Once through the native protocol
and once through the Kafka listener with confluent-kafka.
"""

from __future__ import annotations

import os

import pytest

from client import Admin, Producer

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

LONGEST = "t" * 249
RECORDS = 20


def leftovers(data_dir, prefix: str) -> list[str]:
    return [name for name in os.listdir(data_dir) if name.startswith(prefix[:200])]


def test_249_character_topic_create_produce_delete_restart_native(broker, tmp_path):
    data_dir = tmp_path / "data"
    process = broker(data_dir=data_dir)
    with Admin(f"{process.host}:{process.port}") as admin:
        admin.create_topic(LONGEST, partitions=2)
        with Producer(f"{process.host}:{process.port}") as producer:
            futures = [producer.send(LONGEST, b"v%d" % i, partition=i % 2) for i in range(RECORDS)]
            producer.flush()
            assert all(f.result(timeout=10).offset >= 0 for f in futures)
        assert sorted(leftovers(data_dir, LONGEST)) == [f"{LONGEST}-0", f"{LONGEST}-1"]
        admin.delete_topic(LONGEST)  # raises on any error code
        assert LONGEST not in admin.list_topics()
    assert process.stop() == 0
    assert leftovers(data_dir, LONGEST) == []
    process.restart()
    with Admin(f"{process.host}:{process.port}") as admin:
        assert LONGEST not in admin.list_topics()
        admin.create_topic(LONGEST, partitions=1)  # the name is free again
        assert admin.offsets(LONGEST, 0)[0] == 0
    assert not [e for e in process.log_events() if e.get("level") in ("error", "critical")]


def test_249_character_topic_create_produce_delete_restart_kafka(broker, tmp_path):
    data_dir = tmp_path / "data"
    process = broker(data_dir=data_dir)
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for future in admin.create_topics([NewTopic(LONGEST, 2, 1)], operation_timeout=10).values():
        future.result(timeout=10)
    producer = confluent_kafka.Producer({"bootstrap.servers": process.bootstrap, "acks": "all",
                                         "linger.ms": 0, "log_level": 0})
    delivered = []
    for i in range(RECORDS):
        producer.produce(LONGEST, b"v%d" % i, partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(10) == 0
    assert delivered == [None] * RECORDS
    for future in admin.delete_topics([LONGEST], operation_timeout=10).values():
        assert future.result(timeout=10) is None
    assert LONGEST not in admin.list_topics(timeout=10).topics
    assert process.stop() == 0
    assert leftovers(data_dir, LONGEST) == []
    process.restart()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    assert LONGEST not in admin.list_topics(timeout=10).topics
    assert not [e for e in process.log_events() if e.get("level") in ("error", "critical")]
