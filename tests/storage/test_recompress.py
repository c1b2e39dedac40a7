"""compression.type on append: batches rewritten in the topic's codec (both protocols append through Log)."""

import pytest

from kafka_format import build_batch, iter_entries
from kafka_format.codecs import Codec
from kafka_format.errors import InvalidConfigError, MessageTooLargeError
from storage.config import LogConfig, Target
from storage.validator import validate_and_assign

ROWS = [(b"k%d" % i, b"value-%d" % i * 20, 1_000 + i, [("h", b"x")] if i == 1 else []) for i in range(5)]


def stored(data: bytes, **props) -> list:
    config = LogConfig.from_props(props)
    validated = validate_and_assign(data, next_offset=100, now_ms=5_000, config=config)
    return list(iter_entries(bytes(validated.buffer))), validated


def records_of(entry) -> list:
    return [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in entry.records()]


@pytest.mark.parametrize("source", list(Codec))
@pytest.mark.parametrize("kind", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_to_every_codec(source, kind):
    data = build_batch(ROWS, codec=source, producer_id=7, producer_epoch=1, base_sequence=3)
    expected = records_of(next(iter_entries(build_batch(ROWS, base_offset=100))))
    (entry,), validated = stored(data, **{"compression.type": kind})
    want = Codec.NONE if kind == "uncompressed" else Codec[kind.upper()]
    assert entry.codec == want
    assert records_of(entry) == expected
    assert (entry.base_offset, entry.last_offset, entry.producer_id, entry.producer_epoch, entry.base_sequence) == \
        (100, 104, 7, 1, 3)
    assert entry.partition_leader_epoch == 0 and entry.max_timestamp == 1_004
    entry.ensure_valid()  # CRC and structure


def test_producer_keeps_the_codec_and_same_codec_is_not_rewritten():
    data = build_batch(ROWS, codec=Codec.GZIP, compression_level=1)
    for props in ({}, {"compression.type": "producer"}, {"compression.type": "gzip", "compression.gzip.level": "9"}):
        (entry,), _ = stored(data, **props)
        assert entry.codec == Codec.GZIP
        assert entry.entry_bytes()[61:] == data[61:]  # the producer's compressed bytes, untouched


def test_levels_reach_the_codec():
    data = build_batch([(b"k", b"abcdefgh" * 4000, 1)] * 4)
    sizes = {}
    for level in ("1", "9"):
        (entry,), _ = stored(data, **{"compression.type": "gzip", "compression.gzip.level": level})
        sizes[level] = entry.size
    assert sizes["9"] <= sizes["1"]
    assert LogConfig.from_props({"compression.type": "zstd", "compression.zstd.level": "-5"}).compression_target \
        == Target(Codec.ZSTD, -5)
    assert LogConfig.from_props({"compression.type": "gzip"}).compression_target == Target(Codec.GZIP, None)
    assert LogConfig().compression_target is None


def test_log_append_time_and_size_limit_after_recompression():
    data = build_batch(ROWS, codec=Codec.LZ4)
    (entry,), _ = stored(data, **{"compression.type": "uncompressed", "message.timestamp.type": "LogAppendTime"})
    assert entry.codec == Codec.NONE and entry.timestamp_type == 1 and entry.max_timestamp == 5_000
    assert {r.timestamp for r in entry.records()} == {5_000}
    big = build_batch([(b"k", b"a" * 50_000, 1)], codec=Codec.GZIP)
    assert len(big) < 2_000
    with pytest.raises(MessageTooLargeError):
        stored(big, **{"compression.type": "uncompressed", "max.message.bytes": "10000"})


def test_bad_settings():
    for props in ({"compression.type": "brotli"}, {"compression.type": "GZIP"}, {"compression.gzip.level": "10"},
                  {"compression.lz4.level": "18"}, {"compression.zstd.level": "23"}):
        with pytest.raises(InvalidConfigError):
            LogConfig.from_props(props)


def test_log_appends_recompressed(open_log):
    log = open_log(compression_type="zstd")
    log.append(build_batch(ROWS, codec=Codec.SNAPPY))
    log.append(build_batch(ROWS))
    with log.read(0, 1 << 20) as chunk:
        entries = list(iter_entries(chunk.read()))
    assert [e.codec for e in entries] == [Codec.ZSTD, Codec.ZSTD]
    assert [r.offset for e in entries for r in e.records()] == list(range(10))
    assert log.offset_for_timestamp(1_003).offset == 3
