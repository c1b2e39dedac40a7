"""The transaction coordinator's own cost per transaction, in process: the real
broker app (data directory, partition service, `__transaction_state`), no client
and no sockets, so the figure is the coordinator's Python work alone.

    .venv/bin/python bench/txn_coordinator.py [--transactions 4000] [--runs 3]

Each transaction: AddPartitionsToTxn's decision (one partition; Ongoing written),
EndTxn's (PrepareCommit written), then the completion (the COMMIT marker,
CompleteCommit), awaited before the next. Prints, per transaction, the loop
thread's CPU time (time.thread_time: not what other processes on the machine take)
and the wall time of the AddPartitionsToTxn and EndTxn decisions, best of --runs.
Compare commits with the same script on each tree.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from broker.app import BrokerApp  # noqa: E402
from broker.config.broker_config import BrokerConfig  # noqa: E402
from broker.kafka.transactions.state import TxnState  # noqa: E402

TRANSACTIONAL_ID = "bench"
WARMUP = 200


async def transactions(coordinator, producer_id: int, epoch: int, count: int) -> tuple[float, float]:
    """(AddPartitionsToTxn seconds, EndTxn seconds) over `count` committed transactions."""
    add = end = 0.0
    partitions = [("bench", 0)]
    clock = time.perf_counter
    for _ in range(count):
        start = clock()
        await coordinator.add_partitions(TRANSACTIONAL_ID, producer_id, epoch, partitions)
        added = clock()
        await coordinator.end_txn(TRANSACTIONAL_ID, producer_id, epoch, True)
        add, end = add + added - start, end + clock() - added
        while coordinator.states[TRANSACTIONAL_ID].state != TxnState.COMPLETE_COMMIT:
            await asyncio.sleep(0)  # the completion: marker, CompleteCommit
    return add, end


async def bench(count: int, runs: int) -> None:
    workdir = tempfile.mkdtemp(prefix="strata-txn-coordinator-")
    config = BrokerConfig.load(data_dir=workdir, environ={})
    app = BrokerApp(config)
    try:
        await app.start()
        assert app.registry is not None and app.kafka is not None
        app.registry.create("bench", 1, [])
        coordinator = app.kafka.transactions
        _, producer_id, epoch = await coordinator.init_producer_id(TRANSACTIONAL_ID, 60_000)
        await transactions(coordinator, producer_id, epoch, WARMUP)
        best = None
        for _ in range(runs):
            gc.collect()
            cpu = time.thread_time()
            add, end = await transactions(coordinator, producer_id, epoch, count)
            sample = ((time.thread_time() - cpu) / count, add / count, end / count)
            best = sample if best is None or sample[0] < best[0] else best
        assert best is not None
        print(f"transaction coordinator, {count} transactions x {runs} runs (best); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"  loop CPU per transaction (both decisions, marker, CompleteCommit) {best[0] * 1e6:7.1f} us")
        print(f"  AddPartitionsToTxn decision                                     {best[1] * 1e6:7.1f} us")
        print(f"  EndTxn decision                                                 {best[2] * 1e6:7.1f} us")
    finally:
        app.request_shutdown()
        await app.run_until_shutdown()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import uvloop

    uvloop.run(bench(args.transactions, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
