import pytest

from storage.clock import ManualClock
from storage.config import LogConfig
from storage.log import Log


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
