"""Shared test fixtures (kept minimal), and the `docker` marker.

Tests marked `docker` build and run the container image (tests/docker/test_image.py, the
README's Docker section in tests/test_readme.py). They run only when STRATA_IMAGE_TESTS=1,
which `make test-docker` sets; tests/docker/runtime.py's `require()` then skips them where
podman or the base image is missing, and fails them under CI.
"""

import os

import pytest

IMAGE_TESTS_ENV = "STRATA_IMAGE_TESTS"


def pytest_configure(config):
    config.addinivalue_line("markers", "docker: builds and runs the container image (make test-docker)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get(IMAGE_TESTS_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"image tests: run `make test-docker` (sets {IMAGE_TESTS_ENV}=1)")
    for item in items:
        if item.get_closest_marker("docker") is not None:
            item.add_marker(skip)


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
