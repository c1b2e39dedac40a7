"""Tiered storage (issue 29's bench), two parts in one run against a real
`python -m broker serve` process with a file store, moto's S3 server on
loopback (--store s3, the tests' server) or s3rver on loopback (--store s3rver,
an S3 server from npm: `npm ci --prefix bench/s3rver` first):

    .venv/bin/python bench/tiered.py [--mib 1024] [--store file|s3|s3rver] [--rate-mb 50] [--duration 30]

(a) read: --mib MiB of history is produced to a tiered topic (segment.bytes
    --segment-mib, local.retention.bytes 1) and the broker copies every rolled
    segment and deletes it locally; then the tiered history (offsets below the
    local log start) is read through the Kafka listener with confluent-kafka
    (librdkafka) from offset 0, and the same remote segment objects are read
    straight from the same store with the same library (obstore) in two ways:
    "whole", one GET of each whole `.log` object in turn (the fastest a reader
    that may hold a whole segment in memory does; the ratio's baseline), and
    "ranged", the objects in ranged GETs of the broker's chunk size
    (rsm.config.fetch.chunk.bytes), as many at once as the broker's
    rsm.config.fetch.threads (a direct reader with the broker's memory bound).
    Each round reads the tiered history cold (a broker restarted on the same
    data and store, so its first remote fetch opens nothing in advance) and then
    warm (the same broker again). Figures: MB/s of each, per round and the median
    over --runs rounds, and the ratios (Kafka / direct whole; issue 29's target
    >= 0.7x). moto answers a ranged GET by reading the whole object (its cost
    grows with the object, not the range); the `.log` GETs it logged during the
    cold read are counted. On the file store both the direct and the Kafka
    reads are bound by memory, not by a store: glibc gives each freed buffer
    above its mmap threshold back to the kernel, so every new large buffer is
    faulted in again; MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ in the
    environment (inherited by the broker) change that for both sides.
(b) copy lag: a producer writes --rate-mb MB/s to one tiered topic for
    --duration seconds (300 for issue 29's five minutes); the copy lag
    (kafka_server_brokertopicmetrics_remotecopylagbytes, /metrics) is sampled
    every second. Figures: the lag's mean in the first and the last third and in
    each fifth, its maximum, its least-squares trend (MiB per minute) and the
    rate achieved. No growth: the last third's mean is not above the first
    third's by more than a segment.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

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
S3RVER = os.path.join(ROOT, "bench", "s3rver", "node_modules", ".bin", "s3rver")


class S3rverServer(S3Server):
    """s3rver (npm) on 127.0.0.1, its objects in a directory; any bucket it is asked
    to create. Credentials S3RVER / S3RVER."""

    name = "s3rver"

    def __init__(self, directory: str, log_path: str) -> None:
        if not os.path.exists(S3RVER):
            raise SystemExit(f"{S3RVER} is missing: run `npm ci --prefix bench/s3rver` first")
        super().__init__(log_path)
        self.directory = directory

    def command(self) -> list[str]:
        return [S3RVER, "-d", self.directory, "-a", "127.0.0.1", "-p", str(self.port), "--silent"]

    def start(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        super().start()


def start_store(kind: str, work: str):
    """(broker --set arguments, environment, obstore store, server or None)."""
    if kind == "file":
        path = os.path.join(work, "store")
        os.makedirs(path)
        return ["--set", f"rsm.config.url=file://{path}"], None, LocalStore(path), None
    if kind == "s3rver":
        server: S3Server | S3rverServer = S3rverServer(os.path.join(work, "s3rver"),
                                                       os.path.join(work, "s3rver.log"))
        key = "S3RVER"
    else:
        server = S3Server(os.path.join(work, "moto.log"))
        key = "testing"
    server.start()
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    server.create_bucket(bucket)
    env = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": key}
    store = S3Store(bucket, prefix="bench", config={"endpoint": server.endpoint, "region": "us-east-1",
                                                    "access_key_id": key, "secret_access_key": key},
                    client_options={"allow_http": True})
    args = ["--set", f"rsm.config.url=s3://{bucket}/bench", "--set", f"rsm.config.s3.endpoint={server.endpoint}",
            "--set", "rsm.config.s3.region=us-east-1"]
    return args, env, store, server


def start_broker(work: str, store_args: list[str], env, interval_ms: int, args) -> BrokerProcess:
    return BrokerProcess(os.path.join(work, "data"), "--set", "remote.log.storage.system.enable=true",
                         "--set", f"remote.log.manager.task.interval.ms={interval_ms}",
                         "--set", "log.initial.task.delay.ms=0",
                         "--set", f"rsm.config.cache.bytes={args.cache_mib * MiB}",
                         "--set", f"rsm.config.fetch.chunk.bytes={args.chunk_mib * MiB}",
                         "--set", f"rsm.config.fetch.readahead.bytes={args.readahead_mib * MiB}",
                         "--set", f"rsm.config.fetch.threads={args.threads}",
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


def segment_objects(store) -> list[tuple[str, int]]:
    """(key, size) of every `.log` object, in offset order."""
    return sorted((meta["path"], meta["size"]) for batch in obstore.list(store) for meta in batch
                  if meta["path"].endswith(".log"))


def read_direct_whole(store) -> tuple[int, float]:
    """One GET of each whole segment object in turn."""
    objects = segment_objects(store)
    nbytes = 0
    started = time.monotonic()
    for key, _ in objects:
        nbytes += len(obstore.get(store, key).bytes())
    return nbytes, time.monotonic() - started


def read_direct_ranged(store, chunk: int, threads: int) -> tuple[int, float]:
    """Each segment object in ranged GETs of `chunk` bytes, `threads` at once, in order."""
    objects = segment_objects(store)
    ranges = [(key, start, min(chunk, size - start)) for key, size in objects for start in range(0, size, chunk)]
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        nbytes = sum(pool.map(lambda r: len(obstore.get_range(store, r[0], start=r[1], length=r[2])), ranges))
    return nbytes, time.monotonic() - started


def wait_tiered(broker: BrokerProcess, topic: str) -> None:
    while len(local_segments(broker, topic)) > 1:
        time.sleep(0.2)


def moto_gets(log_path: str, since: int) -> str:
    """The `.log` GETs moto logged after byte `since` of its log: ranged (206) and whole (200)."""
    with open(log_path, "rb") as f:
        f.seek(since)
        lines = [line for line in f.read().decode(errors="replace").splitlines() if '.log HTTP' in line
                 and "GET /" in line]
    ranged = sum(1 for line in lines if '" 206 ' in line)
    return f"{ranged} ranged GETs (206), {len(lines) - ranged} whole GETs (200)"


def median(values: list[float]) -> float:
    return statistics.median(values)


def bench_read(work: str, args) -> None:
    store_args, env, store, server = start_store(args.store, work)
    moto_log = os.path.join(work, "moto.log") if args.store == "s3" else None
    try:
        with start_broker(work, store_args, env, 500, args) as broker:
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
        figures: dict[str, list[float]] = {"local": [], "whole": [], "ranged": [], "cold": [], "warm": []}
        for run in range(args.runs):
            # A broker restarted on the same data: its first remote fetch is a cold one.
            with start_broker(work, store_args, env, 500, args) as broker:
                lbytes, lseconds = read_kafka(broker, plain, local_start)
                wbytes, wseconds = read_direct_whole(store)
                rbytes, rseconds = read_direct_ranged(store, args.chunk_mib * MiB, args.threads)
                mark = os.path.getsize(moto_log) if moto_log else 0
                cbytes, cseconds = read_kafka(broker, topic, local_start)
                requests = f"; store: {moto_gets(moto_log, mark)} in the cold read" if moto_log else ""
                kbytes, kseconds = read_kafka(broker, topic, local_start)
            for name, (n, t) in (("local", (lbytes, lseconds)), ("whole", (wbytes, wseconds)),
                                 ("ranged", (rbytes, rseconds)), ("cold", (cbytes, cseconds)),
                                 ("warm", (kbytes, kseconds))):
                figures[name].append(n / t)
            print(f"  round {run + 1}: direct whole {wbytes / MiB:.0f} MiB in {wseconds:.2f} s, ranged "
                  f"{rbytes / MiB:.0f} MiB in {rseconds:.2f} s; kafka cold {cbytes / MiB:.0f} MiB of values in "
                  f"{cseconds:.2f} s ({cbytes / cseconds / (wbytes / wseconds):.2f}x), warm {kseconds:.2f} s "
                  f"({kbytes / kseconds / (wbytes / wseconds):.2f}x); local (not tiered) {lbytes / MiB:.0f} MiB in "
                  f"{lseconds:.2f} s{requests}", flush=True)
        m = {name: median(values) / MiB for name, values in figures.items()}
        print(f"(a) tiered read, {args.store} store, chunk {args.chunk_mib} MiB, read-ahead {args.readahead_mib} MiB, "
              f"{args.threads} threads, medians of {args.runs}: Kafka listener (librdkafka) cold "
              f"{m['cold']:.1f} MiB/s, warm {m['warm']:.1f} MiB/s; obstore direct whole objects "
              f"{m['whole']:.1f} MiB/s, ranged "
              f"{m['ranged']:.1f} MiB/s; ratio to whole: cold {m['cold'] / m['whole']:.2f}x, warm "
              f"{m['warm'] / m['whole']:.2f}x (target >= 0.7x); to ranged: cold {m['cold'] / m['ranged']:.2f}x, warm "
              f"{m['warm'] / m['ranged']:.2f}x; the same offsets of a topic that is not tiered {m['local']:.1f} MiB/s; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    finally:
        if server is not None:
            server.stop()


def bench_lag(work: str, args) -> None:
    work = os.path.join(work, "lag")
    os.makedirs(work)
    store_args, env, _store, server = start_store(args.store, work)
    try:
        with start_broker(work, store_args, env, 1000, args) as broker:
            topic = create_topic(broker, args.segment_mib)
            samples: list[int] = []
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
            fifth = max(len(samples) // 5, 1)
            fifths = " ".join(f"{sum(samples[i:i + fifth]) / len(samples[i:i + fifth]) / MiB:.0f}"
                              for i in range(0, fifth * 5, fifth) if samples[i:i + fifth])
            trend = statistics.linear_regression(range(len(samples)), samples).slope if len(samples) > 1 else 0.0
            print(f"(b) copy lag at {rate / 1e6:.1f} MB/s for {args.duration} s ({len(samples)} samples): "
                  f"first third mean {first / MiB:.1f} MiB, last third mean {last / MiB:.1f} MiB, "
                  f"max {max(samples) / MiB:.1f} MiB; means by fifth {fifths} MiB; trend {trend * 60 / MiB:+.1f} "
                  f"MiB/min: {verdict}; load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    finally:
        if server is not None:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="MiB of tiered history to read (a)")
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--store", choices=("file", "s3", "s3rver"), default="file")
    parser.add_argument("--chunk-mib", type=int, default=8, help="rsm.config.fetch.chunk.bytes in MiB")
    parser.add_argument("--readahead-mib", type=int, default=32, help="rsm.config.fetch.readahead.bytes in MiB")
    parser.add_argument("--cache-mib", type=int, default=64, help="rsm.config.cache.bytes in MiB")
    parser.add_argument("--threads", type=int, default=4, help="rsm.config.fetch.threads")
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
