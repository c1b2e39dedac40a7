"""Log compaction in the running broker: the cleaner task compacts a topic while
produce and fetch go on, a consumer from the beginning sees every key's latest
value at its offset, keyless records are refused, and shutdown is clean."""

from __future__ import annotations

import contextlib
import os
import time

from broker.config.broker_config import BrokerConfig
from kafka_format import build_batch, iter_entries
from protocol import CreateTopicRequest, ErrorCode, FetchRequest, ProduceRequest
from tests.broker.wire import NativeClient

NONE = ErrorCode.NONE
GUARD_S = 60.0  # a failure guard, not a speed assumption


def wait_for(condition, what: str):
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def consume_all(c: NativeClient, topic: str, end: int) -> list:
    """Every record from offset 0 to `end`, entry by entry (a compacted log has gaps
    and may hold empty batches)."""
    records, offset = [], 0
    while offset < end:
        fetched = c.call(FetchRequest(topic, 0, offset, 1 << 20, 0))
        assert fetched.error == NONE
        entries = list(iter_entries(bytes(fetched.message_set)))
        assert entries, f"nothing at {offset}"
        for entry in entries:
            records += [r for r in entry.records() if r.offset >= offset]
        offset = entries[-1].last_offset + 1
    return records


def log_bytes(directory: str) -> int:
    """Bytes of the partition's .log files; a segment the cleaner swaps out between the
    listing and its stat counts nothing."""
    total = 0
    for name in os.listdir(directory):
        if name.endswith(".log"):
            with contextlib.suppress(FileNotFoundError):
                total += os.path.getsize(os.path.join(directory, name))
    return total


def test_the_cleaner_compacts_a_topic_and_consumers_see_the_latest_values(broker):
    b = broker("--set", "log.cleaner.backoff.ms=100", "--set", "log.initial.task.delay.ms=0")
    directory = os.path.join(b.data_dir, "c-0")
    keys, versions = 40, 25
    latest: dict[bytes, tuple[int, bytes]] = {}
    with NativeClient(b.host, b.port) as c:
        configs = [("cleanup.policy", "compact"), ("segment.bytes", "4096")]
        assert c.call(CreateTopicRequest("c", 1, configs)).error == NONE
        # keyless records are refused on a compacted topic, as Kafka does
        assert c.call(ProduceRequest("c", 0, build_batch([(None, b"x")]))).error == ErrorCode.INVALID_RECORD
        produced = 0  # bytes appended: the cleaner may already be shrinking the log meanwhile
        for version in range(versions):
            for first in range(0, keys, 8):
                recs = [(b"key-%02d" % k, b"value %d of %d " % (version, k) + b"." * 40)
                        for k in range(first, first + 8)]
                batch = build_batch(recs)
                produced += len(batch)
                response = c.call(ProduceRequest("c", 0, batch))
                assert response.error == NONE
                for i, (key, value) in enumerate(recs):
                    latest[key] = (response.base_offset + i, value)
        end = response.base_offset + 8
        wait_for(lambda: log_bytes(directory) < produced / 3, "the cleaner to shrink the log")

        records = consume_all(c, "c", end)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
        got = {}
        for r in records:
            got[r.key] = (r.offset, r.value)
        assert got == latest  # every key's latest value, at the offset it was given
        assert len(records) < keys * versions / 3

    def cleaned_events():
        return [e for e in b.log_events() if e["event"] == "log_cleaned" and e["log"] == "c-0"]

    # The stats line follows the swap that made the log shrink: wait for it too.
    wait_for(lambda: cleaned_events(), "the cleaner's stats line")
    cleaned = cleaned_events()
    for field in ("bytes_read", "bytes_written", "records_kept", "records_dropped", "map_entries",
                  "map_utilization", "duration_seconds"):
        assert field in cleaned[0]
    assert b.stop() == 0


def test_cleaner_settings_have_kafkas_names_and_defaults(tmp_path):
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={})
    assert (config.cleaner_enable, config.cleaner_backoff_ms, config.cleaner_dedupe_buffer_size,
            config.cleaner_io_buffer_size) == (True, 15_000, 134_217_728, 524_288)
    config = BrokerConfig.load(data_dir=str(tmp_path), environ={},
                               overrides=["log.cleaner.enable=false", "log.cleaner.backoff.ms=5"])
    assert (config.cleaner_enable, config.cleaner_backoff_ms) == (False, 5)
