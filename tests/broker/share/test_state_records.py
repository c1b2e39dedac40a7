"""`__share_group_state` records (broker/share/state_records.py): round trips and
bytes built by hand from Kafka's ShareSnapshot/ShareUpdate schemas."""

import struct
import uuid

import pytest

from broker.share.partition import StateBatch
from broker.share.state_records import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareSnapshot,
    ShareStateKey,
    ShareUpdate,
    decode,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    kafka_uuid_string,
)

TOPIC_ID = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
KEY = ShareStateKey("grp", TOPIC_ID, 3)


def test_key_bytes_by_hand():
    want = (struct.pack(">h", 1) + struct.pack(">h", 3) + b"grp" + TOPIC_ID.bytes + struct.pack(">i", 3))
    assert encode_key(UPDATE_TYPE, KEY) == want
    assert decode_key(want) == (UPDATE_TYPE, KEY)
    assert encode_key(SNAPSHOT_TYPE, KEY)[:2] == b"\x00\x00"


def test_snapshot_value_bytes_by_hand():
    value = ShareSnapshot(2, 5, 7, 100, 1111, 2222, (StateBatch(100, 104, 2, 1), StateBatch(105, 105, 4, 5)), 6)
    want = (struct.pack(">h", 0)                       # value version
            + struct.pack(">iiiqqq", 2, 5, 7, 100, 1111, 2222)
            + bytes([3])                                # compact array: 2 batches + 1
            + struct.pack(">qqbh", 100, 104, 2, 1) + b"\x00"
            + struct.pack(">qqbh", 105, 105, 4, 5) + b"\x00"
            + bytes([1, 0, 4]) + struct.pack(">i", 6))  # one tag: 0 DeliveryCompleteCount, 4 bytes
    assert encode_value(value) == want
    assert decode_value(SNAPSHOT_TYPE, want) == value


def test_update_value_bytes_by_hand_without_tags():
    value = ShareUpdate(2, 7, -1, (StateBatch(0, 0, 0, 3),))
    want = (struct.pack(">h", 0) + struct.pack(">iiq", 2, 7, -1) + bytes([2])
            + struct.pack(">qqbh", 0, 0, 0, 3) + b"\x00" + b"\x00")
    assert encode_value(value) == want
    assert decode_value(UPDATE_TYPE, want) == value


@pytest.mark.parametrize("value", [
    ShareSnapshot(0, 0, -1, -1, 1, 1),
    ShareSnapshot(9, 1, 0, 10, 5, 6, tuple(StateBatch(i * 10, i * 10 + 4, 0, i % 5) for i in range(200))),
    ShareUpdate(0, 3, 40, (StateBatch(40, 41, 2, 1),), 12),
])
def test_round_trip(value):
    record_type = SNAPSHOT_TYPE if isinstance(value, ShareSnapshot) else UPDATE_TYPE
    decoded = decode(encode_key(record_type, KEY), encode_value(value))
    assert decoded.record_type == record_type and decoded.key == KEY and decoded.value == value


def test_tombstone_and_foreign_keys():
    assert decode(encode_key(SNAPSHOT_TYPE, KEY), None).value is None
    assert decode(struct.pack(">h", 7) + b"rest", b"") is None


@pytest.mark.parametrize("raw", [b"", b"\x00\x00\x00", struct.pack(">h", 1) + b"\x00\x10abc"])
def test_damaged_keys_raise(raw):
    with pytest.raises((ValueError, struct.error)):
        decode_key(raw)


def test_damaged_values_raise():
    good = encode_value(ShareUpdate(0, 0, 0, (StateBatch(0, 1, 0, 1),)))
    for raw in (good[:-3], struct.pack(">h", 9) + good[2:], good + b"x"):
        with pytest.raises((ValueError, struct.error)):
            decode_value(UPDATE_TYPE, raw)


def test_coordinator_key_and_partition_as_kafka():
    assert kafka_uuid_string(TOPIC_ID) == "ASNFZ4mrze8BI0VniavN7w"
    assert KEY.coordinator_key() == "grp:ASNFZ4mrze8BI0VniavN7w:3"
    assert 0 <= KEY.state_partition(50) < 50


# ---- the layout pieces established from Kafka's sources (see the module doc) -----------------

def test_snapshot_epoch_is_an_int32_not_the_old_uint16():
    """PR #20016 made SnapshotEpoch int32 in both values: four bytes, past 65535 too."""
    snapshot = encode_value(ShareSnapshot(70000, 1, 2, 3, 4, 5))
    update = encode_value(ShareUpdate(70000, 2, 3))
    assert snapshot[2:6] == struct.pack(">i", 70000) and snapshot[6:10] == struct.pack(">i", 1)
    assert update[2:6] == struct.pack(">i", 70000) and update[6:10] == struct.pack(">i", 2)
    assert decode_value(SNAPSHOT_TYPE, snapshot).snapshot_epoch == 70000


def test_snapshot_timestamps_sit_between_start_offset_and_batches():
    """Schema order: ..., StartOffset, CreateTimestamp, WriteTimestamp, StateBatches."""
    raw = encode_value(ShareSnapshot(0, 0, 0, 42, 1_700_000_000_000, 1_700_000_000_123))
    assert raw[14:22] == struct.pack(">q", 42)
    assert raw[22:30] == struct.pack(">q", 1_700_000_000_000)
    assert raw[30:38] == struct.pack(">q", 1_700_000_000_123)
    assert raw[38:] == b"\x01\x00"  # no batches (compact length 0 + 1), no tags
    assert len(encode_value(ShareUpdate(0, 0, 42))) == 2 + 4 + 4 + 8 + 1 + 1  # the update has neither


def test_both_values_are_version_0_and_keys_carry_the_record_type():
    assert encode_value(ShareSnapshot(0, 0, 0, 0, 0, 0))[:2] == b"\x00\x00"
    assert encode_value(ShareUpdate(0, 0, 0))[:2] == b"\x00\x00"
    assert encode_key(SNAPSHOT_TYPE, KEY)[:2] == b"\x00\x00"
    assert encode_key(UPDATE_TYPE, KEY)[:2] == b"\x00\x01"


def test_delivery_complete_count_unknown_writes_no_tag_and_reads_back_as_minus_one():
    value = ShareUpdate(1, 2, 3, (StateBatch(3, 3, 0, 1),))
    raw = encode_value(value)
    assert raw.endswith(b"\x00\x00")  # the batch's empty tags, then the value's
    assert decode_value(UPDATE_TYPE, raw).delivery_complete_count == -1
    zero = encode_value(ShareUpdate(1, 2, 3, (), 0))
    assert zero.endswith(bytes([1, 0, 4]) + struct.pack(">i", 0))  # 0 is known: written


def test_unknown_tags_are_read_past():
    """A later Kafka may add tagged fields: the value's and a batch's unknown tags are skipped."""
    raw = (struct.pack(">h", 0) + struct.pack(">iiq", 1, 2, 3) + bytes([2])
           + struct.pack(">qqbh", 3, 4, 2, 1) + bytes([1, 5, 2]) + b"zz"           # batch: tag 5, 2 bytes
           + bytes([2, 0, 4]) + struct.pack(">i", 9) + bytes([7, 1]) + b"?")      # tags 0 and 7
    assert decode_value(UPDATE_TYPE, raw) == ShareUpdate(1, 2, 3, (StateBatch(3, 4, 2, 1),), 9)


def test_kafka_dump_log_cases():
    """DumpLogSegmentsTest's: a ShareSnapshot tombstone, and a key of record type 32767 alone."""
    assert decode(encode_key(SNAPSHOT_TYPE, KEY), None) is not None
    assert decode(struct.pack(">h", 32767), b"") is None
    assert decode_key(struct.pack(">h", 32767)) is None
