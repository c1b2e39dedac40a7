"""The cost of metrics on the produce and fetch paths: the broker with its admin port
on (and scraped) against the same broker with admin.port -1, in the same run.

    .venv/bin/python bench/metrics.py [--requests 20000] [--runs 5] [--scrape-interval 1.0]

Two real broker processes (`python -m broker serve`) on 127.0.0.1 with fresh data
directories, one with the admin port on (its /metrics fetched every
--scrape-interval seconds by a thread of this script while it is measured), one
with admin.port -1 (nothing counted). Metrics cost per request (a few counter
increments and one histogram bucket), so the requests are small, where that cost
weighs most:
- produce: --requests native PRODUCEs of one v2 batch of 16 records of 100 B,
  8 in flight on one connection. Requests per second.
- fetch: the produced partition read from offset 0 with FETCHes of 16 KiB
  maxBytes, one in flight. Requests per second.
The two brokers take turns (the first one alternating between runs), best of
--runs for each. Ratio = on / off; target >= 0.97.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
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


def produce_rate(broker: BrokerProcess, frames: list[bytes]) -> float:
    elapsed = bench_broker.uvloop_run(bench_broker.produce_pipelined(broker.port, frames, PRODUCE_IN_FLIGHT))
    return len(frames) / elapsed


def fetch_rate(broker: BrokerProcess, end_offset: int) -> float:
    elapsed, _, requests = bench_broker.uvloop_run(
        bench_broker.fetch_all(broker.port, TOPIC, end_offset, FETCH_MAX_BYTES))
    return requests / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000, help="PRODUCE requests per run (default 20000)")
    parser.add_argument("--runs", type=int, default=5, help="best of N (default 5)")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds between scrapes (default 1)")
    args = parser.parse_args()
    if args.requests < 1 or args.runs < 1 or args.scrape_interval <= 0:
        parser.error("--requests and --runs must be at least 1, --scrape-interval above 0")

    os.makedirs(os.path.join(ROOT, ".bench"), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="metrics-", dir=os.path.join(ROOT, ".bench"))
    on = BrokerProcess(os.path.join(workdir, "on"), admin_port=0)
    off = BrokerProcess(os.path.join(workdir, "off"), admin_port=None)
    print(f"strata metrics bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"{args.requests} PRODUCEs of {RECORDS_PER_BATCH} x {len(VALUE)} B records per run, best of {args.runs}")
    scraper = None
    try:
        on.start()
        off.start()
        for broker in (on, off):
            bench_broker.uvloop_run(bench_broker.admin(broker.port, CreateTopicRequest(TOPIC, 1)))
        batch = build_batch([(b"k%d" % i, VALUE, int(time.time() * 1000)) for i in range(RECORDS_PER_BATCH)])
        frames = [encode_request(ProduceRequest(TOPIC, 0, batch))] * args.requests
        for broker in (on, off):  # warm-up
            produce_rate(broker, frames[:2000])
        scraper = Scraper(on.admin_url("/metrics"), args.scrape_interval)
        best = {"produce": {"on": 0.0, "off": 0.0}, "fetch": {"on": 0.0, "off": 0.0}}
        produced = {"on": 2000 * RECORDS_PER_BATCH, "off": 2000 * RECORDS_PER_BATCH}
        sides = [("on", on), ("off", off)]
        for run in range(args.runs):
            order = sides if run % 2 == 0 else sides[::-1]
            rates = {}
            for name, broker in order:
                rates[name] = produce_rate(broker, frames)
                produced[name] += args.requests * RECORDS_PER_BATCH
                best["produce"][name] = max(best["produce"][name], rates[name])
            fetches = {}
            for name, broker in order:
                fetches[name] = fetch_rate(broker, produced[name])
                best["fetch"][name] = max(best["fetch"][name], fetches[name])
            print(f"  run {run + 1}: produce on {rates['on']:8.0f} off {rates['off']:8.0f} req/s | "
                  f"fetch on {fetches['on']:8.0f} off {fetches['off']:8.0f} req/s")
        scraper.stop()
        print(f"scrapes during the runs: {scraper.scrapes} (every {args.scrape_interval} s, "
              f"{scraper.bytes} bytes each)")
        ok = True
        for what in ("produce", "fetch"):
            ratio = best[what]["on"] / best[what]["off"]
            ok &= ratio >= TARGET
            print(f"{what:8} admin on {best[what]['on']:8.0f} req/s, off {best[what]['off']:8.0f} req/s: "
                  f"ratio {ratio:.3f}x (target >= {TARGET}: {'ok' if ratio >= TARGET else 'MISSED'})")
        return 0 if ok else 1
    finally:
        if scraper is not None:
            scraper.stop()
        on.close()
        off.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
