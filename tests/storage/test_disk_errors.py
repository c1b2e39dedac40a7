"""Disk errors at the storage layer: OSError(ENOSPC/EIO) injected into real writes.

An append that fails answers KafkaStorageError (56) and leaves the log as it
was: no torn bytes in the .log, no index entry pointing past the data; the next
append works at the same offset. One `storage_error` line per episode and a
`storage_recovered` line when appends work again. The space reserve gives room
to writes that free space; DELETE_RECORDS moves memory only after its
checkpoint is written; special directory names stay within 255 bytes; startup
removes `-delete` leftovers and sets aside what it cannot open and no topic owns.
"""

from __future__ import annotations

import errno
import os

import pytest
from structlog.testing import capture_logs

from kafka_format import build_batch, scan_entries
from kafka_format.errors import KafkaStorageError
from kafka_format.topic_names import MAX_TOPIC_LENGTH
from storage import checkpoint as checkpoint_module
from storage.config import LogConfig
from storage.manager import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT, LogManager
from storage.names import (
    MAX_FILE_NAME_LENGTH,
    SPECIAL_DIR_SUFFIXES,
    parse_partition_dir_name,
    special_dir_name,
)
from storage.space_reserve import RESERVE_FILE, SpaceReserve

from .test_log import read_all

REAL_PWRITE = os.pwrite


def batch(n: int, start: int = 0, size: int = 100) -> bytes:
    return build_batch([(b"k%d" % i, b"v" * size, 1000 + i) for i in range(start, start + n)])


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class FailingWrites:
    """os.pwrite that fails for files whose name ends with `suffix`: with `partial`,
    the first call writes half its bytes and the next one fails (what a filling
    disk does)."""

    def __init__(self, suffix: str, error: int = errno.ENOSPC, partial: bool = False):
        self.suffix, self.error, self.partial = suffix, error, partial
        self.calls = 0

    def __call__(self, fd, data, offset):
        if not fd_path(fd).endswith(self.suffix):
            return REAL_PWRITE(fd, data, offset)
        self.calls += 1
        view = memoryview(data)
        if self.partial and self.calls % 2 == 1 and len(view) > 1:
            return REAL_PWRITE(fd, view[: len(view) // 2], offset)
        raise OSError(self.error, os.strerror(self.error))


def events(logs, name):
    return [e for e in logs if e["event"] == name]


def test_a_torn_append_is_cut_back_and_answered_56(open_log, monkeypatch):
    log = open_log()
    log.append(batch(3))
    size = log.active_segment.size
    monkeypatch.setattr(os, "pwrite", FailingWrites(".log", partial=True))
    with pytest.raises(KafkaStorageError) as raised:
        log.append(batch(2, 3))
    assert raised.value.code == 56
    assert os.path.getsize(log.active_segment.log.path) == size  # nothing torn stays
    assert log.log_end_offset == 3 and log.active_segment.size == size
    assert [r.offset for r in read_all(log)] == [0, 1, 2]  # reads keep working
    monkeypatch.setattr(os, "pwrite", REAL_PWRITE)
    assert log.append(batch(2, 3)).first_offset == 3
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]


def test_a_failed_index_write_undoes_the_whole_append(open_log, monkeypatch):
    log = open_log(index_interval_bytes=1)  # every append writes index entries
    log.append(batch(2))
    segment = log.active_segment
    size, offset_entries, time_entries = segment.size, segment.offset_index.entries, segment.time_index.entries
    monkeypatch.setattr(os, "pwrite", FailingWrites(".timeindex", errno.EIO))
    with pytest.raises(KafkaStorageError):
        log.append(batch(2, 2))
    assert os.path.getsize(segment.log.path) == size
    assert (segment.size, segment.offset_index.entries, segment.time_index.entries) == \
        (size, offset_entries, time_entries)
    monkeypatch.setattr(os, "pwrite", REAL_PWRITE)
    assert log.append(batch(2, 2)).first_offset == 2
    assert segment.offset_index.lookup(3).offset == 3
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3]


class CleanedChunk:
    """What the cleaner hands LogSegment.append: entries without a first offset."""

    offset_of_max_timestamp = None
    first_offset = None

    def __init__(self, buffer: bytes):
        self.buffer = buffer
        self.entries = scan_entries(buffer).entries
        self.max_timestamp = max(e.max_timestamp for e in self.entries)


def test_a_failed_write_of_a_cleaned_chunk_undoes_it(open_log, monkeypatch):
    """The cleaner's chunks carry no first offset: the undo takes it from the first
    entry, so the segment is as before and takes the same chunk again."""
    log = open_log(index_interval_bytes=1)
    log.append(batch(2))
    segment = log.active_segment
    before = (segment.size, segment.offset_index.entries, segment.time_index.entries)
    chunk = CleanedChunk(build_batch([(b"k%d" % i, b"v" * 100, 1000 + i) for i in (2, 3)], base_offset=2))
    monkeypatch.setattr(os, "pwrite", FailingWrites(".timeindex", errno.EIO))
    with pytest.raises(OSError):
        segment.append(3, chunk)
    assert os.path.getsize(segment.log.path) == before[0]
    assert (segment.size, segment.offset_index.entries, segment.time_index.entries) == before
    monkeypatch.setattr(os, "pwrite", REAL_PWRITE)
    segment.append(3, chunk)
    assert segment.offset_index.lookup(3).offset == 3


def test_single_index_entries_are_written_with_pwrite(open_log, monkeypatch):
    """A store through the mapping on a full tmpfs is SIGBUS; pwrite is ENOSPC."""
    log = open_log(index_interval_bytes=1)
    log.append(batch(1))
    failing = FailingWrites(".timeindex")
    monkeypatch.setattr(os, "pwrite", failing)
    with pytest.raises(OSError):
        log.active_segment.time_index.maybe_append(10_000, 0, skip_full_check=True)
    assert failing.calls == 1


def test_one_log_line_per_episode(open_log, monkeypatch):
    log = open_log()
    with capture_logs() as logs:
        monkeypatch.setattr(os, "pwrite", FailingWrites(".log"))
        for _ in range(5):
            with pytest.raises(KafkaStorageError):
                log.append(batch(1))
        monkeypatch.setattr(os, "pwrite", REAL_PWRITE)
        log.append(batch(1))
        log.append(batch(1))
        monkeypatch.setattr(os, "pwrite", FailingWrites(".log", errno.EIO))
        with pytest.raises(KafkaStorageError):
            log.append(batch(1))
    errors = events(logs, "storage_error")
    assert [e["errno"] for e in errors] == ["ENOSPC", "EIO"]
    recovered = events(logs, "storage_recovered")
    assert [e["failed_requests"] for e in recovered] == [5]


def test_a_failed_fsync_is_a_storage_error(open_log, monkeypatch):
    log = open_log()
    log.append(batch(1))

    def failing_fsync(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(KafkaStorageError):
        log.flush()
    assert log.recovery_point == 0


# ---- the space reserve ----------------------------------------------------------------------------

def test_space_reserve_is_released_only_for_no_space_and_restored(tmp_path):
    reserve = SpaceReserve(str(tmp_path), size=64 * 1024)
    assert reserve.ensure() and os.path.getsize(tmp_path / RESERVE_FILE) == 64 * 1024
    calls = []

    def write_needing_room():
        calls.append(1)
        if os.path.exists(tmp_path / RESERVE_FILE):
            raise OSError(errno.ENOSPC, "No space left on device")
        return "written"

    assert reserve.run("test", write_needing_room) == "written"
    assert len(calls) == 2 and not reserve.in_place
    assert reserve.maybe_restore() and os.path.getsize(tmp_path / RESERVE_FILE) == 64 * 1024

    def broken():
        raise OSError(errno.EIO, "I/O error")

    with pytest.raises(OSError):
        reserve.run("test", broken)
    assert reserve.in_place  # EIO is no reason to give the reserve up


def manager(path, clock, **overrides) -> LogManager:
    config = LogConfig.from_props({k.replace("_", "."): v for k, v in overrides.items()})
    m = LogManager(str(path), config_for=lambda topic: config, clock=clock)
    m.startup()
    return m


def test_delete_records_checkpoint_is_written_before_memory_moves(tmp_path, clock, monkeypatch):
    m = manager(tmp_path, clock)
    one = m.get_or_create_log("t", 0)
    one.append(batch(10))
    m.checkpoint()
    before = (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_bytes()
    real_write = checkpoint_module.atomic_write

    def failing(path, data):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(checkpoint_module, "atomic_write", failing)
    with pytest.raises(OSError):
        m.set_log_start_offset(one, 5)
    assert one.log_start_offset == 0
    assert (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_bytes() == before

    full = {"failures": 0}

    def full_until_reserve_released(path, data):
        if os.path.exists(tmp_path / RESERVE_FILE):
            full["failures"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(checkpoint_module, "atomic_write", full_until_reserve_released)
    assert m.set_log_start_offset(one, 5) == 5
    assert full["failures"] == 1 and one.log_start_offset == 5
    assert "t 0 5" in (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text()
    monkeypatch.setattr(checkpoint_module, "atomic_write", real_write)
    m.shutdown()


def test_shutdown_checkpoints_use_the_reserve_on_a_full_disk(tmp_path, clock, monkeypatch):
    m = manager(tmp_path, clock)
    m.get_or_create_log("t", 0).append(batch(3))
    real_write = checkpoint_module.atomic_write

    def full_until_reserve_released(path, data):
        if os.path.exists(tmp_path / RESERVE_FILE):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(checkpoint_module, "atomic_write", full_until_reserve_released)
    m.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert "t 0 3" in (tmp_path / "recovery-point-offset-checkpoint").read_text()


# ---- directory names and startup --------------------------------------------------------------

@pytest.mark.parametrize("suffix", SPECIAL_DIR_SUFFIXES)
def test_special_directory_names_stay_within_255_bytes(suffix):
    longest = "x" * MAX_TOPIC_LENGTH
    for partition in (0, 7, 2**31 - 1):
        name = special_dir_name(longest, partition, suffix)
        assert len(name.encode()) <= MAX_FILE_NAME_LENGTH
        assert name.endswith(suffix) and f"-{partition}." in name
        assert parse_partition_dir_name(name) is None  # never taken for a partition
    short = special_dir_name("orders", 3, suffix)
    assert short.startswith("orders-3.") and len(short) == len("orders-3.") + 32 + len(suffix)


def test_a_249_character_topic_is_deleted(tmp_path, clock):
    m = manager(tmp_path, clock)
    name = "y" * MAX_TOPIC_LENGTH
    m.get_or_create_log(name, 0).append(batch(2))
    m.delete_log(name, 0)
    assert m.get_log(name, 0) is None
    assert not [n for n in os.listdir(tmp_path) if n.startswith("y")]
    m.shutdown()


def test_startup_removes_delete_leftovers_and_sets_aside_unowned_broken_dirs(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.get_or_create_log("good", 0).append(batch(2))
    m.shutdown()
    leftover = tmp_path / special_dir_name("gone", 0, "-delete")
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x" * 100)
    broken = tmp_path / "broken-0"
    (broken / "00000000000000000000.log").mkdir(parents=True)  # a segment that cannot be opened

    m = LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), clock=clock)
    with capture_logs() as logs:
        m.startup(known=lambda topic, partition: topic == "good")
    names = os.listdir(tmp_path)
    assert not leftover.exists() and not broken.exists()
    assert [n for n in names if n.startswith("broken-0.") and n.endswith("-stray")]
    assert events(logs, "stray_directory")
    assert [r.offset for r in read_all(m.get_log("good", 0))] == [0, 1]
    m.shutdown()


def test_startup_fails_on_a_broken_partition_a_topic_owns(tmp_path, clock):
    (tmp_path / "owned-0" / "00000000000000000000.log").mkdir(parents=True)
    m = LogManager(str(tmp_path), config_for=lambda topic: LogConfig(), clock=clock)
    with pytest.raises(OSError):
        m.startup(known=lambda topic, partition: True)  # registered data is never set aside
    assert (tmp_path / "owned-0").is_dir()
