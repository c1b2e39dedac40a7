"""The Kafka listener under confluent-kafka (librdkafka): produce and consume throughput.

    .venv/bin/python bench/kafka.py [--messages-100 400000] [--messages-1k 150000] [--runs 2]
                                    [--set KEY=VALUE ...] [--consumer-set KEY=VALUE ...]
                                    [--instructions] [--tree DIR]

The broker is the real `python -m broker serve` process on 127.0.0.1 (fresh data
directory, Kafka listener on a free port); the client is confluent-kafka in this
process. For each message size (100 B and 1 KiB values, no key):

- produce: one Producer with linger.ms=5, batch.size=1 MiB, acks=1, no
  compression, every message to partition 0 of a new one-partition topic; the
  clock runs from the first produce() to the end of flush() (every delivery
  report in).
- consume: one Consumer, assign() partition 0 from offset 0 (no group, no
  commits), consume() in batches of 10000 until every message is in.
  librdkafka stops fetching for fetch.queue.backoff.ms (1000 ms by default) once
  its local queue holds queued.min.messages (100000): with 100 B messages a run
  that trips it takes ~1 s longer whatever the broker does, so that figure is
  bimodal; `--consumer-set fetch.queue.backoff.ms=10` measures the broker instead.

msgs/s and MB/s (10^6 bytes of values) are best-of-N wall times; the broker's CPU
seconds (utime + stime of all its threads, /proc/<pid>/stat) are for that run,
also per message in microseconds, next to this process's own CPU (the client).
There is no Kafka broker on the machine to measure a same-run baseline against;
the client's CPU is the reference: librdkafka is C, so where the broker spends
more CPU per message than the client, the broker is the bottleneck. At the end
the share of fetched bytes that went through sendfile (from the broker's log).

--instructions runs the broker under valgrind's callgrind, counting only while
the producer or the consumer runs (callgrind_control), and prints the machine
instructions the broker executes per message instead of the rates: a figure
that other work on the machine does not move, for comparing two trees on a busy
machine (with fewer messages: callgrind is about 50 times slower). --tree DIR
runs the broker of another checkout (its tests/broker_process.py and packages)
under the same client.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess  # noqa: E402


def _bench_broker():
    """bench/broker.py's helpers (cpu_seconds, report_broker_log); its file name
    would shadow the `broker` package as a plain import."""
    spec = importlib.util.spec_from_file_location("bench_broker", os.path.join(ROOT, "bench", "broker.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench_broker = _bench_broker()
CONSUMER_SETTINGS: dict[str, str] = {}  # --consumer-set: librdkafka settings of the consumer
cpu_seconds = bench_broker.cpu_seconds
TIMEOUT = 600


@dataclass
class Sample:
    elapsed: float
    broker_cpu: float
    client_cpu: float


def measure(pid: int, work) -> Sample:
    broker0, client0 = cpu_seconds(pid), time.process_time()
    started = time.perf_counter()
    work()
    elapsed = time.perf_counter() - started
    return Sample(elapsed, cpu_seconds(pid) - broker0, time.process_time() - client0)


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, value: bytes, count: int) -> None:
    from confluent_kafka import Producer

    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                         "acks": 1, "compression.type": "none",
                         "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1 << 20})
    send = producer.produce
    for _ in range(count):
        while True:
            try:
                send(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(TIMEOUT) != 0:
        raise RuntimeError("produce: flush timed out")
    if errors:
        raise RuntimeError(f"produce: {len(errors)} errors, first {errors[0]}")


def consume(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-no-commits",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         **CONSUMER_SETTINGS})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume: {got} of {count} messages in {TIMEOUT} s")
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"consume: {msg.error()}")
                got += 1
    finally:
        consumer.close()


def line(what: str, count: int, size: int, s: Sample) -> str:
    return (f"{what:8s} {count / s.elapsed:10.0f} msgs/s {count * size / s.elapsed / 1e6:8.1f} MB/s  "
            f"broker CPU {s.broker_cpu:6.2f} s ({s.broker_cpu / count * 1e6:5.1f} us/msg, "
            f"{s.broker_cpu / s.elapsed:4.0%} of a core)  client CPU {s.client_cpu:6.2f} s "
            f"({s.client_cpu / count * 1e6:5.1f} us/msg)")


def instructions(pid: int, dumps: str, work) -> int:
    """Machine instructions the broker (under callgrind, counting off) executes during `work`."""
    for flags in (["-z"], ["-i", "on"]):
        subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True)
    work()
    for flags in (["-i", "off"], ["-d"]):
        subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True)
    total = 0
    for path in glob.glob(dumps + ".*"):
        with open(path) as counts:
            total += next(int(row.split()[1]) for row in counts if row.startswith("totals:"))
        os.remove(path)
    return total


def instructions_size(broker: BrokerProcess, dumps: str, size: int, count: int) -> None:
    topic = f"bench-{size}"
    create_topic(broker.bootstrap, topic)
    p = instructions(broker.pid, dumps, lambda: produce(broker.bootstrap, topic, b"v" * size, count))
    c = instructions(broker.pid, dumps, lambda: consume(broker.bootstrap, topic, count))
    print(f"\n== {size} B messages: {count}, broker under callgrind")
    print(f"produce  {p / count:10.0f} instructions per message (broker)")
    print(f"consume  {c / count:10.0f} instructions per message (broker)")


def bench_size(broker: BrokerProcess, size: int, count: int, runs: int) -> None:
    value = b"v" * size
    print(f"\n== {size} B messages: {count} per run, best of {runs}")
    best_produce = best_consume = None
    for run in range(runs):
        topic = f"bench-{size}-{run}"
        create_topic(broker.bootstrap, topic)
        p = measure(broker.pid, partial(produce, broker.bootstrap, topic, value, count))
        c = measure(broker.pid, partial(consume, broker.bootstrap, topic, count))
        print(f"  run {run + 1}: produce {count / p.elapsed:9.0f} msgs/s, consume {count / c.elapsed:9.0f} msgs/s")
        if best_produce is None or p.elapsed < best_produce.elapsed:
            best_produce = p
        if best_consume is None or c.elapsed < best_consume.elapsed:
            best_consume = c
    print(line("produce", count, size, best_produce))
    print(line("consume", count, size, best_consume))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages-100", type=int, default=400_000, help="100 B messages per run")
    parser.add_argument("--messages-1k", type=int, default=150_000, help="1 KiB messages per run")
    parser.add_argument("--runs", type=int, default=2, help="best of N (default 2)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="settings",
                        help="a broker setting, passed to `serve --set` (repeatable)")
    parser.add_argument("--consumer-set", metavar="KEY=VALUE", action="append", default=[],
                        dest="consumer_settings", help="a librdkafka setting of the consumer (repeatable)")
    parser.add_argument("--instructions", action="store_true",
                        help="run the broker under callgrind: its instructions per message")
    parser.add_argument("--tree", metavar="DIR", help="run the broker of the checkout in DIR")
    args = parser.parse_args()
    for kv in args.consumer_settings:
        key, sep, value = kv.partition("=")
        if not sep:
            parser.error(f"--consumer-set wants KEY=VALUE, got {kv!r}")
        CONSUMER_SETTINGS[key] = value
    if min(args.messages_100, args.messages_1k, args.runs) < 1:
        parser.error("counts and --runs must be at least 1")
    import confluent_kafka

    os.makedirs(os.path.join(ROOT, ".bench"), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="kafka-", dir=os.path.join(ROOT, ".bench"))
    process = sys.modules[BrokerProcess.__module__]
    if args.tree:
        spec = importlib.util.spec_from_file_location(
            "tree_broker_process", os.path.join(os.path.abspath(args.tree), "tests", "broker_process.py"))
        assert spec is not None and spec.loader is not None
        process = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(process)
    dumps = os.path.join(workdir, "callgrind.out")
    if args.instructions:
        plain = process.serve_command
        process.serve_command = lambda *a: ["valgrind", "--tool=callgrind", "--instr-atstart=no", "-q",
                                            f"--callgrind-out-file={dumps}", *plain(*a)]
    broker = process.BrokerProcess(os.path.join(workdir, "data"), *(a for kv in args.settings for a in ("--set", kv)))
    print(f"strata kafka bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})")
    try:
        try:
            broker.start(timeout=600 if args.instructions else process.START_TIMEOUT)
        except process.BrokerStartFailed as e:
            print(f"error: the broker could not start: {e}", file=sys.stderr)
            return 1
        print(f"broker pid {broker.pid}, Kafka listener {broker.bootstrap}")
        if args.instructions:
            instructions_size(broker, dumps, 100, args.messages_100)
            instructions_size(broker, dumps, 1024, args.messages_1k)
        else:
            bench_size(broker, 100, args.messages_100, args.runs)
            bench_size(broker, 1024, args.messages_1k, args.runs)
        code = broker.stop()
        if code != 0:
            print(f"warning: the broker exited with code {code}")
        bench_broker.report_broker_log(broker)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        broker.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
