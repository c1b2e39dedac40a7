"""The rich reader (LogEntry, iter_entries, iter_records) and the builders' options."""

import struct

import pytest

from kafka_format import LogEntry, Record, build_batch, build_classic, iter_entries, iter_records
from kafka_format.batch import batch_crc
from kafka_format.codecs import Codec
from kafka_format.errors import CorruptRecordError

# Each test runs on the C hot paths and on their Python twins (conftest.twin).
pytestmark = pytest.mark.usefixtures("twin")


def test_batch_entry_fields():
    data = build_batch([(b"a", b"1", 1000), (b"b", b"2", 1010)], base_offset=40, codec=Codec.GZIP,
                       producer_id=9, producer_epoch=2, base_sequence=17, partition_leader_epoch=3,
                       is_transactional=True)
    entry = LogEntry(data)
    assert (entry.position, entry.size, entry.magic, entry.codec, entry.timestamp_type) == (
        0, len(data), 2, Codec.GZIP, 0)
    assert (entry.base_offset, entry.last_offset, entry.record_count) == (40, 41, 2)
    assert (entry.base_timestamp, entry.max_timestamp) == (1000, 1010)
    assert (entry.producer_id, entry.producer_epoch, entry.base_sequence) == (9, 2, 17)
    assert entry.partition_leader_epoch == 3
    assert entry.is_transactional and not entry.is_control
    assert entry.attributes == Codec.GZIP | 0x10
    assert entry.is_valid()
    assert entry.entry_bytes() == data
    assert entry.records() == [Record(40, 1000, 0, b"a", b"1"), Record(41, 1010, 0, b"b", b"2")]


def test_classic_entry_fields():
    entry = LogEntry(build_classic([(b"k", None, 77)], magic=1, base_offset=5))
    assert (entry.magic, entry.base_offset, entry.last_offset, entry.record_count) == (1, 5, 5, 1)
    assert (entry.max_timestamp, entry.timestamp_type, entry.codec) == (77, 0, 0)
    assert (entry.producer_id, entry.producer_epoch, entry.base_sequence) == (-1, -1, -1)
    assert not entry.is_transactional and not entry.is_control
    assert entry.records() == [Record(5, 77, 0, b"k", None)]


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_compressed_v1_wrapper_base_offset_and_records(codec):
    data = build_classic([(b"a", b"1", 3), (b"b", b"2", 9), (b"c", b"3", 4)], magic=1, codec=codec,
                         offsets=[20, 22, 25])
    entry = LogEntry(data)
    assert (entry.base_offset, entry.last_offset, entry.record_count, entry.max_timestamp) == (20, 25, 3, 9)
    assert [(r.offset, r.timestamp, r.key) for r in entry.records()] == [
        (20, 3, b"a"), (22, 9, b"b"), (25, 4, b"c")]


def test_compressed_v0_wrapper_has_absolute_inner_offsets():
    entry = LogEntry(build_classic([(b"a", b"1"), (b"b", b"2")], magic=0, codec=Codec.GZIP,
                                   base_offset=70))
    assert (entry.base_offset, entry.last_offset, entry.max_timestamp) == (70, 71, -1)
    assert [(r.offset, r.timestamp, r.value) for r in entry.records()] == [(70, -1, b"1"), (71, -1, b"2")]


def test_log_append_time_records_report_the_entry_time():
    batch = build_batch([(b"a", b"1", 5), (b"b", b"2", 7)], timestamp_type=1, max_timestamp=99)
    assert [(r.timestamp, r.timestamp_type) for r in iter_records(batch)] == [(99, 1), (99, 1)]
    wrapper = build_classic([(b"a", b"1", 5), (b"b", b"2", 7)], magic=1, codec=Codec.GZIP,
                            timestamp_type=1)
    assert [(r.timestamp, r.timestamp_type) for r in iter_records(wrapper)] == [(7, 1), (7, 1)]


def test_iter_entries_stops_at_a_trailing_partial_entry():
    data = build_batch([(b"a", b"1", 1)]) + build_classic([(b"b", b"2")], magic=0, base_offset=1)
    for cut in range(len(data) + 1):
        entries = list(iter_entries(data[:cut]))
        assert len(entries) == (2 if cut == len(data) else 1 if cut >= 70 else 0), cut


def test_iter_entries_from_a_start_position():
    first = build_batch([(b"a", b"1", 1)])
    data = first + build_batch([(b"b", b"2", 1)], base_offset=1)
    (entry,) = iter_entries(data, len(first))
    assert (entry.position, entry.base_offset) == (len(first), 1)


def test_iter_entries_raises_on_nonsense():
    bad = bytearray(build_batch([(b"a", b"1", 1)]))
    struct.pack_into(">i", bad, 8, 3)
    with pytest.raises(CorruptRecordError):
        list(iter_entries(bad))
    bad = bytearray(build_batch([(b"a", b"1", 1)]))
    bad[16] = 7
    with pytest.raises(CorruptRecordError, match="unknown magic"):
        list(iter_entries(bad))


def test_validity_checks():
    data = bytearray(build_classic([(b"a", b"1", 1)], magic=1))
    data[-1] ^= 1
    entry = LogEntry(data)
    assert not entry.is_valid()
    with pytest.raises(CorruptRecordError, match="CRC32"):
        entry.ensure_valid()
    with pytest.raises(CorruptRecordError):
        list(iter_records(data))
    assert [r.value for r in iter_records(data, check_crc=False)] == [b"0"]


def test_empty_batch_reads_as_no_records():
    entry = LogEntry(build_batch([], base_offset=5, last_offset_delta=2))
    assert (entry.record_count, entry.base_offset, entry.last_offset, entry.records()) == (0, 5, 7, [])


def test_build_batch_options():
    batch = build_batch([(b"a", b"1", 10), (b"b", b"2", 12)], base_offset=100, offset_deltas=[0, 5],
                        base_timestamp=8)
    entry = LogEntry(batch)
    assert (entry.last_offset, entry.base_timestamp, entry.max_timestamp) == (105, 8, 12)
    assert [r.offset for r in entry.records()] == [100, 105]
    with pytest.raises(ValueError):
        build_batch([(b"a", b"1")], offset_deltas=[0, 1])


def test_build_classic_refuses_what_classic_cannot_hold():
    with pytest.raises(ValueError):
        build_classic([(b"a", b"1", 1, [("h", b"v")])], magic=1)
    with pytest.raises(ValueError):
        build_classic([(b"a", b"1")], magic=1, codec=Codec.ZSTD)
    with pytest.raises(ValueError):
        build_classic([(b"a", b"1")], magic=2)
    with pytest.raises(ValueError):
        build_classic([], magic=1, codec=Codec.GZIP)
    assert build_classic([], magic=1) == b""


def test_missing_timestamps_mean_now():
    import time
    before = time.time_ns() // 1_000_000
    (record,) = iter_records(build_batch([(b"a", b"1")]))
    (message,) = iter_records(build_classic([(b"a", b"1")], magic=1))
    after = time.time_ns() // 1_000_000
    assert before <= record.timestamp <= after and before <= message.timestamp <= after


def test_header_key_that_is_not_utf8_reads_and_rebuilds_byte_for_byte():
    batch = bytearray(build_batch([(b"k", b"v", 1, [("ab", b"x")])]))
    at = batch.index(b"ab")
    batch[at:at + 2] = b"\xff\xfe"  # Kafka does not check header keys are UTF-8
    struct.pack_into(">I", batch, 17, batch_crc(batch, 0, len(batch)))
    (record,) = iter_records(batch)
    rebuilt = build_batch([(record.key, record.value, record.timestamp, record.headers)])
    assert rebuilt == bytes(batch)
