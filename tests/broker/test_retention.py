"""Retention in the running broker: the periodic pass, the delayed file removal,
DELETE_RECORDS removing whole segments, all while produce and fetch go on."""

from __future__ import annotations

import os
import time

from broker.config.broker_config import BrokerConfig
from kafka_format import iter_records
from protocol import CreateTopicRequest, DeleteRecordsRequest, ErrorCode, FetchRequest, OffsetsRequest, ProduceRequest
from tests.broker.conftest import batch
from tests.broker.wire import NativeClient

NONE = ErrorCode.NONE
GUARD_S = 30.0  # a failure guard, not a speed assumption


def wait_for(condition, what: str):
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def fetch_all(c: NativeClient, offset: int, end: int) -> list:
    """Records from `offset` to `end` (a fetch answers from one segment at a time)."""
    records = []
    while offset < end:
        fetched = c.call(FetchRequest("r", 0, offset, 1 << 20, 0))
        assert fetched.error == NONE
        got = [r for r in iter_records(bytes(fetched.message_set)) if r.offset >= offset]
        assert got
        records += got
        offset = got[-1].offset + 1
    return records


def value(i: int) -> bytes:
    return b"record %04d " % i + b"x" * 80  # every batch the same size


def test_retention_deletes_old_segments_while_produce_and_fetch_go_on(broker):
    b = broker("--set", "log.retention.check.interval.ms=100", "--set", "log.initial.task.delay.ms=0",
               "--set", "log.segment.delete.delay.ms=0")
    size = len(batch(value(0)))
    directory = os.path.join(b.data_dir, "r-0")

    def segment_files():
        names = os.listdir(directory)
        return sorted(n for n in names if n.endswith(".log")), [n for n in names if n.endswith(".deleted")]

    with NativeClient(b.host, b.port) as c:
        configs = [("segment.bytes", str(3 * size)), ("retention.bytes", str(6 * size))]
        assert c.call(CreateTopicRequest("r", 1, configs)).error == NONE

        def log_start() -> int:
            return c.call(OffsetsRequest("r", 0, -2, 1)).offsets[0]

        for i in range(30):  # 10 segments of 3; 6 records' worth is kept: 2 segments
            assert c.call(ProduceRequest("r", 0, batch(value(i)))).base_offset == i
        wait_for(lambda: log_start() == 24 and segment_files() == (
            ["00000000000000000024.log", "00000000000000000027.log"], []), "size retention")
        assert c.call(FetchRequest("r", 0, 0, 1 << 20, 0)).error == ErrorCode.OFFSET_OUT_OF_RANGE
        assert [r.value for r in fetch_all(c, 24, 30)] == [value(i) for i in range(24, 30)]

        for i in range(30, 33):  # one more segment: the oldest goes
            assert c.call(ProduceRequest("r", 0, batch(value(i)))).base_offset == i
        wait_for(lambda: log_start() == 27 and segment_files()[1] == [], "the next pass")
        assert [r.offset for r in fetch_all(c, 27, 33)] == list(range(27, 33))

        # DELETE_RECORDS: whole segments below the new start go before the answer.
        assert c.call(DeleteRecordsRequest("r", 0, 31)).log_start_offset == 31
        assert "00000000000000000027.log" not in os.listdir(directory)
        wait_for(lambda: segment_files() == (["00000000000000000030.log"], []), "the file removal")
        assert [r.offset for r in fetch_all(c, 31, 33)] == [31, 32]

    events = b.log_events()
    deleted = [e for e in events if e["event"] == "segments_deleted"]
    assert sum(e["retention_size_breach_segments"] for e in deleted) == 9
    assert sum(e["log_start_offset_breach_segments"] for e in deleted) == 1
    assert any(e["event"] == "retention_pass" and e["segments"] > 0 for e in events)
    assert b.stop() == 0
    b.restart()
    with NativeClient(b.host, b.port) as c:
        assert c.call(OffsetsRequest("r", 0, -2, 1)).offsets == (31,)
        assert c.call(OffsetsRequest("r", 0, -1, 1)).offsets == (33,)
        assert c.call(ProduceRequest("r", 0, batch(value(33)))).base_offset == 33
    assert b.stop() == 0


def test_retention_check_interval_is_read(tmp_path):
    config = BrokerConfig.load(data_dir=str(tmp_path), overrides=["log.retention.check.interval.ms=250"],
                               environ={})
    assert config.retention_check_interval_ms == 250
