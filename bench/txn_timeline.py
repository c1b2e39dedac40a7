"""Where a transaction's time goes: librdkafka's transactional producer against its
plain idempotent twin (bench/transactions.py's sides), per transaction of 1,000 1 KiB
records, with the broker's time for each request on the same clock.

    .venv/bin/python bench/txn_timeline.py [--transactions 100] [--block 5]

The broker runs with its request metrics hooked (`--log-requests`, this script run
as the broker's entry point): every request's API name, start of handling and the
moment its reply is handed to the socket, in time.perf_counter() seconds, go to a
file (not the metrics' end, after the write returns: on a busy machine the send
that wakes the client often lets the client run first, and that wait is no work of
the broker's). perf_counter is
CLOCK_MONOTONIC, one clock for every process of the machine, so the client's own
timestamps (begin, produce loop done, flush done, commit done) line up with the
broker's. Prints, as medians over the transactions:

- the client-side gaps: the transaction's first produce() to AddPartitionsToTxn
  reaching the broker (librdkafka sends it from a one-shot timer of 1 ms), its
  answer to the first Produce reaching the broker (Produce waits for it), the
  last Produce answered to EndTxn reaching the broker, EndTxn answered to
  commit_transaction() returning;
- the broker's time in each request (start of handling to reply handed over),
  and in the plain producer's Produce requests for comparison;
- a transaction against the plain producer's 1,000 records, and the same with the
  broker's AddPartitionsToTxn and EndTxn time taken away: the ratio a broker
  answering those two in no time would give, with this client.
Both producers take turns of --block transactions, as in bench/transactions.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LOG_ENV = "TXN_TIMELINE_REQUEST_LOG"


def serve_with_request_log() -> int:
    """The broker's `serve`, every request's (api, start, end) appended to $TXN_TIMELINE_REQUEST_LOG."""
    import atexit

    from broker.admin import metrics
    from broker.cli import main
    from broker.net import sendfile

    out = open(os.environ[LOG_ENV], "w", buffering=1 << 20)  # noqa: SIM115 - closed at exit
    atexit.register(out.close)
    observe = metrics.RequestStats.observe
    clock = time.perf_counter
    handed = [0.0]  # when the last reply was handed to its connection's writer (the loop thread only)
    writer = sendfile.SendfileWriter
    write, write_now = writer.write, writer.write_now

    async def timed_write(self, reply):
        handed[0] = clock()
        return await write(self, reply)

    def timed_write_now(self, reply):
        handed[0] = clock()
        return write_now(self, reply)

    def logged(self, seconds: float) -> None:
        end = clock()
        start = end - seconds
        out.write(f"{self.name} {start:.6f} {handed[0] if start <= handed[0] <= end else end:.6f}\n")
        observe(self, seconds)

    writer.write, writer.write_now = timed_write, timed_write_now  # type: ignore[method-assign]
    metrics.RequestStats.observe = logged  # type: ignore[method-assign]
    return main()


def run(transactions: int, block: int) -> None:
    from transactions import RECORDS_PER_TXN, PlainSide, TransactionalSide, _produce, create_topic

    import tests.broker_process as broker_process

    script = os.path.abspath(__file__)
    broker_process.serve_command = lambda *args: [sys.executable, script, "--log-requests", "serve", *args]
    workdir = tempfile.mkdtemp(prefix="strata-txn-timeline-")
    requests_file = os.path.join(workdir, "requests.txt")
    broker = broker_process.BrokerProcess(os.path.join(workdir, "data"), env={LOG_ENV: requests_file})
    clock = time.perf_counter
    plain_marks, txn_marks = [], []  # (start, flush or commit called, end)
    try:
        broker.start()
        create_topic(broker.bootstrap, "plain")
        create_topic(broker.bootstrap, "txn")
        plain, txn = PlainSide(broker.bootstrap, "plain"), TransactionalSide(broker.bootstrap, "txn", "timeline")
        for turn in range(transactions // block):
            for side in ((plain, txn) if turn % 2 == 0 else (txn, plain)):
                producer, topic = side.producer, side.topic
                for _ in range(block):
                    start = clock()
                    if side is txn:
                        producer.begin_transaction()
                    for _ in range(RECORDS_PER_TXN):
                        _produce(producer, topic)
                    called = clock()
                    if side is txn:
                        producer.commit_transaction(60)
                        txn_marks.append((start, called, clock()))
                    else:
                        producer.flush(60)
                        plain_marks.append((start, called, clock()))
        broker.stop()
        with open(requests_file) as f:
            requests = [(name, float(a), float(b)) for name, a, b in (line.split() for line in f)]
    finally:
        broker.close()
        shutil.rmtree(workdir, ignore_errors=True)
    report(requests, plain_marks, txn_marks)


def report(requests, plain_marks, txn_marks) -> None:
    def within(start: float, end: float) -> list[tuple[str, float, float]]:
        return [(name, a, b) for name, a, b in requests if start <= a <= end]

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:6.3f} ms" if values else "     - ms"

    gaps: dict[str, list[float]] = {k: [] for k in (
        "first produce() -> AddPartitionsToTxn at the broker",
        "AddPartitionsToTxn answered -> first Produce at the broker",
        "last Produce answered -> EndTxn at the broker",
        "EndTxn answered -> commit_transaction() returns")}
    server: dict[str, list[float]] = {}
    txn_times, client_times = [], []
    for start, _, end in txn_marks:
        seen = within(start, end)
        for name, a, b in seen:
            server.setdefault(name, []).append(b - a)
        add = next((r for r in seen if r[0] == "AddPartitionsToTxn"), None)
        produces = [r for r in seen if r[0] == "Produce"]
        end_txn = next((r for r in seen if r[0] == "EndTxn"), None)
        if add is None or not produces or end_txn is None:
            continue
        values = (add[1] - start, produces[0][1] - add[2], end_txn[1] - produces[-1][2], end - end_txn[2])
        for key, value in zip(gaps, values, strict=True):
            gaps[key].append(value)
        txn_times.append(end - start)
        client_times.append(end - start - (add[2] - add[1]) - (end_txn[2] - end_txn[1]))
    plain_times = [end - start for start, _, end in plain_marks]
    plain_produce = [b - a for start, _, end in plain_marks for name, a, b in within(start, end) if name == "Produce"]
    print(f"{len(txn_marks)} transactions and {len(plain_marks)} plain flushes of 1,000 x 1 KiB; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians:")
    for key, values in gaps.items():
        print(f"  {key:60} {ms(values)}")
    for name in ("AddPartitionsToTxn", "Produce", "EndTxn"):
        print(f"  broker, {name:52} {ms(server.get(name, []))} per request")
    print(f"  broker, Produce of the plain producer                        {ms(plain_produce)} per request")
    plain, txn, client = (statistics.median(v) for v in (plain_times, txn_times, client_times))
    print(f"  plain producer, 1,000 records and flush                      {plain * 1000:6.3f} ms")
    print(f"  transaction, begin to commit returned                        {txn * 1000:6.3f} ms   "
          f"ratio {plain / txn:.2f}x")
    print(f"  the same without the broker's AddPartitionsToTxn + EndTxn    {client * 1000:6.3f} ms   "
          f"ratio {plain / client:.2f}x (a broker answering both in no time)")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--log-requests":
        del sys.argv[1]
        sys.path.insert(0, ROOT)
        os.chdir(ROOT)
        return serve_with_request_log()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=100)
    parser.add_argument("--block", type=int, default=5, help="transactions per turn of each producer")
    args = parser.parse_args()
    run(args.transactions, args.block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
