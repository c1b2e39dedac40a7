"""Broker restart time after a clean stop and after kill -9, for many small partitions.

    .venv/bin/python bench/restart.py [--partitions 2000] [--records 50] [--record-bytes 200]
                                      [--unflushed-partitions 200] [--runs 3]
                                      [--set KEY=VALUE ...] [--dir DIR]

The broker is the real `python -m broker serve` process on 127.0.0.1 with a fresh
data directory. Setup: one topic of --partitions partitions; confluent-kafka
writes --records records of --record-bytes bytes to every partition, most through
a plain producer and those of the first 200 partitions through four idempotent
producers (enable.idempotence=true, 50 partitions each); then a clean stop
(SIGTERM: logs flushed, recovery points at the log ends, producer-state
snapshots written). Each run then measures:

- clean: start the broker on that directory (the clean-shutdown marker is there);
- unclean: produce a little more (one idempotent batch of 10 records to each of
  the first --unflushed-partitions partitions: the unflushed data), SIGKILL the
  broker once every record is acknowledged, and start it again: the start
  recovers every log from its recovery point and producer-state snapshot;
- then a clean stop (timed too: SIGTERM to exit), which the next run's clean
  start follows.

A start is timed from spawning the process to its `listening` line (interpreter
start-up, imports and the topic registry included), and the broker's own figure
is the `logs_loaded` line's elapsed_ms (opening and recovering the logs only).
Each figure is the median of --runs runs; the ratio is unclean / clean, target
<= 3x when the unflushed data is small (issue 14). Every broker is stopped and
the work directory removed on exit (unless --dir is given).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402

TOPIC = "restart-bench"
IDEMPOTENT_PRODUCERS = 4
PARTITIONS_PER_IDEMPOTENT_PRODUCER = 50
UNFLUSHED_BATCH = 10  # records per partition produced before each kill -9
TIMEOUT_S = 120.0


def produce(bootstrap: str, items: list[tuple[int, bytes]], idempotent: bool) -> None:
    """Send (partition, value) pairs and wait until every one is acknowledged."""
    errors: list = []
    config = {"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
              "queue.buffering.max.messages": 1_000_000,
              "log_level": 2}  # not the reconnect errors of a producer outliving its broker
    if idempotent:
        config["enable.idempotence"] = True
    producer = Producer(config)
    for partition, value in items:
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=partition,
                                 on_delivery=lambda err, msg: errors.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(TIMEOUT_S) != 0 or errors:
        raise SystemExit(f"produce failed: {errors[:3]}")


def fill(bootstrap: str, partitions: int, records: int, record_bytes: int) -> None:
    value = b"x" * record_bytes
    idempotent_partitions = min(partitions, IDEMPOTENT_PRODUCERS * PARTITIONS_PER_IDEMPOTENT_PRODUCER)
    plain = [(p, value) for p in range(idempotent_partitions, partitions) for _ in range(records)]
    produce(bootstrap, plain, idempotent=False)
    for first in range(0, idempotent_partitions, PARTITIONS_PER_IDEMPOTENT_PRODUCER):
        owned = range(first, min(first + PARTITIONS_PER_IDEMPOTENT_PRODUCER, idempotent_partitions))
        produce(bootstrap, [(p, value) for p in owned for _ in range(records)], idempotent=True)


def timed_start(broker: BrokerProcess) -> tuple[float, float]:
    """Start the broker; returns (seconds to the listening line, logs_loaded elapsed_ms / 1000)."""
    begin = time.perf_counter()
    broker.restart(timeout=TIMEOUT_S * 5)
    wall = time.perf_counter() - begin
    loaded = [e for e in broker.log_events() if e.get("event") == "logs_loaded"]
    return wall, loaded[-1].get("elapsed_ms", float("nan")) / 1000  # (older brokers: no elapsed_ms)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--records", type=int, default=50, help="records per partition in the setup")
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--unflushed-partitions", type=int, default=200,
                        help="partitions that get one unflushed batch before each kill -9")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="broker setting for every start (e.g. num.recovery.threads.per.data.dir=1)")
    parser.add_argument("--dir", help="work directory (kept); default: a temporary one, removed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work = args.dir or tempfile.mkdtemp(prefix="strata-restart-bench-")
    settings = [arg for kv in args.set for arg in ("--set", kv)]
    broker = BrokerProcess(os.path.join(work, "data"), *settings)
    try:
        broker.start(timeout=TIMEOUT_S)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 2})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)], operation_timeout=60)[TOPIC].result(TIMEOUT_S)
        del admin
        begin = time.perf_counter()
        fill(broker.bootstrap, args.partitions, args.records, args.record_bytes)
        data_bytes = sum(os.path.getsize(os.path.join(dirpath, name))
                         for dirpath, _, names in os.walk(broker.data_dir) for name in names
                         if name.endswith(".log"))
        print(f"setup: {args.partitions} partitions, {args.records} x {args.record_bytes} B records each "
              f"({data_bytes / 1e6:.1f} MB of segments), written in {time.perf_counter() - begin:.1f} s")
        assert broker.stop() == 0
        clean: list[tuple[float, float]] = []
        unclean: list[tuple[float, float]] = []
        stops: list[float] = []
        unflushed = min(args.unflushed_partitions, args.partitions)
        for run in range(args.runs):
            clean.append(timed_start(broker))
            items = [(p, b"u%d" % run) for p in range(unflushed) for _ in range(UNFLUSHED_BATCH)]
            produce(broker.bootstrap, items, idempotent=True)
            broker.kill()
            unclean.append(timed_start(broker))
            begin = time.perf_counter()
            assert broker.stop() == 0
            stops.append(time.perf_counter() - begin)
            print(f"run {run + 1}: clean {clean[-1][0]:.2f} s (logs {clean[-1][1]:.2f} s), "
                  f"unclean {unclean[-1][0]:.2f} s (logs {unclean[-1][1]:.2f} s), clean stop {stops[-1]:.2f} s")
        report(args, clean, unclean, unflushed)
        print(f"clean stop (SIGTERM to exit, flushes and snapshots included): {statistics.median(stops):.2f} s")
    finally:
        broker.close()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


def report(args: argparse.Namespace, clean: list, unclean: list, unflushed: int) -> None:
    rows = []
    for name, index in (("start to listening", 0), ("logs_loaded", 1)):
        c = statistics.median(run[index] for run in clean)
        u = statistics.median(run[index] for run in unclean)
        rows.append((name, c, u, u / c if c > 0 else float("inf")))
    print()
    print(f"restart, {args.partitions} partitions, unflushed: {unflushed} partitions x {UNFLUSHED_BATCH} records"
          f" (median of {args.runs})")
    print(f"{'':22}{'clean stop':>12}{'kill -9':>12}{'ratio':>9}")
    for name, c, u, ratio in rows:
        print(f"{name:22}{c:>11.2f}s{u:>11.2f}s{ratio:>8.2f}x")
    print("target: kill -9 <= 3x clean stop")
    print(json.dumps({"partitions": args.partitions, "clean_s": rows[0][1], "unclean_s": rows[0][2],
                      "ratio": rows[0][3], "clean_logs_s": rows[1][1], "unclean_logs_s": rows[1][2],
                      "logs_ratio": rows[1][3]}))


if __name__ == "__main__":
    main()
