"""Transactions on the Kafka listener, each figure against its baseline in the same run.

    .venv/bin/python bench/transactions.py [--transactions 60] [--runs 3]

The broker is the real `python -m broker serve` process (fresh data directory);
the client is confluent-kafka in this process, linger.ms=5, batch.size=1 MiB,
acks=all, 1 KiB values to partition 0 of a one-partition topic.

- produce: `--transactions` transactions of 1,000 records each (begin, produce,
  commit) with a transactional producer, against the same records from an
  idempotent producer without transactions that flushes after every 1,000 (the
  same rhythm: commit_transaction flushes too), so the ratio is the cost of
  AddPartitionsToTxn, EndTxn and the markers. Target >= 0.8x.
- fetch: the transactional topic read whole by a consumer with
  isolation.level=read_committed, against read_uncommitted. Target >= 0.9x.

Each producer first writes one warm-up record (outside the clock), so both sides
start connected; each pair runs in alternating order. Best-of-N wall times;
ratios = transactional (or read_committed) msgs/s over the baseline's.
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

from tests.broker_process import BrokerProcess  # noqa: E402

RECORDS_PER_TXN = 1000
VALUE = b"x" * 1024
COMMON = {"linger.ms": 5, "batch.size": 1 << 20, "acks": "all", "compression.type": "none"}


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def produce_plain(bootstrap: str, topic: str, transactions: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **COMMON})
    _produce(producer, topic)  # warm up: connection, metadata, producer id (the txn side's init)
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(transactions):
        for _ in range(RECORDS_PER_TXN):
            _produce(producer, topic)
        producer.flush(60)
    return time.perf_counter() - start


def produce_transactional(bootstrap: str, topic: str, transactions: int, transactional_id: str) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **COMMON})
    producer.init_transactions(30)
    producer.begin_transaction()  # warm up: connection, metadata, as the plain side
    _produce(producer, topic)
    producer.commit_transaction(30)
    start = time.perf_counter()
    for _ in range(transactions):
        producer.begin_transaction()
        for _ in range(RECORDS_PER_TXN):
            _produce(producer, topic)
        producer.commit_transaction(60)
    return time.perf_counter() - start


def _produce(producer, topic: str) -> None:
    while True:
        try:
            producer.produce(topic, VALUE, partition=0)
            return
        except BufferError:
            producer.poll(0.01)


def consume(bootstrap: str, topic: str, count: int, isolation: str) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < count:
        for message in consumer.consume(10000, 1.0):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    count = args.transactions * RECORDS_PER_TXN
    workdir = tempfile.mkdtemp(prefix="strata-bench-txn-")
    broker = BrokerProcess(os.path.join(workdir, "data"))
    try:
        broker.start()
        bootstrap = broker.bootstrap
        plain_times, txn_times, rc_times, ru_times = [], [], [], []
        for run in range(args.runs):
            plain, txn = f"plain{run}", f"txn{run}"
            create_topic(bootstrap, plain)
            create_topic(bootstrap, txn)
            # each pair in alternating order, so neither side always runs first
            order = [0, 1] if run % 2 == 0 else [1, 0]
            for side in order:
                if side == 0:
                    plain_times.append(produce_plain(bootstrap, plain, args.transactions))
                else:
                    txn_times.append(produce_transactional(bootstrap, txn, args.transactions, f"bench-{run}"))
            for side in order:
                isolation = "read_uncommitted" if side == 0 else "read_committed"
                (ru_times if side == 0 else rc_times).append(consume(bootstrap, txn, count, isolation))
        plain_rate, txn_rate = count / min(plain_times), count / min(txn_times)
        ru_rate, rc_rate = count / min(ru_times), count / min(rc_times)
        print(f"records: {count} x 1 KiB, {args.transactions} transactions of {RECORDS_PER_TXN}, best of {args.runs}")
        print(f"produce without transactions  {plain_rate:10.0f} msgs/s")
        print(f"produce with transactions     {txn_rate:10.0f} msgs/s   ratio {txn_rate / plain_rate:.2f}x"
              f" (target >= 0.8x)")
        print(f"fetch read_uncommitted        {ru_rate:10.0f} msgs/s")
        print(f"fetch read_committed          {rc_rate:10.0f} msgs/s   ratio {rc_rate / ru_rate:.2f}x"
              f" (target >= 0.9x)")
    finally:
        broker.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
