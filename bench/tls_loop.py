"""What the event-loop thread pays to receive TLS: uvloop's TLS layer against an
SSLSocket read on the loop thread, and against PLAINTEXT, in the same run (the
receive-side alternative issue 15 asked about; docs/decisions/2026-11-26-tls-on-the-loop.md).

    .venv/bin/python bench/tls_loop.py [--mib 64] [--runs 6] [--record 16384]

One uvloop event loop in this process receives --mib MiB per turn on one TCP
connection from a sender in a child process (plain `socket` + `ssl`: TLS 1.3 with
OpenSSL's default suite, one TLS record per --record bytes: 16 KiB is TLS's
largest; librdkafka's produce requests arrive in records of about 2.3 KiB on
average, counted at the broker, so --record 2048 is closer to bench/tls.py), into a
BufferedProtocol that lends 1 MiB buffers as the broker's frame reader does. The
figure is the loop thread's own CPU time (time.thread_time, so the sender and other
processes do not count) from the handshake's end to the last byte, per MiB. The
receive paths, in alternating turns:

- plain: loop.create_server without TLS (what a PLAINTEXT listener pays).
- uvloop TLS: loop.create_server(ssl=...): the ciphertext is read 256 KiB at a
  time into uvloop's buffer, written into OpenSSL's incoming memory BIO, and
  SSLObject.read decrypts record after record into the protocol's buffer (in
  Cython), then one buffer_updated per socket read.
- SSLSocket on the loop: the accepted socket wrapped by context.wrap_socket
  (non-blocking, handshake driven by add_reader/add_writer); on each readable event
  recv_into decrypts straight from the socket into the protocol's buffer, record
  after record, until the buffer is full (then once more at the next loop
  iteration) or SSLWantReadError, then one buffer_updated. No memory BIO, one copy
  less; but OpenSSL reads each record with two recv calls (its 5-byte header, then
  the body: Python's ssl module cannot turn on read-ahead), and each record is one
  Python-level call. It is the receive path of a TLS transport of our own without
  any of the rest of a transport's work (writes, flow control, close): an upper
  bound on what such a transport could save.

Per path: the median and best ms/MiB over --runs turns and the buffer_updated
calls per MiB (the connection shell's per-chunk work).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.tls_certs import CertificateAuthority  # noqa: E402

MIB = 1 << 20
PATHS = ("plain", "uvloop TLS", "SSLSocket on the loop")

SENDER = r"""
import socket, ssl, sys
port, mib, record, ca = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sock = socket.create_connection(("127.0.0.1", port))
if ca:
    sock = ssl.create_default_context(cafile=ca).wrap_socket(sock, server_hostname="localhost")
payload = memoryview(b"x" * (1 << 20))
for _ in range(mib):
    for offset in range(0, len(payload), record):  # one TLS record per sendall (at most 16 KiB)
        sock.sendall(payload[offset:offset + record])
sock.recv(1)  # the receiver's acknowledgement: everything arrived
sock.close()
"""


class Sink(asyncio.BufferedProtocol):
    """Receives `total` bytes into a reused 1 MiB buffer; `done` gets the loop
    thread's CPU seconds from connection_made to the last byte."""

    def __init__(self, total: int, done: asyncio.Future):
        self.view = memoryview(bytearray(MIB))
        self.position = 0
        self.received = 0
        self.total = total
        self.done = done
        self.calls = 0
        self.transport: asyncio.BaseTransport | None = None
        self.started = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.started = time.thread_time()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.position == MIB:
            self.position = 0
        return self.view[self.position:]

    def buffer_updated(self, nbytes: int) -> None:
        self.position += nbytes
        self.received += nbytes
        self.calls += 1
        if self.received >= self.total and not self.done.done():
            self.done.set_result(time.thread_time() - self.started)
            self.transport.write(b"k")  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("closed early"))


class SSLSocketReader:
    """The receive path of an SSLSocket-based transport on the loop thread (see the
    module docstring); `write` is a blocking-free send of a tiny acknowledgement."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, context: ssl.SSLContext,
                 protocol: Sink):
        self.loop = loop
        self.protocol = protocol
        self.sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        self.fd = self.sock.fileno()
        self.events = 0
        self.records = 0
        loop.add_reader(self.fd, self._handshake)

    def _handshake(self) -> None:
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            return
        self.loop.remove_reader(self.fd)
        self.protocol.connection_made(self)  # type: ignore[arg-type]
        self.loop.add_reader(self.fd, self._read)

    def _read(self) -> None:
        self.events += 1
        buffer = self.protocol.get_buffer(-1)
        size, got = len(buffer), 0
        recv_into = self.sock.recv_into
        try:
            while got < size:
                n = recv_into(buffer[got:])
                if not n:
                    break
                got += n
                self.records += 1
        except ssl.SSLWantReadError:
            pass
        if got:
            self.protocol.buffer_updated(got)
        if got == size:  # OpenSSL may hold a decrypted record the socket no longer signals
            self.loop.call_soon(self._read)

    def write(self, data: bytes) -> None:
        self.sock.send(data)

    def close(self) -> None:
        self.loop.remove_reader(self.fd)
        self.sock.close()


async def turn(path: str, mib: int, record: int, context: ssl.SSLContext, ca_pem: str) -> tuple[float, float]:
    """(loop CPU ms per MiB, buffer_updated calls per MiB) of one turn."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    sink = Sink(mib * MIB, done)
    readers: list[SSLSocketReader] = []
    if path == "SSLSocket on the loop":
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]

        def accept() -> None:
            sock, _ = listener.accept()
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as uvloop does
            readers.append(SSLSocketReader(loop, sock, context, sink))

        loop.add_reader(listener.fileno(), accept)

        def close() -> None:
            loop.remove_reader(listener.fileno())
            listener.close()
            for reader in readers:
                reader.close()
    else:
        server = await loop.create_server(lambda: sink, "127.0.0.1", 0,
                                          ssl=context if path == "uvloop TLS" else None)
        port = server.sockets[0].getsockname()[1]
        close = server.close
    sender = await asyncio.create_subprocess_exec(sys.executable, "-c", SENDER, str(port), str(mib), str(record),
                                                  "" if path == "plain" else ca_pem)
    try:
        cpu = await done
    finally:
        await sender.wait()
        close()
    return cpu / mib * 1e3, sink.calls / mib


async def measure(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="strata-bench-tls-loop-") as work:
        ca = CertificateAuthority()
        keystore = ca.issue("localhost").write_pem(Path(work) / "server.pem")
        ca_pem = str(ca.write_pem(Path(work) / "ca.pem"))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(keystore))
        load = os.getloadavg()[0]
        paths = tuple(p for p in PATHS if not args.only or p.startswith(args.only))
        figures: dict[str, list[tuple[float, float]]] = {p: [] for p in paths}
        for _ in range(args.runs):
            for path in paths:
                figures[path].append(await turn(path, args.mib, args.record, context, ca_pem))
    print(f"loop thread CPU per MiB received, {args.runs} alternating turns x {args.mib} MiB, "
          f"{args.record}-byte writes (TLS records); "
          f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    uvloop_median = statistics.median(ms for ms, _ in figures.get("uvloop TLS", [(1.0, 0.0)]))
    for path, rows in figures.items():
        ms = [r[0] for r in rows]
        median = statistics.median(ms)
        print(f"  {path:24} median {median:6.3f}  best {min(ms):6.3f} ms/MiB  "
              f"{median / uvloop_median:5.2f}x uvloop TLS  "
              f"{statistics.median(r[1] for r in rows):6.1f} buffer_updated/MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--record", type=int, default=16384,
                        help="bytes per sender write, so per TLS record (librdkafka's produce records "
                             "average about 2.3 KiB)")
    parser.add_argument("--only", help="run only the paths whose name starts with this (for a profiler)")
    args = parser.parse_args()
    import uvloop

    uvloop.run(measure(args))


if __name__ == "__main__":
    main()
