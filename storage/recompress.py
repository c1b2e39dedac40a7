"""The topic's compression.type applied on append (Kafka's LogValidator with a
broker-side target codec), for every protocol: Log.append validates through
storage/validator.py, which takes the topic's `LogConfig.compression_target`
(worked out once per config, storage/config.py) and hands each record batch of
another codec to `recompress_batch`.

Policy (Kafka's BrokerCompressionType):
- `producer` (the default): every batch keeps the codec its producer chose.
- `uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`: a batch of another codec is
  rewritten with this one, at the topic's compression.gzip.level /
  compression.lz4.level / compression.zstd.level; a batch already in it is kept
  as it came (Kafka does not recompress for a different level either).

A record batch's records section does not depend on its codec (offset and
timestamp deltas are relative), so recompressing is: the same 61-byte header
with the new codec bits, length and CRC around the records compressed anew.
Producer id, epoch, sequence and the transactional bit stay; idempotence and
the offsets are unchanged.

Classic (magic 0/1) entries, which only the native protocol accepts, keep their
codec: Kafka would first convert them to magic 2, which Strata deliberately does not.
"""

from __future__ import annotations

from kafka_format.batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BATCH_OVERHEAD,
    CRC_OFFSET,
    FIELD_OFFSET,
    INT16,
    INT32,
    INT64,
    LEADER_EPOCH_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    UINT32,
    batch_crc,
)
from kafka_format.codecs import compress
from kafka_format.framing import CODEC_MASK, LOG_OVERHEAD

from .config import Target

LENGTH_OFFSET = FIELD_OFFSET["length"]


def recompress_batch(buf, pos: int, records, target: Target, *, base_offset: int, leader_epoch: int,
                     attributes: int, max_timestamp: int) -> bytes:
    """The batch at `pos` of `buf` rewritten around `records` (its uncompressed
    records section) compressed with `target`: offsets assigned from `base_offset`,
    `attributes` (timestamp type etc.) with the new codec bits, `max_timestamp`."""
    payload = compress(target.codec, records, magic=2, level=target.level) if target.codec else bytes(records)
    out = bytearray(buf[pos:pos + BATCH_OVERHEAD])
    out += payload
    INT64.pack_into(out, BASE_OFFSET_OFFSET, base_offset)
    INT32.pack_into(out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    INT32.pack_into(out, LEADER_EPOCH_OFFSET, leader_epoch)
    INT16.pack_into(out, ATTRIBUTES_OFFSET, (attributes & ~CODEC_MASK) | int(target.codec))
    INT64.pack_into(out, MAX_TIMESTAMP_OFFSET, max_timestamp)
    UINT32.pack_into(out, CRC_OFFSET, batch_crc(out, 0, len(out)))
    return bytes(out)
