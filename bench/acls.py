"""Authorization with 10,000 ACLs against authorization off, same run (issue 15's
target: with ACLs, produce and fetch >= 0.95x of the same without).

    .venv/bin/python bench/acls.py [--messages 100000] [--size 1024] [--acls 10000] [--runs 3]

Two real `python -m broker serve` processes, started in the same run: one without
an authorizer, one with StandardAuthorizer and --acls ACLs (a quarter PREFIXED,
the rest LITERAL, on topics and groups, for other principals and for
User:ANONYMOUS, whose ALLOW READ and WRITE on the PREFIXED `bench-` topics and
READ on `bench-` groups let the client in; one DENY on another topic, so every
decision looks at both kinds). The ACLs are created in a first run of that broker
with the client as a super user; the measured run has no super user.
The client is confluent-kafka (librdkafka) in this process, on PLAINTEXT
(User:ANONYMOUS), and the project's own native client. Per broker, alternating,
best of --runs:

- Kafka produce / fetch: as bench/tls.py (one Producer, linger.ms=5, acks=1,
  --messages values of --size bytes to partition 0 of a fresh topic; one
  Consumer assigned to it from offset 0 until every message is in).
- native produce / fetch: client.Producer (send, then flush) and client.Consumer
  (assign, poll until every message is in).
The ratio column is ACLs / off for throughput, and off / ACLs for the broker's
CPU per message (utime + stime, /proc/<pid>/stat, the least over the runs: the
steadier figure on a loaded machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def kafka_produce(bootstrap: str, topic: str, messages: int, size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1,
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 21})
    value = b"x" * size
    errors: list = []
    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=0,
                                 on_delivery=lambda err, _m: err is not None and errors.append(err))
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    assert left == 0 and not errors, f"{left} messages not delivered, errors {errors[:1]}"
    return elapsed


def kafka_fetch(bootstrap: str, topic: str, messages: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < messages:
        assert time.monotonic() < deadline, f"fetch stalled at {got}"
        for m in consumer.consume(10000, 1.0):
            assert not m.error(), m.error()
            got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def native_produce(bootstrap: str, topic: str, messages: int, size: int) -> float:
    from client import Producer

    value = b"x" * size
    with Producer(bootstrap) as producer:
        start = time.perf_counter()
        for _ in range(messages):
            producer.send(topic, value, partition=0)
        producer.flush()
        return time.perf_counter() - start


def native_fetch(bootstrap: str, topic: str, messages: int) -> float:
    from client import Consumer

    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(topic, [0])
        got = 0
        start = time.perf_counter()
        deadline = time.monotonic() + 300
        while got < messages:
            assert time.monotonic() < deadline, f"fetch stalled at {got}"
            got += len(consumer.poll(1000))
        return time.perf_counter() - start


def acl_bindings(count: int) -> list:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    bindings = [
        AclBinding(ResourceType.TOPIC, "bench-", prefixed, "User:ANONYMOUS", "*", AclOperation.WRITE, allow),
        AclBinding(ResourceType.TOPIC, "bench-", prefixed, "User:ANONYMOUS", "*", AclOperation.READ, allow),
        AclBinding(ResourceType.GROUP, "bench-", prefixed, "User:ANONYMOUS", "*", AclOperation.READ, allow),
        AclBinding(ResourceType.TOPIC, "bench-secret", literal, "User:ANONYMOUS", "*", AclOperation.ALL, deny),
        AclBinding(ResourceType.BROKER, "kafka-cluster", literal, "User:ANONYMOUS", "*", AclOperation.ALL, allow),
    ]
    operations = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)
    for i in range(count - len(bindings)):
        rtype = ResourceType.GROUP if i % 5 == 0 else ResourceType.TOPIC
        pattern = prefixed if i % 4 == 0 else literal
        bindings.append(AclBinding(rtype, f"app{i % 997}-{i}", pattern, f"User:u{i % 500}", "*",
                                   operations[i % 3], allow))
    return bindings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    work = tempfile.mkdtemp(prefix="strata-bench-acls-")
    brokers = {}
    try:
        # The ACLs are loaded by a first run of the broker in which the client is a super
        # user; the measured run reads them from the data directory and has no super user.
        setup = BrokerProcess(os.path.join(work, "acls"), "--set", f"authorizer.class.name={AUTHORIZER}",
                              "--set", "super.users=User:ANONYMOUS", kafka_port=0).start()
        try:
            loader = AdminClient({"bootstrap.servers": "{}:{}".format(*setup.kafka_address)})
            bindings = acl_bindings(args.acls)
            for start in range(0, len(bindings), 1000):
                for future in loader.create_acls(bindings[start:start + 1000]).values():
                    future.result(60)
        finally:
            setup.stop()
        brokers["off"] = BrokerProcess(os.path.join(work, "off"), kafka_port=0).start()
        brokers["acls"] = BrokerProcess(os.path.join(work, "acls"), "--set", f"authorizer.class.name={AUTHORIZER}",
                                        kafka_port=0).start()
        kafka = {name: "{}:{}".format(*b.kafka_address) for name, b in brokers.items()}
        native = {name: "{}:{}".format(*b.address) for name, b in brokers.items()}
        admins = {name: AdminClient({"bootstrap.servers": kafka[name]}) for name in brokers}
        results: dict[str, dict[str, float]] = {name: {} for name in brokers}

        def record(name: str, key: str, elapsed: float, cpu: float) -> None:
            r = results[name]
            r[key] = max(r.get(key, 0), args.messages / elapsed)
            r[key + "_cpu"] = min(r.get(key + "_cpu", 1e9), cpu / args.messages * 1e6)

        for run in range(args.runs):
            for name, b in brokers.items():
                for protocol in ("kafka", "native"):
                    topic = f"bench-{protocol}-{run}"
                    admins[name].create_topics([NewTopic(topic, 1)])[topic].result(30)
                    produce, fetch, address = ((kafka_produce, kafka_fetch, kafka[name]) if protocol == "kafka"
                                               else (native_produce, native_fetch, native[name]))
                    cpu0 = cpu_seconds(b.pid)
                    p = produce(address, topic, args.messages, args.size)
                    cpu1 = cpu_seconds(b.pid)
                    f = fetch(address, topic, args.messages)
                    cpu2 = cpu_seconds(b.pid)
                    record(name, f"{protocol} produce", p, cpu1 - cpu0)
                    record(name, f"{protocol} fetch", f, cpu2 - cpu1)
        print(f"{args.messages} x {args.size} B values, best of {args.runs}; {args.acls} ACLs")
        print(f"{'':16} {'authorization off':>22} {f'{args.acls} ACLs':>22} {'ACLs/off':>10}")
        for key in ("kafka produce", "kafka fetch", "native produce", "native fetch"):
            off, on = results["off"][key], results["acls"][key]
            print(f"{key:16} {off:>16,.0f} msg/s {on:>16,.0f} msg/s {on / off:>9.2f}x")
        for key in ("kafka produce", "kafka fetch", "native produce", "native fetch"):
            off, on = results["off"][key + "_cpu"], results["acls"][key + "_cpu"]
            print(f"{key + ' cpu':16} {off:>15.2f} us/msg {on:>15.2f} us/msg {off / on:>9.2f}x (broker CPU)")
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
