"""Broker benchmarks over loopback: each figure next to a baseline measured in the same run.

    .venv/bin/python bench/broker.py [--mb 512] [--runs 3] [--latency-requests 5000]
                                     [--set KEY=VALUE ...] [--dir DIR]

The broker is the real `python -m broker serve` process on 127.0.0.1 with a fresh
data directory; every baseline is a bare server in its own process (started by
this script through multiprocessing), so client, server and kernel share the
machine the same way in both measurements. The client is the same asyncio code
(uvloop, raw non-blocking sockets, the `protocol` codec) against both.

- produce: 1 KiB messages in 1 MiB message sets (one v2 batch of as many 1 KiB
  records as fit in 1 MiB), --mb MiB per run as native PRODUCE requests, 4 in
  flight on one connection (frames built before the clock starts). Baseline: a
  uvloop server that splits the same frames, os.writes each message set to a
  file and answers each with a 22-byte frame, the size of a PRODUCE response.
  Each broker run writes a new topic. Before each side's run a scratch file of
  the same size is written and deleted, so both write into recycled page cache
  (see prefault_page_cache: on a VM, fresh memory costs several times more).
  The broker's log reserves disk blocks ahead of its appends (storage/log.py,
  RESERVE_AHEAD_BYTES) and the baseline does not: that is most of why the
  broker can pass 1.0x here (bench/storage.py shows both writes). Target >= 0.9x.
- fetch: FETCH requests of 1 MiB maxBytes reading the last produce run's topic
  from offset 0, one request in flight, continuing one past the last whole
  entry of each answer. Baseline: a plain-socket server answering each FETCH
  with a 6-byte header and os.sendfile of the same byte range of the same .log
  file (the ranges come from a scan of the segment files). Target >= 0.7x.
- latency: one ~100 B record per PRODUCE, one request in flight, after a
  warm-up. Baseline: a uvloop server answering each frame at once with a
  22-byte frame (the broker's response size), writing nothing. The client
  alternates between the two in blocks of 500 requests, so both see the same
  moments of a noisy machine. p50/p99 in microseconds; target p99 <= 3x.
Throughput figures are best-of-N wall times, latency the run with the best p99;
CPU seconds (from /proc/<pid>/stat, all threads) are for that best run.
Ratios are what to compare across machines. Every child process is stopped and
the work directory removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import glob
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from kafka_format import build_batch  # noqa: E402
from protocol import (  # noqa: E402
    CreateTopicRequest,
    DeleteTopicRequest,
    ErrorCode,
    FetchRequest,
    FrameDecoder,
    ProduceRequest,
    RequestType,
    encode_request,
    parse_response,
)
from tests.broker_process import BrokerProcess, BrokerStartFailed  # noqa: E402

MIB = 1 << 20
HOST = "127.0.0.1"
VALUE = b"x" * 1024
PRODUCE_IN_FLIGHT = 4
FETCH_MAX_BYTES = MIB
LATENCY_VALUE = b"v" * 100
LATENCY_WARMUP = 500
LATENCY_BLOCK = 500  # requests in a row to one server before the other's turn
SERVER_START_TIMEOUT = 30.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

SIZE_ERROR = struct.Struct(">ih")
# What the baselines answer a PRODUCE with: size, error, baseOffset, logAppendTime (22 bytes,
# the size of the broker's PRODUCE response).
BASELINE_PRODUCE_RESPONSE = struct.pack(">ihqq", 18, 0, 0, -1)
ENTRY_HEAD = struct.Struct(">qi")  # offset, size: every log entry
LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a v2 batch
FETCH_TAIL = struct.Struct(">iqii")  # partition, offset, maxBytes, maxWaitMs


# ---------------------------------------------------------------------------------------------
# Baseline servers: each runs in its own process (multiprocessing, spawn) and sends its port
# back through a pipe. They use nothing from the project.
# ---------------------------------------------------------------------------------------------

def _produce_sink_server(conn, workdir: str, write: bool) -> None:
    """uvloop server: split frames, os.write each PRODUCE message set to a file (when
    `write`), answer each frame with BASELINE_PRODUCE_RESPONSE. One file per connection,
    removed when the connection closes."""
    import uvloop

    class Sink(asyncio.Protocol):
        serial = 0

        def connection_made(self, transport):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.transport = transport
            self.buf = bytearray()
            self.fd = -1
            self.path = None
            if write:
                Sink.serial += 1
                self.path = os.path.join(workdir, f"baseline-produce-{Sink.serial}.bin")
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

        def data_received(self, data):
            buf = self.buf
            buf += data
            n = len(buf)
            pos = 0
            answers = 0
            with memoryview(buf) as view:
                while n - pos >= 4:
                    size = int.from_bytes(view[pos:pos + 4], "big")
                    end = pos + 4 + size
                    if end > n:
                        break
                    if self.fd >= 0 and size >= 2 and view[pos + 4:pos + 6] == b"\x00\x00":
                        # PRODUCE: type, topic:str, partition:int32, setSize:int32, messageSet
                        topic_len = int.from_bytes(view[pos + 6:pos + 8], "big")
                        start = pos + 8 + topic_len + 8
                        os.write(self.fd, view[start:end])
                    answers += 1
                    pos = end
            if pos:
                del buf[:pos]
            if answers:
                self.transport.write(BASELINE_PRODUCE_RESPONSE * answers)

        def connection_lost(self, exc):
            if self.fd >= 0:
                os.close(self.fd)
                os.unlink(self.path)
                self.fd = -1

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Sink, HOST, 0, backlog=16)
        conn.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()  # until killed

    uvloop.run(main())


def _sendfile_server(conn, files: list[str], entries: list[tuple[int, int, int, int]]) -> None:
    """Plain blocking-socket server: answer each FETCH with a 6-byte header and os.sendfile
    of the byte range the broker sends for its offset (`fetch_ranges`). `entries` =
    (lastOffset, file index, position, length) for each entry, in offset order."""
    fds = [os.open(path, os.O_RDONLY) for path in files]
    last_offsets = [e[0] for e in entries]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, 0))
    listener.listen(16)
    conn.send(listener.getsockname()[1])
    while True:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = sock.fileno()
        buf = bytearray()
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 4:
                    size = int.from_bytes(buf[:4], "big")
                    if len(buf) < 4 + size:
                        break
                    topic_len = int.from_bytes(buf[6:8], "big")
                    _, offset, _, _ = FETCH_TAIL.unpack_from(buf, 8 + topic_len)
                    del buf[:4 + size]
                    i = bisect.bisect_left(last_offsets, offset)
                    if i == len(entries):
                        sock.sendall(SIZE_ERROR.pack(2, 0))
                        continue
                    _, index, position, length = entries[i]
                    sock.sendall(SIZE_ERROR.pack(2 + length, 0))
                    while length > 0:
                        sent = os.sendfile(out, fds[index], position, length)
                        if sent == 0:
                            raise OSError("segment file ended early")
                        position += sent
                        length -= sent
        except ConnectionError:
            pass
        finally:
            sock.close()


class ServerProcess:
    """A baseline server in its own process; `stop` kills it."""

    def __init__(self, target, *args):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()
        try:
            if not self._conn.poll(SERVER_START_TIMEOUT):
                raise EOFError
            self.port = self._conn.recv()
        except EOFError:
            self.stop()
            raise RuntimeError(f"baseline server {target.__name__} did not start "
                               f"(exit code {self.proc.exitcode})") from None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)
        self._conn.close()


# ---------------------------------------------------------------------------------------------
# Client side (the same code against the broker and the baselines)
# ---------------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of a whole process (all threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Sample:
    elapsed: float
    server_cpu: float
    client_cpu: float
    amount: int = 0  # bytes (fetch) or requests
    latencies: list | None = None  # microseconds, sorted

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def percentile(sorted_values: list, pct: float) -> float:
    k = max(0, min(len(sorted_values) - 1, round(pct / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


async def connect(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    return sock


async def call(sock: socket.socket, request) -> object:
    """One request, one answer (setup and teardown only)."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, encode_request(request))
    decoder = FrameDecoder()
    while (frame := decoder.next_frame()) is None:
        data = await loop.sock_recv(sock, 65536)
        if not data:
            raise ConnectionError("connection closed while waiting for an answer")
        decoder.feed(data)
    response = parse_response(request.TYPE, frame)
    if response.error != ErrorCode.NONE:
        raise RuntimeError(f"{type(request).__name__} answered {response.error!r}")
    return response


async def admin(port: int, *requests) -> None:
    sock = await connect(port)
    try:
        for request in requests:
            await call(sock, request)
    finally:
        sock.close()


async def produce_pipelined(port: int, frames: list[bytes], in_flight: int) -> float:
    """Send every frame with at most `in_flight` unanswered; the wall time."""
    loop = asyncio.get_running_loop()
    sock = await connect(port)
    slots = asyncio.Semaphore(in_flight)
    total = len(frames)

    async def read_answers() -> None:
        decoder = FrameDecoder()
        answered = 0
        try:
            while answered < total:
                data = await loop.sock_recv(sock, 65536)
                if not data:
                    raise ConnectionError(f"connection closed after {answered} of {total} answers")
                decoder.feed(data)
                for frame in decoder.frames():
                    response = parse_response(RequestType.PRODUCE, frame)
                    if response.error != ErrorCode.NONE:
                        raise RuntimeError(f"PRODUCE answered {response.error!r}")
                    answered += 1
                    slots.release()
        except BaseException:
            slots.release()  # wake the sender, which then sees this task done
            raise

    try:
        start = time.perf_counter()
        reader = loop.create_task(read_answers())
        for frame in frames:
            await slots.acquire()
            if reader.done():
                break  # it failed: its exception is raised below
            await loop.sock_sendall(sock, frame)
        await reader
        return time.perf_counter() - start
    finally:
        sock.close()


def next_offset(message_set: memoryview) -> int:
    """One past the last offset of the last whole entry (v2 batches or classic messages)."""
    pos, size, nxt = 0, len(message_set), -1
    while pos + 12 <= size:
        base, length = ENTRY_HEAD.unpack_from(message_set, pos)
        if pos + 12 + length > size:
            break
        if message_set[pos + 16] == 2:
            nxt = base + LAST_OFFSET_DELTA.unpack_from(message_set, pos + 23)[0] + 1
        else:
            nxt = base + 1
        pos += 12 + length
    if nxt < 0:
        raise RuntimeError(f"no whole entry in a {size}-byte FETCH answer (maxBytes too small?)")
    return nxt


async def fetch_all(port: int, topic: str, end_offset: int, max_bytes: int) -> tuple[float, int, int]:
    """FETCH from offset 0 to `end_offset`, one request in flight: (wall time, bytes, requests)."""
    loop = asyncio.get_running_loop()
    sock = await connect(port)
    buf = bytearray(max_bytes + 64)
    view = memoryview(buf)
    offset = received = requests = 0
    try:
        start = time.perf_counter()
        while offset < end_offset:
            await loop.sock_sendall(sock, encode_request(FetchRequest(topic, 0, offset, max_bytes, 0)))
            got = 0
            while got < 4:
                n = await loop.sock_recv_into(sock, view[got:])
                if not n:
                    raise ConnectionError("connection closed during a FETCH answer")
                got += n
            total = 4 + int.from_bytes(view[:4], "big")
            if total > len(buf):
                raise RuntimeError(f"FETCH answer of {total} bytes exceeds maxBytes {max_bytes}")
            while got < total:
                n = await loop.sock_recv_into(sock, view[got:total])
                if not n:
                    raise ConnectionError("connection closed during a FETCH answer")
                got += n
            response = parse_response(RequestType.FETCH, view[4:total])
            if response.error != ErrorCode.NONE:
                raise RuntimeError(f"FETCH at offset {offset} answered {response.error!r}")
            if not len(response.message_set):
                raise RuntimeError(f"FETCH at offset {offset} answered an empty set before the end")
            received += len(response.message_set)
            requests += 1
            offset = next_offset(response.message_set)
            del response
        return time.perf_counter() - start, received, requests
    finally:
        view.release()
        sock.close()


async def round_trips(sock: socket.socket, decoder: FrameDecoder, frame: bytes, count: int,
                      times: list[float] | None) -> None:
    """`count` PRODUCE requests one at a time; each round trip (µs) goes to `times`."""
    loop = asyncio.get_running_loop()
    clock = time.perf_counter_ns
    for _ in range(count):
        start = clock()
        await loop.sock_sendall(sock, frame)
        while (answer := decoder.next_frame()) is None:
            data = await loop.sock_recv(sock, 4096)
            if not data:
                raise ConnectionError("connection closed during a PRODUCE answer")
            decoder.feed(data)
        response = parse_response(RequestType.PRODUCE, answer)
        elapsed = clock() - start
        if response.error != ErrorCode.NONE:
            raise RuntimeError(f"PRODUCE answered {response.error!r}")
        if times is not None:
            times.append(elapsed / 1000)


async def produce_latency(ports: list[int], frame: bytes, warmup: int, count: int,
                          block: int) -> list[list[float]]:
    """One request in flight on one connection per port; after `warmup` requests each, the
    ports take turns in blocks of `block` requests (so both see the same machine) until each
    has made `count`. The round trips of each port, in µs, sorted."""
    socks = [await connect(port) for port in ports]
    decoders = [FrameDecoder() for _ in ports]
    times: list[list[float]] = [[] for _ in ports]
    try:
        for sock, decoder in zip(socks, decoders, strict=True):
            await round_trips(sock, decoder, frame, warmup, None)
        for done in range(0, count, block):
            for sock, decoder, out in zip(socks, decoders, times, strict=True):
                await round_trips(sock, decoder, frame, min(block, count - done), out)
        return [sorted(t) for t in times]
    finally:
        for sock in socks:
            sock.close()


def measure(pid: int, run) -> Sample:
    """Run the coroutine factory `run` (returning the wall time, or (wall time, amount, ...))
    on a fresh uvloop, with the server's and our CPU time."""
    server_cpu, client_cpu = cpu_seconds(pid), time.process_time()
    result = uvloop_run(run())
    server_cpu, client_cpu = cpu_seconds(pid) - server_cpu, time.process_time() - client_cpu
    if isinstance(result, tuple):
        return Sample(result[0], server_cpu, client_cpu, result[1])
    return Sample(result, server_cpu, client_cpu)


def prefault_page_cache(workdir: str, nbytes: int) -> None:
    """Write and delete a scratch file of `nbytes`, so that the run after this writes into
    memory the kernel has just freed. On a VM whose free memory is handed back to the host
    (free page reporting), a first write into cold memory is several times slower than
    into recycled page cache, and which side of a comparison hit it was luck; a server in
    a steady state recycles its page cache."""
    path = os.path.join(workdir, "prefault.bin")
    chunk = b"\0" * MIB
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(-(-nbytes // MIB)):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        os.unlink(path)


# ---------------------------------------------------------------------------------------------
# The phases
# ---------------------------------------------------------------------------------------------

def message_set(base_ts: int) -> tuple[bytes, int]:
    """A v2 batch of as many 1 KiB messages as fit in 1 MiB, and its message count."""
    count = MIB // len(VALUE)
    while True:
        data = build_batch([(b"key-%d" % i, VALUE, base_ts + i) for i in range(count)])
        if len(data) <= MIB:
            return data, count
        count -= 1 + (len(data) - MIB) // len(VALUE)


def produce_sample(server: ServerProcess | BrokerProcess, frames: list[bytes], workdir: str,
                   nbytes: int) -> Sample:
    """Pipeline the produce `frames` to `server` on one connection, after prefaulting
    `nbytes` of page cache."""
    prefault_page_cache(workdir, nbytes)
    return measure(server.pid, partial(produce_pipelined, server.port, frames, PRODUCE_IN_FLIGHT))


def pair(run: int, baseline, broker) -> tuple[Sample, Sample]:
    """Measure both sides, baseline first on even runs and broker first on odd ones, so
    neither always runs just after the other's writes: (baseline, broker)."""
    if run % 2:
        ours = broker()
        return baseline(), ours
    base = baseline()
    return base, broker()


def cpu_note(sample: Sample, per: float, unit: str) -> str:
    return (f"server CPU {sample.server_cpu:5.2f} s ({sample.server_cpu / per * 1e3:6.2f} ms/{unit}), "
            f"client CPU {sample.client_cpu:5.2f} s")


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def bench_produce(broker: BrokerProcess, workdir: str, total_mb: int, runs: int) -> str:
    data, count = message_set(int(time.time() * 1000))
    sets = max(1, total_mb * MIB // len(data))
    mb = sets * len(data) / MIB
    print(f"\n== produce: {sets} sets of {count} x 1 KiB messages ({len(data)} B each, "
          f"{mb:.0f} MiB), {PRODUCE_IN_FLIGHT} in flight on one connection, best of {runs}")
    baseline = ServerProcess(_produce_sink_server, workdir, True)
    best_base = best_ours = None
    topic = ""
    try:
        warm = [encode_request(ProduceRequest("warmup", 0, data))] * 16
        uvloop_run(admin(broker.port, CreateTopicRequest("warmup", 1)))
        uvloop_run(produce_pipelined(baseline.port, warm, PRODUCE_IN_FLIGHT))
        uvloop_run(produce_pipelined(broker.port, warm, PRODUCE_IN_FLIGHT))
        uvloop_run(admin(broker.port, DeleteTopicRequest("warmup")))
        for run in range(runs):
            previous, topic = topic, f"produce-{run}"
            uvloop_run(admin(broker.port, CreateTopicRequest(topic, 1)))
            to_baseline = [encode_request(ProduceRequest("baseline", 0, data))] * sets
            to_broker = [encode_request(ProduceRequest(topic, 0, data))] * sets

            base, ours = pair(run, partial(produce_sample, baseline, to_baseline, workdir, sets * len(data)),
                              partial(produce_sample, broker, to_broker, workdir, sets * len(data)))
            del to_baseline, to_broker
            print(f"  run {run + 1}: broker {mb / ours.elapsed:7.1f} MiB/s | baseline "
                  f"{mb / base.elapsed:7.1f} MiB/s")
            if best_base is None or base.elapsed < best_base.elapsed:
                best_base = base
            if best_ours is None or ours.elapsed < best_ours.elapsed:
                best_ours = ours
                if previous:
                    uvloop_run(admin(broker.port, DeleteTopicRequest(previous)))
            else:
                uvloop_run(admin(broker.port, DeleteTopicRequest(topic)))
                topic = previous
    finally:
        baseline.stop()
    ratio = best_base.elapsed / best_ours.elapsed
    print(f"broker   {mb / best_ours.elapsed:8.1f} MiB/s {sets * count / best_ours.elapsed:10.0f} msgs/s  "
          f"[{cpu_note(best_ours, mb, 'MiB')}]")
    print(f"baseline {mb / best_base.elapsed:8.1f} MiB/s {sets * count / best_base.elapsed:10.0f} msgs/s  "
          f"[{cpu_note(best_base, mb, 'MiB')}]")
    print(f"ratio {ratio:.2f}x (target >= 0.9: {verdict(ratio >= 0.9)})")
    return topic


def fetch_ranges(directory: str, max_bytes: int) -> tuple[list[str], list[tuple[int, int, int, int]], int]:
    """The partition's .log files; for each entry (lastOffset, file index, position, length)
    where position/length is what the broker sends for a FETCH of `max_bytes` at an offset
    in that entry (LogSegment.read): whole entries from that one on, at most max_bytes and
    not past its segment, or the first entry cut at max_bytes when it alone is larger;
    and the log end offset."""
    files = sorted(glob.glob(os.path.join(directory, "*.log")))
    entries = []
    for index, path in enumerate(files):
        spans = []  # (lastOffset, position, end) of each entry of this segment
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            position = 0
            while position + 27 <= size:
                head = os.pread(f.fileno(), 27, position)
                base, length = ENTRY_HEAD.unpack_from(head)
                last = base + LAST_OFFSET_DELTA.unpack_from(head, 23)[0] if head[16] == 2 else base
                spans.append((last, position, position + 12 + length))
                position += 12 + length
        ends = [end for _, _, end in spans]
        for last, position, end in spans:
            limit = min(size, position + max_bytes)
            length = limit - position if end > limit else ends[bisect.bisect_right(ends, limit) - 1] - position
            entries.append((last, index, position, length))
    end = entries[-1][0] + 1 if entries else 0
    return files, entries, end


def bench_fetch(broker: BrokerProcess, topic: str, runs: int) -> None:
    files, entries, end = fetch_ranges(os.path.join(broker.data_dir, f"{topic}-0"), FETCH_MAX_BYTES)
    size = sum(os.path.getsize(path) for path in files)
    print(f"\n== fetch: topic {topic} ({size / MIB:.0f} MiB, {len(entries)} entries, {len(files)} "
          f"segment(s)) from offset 0, maxBytes {FETCH_MAX_BYTES}, one request in flight, best of {runs}")
    baseline = ServerProcess(_sendfile_server, files, entries)
    best_base = best_ours = None
    try:
        warm_end = entries[min(len(entries), 64) - 1][0] + 1 if entries else 0
        uvloop_run(fetch_all(baseline.port, topic, warm_end, FETCH_MAX_BYTES))
        uvloop_run(fetch_all(broker.port, topic, warm_end, FETCH_MAX_BYTES))
        for run in range(runs):
            base, ours = pair(
                run,
                lambda: measure(baseline.pid, lambda: fetch_all(baseline.port, topic, end, FETCH_MAX_BYTES)),
                lambda: measure(broker.pid, lambda: fetch_all(broker.port, topic, end, FETCH_MAX_BYTES)))
            if ours.amount != base.amount:
                print(f"  warning: the broker sent {ours.amount} bytes, the baseline {base.amount}")
            print(f"  run {run + 1}: broker {ours.amount / MIB / ours.elapsed:7.1f} MiB/s | baseline "
                  f"{base.amount / MIB / base.elapsed:7.1f} MiB/s")
            if best_base is None or base.elapsed < best_base.elapsed:
                best_base = base
            if best_ours is None or ours.elapsed < best_ours.elapsed:
                best_ours = ours
    finally:
        baseline.stop()
    mb = best_ours.amount / MIB
    ratio = (best_ours.amount / best_ours.elapsed) / (best_base.amount / best_base.elapsed)
    print(f"broker   {mb / best_ours.elapsed:8.1f} MiB/s  [{cpu_note(best_ours, mb, 'MiB')}]")
    print(f"sendfile {best_base.amount / MIB / best_base.elapsed:8.1f} MiB/s  "
          f"[{cpu_note(best_base, best_base.amount / MIB, 'MiB')}]")
    print(f"ratio {ratio:.2f}x (target >= 0.7: {verdict(ratio >= 0.7)})")


def bench_latency(broker: BrokerProcess, workdir: str, count: int, runs: int) -> None:
    topic = "latency"
    record = [(b"key", LATENCY_VALUE, int(time.time() * 1000))]
    frame = encode_request(ProduceRequest(topic, 0, build_batch(record)))
    block = min(LATENCY_BLOCK, count)
    print(f"\n== latency: PRODUCE of one {len(LATENCY_VALUE)} B record ({len(frame)}-byte frame), "
          f"one in flight, {count} requests each after {LATENCY_WARMUP} warm-up, broker and "
          f"baseline taking turns every {block}, best p99 of {runs}")
    uvloop_run(admin(broker.port, CreateTopicRequest(topic, 1)))
    baseline = ServerProcess(_produce_sink_server, workdir, False)
    best_base = best_ours = None
    try:
        for run in range(runs):
            # Odd runs start with the broker, even ones with the baseline.
            pids = [baseline.pid, broker.pid][::-1 if run % 2 else 1]
            ports = [baseline.port, broker.port][::-1 if run % 2 else 1]
            before = [cpu_seconds(pid) for pid in pids]
            results = uvloop_run(produce_latency(ports, frame, LATENCY_WARMUP, count, block))
            samples = [Sample(0.0, cpu_seconds(pid) - cpu, 0.0, len(t), latencies=t)
                       for pid, cpu, t in zip(pids, before, results, strict=True)]
            base, ours = samples[::-1 if run % 2 else 1]
            print(f"  run {run + 1}: broker p50 {ours.p50:7.1f} us p99 {ours.p99:7.1f} us | "
                  f"baseline p50 {base.p50:7.1f} us p99 {base.p99:7.1f} us")
            if best_base is None or base.p99 < best_base.p99:
                best_base = base
            if best_ours is None or ours.p99 < best_ours.p99:
                best_ours = ours
    finally:
        baseline.stop()
    ratio = best_ours.p99 / best_base.p99
    for name, s in (("broker  ", best_ours), ("baseline", best_base)):
        print(f"{name} p50 {s.p50:7.1f} us  p99 {s.p99:7.1f} us  max {s.latencies[-1]:8.1f} us  "
              f"mean {statistics.fmean(s.latencies):7.1f} us  "
              f"[server CPU {s.server_cpu / (LATENCY_WARMUP + count) * 1e6:5.1f} us/request]")
    print(f"p99 ratio {ratio:.2f}x (target <= 3: {verdict(ratio <= 3)})")


def uvloop_run(coro):
    import uvloop

    return uvloop.run(coro)


def report_broker_log(broker: BrokerProcess) -> None:
    events = broker.log_events()
    stopped = [e for e in events if e.get("event") == "broker_stopped"]
    problems = [e for e in events if e.get("level") in ("warning", "error", "critical")]
    if stopped:
        sf = stopped[-1].get("sendfile", {})
        total = sf.get("bytes", 0) + sf.get("copied_bytes", 0)
        if total:
            print(f"\nbroker: {sf['bytes'] / total:.1%} of FETCH bytes went through sendfile "
                  f"({sf.get('would_block', 0)} EAGAIN, {sf.get('copied_writes', 0)} copied pieces); "
                  f"read pauses {stopped[-1].get('read_pauses')}, write pauses {stopped[-1].get('write_pauses')}")
        appends = stopped[-1].get("appends") or {}
        if appends:
            print(f"broker: appends inline {appends.get('inline')}, in the executor {appends.get('executor')}, "
                  f"inline back-offs {appends.get('backoffs')}")
    for event in problems[:5]:
        print(f"broker log: {event}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=512, help="MiB produced per run (default 512)")
    parser.add_argument("--runs", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--latency-requests", type=int, default=5000,
                        help="timed requests per latency run (default 5000)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="settings",
                        help="a broker setting, passed to `serve --set` (repeatable)")
    parser.add_argument("--dir", default=None,
                        help="work directory, kept afterwards (default: a temporary one under .bench/)")
    args = parser.parse_args()
    if args.mb < 1 or args.runs < 1 or args.latency_requests < 1:
        parser.error("--mb, --runs and --latency-requests must be at least 1")

    # SIGTERM/SIGHUP unwind through the finally blocks below like Ctrl-C does.
    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    if args.dir:
        workdir = os.path.abspath(args.dir)
        os.makedirs(workdir, exist_ok=True)
    else:
        os.makedirs(os.path.join(ROOT, ".bench"), exist_ok=True)
        workdir = tempfile.mkdtemp(prefix="broker-", dir=os.path.join(ROOT, ".bench"))
    data_dir = os.path.join(workdir, "broker-data")
    shutil.rmtree(data_dir, ignore_errors=True)  # always a fresh data directory
    broker = BrokerProcess(data_dir, *(arg for kv in args.settings for arg in ("--set", kv)))
    print(f"strata broker bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"work dir {workdir}")
    started = time.perf_counter()
    try:
        try:
            broker.start()
        except BrokerStartFailed as e:
            print(f"error: the broker could not start: {e}", file=sys.stderr)
            return 1
        print(f"broker pid {broker.pid} on {HOST}:{broker.port}, data dir {data_dir}"
              + (f", settings {' '.join(args.settings)}" if args.settings else ""))
        topic = bench_produce(broker, workdir, args.mb, args.runs)
        bench_fetch(broker, topic, args.runs)
        bench_latency(broker, workdir, args.latency_requests, args.runs)
        code = broker.stop()
        if code != 0:
            print(f"warning: the broker exited with code {code}")
        report_broker_log(broker)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        broker.close()  # kills it if it still runs
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
