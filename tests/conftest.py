"""Shared test fixtures (kept minimal)."""

import types

import pytest


@pytest.fixture(scope="session")
def kafka_codec():
    """kafka-python's `kafka.codec`, with snappy and xxhash support even when the
    optional python-snappy and xxhash packages are missing: kafka-python's own
    framing code (xerial blocks, the old-Kafka LZ4 header checksum) still runs;
    only the raw snappy block codec (cramjam, which python-snappy itself wraps)
    and xxh32 (of storage.codecs, itself checked against lz4 and known vectors
    in test_codecs.py) stand in."""
    import cramjam
    import kafka.codec as codec

    from storage.codecs import xxh32

    saved = {name: getattr(codec, name) for name in ("snappy", "xxhash")}
    if codec.snappy is None:
        codec.snappy = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)))
    if codec.xxhash is None:
        codec.xxhash = types.SimpleNamespace(
            xxh32=lambda data: types.SimpleNamespace(digest=lambda: xxh32(data).to_bytes(4, "big")))
    yield codec
    for name, value in saved.items():
        setattr(codec, name, value)
