"""The partitioner agrees with Kafka's Java producer."""

import random

import pytest

from client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# From apache/kafka clients/.../utils/UtilsTest.java (testMurmur2): Java's int results.
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's imports


@pytest.mark.parametrize("key, expected", JAVA_VECTORS)
def test_murmur2_matches_java_vectors(key, expected):
    assert murmur2(key) == expected


def kafka_python_murmur2(key: bytes) -> int:
    from kafka.partitioner.default import murmur2  # imported late: it warns on import
    return murmur2(key)


def test_murmur2_matches_kafka_python_on_random_keys():
    rng = random.Random(1234)
    for _ in range(3000):
        key = rng.randbytes(rng.randrange(0, 70))
        # kafka-python returns the same 32 bits, unsigned.
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_every_tail_length_and_the_empty_key():
    for n in range(9):
        key = bytes(range(200, 200 + n))  # bytes >= 0x80: Java's signed bytes must not leak
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert -2**31 <= murmur2(b"") < 2**31


def test_to_positive_is_a_mask_not_abs():
    assert to_positive(-2**31) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


def test_partition_for_key_is_kafkas_formula():
    for key, expected in JAVA_VECTORS:
        for n in (1, 3, 7, 12):
            assert partition_for_key(key, n) == (expected & 0x7FFFFFFF) % n
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_partitioner_moves_on_when_its_batch_closes():
    sticky = StickyPartitioner()
    assert sticky.partition("t", 3) == 0
    assert sticky.partition("t", 3) == 0
    sticky.on_batch_closed("t", 2, 3)  # another partition's batch: no move
    assert sticky.partition("t", 3) == 0
    sticky.on_batch_closed("t", 0, 3)
    assert sticky.partition("t", 3) == 1
    sticky.on_batch_closed("t", 1, 3)
    sticky.on_batch_closed("t", 2, 3)
    assert sticky.partition("t", 3) == 0
    assert sticky.partition("other", 3) == 0
