"""Kafka's __consumer_offsets layout and group -> partition mapping."""

from broker.state.group_offsets import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    kafka_abs,
    partition_for,
)


def test_java_string_hash_matches_java():
    # Values of java.lang.String.hashCode().
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -2**31  # the famous Integer.MIN_VALUE
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair


def test_partition_uses_kafka_utils_abs():
    assert kafka_abs(-2**31) == 0  # not Math.abs, which stays negative
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    negative = "group-with-negative-hash"
    assert java_string_hash(negative) < 0
    assert partition_for(negative, 50) == abs(java_string_hash(negative)) % 50


def test_key_and_value_layout():
    key = encode_key("g", "t", 3)
    assert key == bytes.fromhex("0001" "0001 67" "0001 74" "00000003".replace(" ", ""))
    assert decode_key(key) == ("g", "t", 3)
    value = encode_value(42, "meta", 1_700_000_000_000)
    assert value == (bytes.fromhex("0003" "000000000000002a" "ffffffff" "0004") + b"meta"
                     + (1_700_000_000_000).to_bytes(8, "big"))
    assert decode_value(value) == (42, "meta", 1_700_000_000_000, -1)


def test_value_keeps_the_committed_leader_epoch():
    value = encode_value(42, "", 7, leader_epoch=5)
    assert value[:2 + 8 + 4] == bytes.fromhex("0003" "000000000000002a" "00000005")
    assert decode_value(value) == (42, "", 7, 5)


def test_older_value_versions_and_group_metadata_keys():
    v1 = bytes.fromhex("0001" "0000000000000007" "0000") + (5).to_bytes(8, "big") + (9).to_bytes(8, "big")
    assert decode_value(v1) == (7, "", 5, -1)  # no leader epoch before version 3
    assert decode_key(bytes.fromhex("0002 0001 67".replace(" ", ""))) is None  # group metadata
