"""Spark data source read throughput against the plain client, same topic, same run.

    .venv/bin/python bench/pipeline.py [--records 500000] [--partitions 2] [--value-bytes 100]
                                       [--runs 3] [--master local[2]]

A real broker (`python -m broker serve`, fresh data directory on 127.0.0.1) gets
one topic of --partitions partitions holding --records records (keys of 8 bytes,
values of --value-bytes bytes, two records in three carrying one header),
produced once with the client's Producer before any clock starts. Then, in
alternation, --runs times each:

- client: one `client.Consumer` (auto_offset_reset=earliest, 4 MiB fetches, no
  group) assigned every partition, polling until it has handed out every record
  (Record objects with key, value, headers, offset, timestamp in Python).
- spark: `spark.read.format("strata")` over the same topic on a --master
  session (default local[2]: the cores a 2-core machine has), computing
  count(*), sum(length(value)) and max(offset), so the JVM materializes every
  row's value. One Spark task per partition reads its offset range on an
  executor and hands Arrow batches to the JVM. A first, untimed query warms
  the session (Python worker start-up).

Figures are rows per second of the best run of each side, and their ratio
(target >= 0.5x). The data directory is removed on exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from client import Admin, Consumer, Producer  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402


def produce(address: str, topic: str, records: int, partitions: int, value_bytes: int) -> None:
    with Admin(address) as admin:
        admin.create_topic(topic, partitions, {"retention.ms": "-1"})
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    with Producer(address, linger_ms=20, max_batch_bytes=1024 * 1024) as producer:
        for i in range(records):
            producer.send(topic, value, b"%08d" % i, partition=i % partitions,
                          headers=[("h", b"x")] if i % 3 else None)
        producer.flush()


def run_client(address: str, topic: str, partitions: int, records: int) -> float:
    start = time.perf_counter()
    got = 0
    with Consumer(address, auto_offset_reset="earliest", max_bytes=4 * 1024 * 1024) as consumer:
        consumer.assign(topic, range(partitions))
        while got < records:
            got += len(consumer.poll(timeout_ms=1000))
    elapsed = time.perf_counter() - start
    assert got == records, (got, records)
    return elapsed


def run_spark(spark, address: str, topic: str, records: int) -> float:
    start = time.perf_counter()
    df = (spark.read.format("strata").option("bootstrap.servers", address)
          .option("subscribe", topic).load())
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes", "max(offset) AS last") \
        .collect()[0]
    elapsed = time.perf_counter() - start
    assert row.n == records, (row.n, records)
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()

    work = tempfile.mkdtemp(prefix="strata-bench-pipeline-")
    broker = BrokerProcess(os.path.join(work, "data"))
    spark = None
    try:
        broker.start()
        address = f"{broker.host}:{broker.port}"
        topic = "bench"
        t = time.perf_counter()
        produce(address, topic, args.records, args.partitions, args.value_bytes)
        print(f"produced {args.records} records of {args.value_bytes} B into {args.partitions} "
              f"partitions in {time.perf_counter() - t:.1f} s", flush=True)

        from pipeline import local_session
        spark = local_session("strata-bench", args.master, {
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
        spark.sparkContext.setLogLevel("ERROR")
        run_spark(spark, address, topic, args.records)  # warm-up: Python workers start

        client_times, spark_times = [], []
        for run in range(args.runs):
            client_times.append(run_client(address, topic, args.partitions, args.records))
            spark_times.append(run_spark(spark, address, topic, args.records))
            print(f"run {run + 1}: client {client_times[-1]:.2f} s, spark {spark_times[-1]:.2f} s",
                  flush=True)
        client_rate = args.records / min(client_times)
        spark_rate = args.records / min(spark_times)
        print(f"client   {client_rate:12,.0f} rows/s  (best of {args.runs})")
        print(f"strata   {spark_rate:12,.0f} rows/s  (best of {args.runs}, {args.master}, "
              f"{args.partitions} tasks)")
        print(f"ratio    {spark_rate / client_rate:.2f}x  (target >= 0.5x)")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
