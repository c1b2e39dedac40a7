"""The open-file budget (storage/open_files.py) with real files: LRU eviction, pins,
and lazy reopening that reads exactly what the open files read."""

from __future__ import annotations

import os

import pytest

from kafka_format import build_batch, iter_records
from kafka_format.errors import KafkaStorageError
from storage.file_records import FileRecords
from storage.offset_index import OffsetIndex
from storage.open_files import OPEN_FILES, OpenFiles
from storage.time_index import TimeIndex


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def log_file(tmp_path, name: str, budget: OpenFiles, data: bytes = b"") -> FileRecords:
    records = FileRecords.open(str(tmp_path / name), budget)
    if data:
        records.append(data)
    return records


def test_files_open_on_first_use_not_when_made(tmp_path):
    budget = OpenFiles(10)
    (tmp_path / "a.log").write_bytes(b"x" * 100)
    before = open_fds()
    records = FileRecords.open(str(tmp_path / "a.log"), budget)
    index = OffsetIndex(tmp_path / "a.index", 0, 800, budget=budget)
    assert open_fds() == before and budget.open_count() == 0
    assert records.size == 100 and records.read(0, 3) == b"xxx"
    index.append(5, 10)
    assert budget.open_count() == 2 and open_fds() == before + 2  # one fd per index: no mmap duplicate
    records.close()
    index.close()
    assert budget.open_count() == 0 and open_fds() == before


def test_least_recently_used_idle_files_close_first(tmp_path):
    budget = OpenFiles(3)
    files = [log_file(tmp_path, f"{n}.log", budget, b"%d" % n) for n in range(3)]
    assert budget.open_count() == 3
    files[0].read(0, 1)  # 1 is now the least recently used
    log_file(tmp_path, "3.log", budget, b"3")
    assert budget.open_count() == 3
    assert [f.descriptor_open for f in files] == [True, False, True]
    assert budget.evictions == 1 and budget.peak == 3
    assert files[1].read(0, 1) == b"1"  # reopens, closing the least recently used (2)
    assert [f.descriptor_open for f in files] == [True, True, False]


def test_pinned_files_are_never_closed(tmp_path):
    budget = OpenFiles(2)
    a = log_file(tmp_path, "a.log", budget, b"aaaa")
    b = log_file(tmp_path, "b.log", budget, b"bbbb")
    with a.slice(0, 4) as sending, b.slice(0, 4):
        c = log_file(tmp_path, "c.log", budget, b"cccc")  # over the limit: both others are pinned
        assert budget.open_count() == 3 and a.descriptor_open and b.descriptor_open
        fd = sending.fileno()
        assert os.pread(fd, 4, 0) == b"aaaa"
    assert c.read(0, 4) == b"cccc"
    log_file(tmp_path, "d.log", budget, b"dddd")
    assert budget.open_count() == 2  # released: the idle ones went, least recently used first
    assert not a.descriptor_open and not b.descriptor_open


def test_a_closed_file_stays_open_while_a_slice_is_sent(tmp_path):
    budget = OpenFiles(4)
    a = log_file(tmp_path, "a.log", budget, b"data")
    held = a.slice(0, 4)
    a.delete()
    assert not a.closed and held.read() == b"data"
    held.release()
    assert a.closed and budget.open_count() == 0
    with pytest.raises(KafkaStorageError):
        a.read(0, 4)


def test_a_slice_reads_through_its_pin_and_reopens_once_released(tmp_path):
    budget = OpenFiles(1)
    a = log_file(tmp_path, "a.log", budget, b"abcd")
    held = a.slice(1, 2)
    log_file(tmp_path, "b.log", budget, b"bbbb")  # over the limit: a stays open, pinned by the slice
    assert a.descriptor_open and held.read() == b"bc"
    held.release()
    log_file(tmp_path, "c.log", budget, b"cccc")  # a is idle now: closed to make room
    assert not a.descriptor_open
    assert held.read() == b"bc" and a.descriptor_open  # a released slice pins the file to read: reopened


def test_indexes_reopen_with_the_same_entries(tmp_path):
    budget = OpenFiles(16)
    offsets = OffsetIndex(tmp_path / "0.index", 0, 80 * 8, budget=budget)
    times = TimeIndex(tmp_path / "0.timeindex", 0, 80 * 12, budget=budget)
    for n in range(50):
        offsets.append(n * 3, n * 100)
        times.maybe_append(1000 + n, n * 3)
    expected = ([offsets.lookup(t) for t in range(160)], [times.lookup(t) for t in range(990, 1060)])
    assert offsets.evict() and times.evict() and budget.open_count() == 0
    assert offsets.entries == 50 and times.last_entry == (1049, 147)  # known while closed
    assert ([offsets.lookup(t) for t in range(160)], [times.lookup(t) for t in range(990, 1060)]) == expected
    offsets.evict()
    offsets.append(150, 5000)  # an append reopens too, and goes where the entries end
    assert offsets.lookup(1000) == (150, 5000) and offsets.entries == 51
    offsets.flush()
    offsets.close()
    assert os.path.getsize(tmp_path / "0.index") == 51 * 8  # trimmed on close, after an eviction


def test_set_limit_closes_idle_files_down_to_it(tmp_path):
    budget = OpenFiles(10)
    files = [log_file(tmp_path, f"{n}.log", budget, b"x") for n in range(6)]
    budget.set_limit(2)
    assert budget.open_count() == 2 and [f.descriptor_open for f in files] == [False] * 4 + [True] * 2
    assert budget.close_idle() == 2 and budget.open_count() == 0


@pytest.fixture
def tiny_budget():
    """The process's budget at 4 files for one test."""
    old = OPEN_FILES.limit
    OPEN_FILES.set_limit(4)
    yield OPEN_FILES
    OPEN_FILES.set_limit(old)


def test_a_log_of_many_segments_reads_the_same_within_a_tiny_budget(open_log, tiny_budget):
    log = open_log(segment_bytes=2048, index_interval_bytes=128)
    for n in range(300):
        log.append(build_batch([(b"k%d" % n, b"v" * 40, 1000 + n)]))
    assert len(log.segments) > 10 and tiny_budget.open_count() <= 4

    def read_everything():
        out = []
        for start in range(0, 300, 7):
            with log.read(start, 600) as got:
                out.append([(r.offset, r.key) for r in iter_records(got.read())])
        return out, [log.offset_for_timestamp(1000 + n) for n in range(0, 300, 11)]

    first = read_everything()
    assert first[0][0][0] == (0, b"k0")
    log.close()
    reopened = open_log(segment_bytes=2048, index_interval_bytes=128)
    assert tiny_budget.open_count() <= 4
    log = reopened
    assert read_everything() == first
    assert tiny_budget.peak >= 4 and tiny_budget.open_count() <= 4
