"""Broker CPU per request (one-record PRODUCE or a small FETCH, native or Kafka), and
(--profile) the Python calls behind it.

    .venv/bin/python bench/request_cpu.py [--requests 20000] [--request KIND] [--tree DIR]
                                          [--records 1] [--value-bytes 100] [--fetch-bytes 1024]
                                          [--warmup 2000]
                                          [--profile | --instructions | --side-by-side REV]

The broker is the real `python -m broker serve` process (fresh data directory);
one connection sends the same request over and over, one in flight, after a
warm-up of --warmup native PRODUCE requests of the batch below (which also fill
the log the FETCH requests read). The batch is --records records (key "key",
a --value-bytes value; one record of 100 B is the frame bench/broker.py's
latency part sends). --request chooses the request:

- produce: a native PRODUCE of the batch (the default);
- fetch: a native FETCH from offset 0 with maxBytes --fetch-bytes;
- kafka-produce: the batch as a Kafka Produce v9 (acks=1) on the Kafka listener;
- kafka-fetch: a Kafka Fetch v12 (no session, max_wait 0) of partition 0 from
  offset 0 with partition_max_bytes and max_bytes --fetch-bytes.

--tree DIR runs the broker of another checkout (its tests/broker_process.py,
its packages and its C accelerators built in place, this venv's interpreter)
while this script's client drives it: for --instructions and plain runs on two
trees with the same client.
Printed: the broker's CPU seconds (utime + stime of all its threads, from
/proc) per request, and wall time per round trip. There is no baseline: the
figure is for comparing two trees, run in turns (bench/against.py runs this
script on an earlier commit only where that commit has it).

--profile runs the broker under cProfile and lists the functions called about
once or more per request (calls per request, own time per request), which is
where per-request work added to the hot path shows up (the broker's start-up
calls count too, mostly builtins; more requests dilute them).

--instructions runs the broker under valgrind's callgrind, counting only while
the measured requests run (callgrind_control switches it on and off), and
prints the machine instructions the broker executes per request: a figure that
other work on the machine does not move, for comparing two trees on a busy
machine (run it with --requests 1000 or so: callgrind is about 50 times slower).

--side-by-side REV runs this tree's broker and REV's (exported and built as
bench/against.py does) at the same time, and sends the requests in batches of
1,000 to one then the other, alternating which goes first; each broker's CPU
(the run time /proc/PID/task/*/schedstat gives, in ns) is summed over its own
batches, so both see the same moments of a machine whose speed others' work
moves. Printed: both brokers' CPU per request and their ratio (this tree over REV).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import tests.broker_process as broker_process  # noqa: E402
from kafka_format import build_batch  # noqa: E402
from protocol import CreateTopicRequest, FetchRequest, FrameDecoder, ProduceRequest, encode_request  # noqa: E402

REQUESTS = ("produce", "fetch", "kafka-produce", "kafka-fetch")

WARMUP = 2_000
BATCH = 1_000  # requests per turn in --side-by-side


def _bench_broker():
    """bench/broker.py's client helpers; its file name would shadow the `broker` package."""
    return _load("bench_broker", os.path.join(ROOT, "bench", "broker.py"))


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def request_frame(kind: str, batch: bytes, fetch_bytes: int) -> bytes:
    """The frame one request of KIND sends (see the module doc)."""
    if kind == "produce":
        return encode_request(ProduceRequest("request-cpu", 0, batch))
    if kind == "fetch":
        return encode_request(FetchRequest("request-cpu", 0, 0, fetch_bytes, 0))
    from kio.index import load_request_schema

    from broker.kafka.codec import make, nested
    from tests.kafka.wire import encode
    if kind == "kafka-produce":
        cls = load_request_schema(0, 9)
        topic, part = nested(cls, "topic_data"), nested(nested(cls, "topic_data"), "partition_data")
        return encode(make(cls, transactional_id=None, acks=1, timeout=5000,
                           topic_data=(make(topic, name="request-cpu", partition_data=(
                               make(part, index=0, records=batch),)),)), 1)
    cls = load_request_schema(1, 12)
    topic, part = nested(cls, "topics"), nested(nested(cls, "topics"), "partitions")
    return encode(make(cls, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=fetch_bytes, isolation_level=0,
                       session_id=0, session_epoch=-1,
                       topics=(make(topic, topic="request-cpu", partitions=(
                           make(part, partition=0, fetch_offset=0, partition_max_bytes=fetch_bytes),)),),
                       forgotten_topics_data=(), rack_id=""), 1)


async def any_round_trips(sock, frame: bytes, count: int) -> None:
    """`count` requests of FRAME one at a time, each answer read whole (not parsed)."""
    loop = asyncio.get_running_loop()
    decoder = FrameDecoder()
    for _ in range(count):
        await loop.sock_sendall(sock, frame)
        while decoder.next_frame() is None:
            data = await loop.sock_recv(sock, 65536)
            if not data:
                raise ConnectionError("connection closed during an answer")
            decoder.feed(data)


async def prepare(bench, broker, kind: str, warmup_frame: bytes, frame: bytes, warmup: int = WARMUP):
    """Create the topic, warm up with native PRODUCEs, open the measured connection."""
    await bench.admin(broker.port, CreateTopicRequest("request-cpu", 1))
    sock = await bench.connect(broker.port)
    await bench.round_trips(sock, FrameDecoder(), warmup_frame, warmup, None)
    if kind.startswith("kafka"):
        sock.close()
        sock = await bench.connect(broker.kafka_port)
    await any_round_trips(sock, frame, 100)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, frame)
    decoder = FrameDecoder()
    while (answer := decoder.next_frame()) is None:
        decoder.feed(await loop.sock_recv(sock, 65536))
    check_answer(kind, bytes(answer))
    return sock


def check_answer(kind: str, answer: bytes) -> None:
    """Raise unless ANSWER is a successful answer to a request of KIND (with records for a fetch)."""
    if not kind.startswith("kafka"):
        from protocol import ErrorCode, FetchResponse, RequestType, parse_response
        response = parse_response(RequestType.PRODUCE if kind == "produce" else RequestType.FETCH, answer)
        ok = response.error == ErrorCode.NONE and (
            kind == "produce" or (isinstance(response, FetchResponse) and len(response.message_set) > 0))
    else:
        from kio.index import load_response_schema

        from tests.kafka.wire import decode
        if kind == "kafka-produce":
            _, response = decode(load_response_schema(0, 9), answer)
            ok = response.responses[0].partition_responses[0].error_code.value == 0
        else:
            _, response = decode(load_response_schema(1, 12), answer)
            partition = response.responses[0].partitions[0]
            ok = partition.error_code.value == 0 and bool(partition.records)
    if not ok:
        raise RuntimeError(f"{kind}: the broker's answer is not a success: {answer[:200]!r}")


def run_time_ns(pid: int) -> int:
    """CPU time of all of a process's threads so far, in ns (/proc/PID/task/*/schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        # A thread that just ended has no file any more.
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def side_by_side(rev: str, requests: int, kind: str, warmup_frame: bytes, frame: bytes, work: str) -> int:
    """This tree's broker and REV's, the requests sent to both in alternating batches."""
    bench = _bench_broker()
    against = _load("bench_against", os.path.join(ROOT, "bench", "against.py"))
    other_root = against.export_tree(rev, os.path.join(work, "tree"))
    other_process = _load("other_broker_process", os.path.join(other_root, "tests", "broker_process.py"))
    brokers = {"this tree": broker_process.BrokerProcess(os.path.join(work, "this")).start(),
               rev: other_process.BrokerProcess(os.path.join(work, "other")).start()}
    try:
        async def run() -> dict[str, int]:
            socks = {name: await prepare(bench, broker, kind, warmup_frame, frame)
                     for name, broker in brokers.items()}
            spent = dict.fromkeys(brokers, 0)
            names = list(brokers)
            for turn in range(max(1, requests // BATCH)):
                for name in names if turn % 2 == 0 else reversed(names):
                    before = run_time_ns(brokers[name].pid)
                    await any_round_trips(socks[name], frame, BATCH)
                    spent[name] += run_time_ns(brokers[name].pid) - before
            return spent

        spent = asyncio.run(run())
    finally:
        for broker in brokers.values():
            broker.stop()
    sent = max(1, requests // BATCH) * BATCH
    this, other = spent["this tree"] / sent / 1000, spent[rev] / sent / 1000
    print(f"{kind}, side by side ({sent} requests each, load {os.getloadavg()[0]:.1f}): broker CPU "
          f"{this:6.1f} us per request, {rev} {other:6.1f} us: ratio {this / other:.3f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--profile", action="store_true", help="run the broker under cProfile")
    parser.add_argument("--instructions", action="store_true",
                        help="run the broker under callgrind: instructions per request")
    parser.add_argument("--side-by-side", metavar="REV", help="run REV's broker alongside, in alternating batches")
    parser.add_argument("--request", choices=REQUESTS, default="produce", help="the request measured")
    parser.add_argument("--tree", metavar="DIR", help="run the broker of the checkout in DIR")
    parser.add_argument("--records", type=int, default=1, help="records in the produced batch (default 1)")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes of each record's value (default 100)")
    parser.add_argument("--fetch-bytes", type=int, default=1024, help="a FETCH's maxBytes (default 1024)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="native PRODUCEs before the measured requests")
    args = parser.parse_args()
    bench = _bench_broker()
    work = tempfile.mkdtemp(prefix="strata-request-cpu-")
    profile_out = os.path.join(work, "broker.prof")
    callgrind_out = os.path.join(work, "callgrind.out")
    process = broker_process
    if args.tree:
        process = _load("tree_broker_process", os.path.join(os.path.abspath(args.tree), "tests", "broker_process.py"))
    plain = process.serve_command
    if args.profile:
        process.serve_command = lambda *a: [sys.executable, "-m", "cProfile", "-o", profile_out, *plain(*a)[1:]]
    elif args.instructions:
        process.serve_command = lambda *a: ["valgrind", "--tool=callgrind", "--instr-atstart=no", "-q",
                                            f"--callgrind-out-file={callgrind_out}", *plain(*a)]
    now_ms = int(time.time() * 1000)
    batch = build_batch([(b"key", b"v" * args.value_bytes, now_ms)] * args.records)
    warmup_frame = request_frame("produce", batch, args.fetch_bytes)
    frame = request_frame(args.request, batch, args.fetch_bytes)
    if args.side_by_side:
        try:
            return side_by_side(args.side_by_side, args.requests, args.request, warmup_frame, frame, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    broker = process.BrokerProcess(os.path.join(work, "data")).start(timeout=600)
    try:
        async def run() -> tuple[float, float]:
            sock = await prepare(bench, broker, args.request, warmup_frame, frame, args.warmup)
            if args.instructions:
                subprocess.run(["callgrind_control", "-i", "on", str(broker.pid)], check=True, capture_output=True)
            cpu_before, started = bench.cpu_seconds(broker.pid), time.perf_counter()
            await any_round_trips(sock, frame, args.requests)
            if args.instructions:
                subprocess.run(["callgrind_control", "-i", "off", str(broker.pid)], check=True, capture_output=True)
            return bench.cpu_seconds(broker.pid) - cpu_before, time.perf_counter() - started

        cpu, wall = asyncio.run(run())
    finally:
        broker.stop()
    if args.instructions:
        with open(callgrind_out) as counts:
            total = next(int(line.split()[1]) for line in counts if line.startswith("totals:"))
        print(f"{args.request}: broker {total / args.requests:,.0f} instructions per request "
              f"(callgrind, {args.requests} requests)")
        shutil.rmtree(work, ignore_errors=True)
        return 0
    per = 1e6 / args.requests
    print(f"{args.request}: broker CPU {cpu * per:6.1f} us per request, wall {wall * per:6.1f} us "
          f"per round trip ({args.requests} requests, load {os.getloadavg()[0]:.1f})")
    if args.profile:
        total = args.requests + WARMUP
        stats = pstats.Stats(profile_out).stats  # type: ignore[attr-defined]
        rows = sorted(((v[1] / total, v[2] / total * 1e6, k) for k, v in stats.items() if v[1] >= total * 0.9),
                      key=lambda row: (-row[0], -row[1]))
        python_calls = sum(calls for calls, _, (path, _, _) in rows if path != "~")
        print(f"Python functions called per request: {python_calls:.1f}")
        for calls, own_us, (path, line, name) in rows:
            where = name if path == "~" else f"{os.path.relpath(path, ROOT)}:{line} {name}"
            print(f"  {calls:5.2f} calls {own_us:6.2f} us own  {where}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
