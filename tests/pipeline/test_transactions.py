"""read_committed in the Spark sources (issue 18): the broker source over FETCH
version 2 and `strata-segments` over the files (.txnindex, snapshots, markers).
Spark runs once per source; the segment reader's rules are checked on its own."""

from __future__ import annotations

import json
import os

import pytest

from kafka_format import build_batch
from pipeline.segment_txns import NO_END, committed_view
from pipeline.segments import find_segments, read_segment, segment_options
from storage.config import LogConfig
from storage.log import Log
from tests.broker.inprocess import InProcessBroker
from tests.txn_topic import COMMITTED, COMMITTED_AFTER_C, EVERYTHING, C, end_txn, native_bootstrap, write_txn_topic


def by_partition(rows) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {0: [], 1: []}
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        got[r.partition].append(bytes(r.value))
    return got


def test_broker_source_read_committed(spark, tmp_path):
    broker = InProcessBroker(tmp_path).start()
    try:
        topic = write_txn_topic(broker)
        address = native_bootstrap(broker)

        def read(**options):
            reader = spark.read.format("strata").option("kafka.bootstrap.servers", address) \
                .option("subscribe", topic)
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        committed = read(**{"kafka.isolation.level": "read_committed"})
        assert by_partition(committed.collect()) == COMMITTED  # partition 1 ends at its LSO, 2
        assert by_partition(read().collect()) == EVERYTHING
        # An explicit range across the aborted data: its records are dropped, not reported lost.
        ranged = read(**{"kafka.isolation.level": "read_committed", "minPartitions": "4",
                         "endingOffsets": json.dumps({topic: {"0": 6, "1": 2}})})
        assert by_partition(ranged.collect()) == COMMITTED
        end_txn(broker, topic, 1, C, commit=True)
        after = read(**{"kafka.isolation.level": "read_committed"})
        assert by_partition(after.collect()) == COMMITTED_AFTER_C
        assert sorted(r.offset for r in after.collect() if r.partition == 1) == [0, 2, 3]
    finally:
        broker.stop()


# ---- strata-segments ---------------------------------------------------------------------------


def txn(pid: int, seq: int, value: bytes) -> bytes:
    return build_batch([(b"k", value)], producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)


def plain(value: bytes) -> bytes:
    return build_batch([(b"k", value)])


def write_partition(data_dir) -> Log:
    """topic-0 over several small segments: committed, aborted (its abort marker a
    segment after its data), plain data, then a transaction left open."""
    config = LogConfig.from_props({"segment.bytes": "300"})
    log = Log.open(os.path.join(data_dir, "topic-0"), "topic", 0, config)
    pad = b"x" * 80
    log.append(txn(1, 0, b"c1" + pad))  # 0
    log.append(txn(2, 0, b"a1" + pad))  # 1: aborted below
    log.append(plain(b"p1" + pad))  # 2
    log.append_txn_marker(1, 0, 0, commit=True)  # 3
    log.append(txn(2, 1, b"a2" + pad))  # 4
    log.append(plain(b"p2" + pad))  # 5
    log.append_txn_marker(2, 0, 0, commit=False)  # 6
    log.append(txn(2, 2, b"c2" + pad))  # 7: producer 2's next transaction, committed
    log.append_txn_marker(2, 0, 0, commit=True)  # 8
    log.append(plain(b"p3" + pad))  # 9
    log.append(txn(3, 0, b"o1" + pad))  # 10: open
    log.append(plain(b"p4" + pad))  # 11: past the LSO
    assert len(log.segments) > 3 and log.last_stable_offset == 10
    return log


def read_dir(data_dir, **options) -> list[bytes]:
    chosen = segment_options({"path": str(data_dir), **options})
    out: list[bytes] = []
    for segment in find_segments(chosen):
        for batch in read_segment(segment, False, True):
            out.extend(v[:2] for v in batch.column("value").to_pylist())
    return out


def test_segments_read_committed_drops_aborted_data_and_stops_at_the_lso(tmp_path):
    log = write_partition(tmp_path)
    log.close()  # writes the producer-state snapshot (with transaction 3 open)
    everything = [b"c1", b"a1", b"p1", b"a2", b"p2", b"c2", b"p3", b"o1", b"p4"]
    committed = [b"c1", b"p1", b"p2", b"c2", b"p3"]
    assert read_dir(tmp_path) == everything  # markers are never rows
    assert read_dir(tmp_path, **{"isolation.level": "read_committed"}) == committed
    directory = os.path.join(tmp_path, "topic-0")
    bases = sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))
    view = committed_view(directory, bases)
    assert view.stable_end == 10 and [(t.producer_id, t.first_offset) for t in view.aborted] == [(2, 1)]
    # Without snapshots the headers alone tell the open transaction.
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.remove(os.path.join(directory, name))
    assert committed_view(directory, bases).stable_end == 10
    assert read_dir(tmp_path, **{"isolation.level": "read_committed"}) == committed

    reopened = Log.open(directory, "topic", 0, LogConfig.from_props({"segment.bytes": "300"}))
    reopened.append_txn_marker(3, 0, 0, commit=True)
    reopened.close()
    assert committed_view(directory, sorted(int(n[:20]) for n in os.listdir(directory)
                                            if n.endswith(".log"))).stable_end == NO_END
    assert read_dir(tmp_path, **{"isolation.level": "read_committed"}) == [*committed, b"o1", b"p4"]


def test_segments_isolation_level_is_checked(tmp_path):
    from pipeline.offsets import OptionError
    with pytest.raises(OptionError, match="isolation.level: String must be one of"):
        segment_options({"path": str(tmp_path), "isolation.level": "all"})


def test_segments_read_committed_through_spark(spark, tmp_path):
    write_partition(tmp_path).close()
    df = spark.read.format("strata-segments").option("isolation.level", "read_committed").load(str(tmp_path))
    assert sorted(bytes(r.value)[:2] for r in df.collect()) == sorted([b"c1", b"p1", b"p2", b"c2", b"p3"])
