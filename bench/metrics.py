"""The cost of metrics on the produce and fetch paths: the broker with its admin port
on (and scraped) against the same broker with admin.port -1, in the same run.

    .venv/bin/python bench/metrics.py [--blocks 40] [--block 1000] [--scrape-interval 1.0]

Two real broker processes (`python -m broker serve`) on 127.0.0.1 with fresh data
directories, one with the admin port on (its /metrics fetched every
--scrape-interval seconds by a thread of this script while it is measured), one
with admin.port -1 (nothing counted). Metrics cost per request (a few counter
increments and one histogram bucket), so the requests are small, where that cost
weighs most:
- produce: blocks of --block native PRODUCEs of one v2 batch of 16 records of
  100 B, 8 in flight on one connection.
- fetch: blocks that read the first --block batches of the partition from
  offset 0 with FETCHes of 16 KiB maxBytes, one in flight.
The two brokers take turns block by block (which one goes first alternates), so
both see the same moments of a shared, noisy machine; each pair of blocks gives a
throughput ratio (on / off), and the figure is the median over --blocks pairs;
target >= 0.97.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from kafka_format import build_batch  # noqa: E402
from protocol import CreateTopicRequest, ProduceRequest, encode_request  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

# bench/broker.py's client helpers (loaded by path: `broker` is the broker package's name).
_spec = importlib.util.spec_from_file_location("bench_broker", os.path.join(os.path.dirname(__file__), "broker.py"))
assert _spec is not None and _spec.loader is not None
bench_broker = sys.modules["bench_broker"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_broker)

TOPIC = "metrics-bench"
RECORDS_PER_BATCH = 16
VALUE = b"m" * 100
PRODUCE_IN_FLIGHT = 8
FETCH_MAX_BYTES = 16 * 1024
TARGET = 0.97


class Scraper:
    """GET `url` every `interval` seconds on a thread until stopped; counts scrapes."""

    def __init__(self, url: str, interval: float):
        self.url, self.interval = url, interval
        self.scrapes = 0
        self.bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with urllib.request.urlopen(self.url, timeout=30) as response:
                self.bytes = len(response.read())
            self.scrapes += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def produce_time(broker: BrokerProcess, frames: list[bytes]) -> float:
    return bench_broker.uvloop_run(bench_broker.produce_pipelined(broker.port, frames, PRODUCE_IN_FLIGHT))


def fetch_time(broker: BrokerProcess, end_offset: int) -> tuple[float, int]:
    elapsed, _, requests = bench_broker.uvloop_run(
        bench_broker.fetch_all(broker.port, TOPIC, end_offset, FETCH_MAX_BYTES))
    return elapsed, requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=40, help="block pairs per workload (default 40)")
    parser.add_argument("--block", type=int, default=1000, help="PRODUCE requests per block (default 1000)")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds between scrapes (default 1)")
    args = parser.parse_args()
    if args.blocks < 1 or args.block < 1 or args.scrape_interval <= 0:
        parser.error("--blocks and --block must be at least 1, --scrape-interval above 0")

    os.makedirs(os.path.join(ROOT, ".bench"), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="metrics-", dir=os.path.join(ROOT, ".bench"))
    on = BrokerProcess(os.path.join(workdir, "on"), admin_port=0)
    off = BrokerProcess(os.path.join(workdir, "off"), admin_port=None)
    print(f"strata metrics bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; {args.blocks} pairs of "
          f"blocks, admin port on (scraped every {args.scrape_interval} s) and off taking turns")
    scraper = None
    try:
        on.start()
        off.start()
        for broker in (on, off):
            bench_broker.uvloop_run(bench_broker.admin(broker.port, CreateTopicRequest(TOPIC, 1)))
        batch = build_batch([(b"k%d" % i, VALUE, int(time.time() * 1000)) for i in range(RECORDS_PER_BATCH)])
        frames = [encode_request(ProduceRequest(TOPIC, 0, batch))] * args.block
        for broker in (on, off):  # warm-up
            produce_time(broker, frames)
        scraper = Scraper(on.admin_url("/metrics"), args.scrape_interval)
        sides = {"on": on, "off": off}
        results = {}
        print(f"\n== produce: blocks of {args.block} PRODUCEs of {RECORDS_PER_BATCH} x {len(VALUE)} B records, "
              f"{PRODUCE_IN_FLIGHT} in flight")
        results["produce"] = pairs(args.blocks, lambda side: (produce_time(sides[side], frames), args.block))
        end = args.block * RECORDS_PER_BATCH  # every block fetches the first warm-up block's records again
        print(f"\n== fetch: offsets 0..{end} with FETCHes of {FETCH_MAX_BYTES} B maxBytes, one in flight")
        results["fetch"] = pairs(args.blocks, lambda side: fetch_time(sides[side], end))
        scraper.stop()
        print(f"\nscrapes during the runs: {scraper.scrapes} ({scraper.bytes} bytes each)")
        ok = True
        for what, (median, total_on, total_off) in results.items():
            ok &= median >= TARGET
            print(f"{what:8} on {total_on:8.0f} req/s, off {total_off:8.0f} req/s (all blocks); median ratio of "
                  f"the pairs {median:.3f}x (target >= {TARGET}: {'ok' if median >= TARGET else 'MISSED'})")
        return 0 if ok else 1
    finally:
        if scraper is not None:
            scraper.stop()
        on.close()
        off.close()
        shutil.rmtree(workdir, ignore_errors=True)


def pairs(count: int, block) -> tuple[float, float, float]:
    """`count` pairs of blocks, on and off in turns (the first alternating): the median
    of the pairs' throughput ratios (on / off) and each side's overall requests/s."""
    ratios = []
    totals = {"on": [0.0, 0], "off": [0.0, 0]}
    for i in range(count):
        rates = {}
        for side in ("on", "off") if i % 2 == 0 else ("off", "on"):
            elapsed, requests = block(side)
            rates[side] = requests / elapsed
            totals[side][0] += elapsed
            totals[side][1] += requests
        ratios.append(rates["on"] / rates["off"])
    print(f"  pair ratios: min {min(ratios):.3f} median {statistics.median(ratios):.3f} max {max(ratios):.3f}")
    return (statistics.median(ratios), totals["on"][1] / totals["on"][0], totals["off"][1] / totals["off"][0])


if __name__ == "__main__":
    sys.exit(main())
