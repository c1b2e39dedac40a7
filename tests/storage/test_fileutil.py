import os

import pytest

from storage import fileutil
from storage.fileutil import atomic_write, fsync_dir, parse_segment_file_name, segment_file_name


def test_atomic_write_creates_and_replaces(tmp_path):
    target = tmp_path / "state"
    atomic_write(target, b"first")
    assert target.read_bytes() == b"first"
    atomic_write(str(target), b"second, longer content")
    assert target.read_bytes() == b"second, longer content"
    assert sorted(os.listdir(tmp_path)) == ["state"]


def test_atomic_write_fsyncs_file_then_directory(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    atomic_write(tmp_path / "state", b"x")
    assert synced == [str(tmp_path / "state.tmp"), str(tmp_path)]


def test_atomic_write_overwrites_a_leftover_tmp(tmp_path):
    target = tmp_path / "state"
    (tmp_path / "state.tmp").write_bytes(b"garbage from a crash, longer than the data")
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert not (tmp_path / "state.tmp").exists()


def test_atomic_write_failing_fsync_keeps_old_content_and_no_tmp(tmp_path, monkeypatch):
    target = tmp_path / "state"
    atomic_write(target, b"old")

    def failing_fsync(fd):
        raise OSError(5, "simulated I/O error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="simulated"):
        atomic_write(target, b"new content that never lands")
    assert target.read_bytes() == b"old"
    assert not (tmp_path / "state.tmp").exists()


def test_atomic_write_failing_rename_keeps_old_content_and_no_tmp(tmp_path, monkeypatch):
    target = tmp_path / "state"
    atomic_write(target, b"old")

    def failing_replace(src, dst):
        raise OSError(28, "simulated: no space")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert not (tmp_path / "state.tmp").exists()


def test_atomic_write_with_a_directory_in_the_way_of_tmp_leaves_it(tmp_path):
    target = tmp_path / "state"
    atomic_write(target, b"old")
    (tmp_path / "state.tmp").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert (tmp_path / "state.tmp").is_dir()  # not ours to remove


def test_atomic_write_onto_a_directory_fails_and_cleans_up(tmp_path):
    target = tmp_path / "state"
    target.mkdir()
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert target.is_dir()
    assert not (tmp_path / "state.tmp").exists()


def test_fsync_dir(tmp_path):
    fsync_dir(tmp_path)
    fsync_dir(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        fsync_dir(tmp_path / "missing")


def test_segment_file_name():
    assert segment_file_name(0, ".log") == "00000000000000000000.log"
    assert segment_file_name(42, ".index") == "00000000000000000042.index"
    assert segment_file_name(2**63 - 1, ".timeindex") == "09223372036854775807.timeindex"
    assert segment_file_name(7, ".log.cleaned") == "00000000000000000007.log.cleaned"
    with pytest.raises(ValueError):
        segment_file_name(-1, ".log")
    with pytest.raises(ValueError):
        segment_file_name(1, "log")


@pytest.mark.parametrize("name, parsed", [
    ("00000000000000000000.log", (0, ".log")),
    ("00000000000000000042.index", (42, ".index")),
    ("00000000000000000042.timeindex", (42, ".timeindex")),
    ("00000000000000000042.snapshot", (42, ".snapshot")),
    ("00000000000000000042.txnindex", (42, ".txnindex")),
    ("09223372036854775807.log", (2**63 - 1, ".log")),
    ("00000000000000000100.index.deleted", (100, ".index.deleted")),
    ("00000000000000000100.log.deleted", (100, ".log.deleted")),
    ("00000000000000000100.log.cleaned", (100, ".log.cleaned")),
    ("00000000000000000100.log.swap", (100, ".log.swap")),
    ("00000000000000000100.timeindex.swap", (100, ".timeindex.swap")),
    ("00000000000000000100.txnindex.cleaned", (100, ".txnindex.cleaned")),
    ("00000000000000000100.snapshot.deleted", (100, ".snapshot.deleted")),
])
def test_parse_segment_file_name(name, parsed):
    assert parse_segment_file_name(name) == parsed


@pytest.mark.parametrize("name", [
    "",
    "0000000000000000042.log",  # 19 digits
    "000000000000000000042.log",  # 21 digits
    "00000000000000000042",
    "00000000000000000042.",
    "00000000000000000042.logx",
    "00000000000000000042.LOG",
    "00000000000000000042.log.tmp",
    "00000000000000000042.log.swap.deleted",
    "00000000000000000042.deleted",
    "00000000000000000042.index.swap.swap",
    "0000000000000000004a.log",
    "-0000000000000000042.log",
    "recovery-point-offset-checkpoint",
    "leader-epoch-checkpoint",
    "partition.metadata",
    "dir/00000000000000000042.log",
    " 00000000000000000042.log",
])
def test_parse_segment_file_name_rejects(name):
    assert parse_segment_file_name(name) is None


def test_names_round_trip():
    for base in (0, 1, 99, 2**31, 2**63 - 1):
        for suffix in fileutil.SEGMENT_FILE_SUFFIXES:
            for temp in ("",) + fileutil.TEMPORARY_SUFFIXES:
                assert parse_segment_file_name(segment_file_name(base, suffix + temp)) == (base, suffix + temp)
