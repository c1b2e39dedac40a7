"""broker.net.connection.Connection driven by hand, as uvicorn's tests/protocols do: a
mock transport records what is written and whether reading is paused, a mock loop
runs the request task on the test's loop and lets the test set the clock; the
handlers are small fakes. The end-to-end behaviour over real sockets is in
test_server_internals.py, test_fast_path.py and tests/robust.

Frames are native-framed (size:int32 | body of 2 bytes or more); the fake handlers
answer a body b"xx" with b"re:xx"."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest

from broker.net.connection import Connection
from broker.net.flow_control import FlowControl
from broker.net.request_handlers import CloseConnection, FastPath
from broker.net.server import BrokerServer, ServerStats
from storage.file_records import FileSlice

SIZE = struct.Struct(">i")
MAX_QUEUED = 4
WRITE_HIGH = 1024


def frame(body: bytes) -> bytes:
    return SIZE.pack(len(body)) + body


class MockTransport:
    def __init__(self):
        self.written: list[bytes] = []
        self.sends = 0  # write and writelines calls (each one send on a real transport)
        self.buffered = 0  # what get_write_buffer_size answers
        self.read_paused = False
        self.closed = False
        self.aborted = False
        self.limits: tuple[int, int] | None = None

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 40000), "socket": None}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None):
        self.limits = (high, low)

    def get_write_buffer_size(self):
        return self.buffered

    def write(self, data):
        self.written.append(bytes(data))
        self.sends += 1

    def writelines(self, parts):
        self.written.extend(bytes(data) for data in parts)
        self.sends += 1

    def pause_reading(self):
        self.read_paused = True

    def resume_reading(self):
        self.read_paused = False

    def is_closing(self):
        return self.closed or self.aborted

    def close(self):
        self.closed = True

    def abort(self):
        self.aborted = True


class MockLoop:
    """The test's running loop for futures and tasks (recorded), a clock the test sets."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self.now = 100.0
        self.tasks: list[asyncio.Task] = []
        self.timers: list[tuple[float, object]] = []

    def create_task(self, coro):
        task = self._loop.create_task(coro)
        self.tasks.append(task)
        return task

    def create_future(self):
        return self._loop.create_future()

    def time(self):
        return self.now

    def call_later(self, delay, callback, *args):
        self.timers.append((delay, callback))
        return self._loop.call_later(3600, lambda: None)


class EchoHandlers:
    """A plain RequestHandlers: b"re:" + body; b"wait" waits for `release`; b"close"
    raises CloseConnection; b"none" answers nothing; b"file" answers a FileSlice."""

    def __init__(self, loop, file_slice=None):
        self.loop = loop
        self.release = asyncio.Event()
        self.handled: list[bytes] = []
        self.file_slice = file_slice

    async def handle(self, data, peer=None):
        body = bytes(data)
        self.handled.append(body)
        if body == b"wait":
            await self.release.wait()
        if body == b"close":
            raise CloseConnection()
        if body == b"none":
            return None
        if body == b"file":
            return [frame(b"f")[:4], self.file_slice]
        return [frame(b"re:" + body)]

    def bad_frame_reply(self, error):
        return [frame(b"bad")]

    def fatal_reply(self, error):
        return [frame(b"fatal")]

    def begin_shutdown(self):
        pass


class FastEcho(EchoHandlers, FastPath):
    """EchoHandlers with the fast path: bodies starting b"now" are answered at once."""

    def __init__(self, loop):
        super().__init__(loop)
        self.now: list[bytes] = []

    def handle_now(self, data, peer=None):
        body = bytes(data)
        if not body.startswith(b"now"):
            return None
        self.now.append(body)
        return [frame(b"re:" + body)]

    def run_key(self, data):
        return None

    def begin(self, data, peer=None):
        raise AssertionError("no run keys here")


def connect(handlers, **limits):
    server = BrokerServer(handlers, max_frame_bytes=limits.get("max_frame_bytes", 1 << 20),
                          max_queued_requests=MAX_QUEUED, write_buffer_high=WRITE_HIGH)
    conn = Connection(server)
    transport = MockTransport()
    conn.connection_made(transport)
    return server, conn, transport


def feed(conn: Connection, data: bytes) -> None:
    """What uvloop does: get_buffer, copy what fits, buffer_updated."""
    while data:
        buffer = conn.get_buffer(len(data))
        n = min(len(buffer), len(data))
        buffer[:n] = data[:n]
        conn.buffer_updated(n)
        data = data[n:]


async def settle():
    for _ in range(20):
        await asyncio.sleep(0)


def run(test):
    async def main():
        loop = MockLoop(asyncio.get_running_loop())
        try:
            await test(loop)
        finally:
            for task in loop.tasks:
                task.cancel()
    asyncio.run(main())


def test_replies_go_out_in_request_order_and_a_slow_request_holds_back_later_ones():
    async def test(loop):
        handlers = EchoHandlers(loop)
        server, conn, transport = connect(handlers)
        feed(conn, frame(b"wait") + frame(b"aa") + frame(b"bb"))
        await settle()
        assert transport.written == [] and handlers.handled == [b"wait"]  # one at a time
        handlers.release.set()
        await settle()
        assert transport.written == [frame(b"re:wait"), frame(b"re:aa"), frame(b"re:bb")]
        assert server.stats.requests == 3 and conn.in_flight == 0

    run(test)


def test_reading_pauses_at_max_queued_requests_and_resumes_when_answered():
    async def test(loop):
        handlers = EchoHandlers(loop)
        server, conn, transport = connect(handlers)
        feed(conn, frame(b"wait") + b"".join(frame(b"n%d" % i) for i in range(10)))
        assert transport.read_paused and conn.in_flight == MAX_QUEUED
        assert conn.decoder.buffered > 0  # the rest stays as raw bytes in the decoder
        handlers.release.set()
        await settle()
        assert not transport.read_paused and len(transport.written) == 11
        assert server.stats.read_pauses >= 1

    run(test)


def test_a_paused_transport_pauses_reading_and_the_task_waits_for_the_drain():
    async def test(loop):
        handlers = EchoHandlers(loop)
        server, conn, transport = connect(handlers)
        conn.pause_writing()  # the transport's buffer is over the high-water mark
        assert transport.read_paused
        feed(conn, frame(b"aa"))  # bytes already on their way still arrive
        await settle()
        assert transport.written == [] and handlers.handled == []
        conn.resume_writing()
        await settle()
        assert transport.written == [frame(b"re:aa")] and not transport.read_paused
        assert server.stats.write_pauses == 1

    run(test)


def test_the_fast_path_answers_in_the_socket_callback_without_the_task():
    async def test(loop):
        handlers = FastEcho(loop)
        server, conn, transport = connect(handlers)
        feed(conn, frame(b"now1"))
        assert transport.written == [frame(b"re:now1")]  # before the task ever ran
        assert server.stats.answered_at_once == 1 and handlers.handled == []
        feed(conn, frame(b"slow") + frame(b"now2"))  # declined, and busy: both go to the task
        await settle()
        assert transport.written[1:] == [frame(b"re:slow"), frame(b"re:now2")]
        assert handlers.now == [b"now1"]

    run(test)


def test_the_fast_path_answers_the_frames_of_one_read_in_one_write():
    async def test(loop):
        handlers = FastEcho(loop)
        server, conn, transport = connect(handlers)
        feed(conn, frame(b"now1") + frame(b"now2") + frame(b"now3"))
        assert transport.written == [frame(b"re:now1"), frame(b"re:now2"), frame(b"re:now3")]
        assert transport.sends == 1 and server.stats.answered_at_once == 3
        feed(conn, frame(b"now4"))
        assert transport.written[3:] == [frame(b"re:now4")] and transport.sends == 2

    run(test)


def test_the_replies_held_go_out_before_a_large_request_is_handled():
    async def test(loop):
        handlers = FastEcho(loop)
        server, conn, transport = connect(handlers)
        large = b"now" + b"x" * 20_000
        feed(conn, frame(b"now1") + frame(large) + frame(b"now3"))
        assert transport.written == [frame(b"re:now1"), frame(b"re:" + large), frame(b"re:now3")]
        assert transport.sends == 2  # re:now1 alone, then the rest of the read

    run(test)


def test_handlers_without_the_fast_path_interface_are_never_asked_for_it():
    class Sneaky(EchoHandlers):  # has the method, but does not declare FastPath
        def handle_now(self, data, peer=None):
            raise AssertionError("not part of this handler's interface")

    async def test(loop):
        server, conn, transport = connect(Sneaky(loop))
        feed(conn, frame(b"now"))
        await settle()
        assert transport.written == [frame(b"re:now")]

    run(test)


def test_a_short_frame_is_answered_and_an_oversized_one_answered_then_closed():
    async def test(loop):
        handlers = EchoHandlers(loop)
        server, conn, transport = connect(handlers, max_frame_bytes=64)
        feed(conn, frame(b"a") + frame(b"aa") + SIZE.pack(1000) + b"x" * 10)
        await settle()
        assert transport.written == [frame(b"bad"), frame(b"re:aa"), frame(b"fatal")]
        assert transport.closed and server.stats.frames_too_large == 1

    run(test)


def test_close_connection_flushes_earlier_replies_then_closes():
    async def test(loop):
        server, conn, transport = connect(EchoHandlers(loop))
        feed(conn, frame(b"aa") + frame(b"none") + frame(b"close") + frame(b"bb"))
        await settle()
        assert transport.written == [frame(b"re:aa")] and transport.closed

    run(test)


def test_after_eof_queued_requests_are_answered_then_the_connection_closes():
    async def test(loop):
        handlers = EchoHandlers(loop)
        server, conn, transport = connect(handlers)
        feed(conn, frame(b"wait") + frame(b"aa"))
        assert conn.eof_received() is True  # keep the write side open
        handlers.release.set()
        await settle()
        assert transport.written == [frame(b"re:wait"), frame(b"re:aa")] and transport.closed

    run(test)


def test_a_lost_connection_cancels_its_task_and_releases_the_reply_slices(tmp_path):
    async def test(loop):
        path = tmp_path / "segment"
        path.write_bytes(b"y" * 100)
        fd = os.open(path, os.O_RDONLY)
        released = []

        class Records:  # what a FileSlice pins: a segment file's descriptor
            def fileno(self):
                return fd

            def retain(self):
                pass

            def release(self):
                released.append(True)

        file_slice = FileSlice(Records(), 0, 100)
        try:
            handlers = EchoHandlers(loop, file_slice)
            server, conn, transport = connect(handlers)
            feed(conn, frame(b"file"))
            await settle()
            # No socket fd in the mock: the writer copies the slice through the transport.
            assert b"".join(transport.written) == frame(b"f")[:4] + b"y" * 100 and released
            feed(conn, frame(b"wait"))
            await settle()
            conn.connection_lost(None)
            await settle()
            assert loop.tasks[0].done() and conn.closed.done() and conn not in server.connections
        finally:
            os.close(fd)

    run(test)


def test_idle_time_is_the_mock_clock():
    async def test(loop):
        server, conn, transport = connect(EchoHandlers(loop))
        loop.now = 200.0
        feed(conn, frame(b"aa"))
        assert conn.last_active == 200.0

    run(test)


@pytest.mark.parametrize("want", [False, True])
def test_flow_control_changes_the_transport_only_on_a_change(want):
    stats = ServerStats()
    flow = FlowControl(stats)
    transport = MockTransport()
    flow.attach(transport)
    for _ in range(3):
        flow.set_reading(want)
    assert transport.read_paused is (not want) and stats.read_pauses == (0 if want else 1)
    flow.close()
    flow.set_reading(not want)  # a closed connection is left alone
    assert transport.read_paused is (not want)


def test_flow_control_wakes_writers_on_resume_and_for_good_on_close():
    async def main():
        flow = FlowControl(ServerStats())
        flow.pause_writing()
        waiting = asyncio.ensure_future(flow.writable())
        await asyncio.sleep(0)
        assert not waiting.done()
        flow.resume_writing()
        await asyncio.sleep(0)
        assert waiting.done()
        flow.pause_writing()
        flow.close()
        await asyncio.wait_for(flow.writable(), 1)

    asyncio.run(main())
