"""What receiving TLS costs the broker per MiB, against receiving the same bytes in
the clear (the part of bench/tls.py's produce gap that user-space TLS cannot avoid).

    .venv/bin/python bench/tls_micro.py [--mib 64] [--runs 5]

One process, no broker. A client SSLObject encrypts --mib MiB (16 KiB TLS records,
TLS's largest; librdkafka's produce requests come in records of about 2.3 KiB,
whose per-record cost bench/tls_loop.py --record 2048 shows), then the receiving side is timed by the CPU time of its
own thread (time.thread_time, so other processes on a loaded machine do not count):

- MemoryBIO: what asyncio/uvloop's TLS transport does with every socket read:
  the ciphertext is written into the incoming MemoryBIO 256 KiB at a time (uvloop's
  read size) and SSLObject.read decrypts each record into one large buffer, as the
  broker's frame reader lends it. The socket read itself is not included: add the
  plain row for the whole.
- socket BIO: an SSLSocket reads the ciphertext from a socketpair and decrypts into
  the buffer (recv_into): what a TLS layer without memory BIOs would pay, socket
  read included.
- plain recv_into: the same MiB from a socketpair without TLS, what PLAINTEXT pays.

The MemoryBIO rows are run for TLS 1.3 (OpenSSL's default, AES-256-GCM, the suite a
Strata listener negotiates by default) and for TLS 1.2 AES-128-GCM, AES-256-GCM and
ChaCha20-Poly1305, to show how much of the cost is the cipher. Best of --runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.tls_certs import CertificateAuthority  # noqa: E402

MIB = 1 << 20
READ_SIZE = 256 * 1024  # uvloop's SSL_READ_MAX_SIZE


class Contexts:
    def __init__(self, work: Path):
        ca = CertificateAuthority()
        keystore = ca.issue("localhost").write_pem(work / "server.pem")
        ca_pem = ca.write_pem(work / "ca.pem")
        self.server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server.load_cert_chain(str(keystore))
        self.ca_pem = str(ca_pem)

    def client(self, tls12_suite: str | None) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(self.ca_pem)
        if tls12_suite is not None:
            context.maximum_version = ssl.TLSVersion.TLSv1_2
            context.set_ciphers(tls12_suite)
        return context


def handshake(client: ssl.SSLObject, client_out: ssl.MemoryBIO, client_in: ssl.MemoryBIO,
              send: Callable[[bytes], None], receive: Callable[[], bytes]) -> None:
    """Drive the client side of a handshake whose server side runs elsewhere."""
    while True:
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            if client_out.pending:
                send(client_out.read())
            client_in.write(receive())
    if client_out.pending:
        send(client_out.read())


def ciphertext(client: ssl.SSLObject, client_out: ssl.MemoryBIO, mib: int, payload: bytes) -> list[bytes]:
    out = []
    for _ in range(mib):
        client.write(payload)
        out.append(client_out.read())
    return out


def memory_bio(contexts: Contexts, mib: int, payload: bytes, suite: str | None) -> tuple[float, str]:
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = contexts.server.wrap_bio(server_in, server_out, server_side=True)
    client = contexts.client(suite).wrap_bio(client_in, client_out, server_hostname="localhost")

    def send(data: bytes) -> None:
        server_in.write(data)
        with contextlib.suppress(ssl.SSLWantReadError):
            server.do_handshake()

    handshake(client, client_out, client_in, send, server_out.read)
    name, version, _ = server.cipher()  # type: ignore[misc]
    records = ciphertext(client, client_out, mib, payload)
    view = memoryview(bytearray(MIB))
    start = time.thread_time()
    for data in records:
        chunks = memoryview(data)
        got = 0
        for offset in range(0, len(data), READ_SIZE):
            server_in.write(chunks[offset:offset + READ_SIZE])
            while server_in.pending or server.pending():
                try:
                    got += server.read(MIB - got, view[got:])
                except ssl.SSLWantReadError:
                    break
        assert got == MIB, got
    return (time.thread_time() - start) / mib * 1e3, f"{version} {name}"


def socket_read(contexts: Contexts | None, mib: int, payload: bytes) -> float:
    """CPU ms per MiB of receiving over a socketpair, through an SSLSocket when
    `contexts` is given."""
    a, b = socket.socketpair()
    try:
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MIB)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MIB)
        receiver: socket.socket = a
        if contexts is not None:
            server = contexts.server.wrap_socket(a, server_side=True, do_handshake_on_connect=False)
            done = threading.Thread(target=server.do_handshake)
            done.start()
            client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
            client = contexts.client(None).wrap_bio(client_in, client_out, server_hostname="localhost")
            handshake(client, client_out, client_in, b.sendall, lambda: b.recv(65536))
            done.join()
            records = ciphertext(client, client_out, mib, payload)
            receiver = server
        else:
            records = [payload] * mib
        sender = threading.Thread(target=lambda: [b.sendall(r) for r in records])
        view = memoryview(bytearray(MIB))
        start = time.thread_time()
        sender.start()
        for _ in range(mib):
            got = 0
            while got < MIB:
                got += receiver.recv_into(view[got:], MIB - got)
        elapsed = time.thread_time() - start
        sender.join()
        return elapsed / mib * 1e3
    finally:
        a.close()
        b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    payload = os.urandom(MIB)
    with tempfile.TemporaryDirectory(prefix="strata-bench-tls-micro-") as work:
        contexts = Contexts(Path(work))
        rows: dict[str, float] = {}

        def best(label: str, measure: Callable[[], float]) -> None:
            rows[label] = min(measure() for _ in range(args.runs))

        for suite in (None, "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                      "ECDHE-ECDSA-CHACHA20-POLY1305"):
            name = memory_bio(contexts, 1, payload, suite)[1]
            best(f"MemoryBIO, {name}", lambda s=suite: memory_bio(contexts, args.mib, payload, s)[0])
        best("socket BIO (SSLSocket.recv_into), TLS 1.3 default", lambda: socket_read(contexts, args.mib, payload))
        best("plain recv_into (PLAINTEXT)", lambda: socket_read(None, args.mib, payload))
    print(f"receiving side CPU per MiB, best of {args.runs} x {args.mib} MiB; "
          f"load average {os.getloadavg()[0]:.2f}")
    for label, ms in rows.items():
        print(f"  {label:58} {ms:6.3f} ms/MiB")


if __name__ == "__main__":
    main()
