"""LogManager: the data directory, checkpoints, the clean-shutdown marker."""

import os

import pytest

from kafka_format import build_batch
from kafka_format.errors import InvalidTopicError, KafkaStorageError
from storage.config import LogConfig
from storage.manager import CLEAN_SHUTDOWN_FILE, LogManager
from storage.space_reserve import RESERVE_FILE

from .conftest import crash_manager
from .test_log import read_all


def manager(path, clock, **overrides):
    config = LogConfig.from_props({k.replace("_", "."): v for k, v in overrides.items()})
    m = LogManager(str(path), config_for=lambda topic: config, clock=clock)
    m.startup()
    return m


def test_checkpoints_are_kafkas_text_files(tmp_path, clock):
    m = manager(tmp_path, clock)
    a = m.get_or_create_log("orders", 0)
    b = m.get_or_create_log("orders", 1)
    a.append(build_batch([(b"k", b"v", 1)] * 3))
    b.append(build_batch([(b"k", b"v", 1)]))
    m.shutdown()
    text = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    lines = text.splitlines()
    assert lines[0] == "0" and lines[1] == "2"
    assert sorted(lines[2:]) == ["orders 0 3", "orders 1 1"]
    assert (tmp_path / "log-start-offset-checkpoint").read_text().splitlines()[:2] == ["0", "2"]
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_restart_reopens_every_partition_and_removes_the_marker(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.get_or_create_log("a.b-c_d", 0).append(build_batch([(b"k", b"v", 1)] * 2))
    m.get_or_create_log("a.b-c_d", 7)
    m.shutdown()
    again = manager(tmp_path, clock)
    assert again.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert again.topics() == {"a.b-c_d": [0, 7]}
    assert again.get_log("a.b-c_d", 0).log_end_offset == 2
    again.shutdown()


def test_unclean_restart_recovers(tmp_path, clock):
    m = manager(tmp_path, clock)
    log = m.get_or_create_log("t", 0)
    log.append(build_batch([(b"k", b"v", 1)] * 2))
    with open(tmp_path / "t-0" / "00000000000000000000.log", "ab") as f:
        f.write(b"\x00garbage")
    # no shutdown: a crash. A new process may lock the directory again.
    crash_manager(m)
    again = manager(tmp_path, clock)
    assert not again.had_clean_shutdown
    log = again.get_log("t", 0)
    assert log.log_end_offset == 2
    assert [r.value for r in read_all(log)] == [b"v", b"v"]
    again.shutdown()


def test_a_damaged_checkpoint_is_recovered_from_the_logs_and_a_directory_refused(tmp_path, clock):
    """Kafka's loadLogs: a checkpoint that does not parse reads as empty (recovery
    from the first segment, the log start at the first segment's base); a
    directory in a checkpoint's or the marker's place fails the start, naming it."""
    m = manager(tmp_path, clock)
    log = m.get_or_create_log("t", 0)
    log.append(build_batch([(b"k", b"v", 1)] * 3))
    m.set_log_start_offset(log, 2)
    crash_manager(m)  # no marker, the recovery point below the end
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        with open(tmp_path / name, "wb") as f:
            f.write(b"0\n1\nt 0")  # torn mid-entry
    again = manager(tmp_path, clock)
    log = again.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 3)
    assert [r.value for r in read_all(log)] == [b"v"] * 3
    again.shutdown()
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "cleaner-offset-checkpoint",
                 CLEAN_SHUTDOWN_FILE):
        path = tmp_path / name
        if path.exists():
            os.unlink(path)
        path.mkdir()
        with pytest.raises(IsADirectoryError) as raised:
            manager(tmp_path, clock)
        assert raised.value.filename == str(path)
        path.rmdir()


def test_a_second_manager_on_the_same_directory_is_refused(tmp_path, clock):
    m = manager(tmp_path, clock)
    with pytest.raises(KafkaStorageError, match="in use"):
        manager(tmp_path, clock)
    m.shutdown()


def test_bad_topic_names_never_reach_the_file_system(tmp_path, clock):
    m = manager(tmp_path / "data", clock)
    for name in ("..", ".", "", "a/b", "../../etc", "x" * 250, "naïve"):
        with pytest.raises(InvalidTopicError):
            m.get_or_create_log(name, 0)
    assert sorted(os.listdir(tmp_path / "data")) == [".lock", RESERVE_FILE]
    m.shutdown()


def test_delete_removes_the_partition_for_good(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.get_or_create_log("gone", 0).append(build_batch([(b"k", b"v", 1)]))
    m.delete_log("gone", 0)
    assert m.get_log("gone", 0) is None
    assert not any(name.startswith("gone") for name in os.listdir(tmp_path))
    m.shutdown()
    assert manager(tmp_path, clock).topics() == {}


def test_leftover_delete_directories_and_strays_are_handled_on_start(tmp_path, clock):
    (tmp_path / "t-0.0123abc-delete").mkdir()
    (tmp_path / "not a partition").mkdir()
    m = manager(tmp_path, clock)
    assert m.topics() == {}
    assert not (tmp_path / "t-0.0123abc-delete").exists()
    m.shutdown()


def test_rolled_segments_are_flushed_by_the_periodic_task(tmp_path, clock):
    one = len(build_batch([(b"k", b"v", 1)]))
    m = manager(tmp_path, clock, segment_bytes=one * 2)
    log = m.get_or_create_log("t", 0)
    for _ in range(5):
        log.append(build_batch([(b"k", b"v", 1)]))
    assert log.recovery_point == 0
    m.flush_due()
    assert log.recovery_point == 4  # the active segment (base 4) is not flushed
    m.checkpoint()
    assert "t 0 4" in (tmp_path / "recovery-point-offset-checkpoint").read_text()
    m.shutdown()
