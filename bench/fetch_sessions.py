"""Fetch sessions (KIP-227): a consumer of many partitions, with sessions against without.

    .venv/bin/python bench/fetch_sessions.py [--partitions 2000] [--seconds 20] [--warmup 20] [--rounds 1]

The broker is the real `python -m broker serve` process on 127.0.0.1 (fresh data
directory, one topic of --partitions partitions). A producer (confluent-kafka, in
this process) writes one 16-byte message per partition per second, round-robin
over the partitions in ticks of 50 ms. The consumer is a plain Fetch v11 loop in
its own process (hand-encoded over a socket, max_wait 500 ms, min_bytes 1, every
partition from its log end (the high watermarks of a first fetch), as a
consumer with auto.offset.reset=latest: the phases measure the steady state,
not a catch-up of the backlog), the way Kafka's Java client uses sessions: "sessions"
opens one with a full fetch and then sends only the partitions whose position
moved; "full" sends sessionless fetches (epoch -1) naming every partition, each
answered with every partition. The same client code on both sides, so the fetch
rate follows the data in both (librdkafka sends no sessions; kafka-python's
Python is slower than the broker at 2,000 partitions and would set the pace).
Each round measures, in this order and in the same run: the producer alone
("base"), the consumer with sessions, the consumer without; each phase starts
after --warmup seconds and lasts --seconds.

- broker CPU: utime + stime of the broker process (all threads, /proc/<pid>/stat)
  per second of the phase; "fetch CPU" subtracts the base phase's (the producer's
  share, the same in every phase).
- bytes on the wire: what the consumer process's TCP sockets sent and received
  per second (the kernel's bytes_sent + bytes_received, `ss -tinp`): both
  directions of its broker connections.
- records: the records the consumer received per second (should be --partitions).
- consumer CPU: the consumer process's own CPU per second; near 1 s/s, the
  client sets the pace of its fetches (and so of the broker's work for it).
- the load average at the start and the end: the machine's other work slows
  the broker and the clients alike, and with them the sessionless consumer's
  fetch rate, which sets the "full" figures.

Target: with sessions <= 0.2x of without, for CPU (fetch CPU) and bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess  # noqa: E402

TOPIC = "fetch-sessions-bench"
TICK = 0.05
VALUE = b"x" * 16
FETCH = 1
PART = struct.Struct(">iiqqi")  # partition, current leader epoch, fetch offset, log start offset, max bytes


def _cpu_seconds():
    spec = importlib.util.spec_from_file_location("bench_broker", os.path.join(ROOT, "bench", "broker.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.cpu_seconds


cpu_seconds = _cpu_seconds()


def io_bytes(pid: int) -> int:
    """Bytes sent and received over the TCP sockets of process `pid` (the kernel's
    tcp_info counters, from `ss -tinp`)."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
    total = 0
    mine = False
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            mine = f"pid={pid}," in line
            continue
        if mine:
            for field in line.split():
                if field.startswith(("bytes_sent:", "bytes_received:")):
                    total += int(field.partition(":")[2])
    return total


class Producer(threading.Thread):
    """One message per partition per second, round-robin, in ticks of TICK seconds."""

    def __init__(self, bootstrap: str, partitions: int):
        super().__init__(daemon=True)
        from confluent_kafka import Producer as Client

        self.client = Client({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
        self.partitions = partitions
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        per_tick = max(1, int(self.partitions * TICK))
        next_partition = 0
        next_tick = time.monotonic()
        while not self.stopping.is_set():
            for _ in range(per_tick):
                self.client.produce(TOPIC, VALUE, partition=next_partition)
                next_partition = (next_partition + 1) % self.partitions
            self.sent += per_tick
            self.client.poll(0)
            next_tick += TICK
            time.sleep(max(0.0, next_tick - time.monotonic()))
        self.client.flush(30)


def fetch_request(correlation_id: int, parts, *, session_id: int, epoch: int, max_wait: int = 500,
                  partition_max_bytes: int = 1 << 20) -> bytes:
    """A Fetch v11 frame (hand-encoded: kio's Python encoding of 2,000 partitions
    would make the client set the pace) of `parts` [(partition, offset)],
    min_bytes 1."""
    client_id = b"bench"
    out = [struct.pack(">hhih", FETCH, 11, correlation_id, len(client_id)), client_id,
           struct.pack(">iiiibii", -1, max_wait, 1, 50 << 20, 0, session_id, epoch)]
    if parts:
        name = TOPIC.encode()
        out.append(struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", len(parts)))
        out.extend(PART.pack(p, -1, o, -1, partition_max_bytes) for p, o in parts)
    else:
        out.append(struct.pack(">i", 0))
    out.append(struct.pack(">ih", 0, 0))  # no forgotten topics, rack ""
    body = b"".join(out)
    return struct.pack(">i", len(body)) + body


def log_ends(sock: socket.socket, stream, partitions: int) -> dict[int, int]:
    """The log end offset of every partition: the high watermarks of a sessionless
    Fetch that asks for no bytes and does not wait."""
    frame = fetch_request(0, [(p, 0) for p in range(partitions)], session_id=0, epoch=-1, max_wait=0,
                          partition_max_bytes=0)
    sock.sendall(frame)
    (size,) = struct.unpack(">i", stream.read(4))
    error, _, answered = parse_fetch_response(stream.read(size))
    if error:
        raise RuntimeError(f"Fetch error {error}")
    return {partition: high_watermark for partition, high_watermark, _ in answered}


def parse_fetch_response(frame: bytes) -> tuple[int, int, list[tuple[int, int, bytes]]]:
    """(error, session id, [(partition, high watermark, records)]) of a Fetch v11
    response frame (size stripped)."""
    error, session_id, topics = struct.unpack_from(">hii", frame, 8)  # after correlation id, throttle
    pos = 18
    parts = []
    for _ in range(topics):
        (name_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + name_len
        (count,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(count):
            partition, _, high_watermark = struct.unpack_from(">ihq", frame, pos)
            pos += 4 + 2 + 8 + 8 + 8
            (aborted,) = struct.unpack_from(">i", frame, pos)
            pos += 4 + max(aborted, 0) * 16 + 4  # aborted transactions, preferred read replica
            (size,) = struct.unpack_from(">i", frame, pos)
            pos += 4
            parts.append((partition, high_watermark, frame[pos:pos + max(size, 0)]))
            pos += max(size, 0)
    return error, session_id, parts


def next_offset(records: bytes) -> tuple[int, int]:
    """(records, the offset after the last) of a partition's record batches."""
    count, pos, after = 0, 0, -1
    while pos + 27 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        if pos + 12 + length > len(records):
            break
        count += last_delta + 1
        after = base + last_delta + 1
        pos += 12 + length
    return count, after


def consumer_main(bootstrap: str, partitions: int, sessions: bool) -> None:
    """The consumer process: a Fetch v11 loop over every partition from its log end,
    as a session client (only moved partitions in incremental fetches) or
    sessionless (every partition in every fetch, epoch -1). Prints the running
    record and fetch counts once a second."""
    host, _, port = bootstrap.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    stream = sock.makefile("rb")
    offsets = log_ends(sock, stream, partitions)
    session_id, epoch = 0, 0 if sessions else -1
    moved = set(offsets)
    got = fetches = 0
    last = time.monotonic()
    while True:
        parts = [(p, offsets[p]) for p in moved] if session_id else list(offsets.items())
        fetches += 1
        sock.sendall(fetch_request(fetches, parts, session_id=session_id, epoch=epoch))
        (size,) = struct.unpack(">i", stream.read(4))
        error, answered_session, answered = parse_fetch_response(stream.read(size))
        if error:  # the session is gone: start over
            session_id, epoch = 0, 0
            continue
        if sessions:
            session_id = answered_session
            epoch = epoch + 1 if session_id else 0
        moved = set()
        for partition, _, records in answered:
            count, after = next_offset(records)
            if count:
                got += count
                offsets[partition] = after
                moved.add(partition)
        if time.monotonic() - last >= 1:
            last = time.monotonic()
            print(got, fetches, flush=True)


def phase(broker_pid: int, seconds: float, consumer: subprocess.Popen | None) -> dict:
    cpu0, wall0 = cpu_seconds(broker_pid), time.monotonic()
    io0 = io_bytes(consumer.pid) if consumer is not None else 0
    client0 = cpu_seconds(consumer.pid) if consumer is not None else 0.0
    time.sleep(seconds)
    wall = time.monotonic() - wall0
    return {"cpu": (cpu_seconds(broker_pid) - cpu0) / wall,
            "bytes": (io_bytes(consumer.pid) - io0) / wall if consumer is not None else 0.0,
            "client": (cpu_seconds(consumer.pid) - client0) / wall if consumer is not None else 0.0}


def run_consumer(args, bootstrap: str, broker_pid: int, sessions: bool) -> dict:
    consumer = subprocess.Popen([sys.executable, __file__, "--consumer", bootstrap, str(args.partitions),
                                 "1" if sessions else "0"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        time.sleep(args.warmup)
        first = _last_count(consumer)
        fetches = getattr(consumer, "last_fetches", 0)
        result = phase(broker_pid, args.seconds, consumer)
        result["records"] = (_last_count(consumer) - first) / args.seconds
        result["fetches"] = (getattr(consumer, "last_fetches", 0) - fetches) / args.seconds
        return result
    finally:
        consumer.terminate()
        consumer.wait(10)


def _last_count(consumer: subprocess.Popen) -> int:
    """The consumer's latest printed count (its stdout is read without blocking)."""
    import fcntl

    fd = consumer.stdout.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    try:
        data = os.read(fd, 1 << 20).decode()
    except BlockingIOError:
        data = ""
    lines = [line for line in data.splitlines() if line.strip()]
    if lines:
        count, fetches = lines[-1].split()
        consumer.last_count, consumer.last_fetches = int(count), int(fetches)  # type: ignore[attr-defined]
    return getattr(consumer, "last_count", 0)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--consumer":
        consumer_main(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="strata-fetch-sessions-")
    broker = BrokerProcess(os.path.join(work, "data"), "--set", "log.initial.task.delay.ms=0")
    producer = None
    try:
        broker.start()
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)], operation_timeout=120)[TOPIC].result(180)
        producer = Producer(broker.bootstrap, args.partitions)
        producer.start()
        time.sleep(2)
        print(f"{args.partitions} partitions, {args.partitions} msg/s; phases of {args.seconds:g} s "
              f"after {args.warmup:g} s warm-up; load average {os.getloadavg()[0]:.2f}")
        totals: dict[str, list[dict]] = {"base": [], "sessions": [], "full": []}
        for _ in range(args.rounds):
            totals["base"].append(phase(broker.pid, args.seconds, None))
            totals["sessions"].append(run_consumer(args, broker.bootstrap, broker.pid, True))
            totals["full"].append(run_consumer(args, broker.bootstrap, broker.pid, False))
        mean = {k: {f: sum(r[f] for r in v) / len(v) for f in v[0]} for k, v in totals.items()}
        base = mean["base"]["cpu"]
        for name in ("base", "sessions", "full"):
            m = mean[name]
            line = f"{name:9} broker CPU {m['cpu']:.3f} s/s"
            if name != "base":
                line += (f", fetch CPU {m['cpu'] - base:.3f} s/s, wire {m['bytes'] / 1e3:.1f} kB/s, "
                         f"records {m['records']:.0f}/s, fetches {m['fetches']:.1f}/s "
                         f"({(m['cpu'] - base) / max(m['fetches'], 1e-9) * 1e3:.2f} ms CPU, "
                         f"{m['bytes'] / max(m['fetches'], 1e-9) / 1e3:.1f} kB each); "
                         f"consumer CPU {m['client']:.3f} s/s")
            print(line)
        s, f = mean["sessions"], mean["full"]
        print(f"sessions/full: broker CPU {s['cpu'] / f['cpu']:.3f}x, "
              f"fetch CPU {(s['cpu'] - base) / max(f['cpu'] - base, 1e-9):.3f}x, "
              f"wire bytes {s['bytes'] / f['bytes']:.3f}x (target <= 0.2x); "
              f"load average {os.getloadavg()[0]:.2f}")
    finally:
        if producer is not None:
            producer.stopping.set()
            producer.join(30)
        broker.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
