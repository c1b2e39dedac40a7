import fcntl
import os

import pytest

from storage.clock import ManualClock
from storage.config import LogConfig
from storage.log import Log
from storage.manager import LOCK_FILE, LogManager


def crash_manager(manager: LogManager) -> None:
    """Leave `manager`'s data directory as a killed broker process would: nothing
    flushed, closed or written, and the directory lock released (the OS closes a dead
    process's descriptors), so another LogManager may start on it."""
    # The OS's part of a process death: LogManager releases its lock only in a clean shutdown.
    os.close(manager._lock_fd)  # noqa: SLF001


def holds_directory_lock(manager: LogManager) -> bool:
    """Whether `manager`'s data directory is locked: started and not yet shut down."""
    try:
        fd = os.open(os.path.join(manager.data_dir, LOCK_FILE), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's lock, if it took one
    return False


@pytest.fixture
def clock():
    return ManualClock(1_700_000_000_000)


@pytest.fixture
def open_log(tmp_path, clock):
    """Open (or reopen) a log in tmp_path/topic-0 with config overrides."""
    opened = []

    def _open(*, had_clean_shutdown=True, recovery_point=0, log_start_offset=0, **overrides):
        config = LogConfig.from_props({k.replace("_", "."): v for k, v in overrides.items()})
        log = Log.open(str(tmp_path / "topic-0"), "topic", 0, config, clock=clock,
                       had_clean_shutdown=had_clean_shutdown, recovery_point=recovery_point,
                       log_start_offset=log_start_offset)
        opened.append(log)
        return log

    yield _open
    # Only the newest log is closed: an older one stands for a crashed process,
    # whose files a later open has already recovered (closing it would write
    # through stale mappings).
    if opened:
        opened[-1].close()


# ---- the C accelerators and their Python twins ---------------------------------------------------

TWIN_NAMES = ("summarize_records", "find_timestamp", "scan_run", "assign_plain_run", "index_entries")


def c_records():
    """kafka_format._crecords when it is built and taken (not STRATA_PURE_PYTHON), else None."""
    from kafka_format import accel

    if not accel.NATIVE:
        return None
    from kafka_format import _crecords

    return _crecords


def bind_twin(monkeypatch, implementation) -> None:
    """Point kafka_format.accel's hot paths at `implementation` (_crecords or
    _pyrecords), as accel.py does once at import."""
    from kafka_format import accel

    for name in TWIN_NAMES:
        monkeypatch.setattr(accel, name, getattr(implementation, name))


@pytest.fixture(params=["c", "python"])
def twin(request, monkeypatch):
    """Runs a test once on each set of kafka_format's hot paths (C skipped when not built)."""
    from kafka_format import _pyrecords

    implementation = c_records() if request.param == "c" else _pyrecords
    if implementation is None:
        pytest.skip("the C accelerator is not built here (or STRATA_PURE_PYTHON is set)")
    bind_twin(monkeypatch, implementation)
    return implementation
