"""Run the real broker as a subprocess, for end-to-end tests in any test folder.

Contract:
- `BrokerProcess(data_dir, *extra_args, env=None).start()` runs
  `python -m broker serve --data-dir DIR --host 127.0.0.1 --port 0 --kafka-port 0 ...`
  from the repository root, waits for the `strata listening on HOST:PORT` line
  and then `strata kafka listening on HOST:PORT` (generous timeout: a guard
  against hangs, not a speed assumption) and exposes `host`, `port`, `address`,
  `kafka_port`, `kafka_address`, `bootstrap` ("HOST:PORT" of the Kafka listener)
  and `data_dir`. `kafka_port=None` passes `--kafka-port -1` (no Kafka listener,
  one ready line); a fixed `port`/`kafka_port` is passed as given. The HTTP admin
  port is `admin_port` (0 by default: any free port; None passes `--admin-port -1`);
  when on, the third ready line gives `admin_port` and `admin_url(path)`. Every broker
  gets a Kafka port of its own (0 by default), never 9092, so brokers of tests
  running in parallel never collide. If the process exits before it is ready,
  `start()` raises BrokerStartFailed carrying the exit code and stderr.
  `open_files_limit=(soft, hard)` sets the child's RLIMIT_NOFILE before exec.
- `stop(sig=SIGTERM)` signals the broker and returns its exit code;
  `kill()` is `stop(SIGKILL)`; `printed` holds the lines the run wrote to stdout (every
  one once it is stopped); `restart()` starts it again on the same data
  directory (stderr of every run goes to one file). `stderr_text()` and `log_events()` (the JSON log
  lines; the broker logs JSON when stderr is not a terminal) read what it logged.
- Stderr goes to a file, never a pipe, so a chatty broker can never block on a
  full pipe. `close()` kills the process if it still runs; the `broker` fixture in
  tests/conftest.py calls it on teardown for every broker it started.
- `run_serve(*args)` runs `serve` to completion (for startup-error tests) and
  returns (exit code, stdout, stderr).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_PREFIX = "strata listening on "
KAFKA_READY_PREFIX = "strata kafka listening on "
LISTENER_PREFIX = "strata listener "
ADMIN_READY_PREFIX = "strata admin listening on http://"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0


class BrokerStartFailed(Exception):
    def __init__(self, message: str, returncode: int | None, stderr: str):
        super().__init__(f"{message} (exit code {returncode})\n--- broker stderr ---\n{stderr}")
        self.returncode = returncode
        self.stderr = stderr


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "broker", "serve", *args]


def run_serve(*args: str, env: dict[str, str] | None = None, timeout: float = START_TIMEOUT):
    """Run `strata serve ARGS` to completion: (exit code, stdout, stderr). Adds
    `--kafka-port 0` and `--admin-port 0` unless ARGS choose them, so 9092 and 9644
    are never taken."""
    if "--kafka-port" not in args:
        args = (*args, "--kafka-port", "0")
    if "--admin-port" not in args:
        args = (*args, "--admin-port", "0")
    done = subprocess.run(serve_command(*args), cwd=ROOT, env=_env(env), capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


class BrokerProcess:
    def __init__(self, data_dir: str | os.PathLike, *extra_args: str, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", port: int = 0, kafka_port: int | None = 0,
                 open_files_limit: tuple[int, int] | None = None, admin_port: int | None = 0):
        self.data_dir = str(data_dir)
        self.open_files_limit = open_files_limit
        self.extra_args = list(extra_args)
        self.env = env
        self.host = host
        self.port = port
        self.requested_port = port
        self.kafka_port: int | None = kafka_port
        self.requested_kafka_port = kafka_port
        self.admin_port: int | None = admin_port
        self.requested_admin_port = admin_port
        self._buffer = b""
        self.proc: subprocess.Popen | None = None
        self._stderr_path: str | None = None
        self.returncode: int | None = None
        self.runs = 0  # start() calls: each run logs one broker_started event
        self.printed: list[str] = []  # this run's stdout lines (all of them once stopped)

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def kafka_address(self) -> tuple[str, int]:
        assert self.kafka_port is not None, "this broker has no Kafka listener"
        return self.host, self.kafka_port

    @property
    def bootstrap(self) -> str:
        """bootstrap.servers for Kafka clients."""
        host, port = self.kafka_address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def admin_url(self, path: str) -> str:
        """http://HOST:PORT/path of the admin port."""
        assert self.admin_port is not None, "this broker has no admin port"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.admin_port}{path}"

    def start(self, timeout: float = START_TIMEOUT) -> BrokerProcess:
        kafka = -1 if self.requested_kafka_port is None else self.requested_kafka_port
        args = ["--data-dir", self.data_dir, "--host", self.host, "--port", str(self.requested_port),
                "--kafka-port", str(kafka),
                "--admin-port", str(-1 if self.requested_admin_port is None else self.requested_admin_port),
                *self.extra_args]
        if self._stderr_path is None:
            fd, self._stderr_path = tempfile.mkstemp(prefix="strata-broker-", suffix=".log")
            os.close(fd)
        self.returncode = None
        self._buffer = b""
        self.runs += 1
        self.printed = []
        with open(self._stderr_path, "ab") as stderr:  # every run of this broker, appended
            self.proc = subprocess.Popen(serve_command(*args), cwd=ROOT, env=_env(self.env),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=stderr, preexec_fn=self._preexec())
        deadline = time.monotonic() + timeout
        line = self._read_ready_line(deadline, READY_PREFIX)
        address = line[len(READY_PREFIX):].strip()
        host, _, port = address.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        # Then the Kafka line (asked for, or from a `listeners` setting) and the admin line.
        want_kafka = self.requested_kafka_port is not None
        want_admin = self.requested_admin_port is not None
        while want_kafka or want_admin:
            line = self._read_line(deadline)
            if line.startswith(KAFKA_READY_PREFIX):
                self.kafka_port = int(line[len(KAFKA_READY_PREFIX):].strip().rpartition(":")[2])
                want_kafka = False
            elif line.startswith(ADMIN_READY_PREFIX) and not want_kafka:
                self.admin_port = int(line[len(ADMIN_READY_PREFIX):].strip().rpartition(":")[2])
                want_admin = False
            else:
                self.kill()
                raise BrokerStartFailed(f"unexpected line {line!r}", self.returncode, self.stderr_text())
        return self

    def read_listeners(self, count: int, timeout: float = START_TIMEOUT) -> dict[tuple[str, str], tuple[str, int]]:
        """After start: every listener as {(protocol, NAME): (host, port)}, from this run's
        `broker_started` log event (stdout names only the listeners after the first of each
        protocol, `strata listener PROTOCOL NAME SECURITY on HOST:PORT`). Waits until it
        lists `count` listeners."""
        deadline = time.monotonic() + timeout
        while True:
            started = [e for e in self.log_events() if e.get("event") == "broker_started"]
            listeners = started[-1].get("listeners", []) if len(started) >= self.runs else []
            if len(listeners) >= count:
                out: dict[tuple[str, str], tuple[str, int]] = {}
                for entry in listeners:
                    host, _, port = entry["address"].rpartition(":")
                    out[(entry["protocol"], entry["name"])] = (host.strip("[]"), int(port))
                return out
            if time.monotonic() >= deadline:
                raise BrokerStartFailed(f"no broker_started event listing {count} listeners",
                                        self.returncode, self.stderr_text())
            time.sleep(0.05)

    def _preexec(self):
        """`open_files_limit=(soft, hard)`: RLIMIT_NOFILE set in the child before exec."""
        if self.open_files_limit is None:
            return None
        limits = self.open_files_limit

        def set_limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)

        return set_limit

    def _read_ready_line(self, deadline: float, prefix: str) -> str:
        line = self._read_line(deadline)
        if not line.startswith(prefix):
            self.kill()
            raise BrokerStartFailed(f"unexpected first line {line!r}", self.returncode, self.stderr_text())
        return line

    def _read_line(self, deadline: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        buf = self._buffer
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise BrokerStartFailed("broker did not print its listening line in time",
                                            self.returncode, self.stderr_text())
                if sel.select(min(left, 0.5)):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:  # stdout closed: the broker exited
                        self.returncode = self.proc.wait(timeout=STOP_TIMEOUT)
                        raise BrokerStartFailed("broker exited before listening", self.returncode,
                                                self.stderr_text())
                    buf += chunk
        raw, _, self._buffer = buf.partition(b"\n")
        self.printed.append(raw.decode())
        return raw.decode()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Send `sig`, wait for the exit, return the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait()
            raise
        finally:
            if self.proc.stdout is not None and not self.proc.stdout.closed:
                if self.proc.poll() is not None:  # exited: the rest of stdout is there to read
                    self.printed.extend((self._buffer + self.proc.stdout.read()).decode().splitlines())
                    self._buffer = b""
                self.proc.stdout.close()
        return self.returncode

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def restart(self, **kwargs) -> BrokerProcess:
        """Start again on the same data directory (after stop or kill); new port."""
        if self.running:
            self.stop()
        self.requested_port = 0 if self.requested_port == 0 else self.port
        if self.requested_kafka_port not in (None, 0):
            self.requested_kafka_port = self.kafka_port
        return self.start(**kwargs)

    def stderr_text(self) -> str:
        """Everything every run of this broker wrote to stderr."""
        if self._stderr_path is None:
            return ""
        with open(self._stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def log_events(self) -> list[dict]:
        events = []
        for line in self.stderr_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._stderr_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._stderr_path)
            self._stderr_path = None

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
