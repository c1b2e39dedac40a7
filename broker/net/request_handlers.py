"""What a connection (broker/net/connection.py) serves and how it may answer: the reply
types, the `RequestHandlers` protocol both adapters implement (the native `Handlers`,
`broker.kafka.KafkaApis`), and the interfaces a handlers class declares by subclassing.

- Fast path (`FastPath`, an interface a RequestHandlers class declares by
  subclassing it): while a connection is idle (nothing queued, nothing being
  handled, the write buffer under its limit, not draining), a frame just read is
  handled right in the socket callback: `handle_now` (native: a PRODUCE appended
  inline, a FETCH that need not wait) answers it synchronously and the reply is
  written at once, a FileSlice by sendfile while the socket takes it (the rest, if
  any, goes to the task), so a request costs no task wake-up, no future, no Event
  (an asyncio.Event wait also costs a getpid). A frame `handle_now` declines
  (None) queues for the task; a keyed frame is begun at once. Since the
  connection was idle, every earlier request is answered by then: order and
  visibility are those of the task.
- Streaming: a frame the handlers key with `run_key` (native: a PRODUCE for the
  executor, keyed by partition) is handled with `begin`, which starts it at once
  and returns the future of its reply. While every request from the one being
  answered to the last one read is begun with the same key, a new frame with that
  key is begun as soon as it is read, before its turn: its append queues behind
  the earlier ones (the partition's appender runs them in order), so a stream of
  pipelined PRODUCEs keeps the append thread busy while replies still go out in
  order, each one when its own append is done. Any other request breaks the
  streak and waits for every earlier reply. `stats.begun_early` counts
  them.
- Per-connection state (`PerConnection`, declared like FastPath by subclassing):
  handlers that keep state per connection (native: the protocol version settled
  by a HANDSHAKE) give each Connection its own view, `for_connection()`, which it
  serves instead of the shared handlers.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Protocol

from broker.net.listeners import ConnectionContext
from protocol import ProtocolError
from storage.file_records import FileSlice

Part = bytes | FileSlice
Reply = list[Part]
Frame = memoryview | bytes  # one request frame, size stripped


class CloseConnection(Exception):
    """Raised by `handle` when the protocol says to close without an answer (Kafka: a
    request it cannot parse, an unsupported API version). Earlier replies are flushed."""


class CloseAfterReply(CloseConnection):
    """Raised by `handle` to answer `reply` and then close (a failed SASL authentication)."""

    def __init__(self, reply: list):
        super().__init__()
        self.reply = reply


class RequestHandlers(Protocol):
    """What a connection serves: the native `Handlers` or `broker.kafka.KafkaApis`.

    - `handle(frame, conn)`: `conn` is the connection's ConnectionContext
      (broker/net/listeners.py: listener, security protocol, peer address, client
      certificate subject). The reply parts in order (bytes, or FileSlices sent with
      sendfile and released by the connection), None for no reply at all (Kafka's
      acks=0), or raise CloseConnection. Must not raise anything else.
    - `bad_frame_reply(error)`: the reply to a frame the decoder refused while the
      framing is still in step (too short); None closes the connection instead.
    - `fatal_reply(error)`: the bytes to write before closing after a frame over
      socket.request.max.bytes (may be empty), straight to the transport.
    - `begin_shutdown()`: answer long polls now.
    A class that also answers without a task declares it by subclassing `FastPath`."""

    loop: asyncio.AbstractEventLoop

    async def handle(self, frame: Frame, conn: ConnectionContext) -> Reply | None: ...

    def bad_frame_reply(self, error: ProtocolError) -> Reply | None: ...

    def fatal_reply(self, error: ProtocolError) -> list[bytes]: ...

    def begin_shutdown(self) -> None: ...


class FastPath(ABC):
    """The requests a RequestHandlers class answers without the connection's task.

    - `handle_now(frame, conn)`: the reply if it can be made at once with no waiting
      (same answer as `handle`), or None, having done nothing, to send the frame to
      `handle`. Never raises. Called only when every earlier request on the
      connection is answered.
    - `run_key(frame)` and `begin(frame, conn)`: a frame with a run key (not None)
      is handled by `begin`, which starts the work and returns a future of the reply
      (never raises; the future never fails). Work begun for frames of the same key
      takes effect in the order begun (native: large PRODUCEs, keyed by partition,
      appended in order by the partition's appender). So the connection may begin a
      keyed frame before its turn, as soon as it is read, when every request before
      it on the connection is already begun with the same key."""

    @abstractmethod
    def handle_now(self, frame: Frame, conn: ConnectionContext) -> Reply | None: ...

    @abstractmethod
    def run_key(self, frame: Frame) -> Any: ...

    @abstractmethod
    def begin(self, frame: Frame, conn: ConnectionContext) -> asyncio.Future: ...


class NoFastPath(FastPath):
    """The fast path of handlers that declare none: every frame goes to `handle`."""

    def handle_now(self, frame: Frame, conn: Any = None) -> Reply | None:
        return None

    def run_key(self, frame: Frame) -> Any:
        return None

    def begin(self, frame: Frame, conn: Any = None) -> asyncio.Future:
        raise AssertionError("begin() on a frame without a run key")


NO_FAST_PATH = NoFastPath()


class PerConnection(ABC):
    """Handlers that keep state per connection: each Connection serves the
    RequestHandlers (maybe a FastPath) `for_connection(context)` returns, made when
    the connection is; the server's shared instance gets `begin_shutdown`."""

    loop: asyncio.AbstractEventLoop

    @abstractmethod
    def for_connection(self, context: ConnectionContext) -> RequestHandlers: ...

    @abstractmethod
    def begin_shutdown(self) -> None: ...
