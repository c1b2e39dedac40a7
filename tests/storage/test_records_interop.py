"""Kafka interop: kafka-python's record builders and readers against ours, both ways."""

import pytest

from kafka_format import Record, build_batch, build_classic, iter_records, scan_entries
from kafka_format.codecs import Codec
from storage.config import LogConfig
from storage.validator import validate_and_assign

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's imports

NOW = 1_700_000_000_000
# Compressible values, so that kafka-python's v2 builder keeps the compression.
ROWS = [(b"key-%d" % i, b"value %d " % i * 20, 1_600_000_000_000 + 7 * i) for i in range(12)]
ROWS += [(None, b"keyless " * 10, 1_600_000_000_100), (b"nullvalue", None, 1_600_000_000_050)]
HEADERS = [[("h1", b"v1")], [], [("h2", None), ("h3", b"")]]

LEGACY = [(m, c) for m in (0, 1) for c in (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)]
V2 = [(2, c) for c in Codec]
ALL = LEGACY + V2


def expected_records(magic, first_offset, headers=False):
    out = []
    for i, (key, value, ts) in enumerate(ROWS):
        hdrs = tuple(HEADERS[i % 3]) if headers else ()
        out.append(Record(first_offset + i, ts if magic else -1, 0, key, value, hdrs))
    return out


def kafka_python_set(magic, codec, *, with_headers):
    from kafka.record.memory_records import MemoryRecordsBuilder
    builder = MemoryRecordsBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for i, (key, value, ts) in enumerate(ROWS):
        hdrs = HEADERS[i % 3] if with_headers else []
        assert builder.append(timestamp=ts, key=key, value=value, headers=hdrs) is not None
    builder.close()
    return bytes(builder.buffer())


@pytest.mark.parametrize("magic,codec", ALL, ids=lambda v: str(getattr(v, "name", v)))
def test_kafka_python_sets_are_accepted_and_read_back(kafka_codec, magic, codec):
    data = kafka_python_set(magic, codec, with_headers=magic == 2)
    assert scan_entries(data).problem is None
    entry_codec = scan_entries(data).entries[0].codec
    assert entry_codec == codec
    result = validate_and_assign(data, next_offset=500, now_ms=NOW, config=LogConfig())
    assert (result.first_offset, result.last_offset, result.record_count) == (500, 513, 14)
    assert list(iter_records(result.buffer)) == expected_records(magic, 500, headers=magic == 2)
    assert scan_entries(result.buffer, min_offset=500).problem is None


def test_kafka_python_builders_directly(kafka_codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    v2 = DefaultRecordBatchBuilder(magic=2, compression_type=Codec.LZ4, is_transactional=False,
                                   producer_id=3, producer_epoch=1, base_sequence=10,
                                   batch_size=1 << 20)
    v1 = LegacyRecordBatchBuilder(magic=1, compression_type=Codec.SNAPPY, batch_size=1 << 20)
    v0 = LegacyRecordBatchBuilder(magic=0, compression_type=Codec.GZIP, batch_size=1 << 20)
    for builder in (v2, v1, v0):
        for i, (key, value, ts) in enumerate(ROWS):
            builder.append(i, timestamp=ts, key=key, value=value, headers=[])
    data = bytes(v2.build()) + bytes(v1.build()) + bytes(v0.build())
    result = validate_and_assign(data, next_offset=0, now_ms=NOW, config=LogConfig())
    records = list(iter_records(result.buffer))
    assert [r.offset for r in records] == list(range(42))
    assert records == (expected_records(2, 0) + expected_records(1, 14) + expected_records(0, 28))


def read_with_kafka_python(buf):
    """(offset, timestamp, key, value, headers) per record, via kafka.record.MemoryRecords."""
    from kafka.record import MemoryRecords
    records = MemoryRecords(bytes(buf))
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for record in batch:
            assert record.validate_crc()
            ts = -1 if record.timestamp is None else record.timestamp
            out.append(Record(record.offset, ts, record.timestamp_type or 0, record.key,
                              record.value, tuple(record.headers)))
    return out


@pytest.mark.parametrize("magic,codec", ALL, ids=lambda v: str(getattr(v, "name", v)))
def test_our_sets_parse_in_kafka_python(kafka_codec, magic, codec):
    if magic == 2:
        rows = [(k, v, ts, HEADERS[i % 3]) for i, (k, v, ts) in enumerate(ROWS)]
        data = build_batch(rows, base_offset=30, codec=codec, producer_id=1, producer_epoch=0,
                           base_sequence=0)
    else:
        data = build_classic(ROWS, magic=magic, codec=codec, base_offset=30)
    assert read_with_kafka_python(data) == expected_records(magic, 30, headers=magic == 2)
    # and after the broker assigned offsets (v0 wrappers are rebuilt on the way)
    result = validate_and_assign(data, next_offset=9000, now_ms=NOW, config=LogConfig())
    assert read_with_kafka_python(result.buffer) == expected_records(magic, 9000, headers=magic == 2)


@pytest.mark.parametrize("magic,codec", [(1, Codec.NONE), (1, Codec.GZIP), (2, Codec.NONE),
                                         (2, Codec.SNAPPY)])
def test_log_append_time_reads_the_same_in_kafka_python(kafka_codec, magic, codec):
    data = build_batch(ROWS, codec=codec) if magic == 2 else build_classic(ROWS, magic=magic, codec=codec)
    config = LogConfig(message_timestamp_type="LogAppendTime")
    result = validate_and_assign(data, next_offset=0, now_ms=NOW, config=config)
    theirs = read_with_kafka_python(result.buffer)
    assert [(r.timestamp, r.timestamp_type) for r in theirs] == [(NOW, 1)] * len(ROWS)
    assert theirs == list(iter_records(result.buffer))


def test_a_segment_file_written_from_kafka_python_sets_reads_in_kafka_python(kafka_codec, tmp_path):
    """The whole path: kafka-python builds sets, a real Log appends them, and
    kafka-python reads the .log file back with the offsets the log assigned."""
    from kafka.record.memory_records import MemoryRecords

    from storage.log import Log
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig())
    for magic, codec in ALL:
        log.append(kafka_python_set(magic, codec, with_headers=magic == 2))
    log.close()
    records = MemoryRecords((tmp_path / "t-0" / "00000000000000000000.log").read_bytes())
    got = []
    while records.has_next():
        batch = records.next_batch()
        got.extend((r.offset, r.key, r.value) for r in batch)
    expected = [(n * len(ROWS) + i, key, value)
                for n in range(len(ALL)) for i, (key, value, _) in enumerate(ROWS)]
    assert got == expected
