"""Native FETCH version 2 against the real broker process, over raw sockets: offsets and
the aborted list, isolation levels, the version-1 bytes, and a long poll's answer."""

from __future__ import annotations

import struct

import pytest

from protocol import (
    ErrorCode,
    FetchRequest,
    ProduceRequest,
)
from tests.broker.conftest import batch
from tests.broker.wire import NativeClient

NONE = ErrorCode.NONE


def recv_bytes(c: NativeClient) -> bytes:
    """The next response frame as raw bytes (size stripped)."""
    c.pending.popleft()
    return bytes(c.recv_frame())


# ---- FETCH version 2 ------------------------------------------------------------------------

@pytest.mark.parametrize("isolation", [0, 1])
def test_fetch_v2_answers_offsets_and_an_empty_aborted_list(connect, new_topic, isolation):
    topic = new_topic()
    c = connect()
    c.handshake()
    first = batch(b"a", b"b")
    assert c.call(ProduceRequest(topic, 0, first)).error == NONE
    c.send(FetchRequest(topic, 0, 0, 1 << 20, 0, isolation))
    raw = recv_bytes(c)
    error, hw, lso, start, aborted = struct.unpack_from(">hqqqi", raw)
    assert (error, hw, lso, start, aborted) == (0, 2, 2, 0, 0)
    assert len(raw) == 30 + len(first)
    at_end = c.call(FetchRequest(topic, 0, 2, 4096, 0, isolation))
    assert at_end.high_watermark == at_end.last_stable_offset == 2 and bytes(at_end.message_set) == b""


def test_fetch_v2_with_an_unknown_isolation_level_is_invalid_request(connect, new_topic):
    topic = new_topic()
    c = connect()
    c.handshake()
    bad = c.call(FetchRequest(topic, 0, 0, 4096, 0, 2))
    assert bad.error == ErrorCode.INVALID_REQUEST and "isolationLevel 2" in bad.message


def test_fetch_v1_bytes_are_the_v2_message_set_alone(connect, new_topic):
    topic = new_topic()
    c = connect()
    data = batch(b"a")
    c.call(ProduceRequest(topic, 0, data))
    c.send(FetchRequest(topic, 0, 0, 4096, 0))
    v1 = recv_bytes(c)
    v2 = connect()
    v2.handshake()
    v2.send(FetchRequest(topic, 0, 0, 4096, 0))
    assert v1 == b"\x00\x00" + recv_bytes(v2)[30:] and len(v1) == 2 + len(data)
