"""File descriptors under many segments: 2,000 partitions of 10 segments each under a
4,096-descriptor limit.

    .venv/bin/python bench/descriptors.py [--partitions 2000] [--segments 10]
                                          [--limit 4096] [--dir DIR]

The real broker (`python -m broker serve`, via tests/broker_process.py) runs with
RLIMIT_NOFILE soft = hard = --limit, so its open-file budget (log.max.open.files =
0) is half of it, while the topic has partitions x segments x 3 segment and index
files (60,000 by default). Steps:

1. create the topic (segment.bytes below two records: every record rolls a segment)
   and produce `segments` rounds of one ~600 B record to every partition;
2. stop the broker cleanly and start it again: the restart time is from the
   process start to its listening line (loading every log, sanity-checking every
   index);
3. to every partition in turn, on one native-protocol connection: one PRODUCE of one
   record and one FETCH from offset 0 (the oldest segment: its files were closed
   and reopen), each timed from sending the request to the whole answer.

Printed: the most descriptors the process held (sampled from /proc/<pid>/fd every
20 ms through all steps), how many of them were segment and index files, the
restart time, and the mean / p99 latency of the produce and the fetch of step 3.
Kafka keeps every segment's files open: 60,000 descriptors for this data.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from client import Admin, Producer  # noqa: E402
from kafka_format import build_batch, iter_records  # noqa: E402
from protocol import ErrorCode, FetchRequest, ProduceRequest, encode_request, parse_response  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

TOPIC = "descriptors"
VALUE_BYTES = 600
DATA_SUFFIXES = (".log", ".index", ".timeindex")


class FdSampler:
    """The most descriptors (all, and data files) a process held, sampled in a thread."""

    def __init__(self, data_dir: str):
        self.data_dir = os.path.realpath(data_dir)
        self.pid: int | None = None
        self.peak = 0
        self.peak_data = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling; a no-op once stopped or if never started."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            pid = self.pid
            if pid is None:
                continue
            fd_dir = f"/proc/{pid}/fd"
            try:
                names = os.listdir(fd_dir)
            except OSError:
                continue
            data = 0
            for name in names:
                try:
                    target = os.readlink(os.path.join(fd_dir, name))
                except OSError:
                    continue
                if target.startswith(self.data_dir) and target.endswith(DATA_SUFFIXES):
                    data += 1
            self.peak = max(self.peak, len(names))
            self.peak_data = max(self.peak_data, data)


def value(partition: int, n: int) -> bytes:
    return b"%d-%d-" % (partition, n) + b"v" * VALUE_BYTES


def fill(address: str, partitions: int, segments: int) -> None:
    with Admin(address) as admin:
        admin.create_topic(TOPIC, partitions=partitions,
                           configs={"segment.bytes": "1024", "index.interval.bytes": "100"})
    with Producer(address, linger_ms=5) as producer:
        for n in range(segments):
            for p in range(partitions):
                producer.send(TOPIC, value(p, n), partition=p)
            producer.flush()


class Connection:
    """One blocking native-protocol connection: a request, then its whole answer."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, request):
        self.sock.sendall(encode_request(request))
        head = self._read(4)
        body = self._read(int.from_bytes(head, "big"))
        response = parse_response(request.TYPE, body)
        if response.error != ErrorCode.NONE:
            raise SystemExit(f"{type(request).__name__} {request.topic}-{request.partition} "
                             f"answered {response.error!r}")
        return response

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def produce_and_fetch_in_turn(host: str, port: int, partitions: int) -> tuple[list[float], list[float]]:
    """One PRODUCE of one record and one FETCH from offset 0 (the oldest segment's first
    entries, 4 KiB at most) per partition, partition after partition, each timed."""
    produce_s, fetch_s = [], []
    conn = Connection(host, port)
    try:
        for p in range(partitions):
            frame = build_batch([(None, value(p, -1), int(time.time() * 1000))])
            t0 = time.perf_counter()
            conn.call(ProduceRequest(TOPIC, p, frame))
            t1 = time.perf_counter()
            fetched = conn.call(FetchRequest(TOPIC, p, 0, 4096))
            t2 = time.perf_counter()
            first = next(iter_records(bytes(fetched.message_set)), None)
            if first is None or first.offset != 0 or first.value != value(p, 0):
                raise SystemExit(f"partition {p}: fetch from offset 0 read {first!r}")
            produce_s.append(t1 - t0)
            fetch_s.append(t2 - t1)
    finally:
        conn.close()
    return produce_s, fetch_s


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"mean {statistics.fmean(values) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--limit", type=int, default=4096)
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="strata-bench-fds-", dir=args.dir)
    data_dir = os.path.join(work, "data")
    os.makedirs(work, exist_ok=True)
    sampler = FdSampler(data_dir)
    process = BrokerProcess(data_dir, open_files_limit=(args.limit, args.limit))
    try:
        sampler.start()
        process.start()
        sampler.pid = process.pid
        address = f"{process.host}:{process.port}"
        t0 = time.perf_counter()
        fill(address, args.partitions, args.segments)
        fill_s = time.perf_counter() - t0
        files = sum(1 for _r, _d, names in os.walk(data_dir) for n in names if n.endswith(DATA_SUFFIXES))
        process.stop()
        t0 = time.perf_counter()
        process.start()
        restart_s = time.perf_counter() - t0
        sampler.pid = process.pid
        produce_s, fetch_s = produce_and_fetch_in_turn(process.host, process.port, args.partitions)
        time.sleep(0.1)
        sampler.stop()
        process.stop()
        budget = [e for e in process.log_events() if e.get("event") == "open_files_limit"][-1]
        print(f"data: {args.partitions} partitions x {args.segments} segments = {files} segment and "
              f"index files (filled in {fill_s:.1f} s)")
        print(f"descriptor limit {args.limit} (soft = hard); budget log.max.open.files = "
              f"{budget['max_open_files']}")
        print(f"peak descriptors: {sampler.peak} (segment and index files: {sampler.peak_data})")
        print(f"restart after a clean stop: {restart_s:.2f} s")
        print(f"to every partition in turn: produce {ms(produce_s)}; fetch from offset 0 {ms(fetch_s)}")
    finally:
        sampler.stop()
        process.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
