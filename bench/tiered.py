"""Tiered storage (issue 29's bench), two parts in one run against a real
`python -m broker serve` process with a file store (or moto's S3 server on
loopback with --store s3):

    .venv/bin/python bench/tiered.py [--mib 1024] [--store file|s3] [--rate-mb 50] [--duration 30]

(a) read: --mib MiB of history is produced to a tiered topic (segment.bytes
    --segment-mib, local.retention.bytes 1) and the broker copies every rolled
    segment and deletes it locally; then the tiered history (offsets below the
    local log start) is read through the Kafka listener with confluent-kafka
    (librdkafka) from offset 0, and the same remote segment objects are read
    straight from the same store with obstore. Figures: MB/s of each and the
    ratio (Kafka / direct; issue 29's target >= 0.7x).
(b) copy lag: a producer writes --rate-mb MB/s to one tiered topic for
    --duration seconds (300 for issue 29's five minutes); the copy lag
    (kafka_server_brokertopicmetrics_remotecopylagbytes, /metrics) is sampled
    every second. Figures: the lag's mean in the first and the last third, its
    maximum, and the rate achieved. No growth: the last third's mean is not
    above the first third's by more than a segment.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import obstore  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from obstore.store import LocalStore, S3Store  # noqa: E402

from client import Admin  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.storage.remote.conftest import S3Server  # noqa: E402

MiB = 1024 * 1024
VALUE_BYTES = 16 * 1024
LAG_METRIC = "kafka_server_brokertopicmetrics_remotecopylagbytes{"


def start_store(kind: str, work: str):
    """(broker --set arguments, environment, obstore store, server or None)."""
    if kind == "file":
        path = os.path.join(work, "store")
        os.makedirs(path)
        return ["--set", f"rsm.config.url=file://{path}"], None, LocalStore(path), None
    server = S3Server(os.path.join(work, "moto.log"))
    server.start()
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    server.create_bucket(bucket)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    store = S3Store(bucket, prefix="bench", config={"endpoint": server.endpoint, "region": "us-east-1",
                                                    "access_key_id": "testing", "secret_access_key": "testing"},
                    client_options={"allow_http": True})
    args = ["--set", f"rsm.config.url=s3://{bucket}/bench", "--set", f"rsm.config.s3.endpoint={server.endpoint}",
            "--set", "rsm.config.s3.region=us-east-1"]
    return args, env, store, server


def start_broker(work: str, store_args: list[str], env, interval_ms: int) -> BrokerProcess:
    return BrokerProcess(os.path.join(work, "data"), "--set", "remote.log.storage.system.enable=true",
                         "--set", f"remote.log.manager.task.interval.ms={interval_ms}",
                         "--set", "log.initial.task.delay.ms=0", "--set", "rsm.config.cache.bytes=67108864",
                         *store_args, env=env).start()


def create_topic(broker: BrokerProcess, segment_mib: int) -> str:
    topic = f"tiered-{uuid.uuid4().hex[:8]}"
    with Admin(f"{broker.host}:{broker.port}") as admin:
        admin.create_topic(topic, 1, {"remote.storage.enable": "true", "segment.bytes": str(segment_mib * MiB),
                                      "local.retention.bytes": "1", "retention.ms": "-1", "retention.bytes": "-1"})
    return topic


def produce(broker: BrokerProcess, topic: str, total_bytes: int, rate_bytes: float | None = None) -> float:
    """Produce `total_bytes` of values (at `rate_bytes` a second when given); the rate achieved."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                         "queue.buffering.max.kbytes": 1 << 20, "acks": 1})
    value = os.urandom(VALUE_BYTES)
    sent = 0
    started = time.monotonic()
    while sent < total_bytes:
        if rate_bytes is not None:
            ahead = sent / rate_bytes - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        try:
            producer.produce(topic, value=value)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
        sent += len(value)
    producer.flush(120)
    return sent / (time.monotonic() - started)


def local_segments(broker: BrokerProcess, topic: str) -> list[str]:
    directory = os.path.join(broker.data_dir, f"{topic}-0")
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))


def copy_lag(broker: BrokerProcess) -> int:
    with urllib.request.urlopen(broker.admin_url("/metrics"), timeout=10) as response:
        text = response.read().decode()
    return int(sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(LAG_METRIC)))


def read_kafka(broker: BrokerProcess, topic: str, below: int) -> tuple[int, float]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 * MiB,
                         "max.partition.fetch.bytes": 16 * MiB, "queued.max.messages.kbytes": 256 * 1024})
    consumer.assign([TopicPartition(topic, 0, 0)])
    nbytes = 0
    started = time.monotonic()
    try:
        while True:
            for message in consumer.consume(256, 1.0):  # returns once 256 are in (or after 1 s)
                if message.error():
                    raise RuntimeError(str(message.error()))
                if message.offset() >= below:
                    return nbytes, time.monotonic() - started
                nbytes += len(message.value())
    finally:
        consumer.close()


def read_direct(store) -> tuple[int, float]:
    keys = [meta["path"] for batch in obstore.list(store) for meta in batch if meta["path"].endswith(".log")]
    nbytes = 0
    started = time.monotonic()
    for key in keys:
        nbytes += len(obstore.get(store, key).bytes())
    return nbytes, time.monotonic() - started


def wait_tiered(broker: BrokerProcess, topic: str) -> None:
    while len(local_segments(broker, topic)) > 1:
        time.sleep(0.2)


def bench_read(work: str, args) -> None:
    store_args, env, store, server = start_store(args.store, work)
    try:
        with start_broker(work, store_args, env, 500) as broker:
            topic = create_topic(broker, args.segment_mib)
            rate = produce(broker, topic, args.mib * MiB)
            print(f"produced {args.mib} MiB at {rate / MiB:.1f} MiB/s", flush=True)
            started = time.monotonic()
            wait_tiered(broker, topic)
            print(f"copied and deleted locally {time.monotonic() - started:.1f} s after the last produce", flush=True)
            local_start = int(local_segments(broker, topic)[0].split(".")[0])
            # The same history in a topic that is not tiered: the Kafka listener's local read, for reference.
            plain = f"plain-{uuid.uuid4().hex[:8]}"
            with Admin(f"{broker.host}:{broker.port}") as admin:
                admin.create_topic(plain, 1, {"segment.bytes": str(args.segment_mib * MiB)})
            produce(broker, plain, args.mib * MiB)
            best_kafka = best_direct = best_local = 0.0
            for _ in range(args.runs):
                lbytes, lseconds = read_kafka(broker, plain, local_start)
                best_local = max(best_local, lbytes / lseconds)
                nbytes, seconds = read_direct(store)
                best_direct = max(best_direct, nbytes / seconds)
                kbytes, kseconds = read_kafka(broker, topic, local_start)
                best_kafka = max(best_kafka, kbytes / kseconds)
                print(f"  direct {nbytes / MiB:.0f} MiB in {seconds:.2f} s; kafka {kbytes / MiB:.0f} MiB of values "
                      f"in {kseconds:.2f} s; local (not tiered) {lbytes / MiB:.0f} MiB in {lseconds:.2f} s", flush=True)
            print(f"(a) tiered read, {args.store} store: Kafka listener (librdkafka) {best_kafka / MiB:.1f} MiB/s, "
                  f"obstore direct {best_direct / MiB:.1f} MiB/s, ratio {best_kafka / best_direct:.2f}x "
                  f"(target >= 0.7x); the same offsets of a topic that is not tiered {best_local / MiB:.1f} MiB/s",
                  flush=True)
    finally:
        if server is not None:
            server.stop()


def bench_lag(work: str, args) -> None:
    work = os.path.join(work, "lag")
    os.makedirs(work)
    store_args, env, _store, server = start_store(args.store, work)
    try:
        with start_broker(work, store_args, env, 1000) as broker:
            topic = create_topic(broker, args.segment_mib)
            samples: list[int] = []
            import threading

            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    samples.append(copy_lag(broker))
                    done.wait(1.0)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            rate = produce(broker, topic, int(args.rate_mb * 1e6 * args.duration), args.rate_mb * 1e6)
            done.set()
            sampler.join()
            third = max(len(samples) // 3, 1)
            first = sum(samples[:third]) / third
            last = sum(samples[-third:]) / third
            growth = last - first
            verdict = "no growth" if growth <= args.segment_mib * MiB else "GROWS"
            print(f"(b) copy lag at {rate / 1e6:.1f} MB/s for {args.duration} s ({len(samples)} samples): "
                  f"first third mean {first / MiB:.1f} MiB, last third mean {last / MiB:.1f} MiB, "
                  f"max {max(samples) / MiB:.1f} MiB: {verdict}", flush=True)
    finally:
        if server is not None:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="MiB of tiered history to read (a)")
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--store", choices=("file", "s3"), default="file")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rate-mb", type=float, default=50.0, help="producer rate in MB/s (b)")
    parser.add_argument("--duration", type=int, default=30, help="seconds of producing (b); 300 for issue 29")
    parser.add_argument("--only", choices=("read", "lag"), default=None)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="strata-tiered-bench-")
    try:
        if args.only in (None, "read"):
            bench_read(work, args)
        if args.only in (None, "lag"):
            bench_lag(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
