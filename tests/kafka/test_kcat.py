"""kcat (Debian's, librdkafka 2.0) against the Kafka listener: metadata,
produce and consume with codecs, keys and offsets, offsets by timestamp. Skipped
where kcat is not installed (.ci/run installs it)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.kafka.conftest import requires_kcat, unique_name

pytestmark = requires_kcat
TIMEOUT = 60


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["kcat", "-b", bootstrap, *args], input=stdin, capture_output=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


def test_kcat_version_is_librdkafka_2():
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=TIMEOUT).stdout
    assert "librdkafka 2." in out


def test_kcat_metadata(kafka_broker, new_topic):
    topic = new_topic(partitions=3)
    doc = json.loads(kcat(kafka_broker.bootstrap, "-L", "-J", "-t", topic))
    (broker,) = doc["brokers"]
    assert broker["id"] == 0 and broker["name"] == kafka_broker.bootstrap
    assert doc["controllerid"] == 0
    (found,) = doc["topics"]
    assert found["topic"] == topic
    assert [(p["partition"], p["leader"], [r["id"] for r in p["replicas"]]) for p in found["partitions"]] == \
        [(0, 0, [0]), (1, 0, [0]), (2, 0, [0])]
    text = kcat(kafka_broker.bootstrap, "-L")
    assert f'topic "{topic}" with 3 partitions' in text


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_and_consume(kafka_broker, codec):
    topic = unique_name("kcat")  # auto-created on produce
    lines = b"".join(b"key%d:value %d %s\n" % (i, i, codec.encode()) for i in range(200))
    kcat(kafka_broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K", ":", "-z", codec, stdin=lines)
    out = kcat(kafka_broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
               "-f", "%o|%k|%s\n")
    assert out.splitlines() == [f"{i}|key{i}|value {i} {codec}" for i in range(200)]
    out = kcat(kafka_broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "150", "-c", "3", "-f", "%o %s\n")
    assert out.splitlines() == [f"{i} value {i} {codec}" for i in range(150, 153)]


def test_kcat_reads_what_confluent_kafka_wrote(kafka_broker, new_topic):
    from confluent_kafka import Producer

    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "compression.type": "zstd",
                         "enable.idempotence": True})
    base = 1_690_000_000_000
    for i in range(20):
        producer.produce(topic, value=b"c%d" % i, timestamp=base + i)
    assert producer.flush(TIMEOUT) == 0
    out = kcat(kafka_broker.bootstrap, "-C", "-t", topic, "-o", "-5", "-e", "-f", "%o %T %s\n")
    assert out.splitlines() == [f"{i} {base + i} c{i}" for i in range(15, 20)]
    # Offsets by timestamp (ListOffsets): -Q -t topic:partition:timestamp
    out = kcat(kafka_broker.bootstrap, "-Q", "-t", f"{topic}:0:{base + 7}")
    assert "offset 7" in out
