"""The broker inside the test process (a thread running uvloop), for tests that
look at the server's own state: its connections, flow-control counters and
`broker.net.server.sendfile_stats`. End-to-end behaviour is tested against the real
process (tests/broker_process.py); this harness is for introspection.
"""

from __future__ import annotations

import asyncio
import threading

import uvloop

from broker.app import BrokerApp
from broker.config.broker_config import BrokerConfig


class InProcessBroker:
    def __init__(self, data_dir, *overrides: str):
        self.config = BrokerConfig.load(overrides=["host.name=127.0.0.1", "port=0", "kafka.port=0", "admin.port=0",
                                                   *overrides],
                                        data_dir=str(data_dir), environ={})
        self.app = BrokerApp(self.config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="inprocess-broker", daemon=True)

    def _run(self) -> None:
        async def main():
            self.loop = asyncio.get_running_loop()
            try:
                await self.app.start()
            except BaseException as e:
                self._error = e
                self._ready.set()
                return
            self._ready.set()
            await self.app.run_until_shutdown()

        uvloop.run(main())

    def start(self) -> InProcessBroker:
        self._thread.start()
        if not self._ready.wait(60):
            raise TimeoutError("in-process broker did not start")
        if self._error is not None:
            raise self._error
        return self

    @property
    def address(self) -> tuple[str, int]:
        assert self.app.address is not None
        return self.app.address

    @property
    def server(self):
        return self.app.server

    def call_in_loop(self, fn, *args):
        """Run fn(*args) on the broker's loop and return its result (thread-safe)."""
        assert self.loop is not None

        async def run():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.app.request_shutdown)
        self._thread.join(60)
