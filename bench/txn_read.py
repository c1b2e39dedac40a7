"""Native client read_committed against read_uncommitted, same topic, same run.

    .venv/bin/python bench/txn_read.py [--records 300000] [--partitions 2] [--value-bytes 100] [--runs 3]

A real broker (`python -m broker serve`, fresh data directory on 127.0.0.1) gets
one topic of --partitions partitions holding --records records (keys of 8
bytes, values of --value-bytes bytes, no transactions), produced once before any
clock starts. Then, in alternation, --runs times each, one `client.Consumer`
(auto_offset_reset=earliest, 4 MiB fetches, no group) assigned every partition
polls until it has handed out every record:

- read_uncommitted: MULTIFETCH over the partitions (native version 1's path);
- read_committed: one FETCH version 2 (isolation 1) per partition, pipelined,
  each answer's aborted list applied (Kafka's consumer rule).

Figures are records per second of the best run of each side and their ratio
(issue 18's target for read_committed against read_uncommitted: >= 0.9x).
The data directory is removed on exit.
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

from bench.pipeline import produce  # noqa: E402
from client import Consumer  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402


def consume(address: str, topic: str, partitions: int, records: int, isolation: str) -> float:
    start = time.perf_counter()
    got = 0
    with Consumer(address, auto_offset_reset="earliest", max_bytes=4 * 1024 * 1024,
                  isolation_level=isolation) as consumer:
        consumer.assign(topic, range(partitions))
        while got < records:
            got += len(consumer.poll(timeout_ms=1000))
    elapsed = time.perf_counter() - start
    assert got == records, (got, records)
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()

    work = tempfile.mkdtemp(prefix="strata-bench-txn-read-")
    broker = BrokerProcess(os.path.join(work, "data"))
    try:
        broker.start()
        address = f"{broker.host}:{broker.port}"
        produce(address, "bench", args.records, args.partitions, args.value_bytes)
        times: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
        for run in range(args.runs):
            for isolation, taken in times.items():
                taken.append(consume(address, "bench", args.partitions, args.records, isolation))
            print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
        rates = {k: args.records / min(v) for k, v in times.items()}
        for isolation, rate in rates.items():
            print(f"{isolation:17} {rate:12,.0f} records/s  (best of {args.runs})")
        print(f"ratio             {rates['read_committed'] / rates['read_uncommitted']:.2f}x  (target >= 0.9x)")
        return 0
    finally:
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
