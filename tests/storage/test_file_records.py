"""FileRecords' block reservation: blocks past the end are reserved for appends,
invisible to readers, and given back at release, truncation and close."""

import os

import pytest

from kafka_format import build_batch
from storage import file_records
from storage.file_records import FileRecords
from storage.fileutil import reserve_blocks

MIB = 1 << 20


def allocated(path) -> int:
    return os.stat(path).st_blocks * 512


@pytest.fixture
def reservable(tmp_path):
    with open(tmp_path / "probe", "wb") as f:
        if not reserve_blocks(f.fileno(), 0, 4096):
            pytest.skip("this filesystem cannot reserve blocks (fallocate KEEP_SIZE)")


@pytest.fixture
def records(tmp_path, reservable):
    path = str(tmp_path / "00000000000000000000.log")
    opened = FileRecords.open(path)
    yield opened
    opened.close()


def test_reserved_blocks_are_held_past_the_end_but_not_seen(records):
    data = os.urandom(100_000)
    assert records.append(data, reserve_ahead=MIB) == 0
    assert os.stat(records.path).st_size == len(data) == records.size
    assert allocated(records.path) >= len(data) + MIB
    assert records.read(0, 2 * MIB) == data  # nothing past the end reads back


def test_appends_inside_the_reservation_reserve_nothing_more(records, monkeypatch):
    calls = []
    real = file_records.reserve_blocks
    monkeypatch.setattr(file_records, "reserve_blocks", lambda *a: calls.append(a) or real(*a))
    for _ in range(10):
        records.append(b"x" * 1000, reserve_ahead=64 * 1024)
    assert calls == [(records.fileno(), 0, 1000 + 64 * 1024)]
    records.append(b"y" * 60_000, reserve_ahead=64 * 1024)  # crosses the reserved end
    assert calls[1] == (records.fileno(), 10_000, 60_000 + 64 * 1024)


def test_release_gives_the_blocks_back_and_keeps_size_and_mtime(records):
    data = os.urandom(10_000)
    records.append(data, reserve_ahead=4 * MIB)
    os.utime(records.path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    records.release_reserved()
    stat = os.stat(records.path)
    assert stat.st_size == len(data)
    assert stat.st_mtime_ns == 1_600_000_000_000_000_000
    assert allocated(records.path) < MIB
    assert records.read(0, len(data)) == data


def test_truncation_gives_the_blocks_back(records):
    records.append(os.urandom(10_000), reserve_ahead=4 * MIB)
    records.truncate_to(5_000)
    assert allocated(records.path) < MIB
    assert os.stat(records.path).st_size == 5_000


def test_close_gives_the_blocks_back(records):
    records.append(os.urandom(10_000), reserve_ahead=4 * MIB)
    records.close()
    assert allocated(records.path) < MIB
    assert os.stat(records.path).st_size == 10_000


def test_a_filesystem_that_refuses_is_not_asked_again(records, monkeypatch):
    calls = []
    monkeypatch.setattr(file_records, "reserve_blocks", lambda *a: calls.append(a) and False)
    for _ in range(3):
        records.append(b"z" * 5000, reserve_ahead=1000)
    assert len(calls) == 1
    assert records.read(0, 15_000) == b"z" * 15_000
    records.release_reserved()  # nothing to give back: no truncation either
    assert records.size == 15_000


def test_log_segments_hold_no_reserved_blocks_once_rolled_or_closed(open_log, reservable):
    log = open_log(segment_bytes=64 * 1024)
    value = os.urandom(1000)
    log.append(build_batch([(b"k", value, 0)]))
    first = log.active_segment
    assert allocated(first.log.path) >= first.size + 60 * 1024  # reserved up to segment.bytes ahead
    for i in range(200):  # ~200 KB: several rolls
        log.append(build_batch([(b"k", value, i)]))
    segments = list(log.segments.snapshot())
    assert len(segments) > 2
    for segment in segments[:-1]:
        assert allocated(segment.log.path) < segment.size + 8192
    active = segments[-1]
    assert allocated(active.log.path) > active.size + 8192
    os.utime(active.log.path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    log.close()
    assert allocated(active.log.path) < active.size + 8192
    assert os.stat(active.log.path).st_mtime_ns == 1_600_000_000_000_000_000


def test_recovery_gives_back_what_a_crashed_process_reserved(open_log, reservable):
    crashed = open_log(segment_bytes=64 * 1024 * 1024)
    for i in range(5):
        crashed.append(build_batch([(b"k", os.urandom(1000), i)]))
    path = crashed.active_segment.log.path
    size = crashed.active_segment.size
    assert allocated(path) > size + MIB  # the crashed process never gave them back
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    reopened = open_log(segment_bytes=64 * 1024 * 1024, had_clean_shutdown=False)
    assert allocated(path) < size + 64 * 1024
    assert os.stat(path).st_size == size
    assert os.stat(path).st_mtime_ns == 1_600_000_000_000_000_000
    assert reopened.log_end_offset == 5

