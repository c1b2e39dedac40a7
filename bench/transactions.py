"""Transactions on the Kafka listener, each figure against its baseline in the same run.

    .venv/bin/python bench/transactions.py [--transactions 60] [--runs 3] [--block 5] [--no-aiokafka]

The broker is the real `python -m broker serve` process (fresh data directory);
the client is confluent-kafka in this process. Both producers have the same
settings (COMMON: linger.ms=5, batch.size=1 MiB, acks=all, no compression,
idempotence on: a transactional producer is idempotent), 1 KiB values to
partition 0 of a one-partition topic each.

- produce: `--transactions` transactions of 1,000 records each (begin, produce,
  commit) with a transactional producer, against the same records from an
  idempotent producer without transactions that flushes after every 1,000 (the
  same rhythm: commit_transaction flushes too), so the ratio is the cost of
  AddPartitionsToTxn, EndTxn and the markers. Target >= 0.8x.
  Both producers are connected and warmed up (one record; the transactional one
  initialised and one transaction committed) before any clock starts; then they
  take turns, `--block` transactions (or their 1,000-record flushes) at a time,
  the side that goes first alternating, so both see the same load on a shared
  machine. Each pair of turns gives one ratio (baseline time / transactional
  time); the figure is the median of them, the msgs/s figures are over each
  side's total time.
  Below it: what a transaction took over the plain producer's 1,000 records, in
  ms (median of the pairs of turns). bench/txn_timeline.py splits that between the client (librdkafka sends
  AddPartitionsToTxn from a one-shot timer of 1 ms started by the transaction's
  first produce(), and its Produce requests wait for the answer) and the broker.
- cross-check (unless --no-aiokafka): the same comparison with aiokafka's
  producers (an idempotent one flushing every 1,000 records against a
  transactional one), same turns, its own line. aiokafka's flush() waits out
  linger_ms while commit_transaction() closes the open batch at once, so both
  aiokafka producers have linger_ms=0 (neither side waits for a linger);
  otherwise COMMON's settings. aiokafka is pure Python, so its records cost
  more and the same per-transaction cost weighs less in its ratio: the line
  gives the per-transaction cost in ms too, the figure to compare.
- fetch: the transactional topic read whole by a consumer with
  isolation.level=read_committed, against read_uncommitted, in alternating
  order; best-of-N wall times. Target >= 0.9x.

Each of the --runs runs uses fresh topics; the load average is printed with the
figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess  # noqa: E402

RECORDS_PER_TXN = 1000
VALUE = b"x" * 1024
COMMON = {"linger.ms": 5, "batch.size": 1 << 20, "acks": "all", "compression.type": "none"}
AIO_COMMON = {"linger_ms": 0, "max_batch_size": 1 << 20, "acks": "all", "compression_type": None}


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


class PlainSide:
    """An idempotent producer without transactions, flushing after every 1,000 records."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **COMMON})
        _produce(self.producer, topic)  # warm up: connection, metadata, producer id
        self.producer.flush(30)

    def run(self, transactions: int) -> float:
        start = time.perf_counter()
        for _ in range(transactions):
            for _ in range(RECORDS_PER_TXN):
                _produce(self.producer, self.topic)
            self.producer.flush(60)
        return time.perf_counter() - start


class TransactionalSide:
    """A transactional producer: begin, 1,000 records, commit."""

    def __init__(self, bootstrap: str, topic: str, transactional_id: str):
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **COMMON})
        self.producer.init_transactions(30)
        self.producer.begin_transaction()  # warm up: connection, metadata, as the plain side
        _produce(self.producer, topic)
        self.producer.commit_transaction(30)

    def run(self, transactions: int) -> float:
        start = time.perf_counter()
        for _ in range(transactions):
            self.producer.begin_transaction()
            for _ in range(RECORDS_PER_TXN):
                _produce(self.producer, self.topic)
            self.producer.commit_transaction(60)
        return time.perf_counter() - start


class AioSides:
    """aiokafka's idempotent producer (flushing every 1,000 records) and its
    transactional one, on an event loop of their own; `run(side, n)` as the
    confluent-kafka sides' run (side 0: plain, 1: transactional)."""

    def __init__(self, bootstrap: str, plain_topic: str, txn_topic: str, transactional_id: str):
        self.loop = asyncio.new_event_loop()
        self.topics = (plain_topic, txn_topic)
        self.producers: tuple = ()
        self.loop.run_until_complete(self._start(bootstrap, transactional_id))

    async def _start(self, bootstrap: str, transactional_id: str) -> None:
        from aiokafka import AIOKafkaProducer

        self.producers = (AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, **AIO_COMMON),
                          AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                           **AIO_COMMON))
        for producer in self.producers:
            await producer.start()
        await self._plain(1, 1)  # warm up, as the confluent-kafka sides
        await self._transactional(1, 1)

    async def _plain(self, transactions: int, records: int = RECORDS_PER_TXN) -> None:
        producer, topic = self.producers[0], self.topics[0]
        for _ in range(transactions):
            for _ in range(records):
                await producer.send(topic, VALUE, partition=0)
            await producer.flush()

    async def _transactional(self, transactions: int, records: int = RECORDS_PER_TXN) -> None:
        producer, topic = self.producers[1], self.topics[1]
        for _ in range(transactions):
            await producer.begin_transaction()
            for _ in range(records):
                await producer.send(topic, VALUE, partition=0)
            await producer.commit_transaction()

    def run(self, side: int, transactions: int) -> float:
        start = time.perf_counter()
        self.loop.run_until_complete(self._transactional(transactions) if side else self._plain(transactions))
        return time.perf_counter() - start

    def close(self) -> None:
        async def stop() -> None:
            for producer in self.producers:
                await producer.stop()

        self.loop.run_until_complete(stop())
        self.loop.close()


class Turns:
    """The paired turns of one comparison: per side its total seconds, and per pair
    the plain/transactional time ratio and the transactional side's extra time per
    transaction."""

    def __init__(self):
        self.totals = [0.0, 0.0]
        self.ratios: list[float] = []
        self.extra_s: list[float] = []
        self.transactions = 0

    def take(self, run_side, run: int, transactions: int, block: int) -> Turns:
        done, turn = 0, 0
        while done < transactions:
            n = min(block, transactions - done)
            times = [0.0, 0.0]
            for side in ([0, 1] if (run + turn) % 2 == 0 else [1, 0]):
                times[side] = run_side(side, n)
                self.totals[side] += times[side]
            self.ratios.append(times[0] / times[1])
            self.extra_s.append((times[1] - times[0]) / n)
            self.transactions += n
            done += n
            turn += 1
        return self

    def overhead_ms(self) -> float:
        """What a transaction took over the plain producer's 1,000 records, in ms (median of the pairs)."""
        return statistics.median(self.extra_s) * 1000


def produce_paired(bootstrap: str, run: int, transactions: int, block: int, turns: Turns) -> None:
    """confluent-kafka's plain and transactional producers, in paired turns, into `turns`."""
    plain_topic, txn_topic = f"plain{run}", f"txn{run}"
    create_topic(bootstrap, plain_topic)
    create_topic(bootstrap, txn_topic)
    sides = [PlainSide(bootstrap, plain_topic), TransactionalSide(bootstrap, txn_topic, f"bench-{run}")]
    turns.take(lambda side, n: sides[side].run(n), run, transactions, block)


def produce_paired_aiokafka(bootstrap: str, run: int, transactions: int, block: int, turns: Turns) -> None:
    plain_topic, txn_topic = f"aio-plain{run}", f"aio-txn{run}"
    create_topic(bootstrap, plain_topic)
    create_topic(bootstrap, txn_topic)
    sides = AioSides(bootstrap, plain_topic, txn_topic, f"bench-aio-{run}")
    try:
        turns.take(sides.run, run, transactions, block)
    finally:
        sides.close()


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
    parser.add_argument("--block", type=int, default=5, help="transactions per turn of each producer")
    parser.add_argument("--no-aiokafka", action="store_true", help="skip the aiokafka cross-check")
    args = parser.parse_args()
    count = args.transactions * RECORDS_PER_TXN
    workdir = tempfile.mkdtemp(prefix="strata-bench-txn-")
    broker = BrokerProcess(os.path.join(workdir, "data"))
    try:
        broker.start()
        bootstrap = broker.bootstrap
        turns, aio_turns = Turns(), Turns()
        rc_times, ru_times = [], []
        for run in range(args.runs):
            produce_paired(bootstrap, run, args.transactions, args.block, turns)
            if not args.no_aiokafka:
                produce_paired_aiokafka(bootstrap, run, args.transactions, args.block, aio_turns)
            # read_committed and read_uncommitted in alternating order, so neither always runs first
            for side in ([0, 1] if run % 2 == 0 else [1, 0]):
                isolation = "read_uncommitted" if side == 0 else "read_committed"
                (ru_times if side == 0 else rc_times).append(consume(bootstrap, f"txn{run}", count, isolation))
        total = count * args.runs
        plain_rate, txn_rate = total / turns.totals[0], total / turns.totals[1]
        ratios = turns.ratios
        ru_rate, rc_rate = count / min(ru_times), count / min(rc_times)
        print(f"records: {count} x 1 KiB per side per run, {args.transactions} transactions of {RECORDS_PER_TXN}, "
              f"{args.runs} runs, turns of {args.block}; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores")
        print(f"produce without transactions  {plain_rate:10.0f} msgs/s")
        print(f"produce with transactions     {txn_rate:10.0f} msgs/s   ratio {statistics.median(ratios):.2f}x"
              f" (median of {len(ratios)} paired turns; totals {txn_rate / plain_rate:.2f}x; target >= 0.8x)")
        print(f"  per transaction: {turns.overhead_ms():.2f} ms over the plain producer's "
              f"(bench/txn_timeline.py: where it goes)")
        if aio_turns.transactions:
            aio_plain, aio_txn = total / aio_turns.totals[0], total / aio_turns.totals[1]
            print(f"cross-check, aiokafka (linger_ms=0 both sides): without {aio_plain:.0f} msgs/s, with "
                  f"{aio_txn:.0f} msgs/s, ratio {statistics.median(aio_turns.ratios):.2f}x (median of "
                  f"{len(aio_turns.ratios)} paired turns); {aio_turns.overhead_ms():.2f} ms per transaction "
                  f"over the plain producer's")
        print(f"fetch read_uncommitted        {ru_rate:10.0f} msgs/s")
        print(f"fetch read_committed          {rc_rate:10.0f} msgs/s   ratio {rc_rate / ru_rate:.2f}x"
              f" (best of {args.runs}; target >= 0.9x)")
    finally:
        broker.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
