"""One real broker process for a whole test session (client and CLI tests).

Built on tests/broker_process.py (the server's own harness): `live_broker`
is session-scoped because these tests only need a running broker and use
fresh topic and group names (`unique`), and starting a broker per test would
cost a second each. Tests that stop or restart a broker start their own.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.broker_process import ROOT, BrokerProcess

REPO = ROOT


class LiveBroker:
    def __init__(self, process: BrokerProcess):
        self.process = process

    @property
    def address(self) -> str:
        """"host:port", as --bootstrap-server and the client take it."""
        return f"{self.process.host}:{self.process.port}"


@pytest.fixture(scope="session")
def live_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("live-broker"))
    process.start()
    yield LiveBroker(process)
    process.close()


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
