"""validate_and_assign: one test per rule of the append-time validator."""

import struct

import pytest

from kafka_format import (
    EntryInfo,
    LogEntry,
    Record,
    build_batch,
    build_classic,
    iter_entries,
    iter_records,
    scan_entries,
)
from kafka_format.batch import BATCH_HEADER, batch_crc, encode_record
from kafka_format.classic import append_message, message_crc
from kafka_format.codecs import Codec, compress
from kafka_format.errors import (
    KEYLESS_ON_COMPACTED,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordListTooLargeError,
    RecordValidationError,
)
from storage.config import LogConfig
from storage.validator import validate_and_assign

# Each test runs on the C hot paths and on their Python twins (conftest.twin).
pytestmark = pytest.mark.usefixtures("twin")

NOW = 1_700_000_000_000
CREATE = LogConfig()
APPEND_TIME = LogConfig(message_timestamp_type="LogAppendTime")
COMPACT = LogConfig(cleanup_policy=("compact",))


def validate(data, config=CREATE, next_offset=100):
    return validate_and_assign(data, next_offset=next_offset, now_ms=NOW, config=config)


def fix_crc(buf: bytearray, pos: int = 0) -> bytearray:
    size = struct.unpack_from(">i", buf, pos + 8)[0]
    end = pos + 12 + size
    if buf[pos + 16] == 2:
        struct.pack_into(">I", buf, pos + 17, batch_crc(buf, pos, end))
    else:
        struct.pack_into(">I", buf, pos + 12, message_crc(buf, pos, end))
    return buf


def raw_batch(records: bytes, *, count: int, last_delta: int | None = None, codec: int = 0,
              attributes: int | None = None, producer_id: int = -1, base_sequence: int = -1,
              base_ts: int = 1000, max_ts: int = 1000) -> bytes:
    """A batch around hand-made record bytes (compressed here when codec says so)."""
    payload = compress(codec, records) if codec else records
    out = bytearray(BATCH_HEADER.size) + payload
    BATCH_HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0,
                           codec if attributes is None else attributes,
                           count - 1 if last_delta is None else last_delta, base_ts, max_ts,
                           producer_id, 0, base_sequence, count)
    return bytes(fix_crc(out))


def wrapper(inner_messages: list[tuple[int, bytes | None, bytes | None, int]], *, magic: int,
            codec: int, timestamp: int = 0, inner_magic: int | None = None,
            inner_codec: int = 0) -> bytes:
    """A compressed classic wrapper around inner (offset, key, value, timestamp) messages."""
    inner = bytearray()
    for offset, key, value, ts in inner_messages:
        append_message(inner, offset, magic if inner_magic is None else inner_magic, inner_codec,
                       ts, key, value)
    out = bytearray()
    append_message(out, 0, magic, codec, timestamp, None, compress(codec, inner, magic=magic))
    return bytes(out)


def read(buf) -> list[Record]:
    return list(iter_records(buf))


def values(buf) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in iter_records(buf)]


# ---- offsets and the result -------------------------------------------------------------


def test_v2_batch_gets_offsets_and_leader_epoch_without_crc_change():
    data = build_batch([(b"k", b"v", 1000), (b"k2", b"v2", 1002)], partition_leader_epoch=7)
    result = validate(data)
    assert result.buffer[17:] == data[17:]  # CRC and everything it covers unchanged
    assert struct.unpack_from(">qii", result.buffer) == (100, len(data) - 12, 0)
    assert (result.first_offset, result.last_offset, result.record_count) == (100, 101, 2)
    assert (result.max_timestamp, result.offset_of_max_timestamp, result.log_append_time) == (1002, 101, -1)
    assert result.entries == [EntryInfo(0, len(data), 2, 101, 1002, 0)]
    assert scan_entries(result.buffer, min_offset=100).problem is None


def test_classic_messages_get_consecutive_offsets():
    data = (build_classic([(b"a", b"1", 5), (b"b", b"2", 9)], magic=1, base_offset=77)
            + build_classic([(b"c", b"3")], magic=0, base_offset=3))
    result = validate(data)
    assert values(result.buffer) == [(100, b"1"), (101, b"2"), (102, b"3")]
    assert [e.last_offset for e in result.entries] == [100, 101, 102]
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (9, 101)
    assert scan_entries(result.buffer, min_offset=100).problem is None


def test_mixed_magics_in_one_set():
    parts = [build_batch([(b"a", b"1", 10)] * 2), build_classic([(b"b", b"2", 30)], magic=1),
             build_classic([(b"c", b"3")], magic=0, codec=Codec.GZIP),
             build_batch([(b"d", b"4", 30)], codec=Codec.LZ4)]
    result = validate(b"".join(parts))
    assert [r.offset for r in read(result.buffer)] == [100, 101, 102, 103, 104]
    assert [e.magic for e in result.entries] == [2, 1, 0, 2]
    # the first entry reaching the maximum wins; its last offset is reported
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (30, 102)
    positions = [e.position for e in scan_entries(result.buffer).entries]
    assert [e.position for e in result.entries] == positions


def test_v0_only_set_has_no_timestamp():
    result = validate(build_classic([(b"a", b"1")], magic=0))
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (-1, -1)


# ---- the caller's bytes, partial and empty input -------------------------------------------


ALL_KINDS = [
    build_batch([(b"a", b"1", 10)] * 3),
    build_batch([(b"a", b"1", 10)] * 3, codec=Codec.SNAPPY),
    build_classic([(b"a", b"1", 10)], magic=1),
    build_classic([(b"a", b"1", 10)] * 2, magic=1, codec=Codec.GZIP),
    build_classic([(b"a", b"1")] * 2, magic=0, codec=Codec.LZ4),  # rebuilt
]


@pytest.mark.parametrize("config", [CREATE, APPEND_TIME, COMPACT], ids=["create", "append", "compact"])
def test_callers_buffer_is_never_mutated(config):
    original = b"".join(ALL_KINDS)
    data = bytearray(original)
    result = validate(data, config)
    assert data == original
    assert result.buffer is not data
    validate(memoryview(data), config)
    assert data == original


def test_bad_entry_refuses_the_whole_set_and_leaves_input_alone():
    good = build_batch([(b"a", b"1", 10)])
    bad = bytearray(build_batch([(b"b", b"2", 10)]))
    bad[-1] ^= 1
    data = bytearray(good + bad)
    before = bytes(data)
    with pytest.raises(CorruptRecordError):
        validate(data)
    assert data == before


def test_empty_set_is_corrupt():
    with pytest.raises(CorruptRecordError, match="empty"):
        validate(b"")


def test_trailing_partial_entry_is_corrupt_at_every_cut():
    whole = b"".join(ALL_KINDS)
    boundaries = {0, len(whole)}
    pos = 0
    for part in ALL_KINDS:
        pos += len(part)
        boundaries.add(pos)
    assert validate(whole).record_count == 11
    for cut in range(1, len(whole)):
        if cut in boundaries:
            assert validate(whole[:cut]).last_offset >= 100
            continue
        with pytest.raises(CorruptRecordError, match="cut short"):
            validate(whole[:cut])


# ---- corrupt bytes -----------------------------------------------------------------------


@pytest.mark.parametrize("data", ALL_KINDS[:4], ids=["v2", "v2 snappy", "v1", "v1 gzip"])
def test_bad_crc_is_corrupt(data):
    flipped = bytearray(data)
    flipped[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate(flipped)


def test_bad_size_or_magic_is_corrupt():
    small = bytearray(build_classic([(b"k", b"v")], magic=0))
    struct.pack_into(">i", small, 8, 13)
    with pytest.raises(CorruptRecordError, match="bad size"):
        validate(small)
    short_batch = bytearray(build_batch([(b"k", b"v", 1)]))
    struct.pack_into(">i", short_batch, 8, 40)
    with pytest.raises(CorruptRecordError, match="shorter than a batch header"):
        validate(short_batch[:52])
    magic3 = bytearray(build_batch([(b"k", b"v", 1)]))
    magic3[16] = 3
    with pytest.raises(CorruptRecordError, match="magic 3"):
        validate(magic3)


def test_classic_lengths_disagreeing_with_size_are_corrupt():
    message = bytearray(build_classic([(b"key", b"value", 1)], magic=1))
    struct.pack_into(">i", message, 26, 2)
    with pytest.raises(CorruptRecordError, match="disagrees"):
        validate(fix_crc(message))


def test_corrupt_compressed_payloads():
    garbage_batch = raw_batch(b"", count=1)
    garbage_batch = bytearray(garbage_batch[:61] + b"not gzip at all")
    struct.pack_into(">i", garbage_batch, 8, len(garbage_batch) - 12)
    garbage_batch[22] = Codec.GZIP
    with pytest.raises(CorruptRecordError, match="gzip"):
        validate(fix_crc(garbage_batch))
    garbage_wrapper = bytearray()
    append_message(garbage_wrapper, 0, 1, Codec.SNAPPY, 0, None, b"\xff\xff\xff\xff not snappy")
    with pytest.raises(CorruptRecordError, match="snappy"):
        validate(garbage_wrapper)


def test_unknown_codec_is_corrupt():
    batch = bytearray(build_batch([(b"k", b"v", 1)]))
    batch[22] = 5
    with pytest.raises(CorruptRecordError, match="unknown codec 5"):
        validate(fix_crc(batch))
    message = bytearray(build_classic([(b"k", b"v")], magic=0))
    message[17] = 6
    with pytest.raises(CorruptRecordError, match="unknown codec 6"):
        validate(fix_crc(message))


def test_compressed_batch_records_are_walked():
    two = encode_record(0, 0, b"a", b"1") + encode_record(1, 0, b"b", b"2")
    with pytest.raises(CorruptRecordError, match="cut short"):  # count says 3, payload holds 2
        validate(raw_batch(two, count=3, codec=Codec.GZIP))
    with pytest.raises(CorruptRecordError, match="left after"):  # count says 1, payload holds 2
        validate(raw_batch(two, count=1, codec=Codec.GZIP))
    lying = bytearray(encode_record(0, 0, b"a", b"1"))
    lying[0] += 2  # declared length one byte longer than its fields
    with pytest.raises(CorruptRecordError, match="declared"):
        validate(raw_batch(bytes(lying) + b"\x00", count=1, codec=Codec.ZSTD))


def test_uncompressed_batch_records_are_not_walked():
    """Per batch, header and CRC only: broken record bytes under a good CRC pass
    (as Kafka's CRC would, too); a compacted topic does walk them."""
    nonsense = raw_batch(b"\xff" * 20, count=2)
    assert validate(nonsense).record_count == 2
    with pytest.raises(CorruptRecordError):
        validate(nonsense, COMPACT)


def test_inner_message_problems():
    with pytest.raises(CorruptRecordError, match="magic"):
        validate(wrapper([(0, b"k", b"v", 1)], magic=1, codec=Codec.GZIP, inner_magic=0))
    bad_inner = bytearray()
    append_message(bad_inner, 0, 1, 0, 1, b"k", b"v")
    bad_inner[-1] ^= 1
    outer = bytearray()
    append_message(outer, 0, 1, Codec.GZIP, 1, None, compress(Codec.GZIP, bad_inner))
    with pytest.raises(CorruptRecordError, match="inner message at 0 fails its CRC"):
        validate(outer)
    no_value = bytearray()
    append_message(no_value, 0, 1, Codec.GZIP, 1, None, None)
    with pytest.raises(CorruptRecordError, match="no value"):
        validate(no_value)


# ---- sizes ---------------------------------------------------------------------------------


def test_entry_over_max_message_bytes():
    batch = build_batch([(b"k", b"v" * 100, 1)])
    assert validate(batch, LogConfig(max_message_bytes=len(batch))).record_count == 1
    with pytest.raises(MessageTooLargeError):
        validate(batch, LogConfig(max_message_bytes=len(batch) - 1))
    message = build_classic([(b"k", b"v" * 100)], magic=0)
    with pytest.raises(MessageTooLargeError):
        validate(message, LogConfig(max_message_bytes=len(message) - 1))


def test_too_large_is_checked_before_the_crc():
    batch = bytearray(build_batch([(b"k", b"v" * 100, 1)]))
    batch[-1] ^= 1
    with pytest.raises(MessageTooLargeError):
        validate(batch, LogConfig(max_message_bytes=100))


def test_set_over_segment_bytes():
    data = build_batch([(b"k", b"v", 1)]) * 2
    assert validate(data, LogConfig(segment_bytes=len(data))).record_count == 2
    with pytest.raises(RecordListTooLargeError):
        validate(data, LogConfig(segment_bytes=len(data) - 1))


# ---- batch rules ---------------------------------------------------------------------------


def test_batch_with_no_records_is_invalid():
    with pytest.raises(InvalidRecordError, match="recordCount 0"):
        validate(build_batch([]))


def test_batch_count_must_match_offset_range():
    with pytest.raises(InvalidRecordError, match="does not match"):
        validate(build_batch([(b"k", b"v", 1)] * 2, last_offset_delta=2))
    with pytest.raises(InvalidRecordError, match="does not match"):
        validate(raw_batch(encode_record(0, 0, b"k", b"v"), count=1, last_delta=-1))


def test_control_batch_is_invalid():
    with pytest.raises(InvalidRecordError, match="control"):
        validate(build_batch([(b"\x00\x00\x00\x01", b"", 1)], is_control=True))


def test_producer_id_needs_a_sequence():
    with pytest.raises(InvalidRecordError, match="sequence"):
        validate(build_batch([(b"k", b"v", 1)], producer_id=5, producer_epoch=0))
    ok = validate(build_batch([(b"k", b"v", 1)], producer_id=5, producer_epoch=0, base_sequence=0))
    entry = next(iter_entries(ok.buffer))
    assert (entry.producer_id, entry.producer_epoch, entry.base_sequence) == (5, 0, 0)


def test_transactional_batch_is_accepted():
    result = validate(build_batch([(b"k", b"v", 1)], producer_id=5, producer_epoch=0,
                                  base_sequence=0, is_transactional=True))
    assert next(iter_entries(result.buffer)).is_transactional


# ---- timestamps ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_batch_log_append_time(codec):
    result = validate(build_batch([(b"k", b"v", 1000), (b"k", b"v", 5)], codec=codec), APPEND_TIME)
    entry = next(iter_entries(result.buffer))
    entry.ensure_valid()  # the CRC was recomputed
    assert entry.attributes & 0x08 and entry.timestamp_type == 1
    assert (entry.max_timestamp, result.max_timestamp, result.log_append_time) == (NOW, NOW, NOW)
    assert result.entries[0].max_timestamp == NOW
    assert {(r.timestamp, r.timestamp_type) for r in entry.records()} == {(NOW, 1)}


def test_batch_create_time_clears_a_client_set_log_append_bit():
    result = validate(build_batch([(b"k", b"v", 1000)], timestamp_type=1))
    entry = next(iter_entries(result.buffer))
    entry.ensure_valid()
    assert entry.timestamp_type == 0 and entry.records()[0].timestamp == 1000


def test_compressed_batch_max_timestamp_is_recomputed():
    records = encode_record(0, 0, b"a", b"1") + encode_record(1, 70, b"b", b"2")
    result = validate(raw_batch(records, count=2, codec=Codec.LZ4, base_ts=1000, max_ts=5))
    entry = next(iter_entries(result.buffer))
    entry.ensure_valid()
    assert entry.max_timestamp == result.max_timestamp == 1070


def test_uncompressed_batch_max_timestamp_is_trusted():
    records = encode_record(0, 0, b"a", b"1") + encode_record(1, 70, b"b", b"2")
    result = validate(raw_batch(records, count=2, base_ts=1000, max_ts=5))
    assert result.max_timestamp == 5


def test_v1_message_log_append_time():
    data = build_classic([(b"a", b"1", 5), (b"b", b"2", 6)], magic=1)
    result = validate(data, APPEND_TIME)
    assert scan_entries(result.buffer).problem is None  # CRCs recomputed
    assert [(r.timestamp, r.timestamp_type) for r in read(result.buffer)] == [(NOW, 1), (NOW, 1)]
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (NOW, 100)


def test_v0_message_keeps_no_timestamp_under_log_append_time():
    data = build_classic([(b"a", b"1")], magic=0)
    result = validate(data, APPEND_TIME)
    assert result.buffer[8:] == data[8:]
    assert result.max_timestamp == -1 and result.log_append_time == NOW


# ---- compressed classic wrappers --------------------------------------------------------------


def test_v1_wrapper_with_relative_offsets_is_assigned_in_place():
    data = wrapper([(0, b"a", b"1", 10), (1, b"b", b"2", 30), (2, b"c", b"3", 20)], magic=1,
                   codec=Codec.SNAPPY, timestamp=30)
    result = validate(data)
    assert result.buffer[12:] == data[12:]  # only the wrapper offset changed
    assert struct.unpack_from(">q", result.buffer)[0] == 102
    assert values(result.buffer) == [(100, b"1"), (101, b"2"), (102, b"3")]
    assert LogEntry(result.buffer).base_offset == 100
    assert result.entries == [EntryInfo(0, len(data), 1, 102, 30, Codec.SNAPPY)]


def test_v1_wrapper_timestamp_becomes_the_largest_inner_one():
    data = wrapper([(0, b"a", b"1", 10), (1, b"b", b"2", 30)], magic=1, codec=Codec.GZIP,
                   timestamp=999)
    result = validate(data)
    entry = LogEntry(result.buffer)
    entry.ensure_valid()
    assert entry.max_timestamp == result.max_timestamp == 30
    assert [r.timestamp for r in entry.records()] == [10, 30]


def test_v1_wrapper_log_append_time():
    data = wrapper([(0, b"a", b"1", 10), (1, b"b", b"2", 30)], magic=1, codec=Codec.GZIP)
    result = validate(data, APPEND_TIME)
    entry = LogEntry(result.buffer)
    entry.ensure_valid()
    assert entry.attributes & 0x08 and entry.max_timestamp == NOW
    assert [(r.timestamp, r.timestamp_type) for r in entry.records()] == [(NOW, 1), (NOW, 1)]


def test_v1_wrapper_with_wrong_inner_offsets_is_rebuilt():
    data = wrapper([(500, b"a", b"1", 10), (501, b"b", b"2", 20)], magic=1, codec=Codec.LZ4)
    after = build_batch([(b"z", b"9", 5)])
    result = validate(data + after)
    assert values(result.buffer) == [(100, b"1"), (101, b"2"), (102, b"9")]
    entry = LogEntry(result.buffer)
    entry.ensure_valid()
    assert entry.codec == Codec.LZ4 and entry.base_offset == 100 and entry.last_offset == 101
    assert result.entries[0].size == entry.size
    assert result.entries[1].position == entry.size  # later entries are shifted
    assert scan_entries(result.buffer, min_offset=100).problem is None


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_v0_wrapper_is_always_rebuilt_with_absolute_offsets(codec):
    data = wrapper([(0, b"a", b"1", -1), (1, b"b", b"2", -1)], magic=0, codec=codec)
    result = validate(data)
    entry = LogEntry(result.buffer)
    entry.ensure_valid()
    assert (entry.codec, entry.base_offset, entry.last_offset, entry.record_count) == (codec, 100, 101, 2)
    assert values(result.buffer) == [(100, b"1"), (101, b"2")]
    assert result.entries == [EntryInfo(0, len(result.buffer), 0, 101, -1, codec)]


def test_rebuilt_entry_over_max_message_bytes():
    # 300 identical inner messages (all at offset 0) compress better than the
    # same messages renumbered 100, 101, ...: the rebuilt wrapper is larger.
    data = wrapper([(0, b"k", b"v", -1)] * 300, magic=0, codec=Codec.GZIP)
    assert len(validate(data).buffer) > len(data)
    with pytest.raises(MessageTooLargeError, match="once rebuilt"):
        validate(data, LogConfig(max_message_bytes=len(data)))


def test_nested_compression_is_invalid():
    with pytest.raises(InvalidRecordError, match="holds a compressed message"):
        validate(wrapper([(0, b"k", b"v", 1)], magic=1, codec=Codec.GZIP, inner_codec=Codec.GZIP))


def test_empty_wrapper_is_invalid():
    empty = bytearray()
    append_message(empty, 0, 1, Codec.GZIP, 1, None, compress(Codec.GZIP, b""))
    with pytest.raises(InvalidRecordError, match="no messages"):
        validate(empty)


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_before_magic_2_is_invalid(magic):
    message = bytearray()
    append_message(message, 0, magic, Codec.ZSTD, 1, None, compress(Codec.ZSTD, b"whatever"))
    with pytest.raises(InvalidRecordError, match="zstd"):
        validate(message)


def test_compressed_batch_with_wrong_offset_deltas_is_rebuilt():
    records = (encode_record(3, 0, b"a", b"1", [("h", b"x")]) + encode_record(9, 5, b"b", None))
    data = raw_batch(records, count=2, codec=Codec.GZIP, producer_id=4, base_sequence=8)
    result = validate(data)
    entry = next(iter_entries(result.buffer))
    entry.ensure_valid()
    assert (entry.base_offset, entry.last_offset, entry.codec) == (100, 101, Codec.GZIP)
    assert (entry.producer_id, entry.base_sequence, entry.partition_leader_epoch) == (4, 8, 0)
    assert entry.records() == [Record(100, 1000, 0, b"a", b"1", (("h", b"x"),)),
                               Record(101, 1005, 0, b"b", None, ())]


# ---- compacted topics ---------------------------------------------------------------------------


@pytest.mark.parametrize("data", [
    build_batch([(b"k", b"v", 1), (None, b"v", 1)]),
    build_batch([(b"k", b"v", 1), (None, b"v", 1)], codec=Codec.ZSTD),
    build_classic([(None, b"v")], magic=0),
    build_classic([(None, b"v", 1)], magic=1),
    build_classic([(b"k", b"v", 1), (None, b"v", 1)], magic=1, codec=Codec.GZIP),
    build_classic([(b"k", b"v"), (None, b"v")], magic=0, codec=Codec.SNAPPY),
], ids=["v2", "v2 zstd", "v0", "v1", "v1 gzip", "v0 snappy"])
def test_keyless_record_on_compacted_topic_is_invalid(data):
    assert validate(data).record_count >= 1  # fine when not compacted
    with pytest.raises(InvalidRecordError, match="without key"):
        validate(data, COMPACT)


@pytest.mark.parametrize("data, indexes", [
    (build_batch([(b"k", b"v", 1), (None, b"v", 1), (b"k", b"v", 1), (None, b"v", 1)]), [1, 3]),
    (build_batch([(None, b"v", 1), (b"k", b"v", 1)], codec=Codec.ZSTD), [0]),
    (build_classic([(b"k", b"v", 1), (None, b"v", 1), (None, b"v", 1)], magic=1, codec=Codec.GZIP), [1, 2]),
    (build_classic([(None, b"v", 1)], magic=1), [0]),  # an uncompressed classic message: a batch of one
], ids=["v2", "v2 zstd", "v1 gzip", "v1"])
def test_keyless_records_are_named_by_their_index_in_the_batch(data, indexes):
    """KIP-467: the set is refused whole, with each keyless record's index and
    Kafka's messages, so a client fails those records alone."""
    with pytest.raises(RecordValidationError) as raised:
        validate(data, COMPACT)
    error = raised.value
    assert error.code == 87  # INVALID_RECORD
    assert error.record_errors == tuple((i, "Compacted topic cannot accept message without key") for i in indexes)
    assert str(error).startswith(f"One or more records have been rejected due to {len(indexes)} record errors "
                                 "in total, and only showing the first three errors at most: [RecordError("
                                 f"batchIndex={indexes[0]}, message='Compacted topic cannot accept message")


def test_record_errors_message_shows_the_first_three():
    data = build_batch([(None, b"v", 1)] * 5)
    with pytest.raises(RecordValidationError) as raised:
        validate(data, COMPACT)
    assert [i for i, _ in raised.value.record_errors] == [0, 1, 2, 3, 4]
    assert str(raised.value).count("RecordError(") == 3


def test_keyless_record_after_a_valid_batch_names_its_own_batch():
    data = build_batch([(b"k", b"v", 1)] * 3) + build_batch([(b"k", b"v", 1), (None, b"v", 1)])
    with pytest.raises(RecordValidationError) as raised:
        validate(data, COMPACT)
    assert [i for i, _ in raised.value.record_errors] == [1]


def test_keyed_records_on_compacted_topic_pass():
    data = b"".join(ALL_KINDS)
    assert validate(data, COMPACT).record_count == 11


# ---- the CreateTime timestamp window (message.timestamp.before/after.max.ms) ----------

WINDOW = LogConfig(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)


@pytest.mark.parametrize("form", ["batch", "gzip batch", "v1 gzip wrapper"])
def test_records_outside_the_window_are_named_by_index(form):
    stamps = [NOW - 1000, NOW - 1001, NOW + 500, NOW + 501]
    if form == "v1 gzip wrapper":
        data = build_classic([(b"k", b"v", ts) for ts in stamps], magic=1, codec=Codec.GZIP)
    else:
        data = build_batch([(b"k", b"v", ts, ()) for ts in stamps],
                           codec=Codec.GZIP if form == "gzip batch" else Codec.NONE)
    with pytest.raises(InvalidTimestampError) as refused:
        validate(data, WINDOW)
    assert refused.value.code == 32
    assert [i for i, _ in refused.value.record_errors] == [1, 3]
    assert refused.value.record_errors[0][1] == (
        f"Timestamp {NOW - 1001} of message with offset 1 is out of range. "
        f"The timestamp should be within [{NOW - 1000}, {NOW + 500}]")


def test_a_classic_message_outside_the_window_is_index_0():
    data = build_classic([(b"k", b"ok", NOW), (b"k", b"old", NOW - 5000)], magic=1)
    with pytest.raises(InvalidTimestampError) as refused:
        validate(data, WINDOW)
    assert [i for i, _ in refused.value.record_errors] == [0]


def test_keyless_and_late_records_of_one_batch_answer_invalid_timestamp():
    config = LogConfig(cleanup_policy=("compact",), message_timestamp_before_max_ms=1000)
    data = build_batch([(None, b"a", NOW, ()), (b"k", b"b", NOW - 5000, ())])
    with pytest.raises(InvalidTimestampError) as refused:
        validate(data, config)
    assert [(i, m == KEYLESS_ON_COMPACTED) for i, m in refused.value.record_errors] == [(0, True), (1, False)]


def test_difference_max_ms_stands_in_for_an_unset_side():
    config = LogConfig(message_timestamp_difference_max_ms=1000, message_timestamp_after_max_ms=10_000)
    assert (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == (1000, 10_000)
    validate(build_batch([(b"k", b"v", NOW + 5000, ())]), config)
    with pytest.raises(InvalidTimestampError):
        validate(build_batch([(b"k", b"v", NOW - 5000, ())]), config)


def test_log_append_time_and_no_window_take_any_timestamp():
    data = build_batch([(b"k", b"v", 0, ())])
    validate(data, CREATE)
    validate(data, LogConfig(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=1))
