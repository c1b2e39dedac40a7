"""Garbage inside a trusted index: the check on open finds entries out of order and
the loader rebuilds the index, so reads stay correct after a restart (Kafka checks
only an index's length and last entry, and would serve wrong positions)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kafka_format import build_batch, iter_records
from kafka_format.errors import CorruptIndexError
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex


def fill(log, count=200):
    for n in range(count):
        log.append(build_batch([(b"k%d" % n, b"v" * 40, 1000 + n)]))


def read_all(log):
    out = []
    offset = 0
    while offset < log.log_end_offset:
        with log.read(offset, 300) as got:
            records = [r for r in iter_records(got.read()) if r.offset >= offset]
        out.extend((r.offset, r.key) for r in records)
        offset = records[-1].offset + 1
    return out


@pytest.mark.parametrize("damage", ["swap", "offset", "position", "timestamps"])
def test_garbage_inside_an_index_below_the_recovery_point_is_rebuilt(open_log, tmp_path, damage):
    config = {"segment_bytes": 4096, "index_interval_bytes": 200}
    log = open_log(**config)
    fill(log)
    expected = read_all(log)
    timestamps = [log.offset_for_timestamp(1000 + n) for n in range(0, 200, 9)]
    first = log.segments.first
    index_path, time_path = first.offset_index.path, first.time_index.path
    log.close()  # a clean shutdown: every segment is below the recovery point

    if damage == "timestamps":
        data = bytearray(Path(time_path).read_bytes())
        assert len(data) >= 36
        struct.pack_into(">q", data, 12, 10**12)  # a timestamp far above the next ones
        Path(time_path).write_bytes(bytes(data))
    else:
        data = bytearray(Path(index_path).read_bytes())
        assert len(data) >= 32  # several entries, the last one left as it was
        if damage == "swap":
            data[8:16], data[16:24] = data[16:24], data[8:16]
        elif damage == "offset":
            struct.pack_into(">i", data, 8, 10**6)  # a relative offset above the later ones
        else:
            struct.pack_into(">i", data, 12, 10**6)  # a position above the later ones
        Path(index_path).write_bytes(bytes(data))

    with pytest.raises(CorruptIndexError):
        (TimeIndex(time_path, first.base_offset) if damage == "timestamps"
         else OffsetIndex(index_path, first.base_offset)).sanity_check()

    reopened = open_log(**config)
    assert read_all(reopened) == expected
    assert [reopened.offset_for_timestamp(1000 + n) for n in range(0, 200, 9)] == timestamps
    reopened.segments.first.sanity_check()  # rebuilt whole


def test_an_entry_past_the_end_of_the_log_is_corrupt(tmp_path):
    index = OffsetIndex(tmp_path / "0.index", 0, 64)
    index.append(1, 0)
    index.append(2, 500)
    index.sanity_check(log_size=600)
    with pytest.raises(CorruptIndexError, match="past the end"):
        index.sanity_check(log_size=500)
    index.close()
