import pytest

from .local_broker import LocalBroker


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """The real broker process, shared by this session's client and CLI tests."""
    running = LocalBroker(tmp_path_factory.mktemp("broker-data"))
    yield running
    running.stop()
