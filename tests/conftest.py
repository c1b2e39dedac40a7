"""Shared test fixtures (kept minimal)."""

import pytest


@pytest.fixture(scope="session")
def kafka_codec():
    """kafka-python's codec module, an independent implementation of Kafka's
    framings (xerial snappy, old-Kafka LZ4 checksums) to cross-check against."""
    import kafka.codec as codec

    assert codec.has_snappy() and codec.has_lz4() and codec.has_zstd()
    return codec
