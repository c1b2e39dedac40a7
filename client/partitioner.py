"""Choosing a partition for a record, as Kafka's Java producer does.

Contract:
- `murmur2(data)` is org.apache.kafka.common.utils.Utils.murmur2 bit for bit:
  MurmurHash2, seed 0x9747b28c, returned as a signed 32-bit int (Java's int).
- `to_positive(n)` is Utils.toPositive (`n & 0x7fffffff`, not abs: abs of
  INT_MIN is negative in Java).
- `partition_for_key(key, n)` = `to_positive(murmur2(key)) % n`, so a key lands
  on the same partition as it would with a Java producer on a topic with the
  same partition count.
- Keyless records: `StickyPartitioner`, Kafka's default since 2.4 (KIP-480).
  A topic's keyless records stick to one partition until the producer closes
  the batch they went into, then move to the next partition (round-robin
  rather than Kafka's random pick, so tests and users can predict it).
  Sticking fills batches instead of spreading one record per partition per
  linger period, which is what KIP-480 measured as the win.
"""

from __future__ import annotations

__all__ = ["murmur2", "to_positive", "partition_for_key", "StickyPartitioner"]

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
MASK32 = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 of `data` as a signed 32-bit int."""
    data = bytes(data)
    length = len(data)
    h = (SEED ^ length) & MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        # Little-endian 4-byte word; Java's `& 0xff` makes the bytes unsigned as here.
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * M) & MASK32
        k ^= k >> R  # Java's >>> on a 32-bit int: a logical shift of the unsigned value
        k = (k * M) & MASK32
        h = (h * M) & MASK32
        h ^= k
    tail = length & 3
    # Java's switch falls through 3 -> 2 -> 1, multiplying once at the end.
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Where keyless records go: one partition per topic until its batch closes."""

    def __init__(self) -> None:
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self._current[topic] = 0
        return current

    def on_batch_closed(self, topic: str, partition: int, num_partitions: int) -> None:
        """The batch keyless records stuck to was closed: move to the next partition."""
        if self._current.get(topic) == partition:
            self._current[topic] = (partition + 1) % num_partitions
