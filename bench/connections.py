"""Broker memory under many connections: RSS with 2,000 idle connections open and
after they close, and with connections that announce 100 MB frames.

    .venv/bin/python bench/connections.py [--connections 2000] [--announced 10]
                                          [--repo DIR] [--env KEY=VALUE ...] [--set KEY=VALUE ...]

The broker is the real `python -m broker serve` process of the checkout at --repo
(default: this one; pass another checkout, e.g. main, to compare) on 127.0.0.1
with a fresh data directory; --env adds environment variables to it (e.g.
PYTHONMALLOC=malloc), --set broker settings. RSS is VmRSS from /proc/<pid>/status,
read once it has been steady for half a second.

- idle: --connections connections to the Kafka listener, each sends one
  ApiVersions request and reads the answer, then stays open doing nothing.
  Printed: RSS before, with them open (and per connection), after they all close
  (and how much of what they took was given back).
- announced: --announced connections each send the size field of a 100 MB frame
  and 1 KiB of it, then nothing. Printed: how much RSS that costs.
Figures are best of one run on a quiet moment; they depend on the allocator
(glibc), not on the machine's speed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
READY = "strata kafka listening on "
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)  # size, key, version, correlation, null client


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def steady_rss(pid: int, timeout: float = 10.0) -> int:
    """RSS once two readings half a second apart agree within 64 KiB."""
    deadline = time.monotonic() + timeout
    last = rss_kib(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_kib(pid)
        if abs(now - last) <= 64:
            return now
        last = now
    return last


def start_broker(repo: str, data_dir: str, env_extra: dict[str, str], settings: list[str]):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env["PYTHONPATH"] = repo
    env["PYTHONUNBUFFERED"] = "1"
    env.update(env_extra)
    args = [sys.executable, "-m", "broker", "serve", "--data-dir", data_dir, "--host", "127.0.0.1",
            "--port", "0", "--kafka-port", "0", "--admin-port", "0", "--set", "log.format=json"]
    for kv in settings:
        args += ["--set", kv]
    proc = subprocess.Popen(args, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(READY):
            host, port = line[len(READY):].strip().rsplit(":", 1)
            return proc, (host, int(port))
    raise RuntimeError(f"broker exited with {proc.wait()}")


def open_idle(address: tuple[str, int], count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(address, timeout=30)
        sock.sendall(API_VERSIONS_V0)
        (size,) = struct.unpack(">i", _read(sock, 4))
        _read(sock, size)
        socks.append(sock)
    return socks


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def mib(kib: float) -> str:
    return f"{kib / 1024:+.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--announced", type=int, default=10)
    parser.add_argument("--repo", default=ROOT)
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--set", dest="settings", action="append", default=[])
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * args.connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the broker inherits it

    env_extra = dict(kv.split("=", 1) for kv in args.env)
    work = tempfile.mkdtemp(prefix="strata-bench-conn-")
    proc = None
    try:
        proc, address = start_broker(os.path.abspath(args.repo), os.path.join(work, "data"), env_extra,
                                     args.settings)
        open_idle(address, 20)  # warm-up: first connections, imports
        base = steady_rss(proc.pid)
        socks = open_idle(address, args.connections)
        with_idle = steady_rss(proc.pid)
        for sock in socks:
            sock.close()
        socks.clear()
        time.sleep(1.5)  # the broker sees the closes and trims
        after = steady_rss(proc.pid)
        taken = with_idle - base
        given = with_idle - after
        print(f"repo {args.repo}  env {env_extra or '-'}")
        print(f"idle connections: {args.connections}")
        print(f"  RSS before          {base / 1024:8.1f} MiB")
        print(f"  RSS with them open  {with_idle / 1024:8.1f} MiB  ({mib(taken)}, "
              f"{taken / max(1, args.connections):.1f} KiB each)")
        print(f"  RSS after close     {after / 1024:8.1f} MiB  ({mib(after - base)} vs before; "
              f"{100 * given / max(1, taken):.0f}% of what they took given back)")

        base = steady_rss(proc.pid)
        announced = []
        for _ in range(args.announced):
            sock = socket.create_connection(address, timeout=30)
            sock.sendall(struct.pack(">i", 100 * 1024 * 1024) + struct.pack(">hhi", 0, 9, 1) + b"x" * 1016)
            announced.append(sock)
        held = steady_rss(proc.pid)
        print(f"announced 100 MB frames: {args.announced} connections, 1 KiB sent each")
        print(f"  RSS {base / 1024:.1f} -> {held / 1024:.1f} MiB ({mib(held - base)})")
        for sock in announced:
            sock.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
