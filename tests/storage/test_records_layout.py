"""Byte layouts, checked against hand-written bytes: one small entry per magic, and varints."""

import zlib

import crc32c
import pytest

from kafka_format import (
    LOG_OVERHEAD,
    Record,
    build_batch,
    build_classic,
    decode_varint,
    encode_varint,
    iter_records,
    scan_entries,
)
from kafka_format.batch import BATCH_OVERHEAD, FIELD_OFFSET
from kafka_format.errors import CorruptRecordError
from kafka_format.varint import size_of_varint

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's imports

# offset 0 | size 16 | crc | magic 0 | attributes 0 | keyLen 1 | "k" | valueLen 1 | "v"
V0_KEY_K_VALUE_V = bytes.fromhex(
    "0000000000000000" "00000010" "1fecd70a" "00" "00" "00000001" "6b" "00000001" "76")

# offset 5 | size 27 | crc | magic 1 | attributes 0 | timestamp 1000 | keyLen -1 | valueLen 5 | "hello"
V1_NULL_KEY_HELLO = bytes.fromhex(
    "0000000000000005" "0000001b" "942da341" "01" "00" "00000000000003e8" "ffffffff"
    "00000005" "68656c6c6f")

# baseOffset 0 | length 58 | leaderEpoch -1 | magic 2 | crc | attributes 0 | lastOffsetDelta 0 |
# baseTimestamp 1000 | maxTimestamp 1000 | producerId -1 | producerEpoch -1 | baseSequence -1 |
# count 1 | record: length 8 (zigzag 0x10) | attrs 0 | tsDelta 0 | offsetDelta 0 | keyLen 1 (0x02)
# "k" | valueLen 1 (0x02) | "v" | headers 0
V2_KEY_K_VALUE_V = bytes.fromhex(
    "0000000000000000" "0000003a" "ffffffff" "02" "716a6189" "0000" "00000000"
    "00000000000003e8" "00000000000003e8" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "10" "00" "00" "00" "02" "6b" "02" "76" "00")


def test_v0_layout():
    assert build_classic([(b"k", b"v")], magic=0) == V0_KEY_K_VALUE_V
    assert zlib.crc32(V0_KEY_K_VALUE_V[16:]) == 0x1FECD70A
    assert len(V0_KEY_K_VALUE_V) == LOG_OVERHEAD + 16
    assert list(iter_records(V0_KEY_K_VALUE_V)) == [Record(0, -1, 0, b"k", b"v", ())]


def test_v1_layout():
    assert build_classic([(None, b"hello", 1000)], magic=1, base_offset=5) == V1_NULL_KEY_HELLO
    assert zlib.crc32(V1_NULL_KEY_HELLO[16:]) == 0x942DA341
    assert list(iter_records(V1_NULL_KEY_HELLO)) == [Record(5, 1000, 0, None, b"hello", ())]


def test_v2_layout():
    assert build_batch([(b"k", b"v", 1000)]) == V2_KEY_K_VALUE_V
    assert crc32c.crc32c(V2_KEY_K_VALUE_V[21:]) == 0x716A6189
    assert len(V2_KEY_K_VALUE_V) == BATCH_OVERHEAD + 9
    assert list(iter_records(V2_KEY_K_VALUE_V)) == [Record(0, 1000, 0, b"k", b"v", ())]


def test_v2_header_field_offsets_match_kafka():
    assert FIELD_OFFSET == {
        "base_offset": 0, "length": 8, "partition_leader_epoch": 12, "magic": 16, "crc": 17,
        "attributes": 21, "last_offset_delta": 23, "base_timestamp": 27, "max_timestamp": 35,
        "producer_id": 43, "producer_epoch": 51, "base_sequence": 53, "record_count": 57}
    assert BATCH_OVERHEAD == 61


def test_v2_record_with_header_and_null_value():
    batch = build_batch([(b"k", None, 1003, [("h", b"x"), ("n", None)])], base_timestamp=1000)
    # length 14 (0x1c) | attrs | tsDelta 3 (0x06) | offsetDelta 0 | keyLen 1 | "k" | valueLen -1 (0x01) |
    # 2 headers (0x04) | keyLen 1 | "h" | valueLen 1 | "x" | keyLen 1 | "n" | valueLen -1
    assert batch[BATCH_OVERHEAD:] == bytes.fromhex("1c" "00" "06" "00" "02" "6b" "01" "04"
                                                   "02" "68" "02" "78" "02" "6e" "01")
    (record,) = iter_records(batch)
    assert record == Record(0, 1003, 0, b"k", None, (("h", b"x"), ("n", None)))


def test_empty_batch_is_61_bytes_and_scans():
    empty = build_batch([], base_offset=7, last_offset_delta=3, base_timestamp=50)
    assert len(empty) == BATCH_OVERHEAD
    result = scan_entries(empty, min_offset=7)
    assert result.problem is None
    assert result.entries[0].last_offset == 10
    assert list(iter_records(empty)) == []


# ---- varints -------------------------------------------------------------------------------

VARINTS = [(0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (63, "7e"), (64, "8001"),
           (-65, "8101"), (300, "d804"), (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
           (2**63 - 1, "feffffffffffffffff01"), (-(2**63), "ffffffffffffffffff01")]


@pytest.mark.parametrize("value,hexed", VARINTS)
def test_varint_encoding(value, hexed):
    assert encode_varint(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed)) == (value, len(hexed) // 2)
    assert size_of_varint(value) == len(hexed) // 2


def test_varint_decode_at_position_and_errors():
    buf = b"\xff" + encode_varint(300) + encode_varint(-2)
    value, pos = decode_varint(buf, 1)
    assert value == 300
    assert decode_varint(buf, pos) == (-2, len(buf))
    with pytest.raises(CorruptRecordError, match="ends inside"):
        decode_varint(b"\x80\x80")
    with pytest.raises(CorruptRecordError, match="longer than"):
        decode_varint(b"\x80" * 11 + b"\x00")


def test_varint_matches_kafka_python():
    from kafka.record.util import decode_varint as kp_decode
    from kafka.record.util import encode_varint as kp_encode
    for value in [0, 1, -1, 127, -128, 2**20, -(2**40), 2**62, -(2**63)]:
        out = bytearray()
        kp_encode(value, out.append)
        assert bytes(out) == encode_varint(value)
        assert kp_decode(out, 0) == decode_varint(out, 0)
