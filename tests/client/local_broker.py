"""Start the real broker process for end-to-end tests (`python -m broker serve`).

Used by the `broker` fixtures of tests/client and tests/cli: one process per
test session on a free port, data in a temporary directory. Its output is
drained by a thread (so a chatty broker never blocks on a full pipe) and kept
for failure messages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"strata listening on (\S+):(\d+)")
START_TIMEOUT_S = 30


class LocalBroker:
    def __init__(self, data_dir: str | os.PathLike):
        self.data_dir = str(data_dir)
        self.output: list[str] = []
        self.host: str | None = None
        self.port: int | None = None
        self._started = threading.Event()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--data-dir", self.data_dir,
             "--port", "0", "--host", "127.0.0.1"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._started.wait(START_TIMEOUT_S):
            self.stop()
            raise RuntimeError("broker did not start:\n" + "".join(self.output[-30:]))

    def _drain(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            found = LISTENING.search(line)
            if found and not self._started.is_set():
                self.host, self.port = found.group(1), int(found.group(2))
                self._started.set()
        self._started.set()  # exited: wake the waiter, which sees no port

    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError("broker is not running:\n" + "".join(self.output[-30:]))
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
