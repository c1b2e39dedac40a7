"""Share groups as a work queue: four share consumers on one partition against one, and
the broker's CPU per acknowledged record against a classic consumer's fetch and commit.

    .venv/bin/python bench/share_groups.py [--records 2000] [--work-ms 2] [--cpu-records 20000]

The broker is the real `python -m broker serve` process (fresh data directory); the
clients are confluent-kafka's (librdkafka): `ShareConsumer` (implicit acknowledgement:
a poll accepts the records of the previous one) and, for the CPU comparison, a classic
`Consumer` committing synchronously after each batch it polled.

1. Throughput: `--records` records on a one-partition topic; one share consumer, then
   four (threads, one client each, one group each run), each spending `--work-ms` per
   record (a sleep: the work of a queue's consumer, which does not hold the GIL), with
   max.poll.records=10 (a consumer acquires only what it works on next).
   Printed: records per second of each and their ratio (four over one).
2. CPU: `--cpu-records` records on a second one-partition topic (the producer's default
   batching), read by both sides with the same batch size, 500 records (Kafka's default
   max.poll.records, the share consumer's too), and no work:
   - share: one share consumer polls (max.poll.records=500) until it got every record;
     each poll acknowledges (ACCEPT) the records of the previous one, and closing it
     acknowledges the last ones (ShareFetch with acknowledgements, then the final
     ShareAcknowledge; the broker writes each request's acknowledgements to
     `__share_group_state` before answering).
   - classic: one consumer (enable.auto.commit=false) takes up to 500 records per
     consume() and commits them synchronously (OffsetCommit) after each batch.
   The broker's CPU time (/proc/<pid>/task/*/schedstat, all threads) over each run,
   joining and leaving included, divided by the records. Printed: both per record and
   the ratio (share over classic).

Deadlines are guards against hangs; the figures are for comparing runs on one machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.broker_process import BrokerProcess  # noqa: E402

GUARD = 300.0
MAX_POLL_RECORDS = 10  # the throughput part: a consumer acquires only what it works on next
CPU_BATCH = 500  # the CPU part, both sides: Kafka's default max.poll.records


def cpu_seconds(pid: int) -> float:
    """The CPU time of every thread of the process (/proc/PID/task/*/schedstat, in ns);
    threads that ended are in utime + stime (/proc/PID/stat, clock ticks) only, so the
    larger of the two."""
    running = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                running += int(f.read().split()[0])
        except FileNotFoundError:
            continue
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return max(running / 1e9, ticks)


def make_topic(bootstrap: str, name: str, records: int, one_per_batch: bool = True) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1)])[name].result(60)
    # One record per batch (the throughput part): share consumers acquire whole batches
    # (batch-optimized acquisition, as Kafka's), so a batch is the unit of work handed out.
    settings = {"bootstrap.servers": bootstrap}
    if one_per_batch:
        settings.update({"linger.ms": 0, "batch.num.messages": 1})
    producer = Producer(settings)
    for i in range(records):
        producer.produce(name, b"r%d" % i)
    producer.flush(60)


def earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(60)


def share_run(bootstrap: str, topic: str, group: str, consumers: int, records: int, work_s: float,
              max_poll_records: int = MAX_POLL_RECORDS) -> float:
    """Seconds until `consumers` share consumers processed `records` records."""
    from confluent_kafka import ShareConsumer

    earliest(bootstrap, group)
    done: set[bytes] = set()
    lock = threading.Lock()
    start = [0.0]
    deadline = time.monotonic() + GUARD

    def work() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_poll_records,
                           "log_level": 3})
        c.subscribe([topic])
        try:
            while len(done) < records and time.monotonic() < deadline:
                for m in c.poll(0.2):
                    if m.error() is not None:
                        continue
                    with lock:
                        if not start[0]:
                            start[0] = time.monotonic()
                    if work_s:
                        time.sleep(work_s)
                    with lock:
                        done.add(m.value())
        finally:
            c.close()

    threads = [threading.Thread(target=work) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(done) < records:
        raise SystemExit(f"{consumers} share consumer(s) processed {len(done)} of {records} records")
    return time.monotonic() - start[0]


def classic_run(bootstrap: str, topic: str, group: str, records: int) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + GUARD
    try:
        while got < records and time.monotonic() < deadline:
            batch = [m for m in c.consume(CPU_BATCH, 0.2) if m.error() is None]
            if batch:
                got += len(batch)
                c.commit(asynchronous=False)
    finally:
        c.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--work-ms", type=float, default=2.0)
    parser.add_argument("--cpu-records", type=int, default=20000,
                        help="records of the CPU comparison (enough that joining and leaving do not dominate)")
    parser.add_argument("--part", choices=("all", "throughput", "cpu"), default="all", help="which part to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        broker = BrokerProcess(Path(data) / "data").start()
        try:
            bootstrap = broker.bootstrap
            if args.part in ("all", "throughput"):
                make_topic(bootstrap, "queue", args.records)
                one = share_run(bootstrap, "queue", "one", 1, args.records, args.work_ms / 1000)
                four = share_run(bootstrap, "queue", "four", 4, args.records, args.work_ms / 1000)
                print(f"throughput, {args.records} records, {args.work_ms} ms of work each: "
                      f"1 share consumer {args.records / one:.0f}/s, 4 on one partition {args.records / four:.0f}/s, "
                      f"ratio {one / four:.2f}")
            if args.part == "throughput":
                return 0
            make_topic(bootstrap, "cpu", args.cpu_records, one_per_batch=False)
            pid = broker.proc.pid
            before = cpu_seconds(pid)
            share_run(bootstrap, "cpu", "cpu-share", 1, args.cpu_records, 0, CPU_BATCH)
            share_cpu = (cpu_seconds(pid) - before) / args.cpu_records
            before = cpu_seconds(pid)
            classic_run(bootstrap, "cpu", "cpu-classic", args.cpu_records)
            classic_cpu = (cpu_seconds(pid) - before) / args.cpu_records
            print(f"broker CPU per record, {args.cpu_records} records, {CPU_BATCH} per poll: share (acquire + "
                  f"acknowledge) {share_cpu * 1e6:.1f} us, classic "
                  f"(fetch + commit) {classic_cpu * 1e6:.1f} us, ratio {share_cpu / classic_cpu:.2f}")
        finally:
            broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
