"""A scripted in-process broker for client unit tests (no storage, no real server).

It speaks the native protocol through the `protocol` codec and knows just
enough: METADATA answers from a fixed topic table, PRODUCE hands out
consecutive offsets per partition and records what arrived (entries read with
kafka_format), everything else answers INVALID_REQUEST. Hooks let a test
drop connections to exercise retries. Runs on the test's own event loop.
"""

from __future__ import annotations

import asyncio

from kafka_format import iter_entries
from protocol import (
    ErrorCode,
    FrameDecoder,
    MetadataResponse,
    PartitionMetadata,
    ProduceRequest,
    ProduceResponse,
    TopicMetadata,
    encode_response,
    error_response,
    parse_request,
)
from protocol.requests import MetadataRequest


class FakeBroker:
    def __init__(self, topics: dict[str, int]):
        self.topics = dict(topics)
        self.produced: list[tuple[str, int, list]] = []  # (topic, partition, records) per request
        self.next_offset: dict[tuple[str, int], int] = {}
        self.drop_produce_requests = 0  # close the connection instead of answering, this many times
        self.hang = False  # a hung broker: read requests, never answer (until cleared)
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()
        for task in list(self._handlers):  # the server leaves accepted connections open
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        self._handlers.add(task)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                decoder.feed(data)
                for frame in decoder.frames():
                    if self.hang:
                        continue
                    answer = self._answer(parse_request(frame))
                    if answer is None:
                        writer.close()
                        return
                    writer.write(answer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    def _answer(self, request) -> bytes | None:
        if isinstance(request, MetadataRequest):
            names = request.topics or tuple(self.topics)
            return encode_response(MetadataResponse(ErrorCode.NONE, tuple(
                TopicMetadata(name, ErrorCode.NONE,
                              tuple(PartitionMetadata(p, 0, 0) for p in range(self.topics[name])))
                if name in self.topics else
                TopicMetadata(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                for name in names)))
        if isinstance(request, ProduceRequest):
            if self.drop_produce_requests:
                self.drop_produce_requests -= 1
                return None
            if request.partition >= self.topics.get(request.topic, 0):
                return error_response(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            records = [r for e in iter_entries(bytes(request.message_set)) for r in e.records()]
            tp = (request.topic, request.partition)
            base = self.next_offset.get(tp, 0)
            self.next_offset[tp] = base + len(records)
            self.produced.append((request.topic, request.partition, records))
            return encode_response(ProduceResponse(ErrorCode.NONE, base, -1))
        return error_response(ErrorCode.INVALID_REQUEST)
