"""Memory and connection limits against the real broker (issue 14, item 7).

- A connection that announces a 100 MB frame gets a buffer that grows as bytes
  arrive, so ten of them cost a few MiB, not 1 GB.
- queued.max.request.bytes: when the broker-wide pool for requests being received
  is spent, the broker stops reading from connections that need more, and goes on
  once memory comes back.
- connections.max.idle.ms closes idle connections; max.connections.per.ip (and its
  overrides) and max.connections close connections over the limit at once.
"""

from __future__ import annotations

import socket
import struct
import time

from kafka_format import build_batch
from protocol import CreateTopicRequest, ErrorCode, ProduceRequest, encode_request
from tests.broker.wire import NativeClient

MIB = 1024 * 1024
WAIT = 30.0  # a guard against hangs, not a speed assumption


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _closed_by_broker(sock: socket.socket, timeout: float = WAIT) -> bool:
    """True once the broker closes `sock` (EOF or reset), False if it answers bytes."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _served(address: tuple[str, int]) -> bool:
    """A new native connection gets an answer to a request."""
    client = NativeClient(*address)
    try:
        return client.call(CreateTopicRequest("probe", 1)).error in (ErrorCode.NONE,
                                                                      ErrorCode.TOPIC_ALREADY_EXISTS)
    except (ConnectionError, OSError):
        return False
    finally:
        client.sock.close()


def test_announced_frames_cost_what_arrives_not_what_is_announced(broker):
    server = broker()
    before = rss_kib(server.pid)
    socks = []
    for _ in range(10):
        sock = socket.create_connection(server.address, timeout=WAIT)
        sock.sendall(struct.pack(">ih", 100 * MIB, 0) + b"x" * 1024)  # a PRODUCE's first KiB
        socks.append(sock)
    assert _served(server.address)  # every frame so far has been read and the broker answers
    grown = rss_kib(server.pid) - before
    assert grown < 64 * 1024, f"RSS grew by {grown} KiB"  # 1 GB before (the whole frame up front)
    for sock in socks:
        sock.close()


def test_reading_pauses_while_request_memory_is_spent(broker):
    server = broker("--set", f"queued.max.request.bytes={MIB}")
    client = NativeClient(*server.address)
    assert client.call(CreateTopicRequest("t", 1)).error == ErrorCode.NONE
    # A spends the pool: a 100 MB frame of which 2 MiB arrive (its buffer grows to hold them).
    hog = socket.create_connection(server.address, timeout=WAIT)
    hog.sendall(struct.pack(">ih", 100 * MIB, 0) + b"x" * (2 * MIB))
    assert _served(server.address)  # small requests need no pool memory
    # B's large PRODUCE needs pool memory: it is not read while A holds the pool.
    produce = encode_request(ProduceRequest("t", 0, build_batch([(None, b"v" * (300 * 1024))])))
    waiting = socket.create_connection(server.address, timeout=WAIT)
    waiting.sendall(produce)
    waiting.settimeout(0.5)
    try:
        early = waiting.recv(1)
    except TimeoutError:
        early = b""
    assert early == b""  # no answer while the pool is spent
    hog.close()  # A's memory comes back: B is read and answered
    waiting.settimeout(WAIT)
    (size,) = struct.unpack(">i", waiting.recv(4, socket.MSG_WAITALL))
    body = waiting.recv(size, socket.MSG_WAITALL)
    assert struct.unpack_from(">h", body)[0] == ErrorCode.NONE
    waiting.close()


def test_idle_connections_are_closed(broker):
    server = broker("--set", "connections.max.idle.ms=300")
    idle = socket.create_connection(server.address, timeout=WAIT)
    kafka_idle = socket.create_connection(server.kafka_address, timeout=WAIT)
    started = time.monotonic()
    assert _closed_by_broker(idle)
    assert _closed_by_broker(kafka_idle)
    assert time.monotonic() - started >= 0.3  # not before connections.max.idle.ms
    assert _served(server.address)


def _admitted_native(address: tuple[str, int]) -> NativeClient:
    """A native connection the broker has admitted (it answered a request on it)."""
    client = NativeClient(*address)
    assert client.call(CreateTopicRequest("probe", 1)).error in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
    return client


def _admitted_kafka(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=WAIT)
    sock.sendall(struct.pack(">ihhih", 10, 18, 0, 1, -1))  # ApiVersions v0
    (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
    assert len(sock.recv(size, socket.MSG_WAITALL)) == size
    return sock


def test_connections_over_the_per_ip_limit_are_closed(broker):
    server = broker("--set", "max.connections.per.ip=3")
    kept = [_admitted_native(server.address).sock for _ in range(2)]
    kept.append(_admitted_kafka(server.kafka_address))  # both listeners count
    over = socket.create_connection(server.address, timeout=WAIT)  # the 4th from 127.0.0.1
    assert _closed_by_broker(over)
    kept.pop().close()
    deadline = time.monotonic() + WAIT
    while not _served(server.address):  # the broker sees the close, then admits again
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for sock in kept:
        sock.close()


def test_per_ip_override_and_broker_wide_limit(broker):
    server = broker("--set", "max.connections.per.ip=1", "--set", "max.connections.per.ip.overrides=127.0.0.1:4",
                    "--set", "max.connections=3")
    kept = [_admitted_native(server.address).sock for _ in range(3)]  # over 1: the override (4) applies
    over = socket.create_connection(server.address, timeout=WAIT)
    assert _closed_by_broker(over)  # the 4th: over max.connections
    for sock in kept:
        sock.close()
    events = [e for e in server.log_events() if e.get("event") == "connection_refused"]
    assert events and "max.connections 3" in events[0]["reason"]


def test_bad_limit_settings_are_refused(tmp_path):
    from tests.broker_process import run_serve

    code, _, err = run_serve("--data-dir", str(tmp_path), "--set", "max.connections.per.ip.overrides=nohost")
    assert code != 0 and "max.connections.per.ip.overrides" in err
    code, _, err = run_serve("--data-dir", str(tmp_path), "--set", "queued.max.request.bytes=0")
    assert code != 0 and "queued.max.request.bytes" in err
