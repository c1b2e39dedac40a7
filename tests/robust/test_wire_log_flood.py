"""A flood of bad frames writes a bounded number of log lines (issue 14, item 6).

100,000 bad Kafka requests (each closes its connection, as Kafka does, so the
client reconnects for every one) and 100,000 bad native frames (answered
INVALID_REQUEST on one connection, which stays open) go to `strata serve`; its
log grows by a few dozen lines, not one per frame: bad requests are logged once
per connection and reason, counted after that, and capped broker-wide
(broker/net/bad_request_log.py), with a summary line carrying the counts.
"""

from __future__ import annotations

import socket
import struct
import threading

from tests.robust.wire_fuzz import FuzzClient

FRAMES = 100_000
KAFKA_CLIENTS = 4
SIZE = struct.Struct(">i")
# Bounded by the limiter: at most max_lines + 1 per 10 s window (20 + 1), over a
# run of well under a minute, plus the first lines.
MAX_LINES = 150


def _bad_kafka_frames(count: int) -> list[bytes]:
    """Requests Kafka refuses to parse: CreateTopics v5 whose topics array is null, a
    header cut short, an unknown api key."""
    # header v2 (null client id, no tagged fields), then a compact array count 0 = null
    create_null = struct.pack(">hhih", 19, 5, 0, -1) + b"\x00" + b"\x00"
    header_cut = struct.pack(">hhi", 3, 1, 0) + b"\x00"
    unknown_api = struct.pack(">hhih", 999, 0, 0, -1)
    kinds = (create_null, header_cut, unknown_api)
    return [kinds[i % len(kinds)] for i in range(count)]


def _flood_native(host: str, port: int, count: int) -> int:
    """Send `count` bad native frames pipelined (unknown types, 1-byte frames); return
    how many INVALID_REQUEST answers came back."""
    unknown_type = SIZE.pack(2) + struct.pack(">h", 0x7FFF)
    too_short = SIZE.pack(1) + b"\x00"
    sock = socket.create_connection((host, port), timeout=30)
    answers = 0

    def read() -> None:
        nonlocal answers
        buffer = bytearray()
        while answers < count:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            buffer += chunk
            while len(buffer) >= 6:
                (size,) = SIZE.unpack_from(buffer, 0)
                if len(buffer) < 4 + size:
                    break
                (error,) = struct.unpack_from(">h", buffer, 4)
                assert error == 42  # INVALID_REQUEST
                answers += 1
                del buffer[:4 + size]

    reader = threading.Thread(target=read)
    reader.start()
    batch = 1000
    for start in range(0, count, batch):
        sock.sendall(b"".join(unknown_type if (start + i) % 2 else too_short for i in range(batch)))
    reader.join()
    sock.close()
    return answers


def test_bad_frame_floods_write_a_bounded_number_of_log_lines(broker):
    server = broker()
    before = len(server.stderr_text().splitlines())

    assert _flood_native(server.host, server.port, FRAMES) == FRAMES

    frames = _bad_kafka_frames(FRAMES)
    results: list[tuple[int, int]] = []

    def run(offset: int) -> None:
        client = FuzzClient(*server.kafka_address)
        try:
            results.append(client.run(frames[offset::KAFKA_CLIENTS]))
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(KAFKA_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(closed for _, closed in results) == FRAMES  # each one closed its connection

    assert server.running
    server.stop()
    events = server.log_events()
    lines = server.stderr_text().splitlines()[before:]
    assert len(lines) <= MAX_LINES, len(lines)
    assert "Traceback" not in server.stderr_text()
    # Nothing is lost: the counts of what was not logged line by line are in the summaries.
    reported: dict[str, int] = {}
    for event in events:
        name = event.get("event")
        if name in ("bad_request", "bad_frame", "kafka_bad_request", "kafka_unsupported_request"):
            reported[name] = reported.get(name, 0) + event.get("repeated", 1)
        elif name == "bad_requests_not_logged":
            for reason, count in event["counts"].items():
                reported[reason] = reported.get(reason, 0) + count
    assert reported.get("bad_request", 0) + reported.get("bad_frame", 0) == FRAMES  # native
    assert reported.get("kafka_bad_request", 0) + reported.get("kafka_unsupported_request", 0) == FRAMES
    print(f"{2 * FRAMES} bad frames, {len(lines)} log lines")
