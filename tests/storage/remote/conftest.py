"""Remote stores for the tiered-storage tests: a directory (file store) and moto's
S3 server, run as its own process on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from storage.remote.config import RemoteLogConfig
from storage.remote.store import FileRemoteStorageManager, S3RemoteStorageManager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto's S3 server process on 127.0.0.1; `stop()` and `start()` again on the same port.
    A subclass names another S3 server's command (`command`)."""

    name = "moto server"

    def __init__(self, log_path: str) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process keeps it
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not listen within 60 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = S3Server(str(tmp_path_factory.mktemp("moto") / "moto.log"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_config(s3_server, monkeypatch):
    """A fresh bucket on the session's S3 server and the broker settings that name it."""
    bucket = f"tier-{uuid.uuid4().hex[:12]}"
    if s3_server.process is None:
        s3_server.start()
    s3_server.create_bucket(bucket)
    environ = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    return RemoteLogConfig.from_props({"remote.log.storage.system.enable": "true",
                                       "rsm.config.url": f"s3://{bucket}/cluster-a",
                                       "rsm.config.s3.endpoint": s3_server.endpoint,
                                       "rsm.config.s3.region": "us-east-1"}, environ=environ)


@pytest.fixture
def file_config(tmp_path):
    return RemoteLogConfig.from_props({"remote.log.storage.system.enable": "true",
                                       "rsm.config.url": f"file://{tmp_path / 'remote'}"}, environ={})


@pytest.fixture(params=["file", "s3"])
def remote_config(request):
    """The same test against the file store and against the S3 server."""
    return request.getfixturevalue(f"{request.param}_config")


def open_rsm(config: RemoteLogConfig):
    assert config.location is not None
    if config.location.scheme == "file":
        return FileRemoteStorageManager(config.location, chunk_bytes=config.fetch_chunk_bytes)
    return S3RemoteStorageManager(config)


@pytest.fixture
def rsm(remote_config):
    manager = open_rsm(remote_config)
    yield manager
    manager.close()


