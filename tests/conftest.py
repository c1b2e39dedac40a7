"""Shared test fixtures (kept minimal)."""

import pytest


@pytest.fixture(scope="session")
def kafka_codec():
    """kafka-python's codec module, an independent implementation of Kafka's
    framings (xerial snappy, old-Kafka LZ4 checksums) to cross-check against."""
    import kafka.codec as codec

    assert codec.has_snappy() and codec.has_lz4() and codec.has_zstd()
    return codec


@pytest.fixture
def broker(tmp_path):
    """Factory: `broker(*serve_args, data_dir=None, env=None, **options)` starts the real broker
    (`python -m broker serve`) on 127.0.0.1 and a free port and returns a
    tests.broker_process.BrokerProcess (host, port, data_dir, stop(), kill(),
    restart(), log_events()); `options` go to BrokerProcess (open_files_limit=...).
    Every broker started is killed on teardown."""
    from tests.broker_process import BrokerProcess

    started = []

    def start(*serve_args, data_dir=None, env=None, **options):
        directory = data_dir if data_dir is not None else tmp_path / f"broker-{len(started)}"
        process = BrokerProcess(directory, *serve_args, env=env, **options)
        started.append(process)
        return process.start()

    yield start
    for process in started:
        process.close()
