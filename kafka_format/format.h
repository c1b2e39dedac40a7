/* Kafka's log entry layouts, for the C accelerators: kafka_format/_crecords.c
 * and storage/_ccleaner.c take every field position, size, magic value and
 * attribute bit from here. They are those of kafka_format/framing.py,
 * classic.py and batch.py, which derive them from their structs;
 * tests/storage/test_format_header.py parses this file and checks every value
 * against the Python constants.
 *
 *   every entry   0 offset:int64 | 8 size:int32 | 12 crc or epoch:int32 | 16 magic:int8
 *   magic 0/1     12 crc:uint32 | 16 magic | 17 attributes:int8 | [18 timestamp:int64, v1] |
 *                 keyLength:int32 key | valueLength:int32 value; CRC32 (IEEE) over magic..end
 *   magic 2       0 baseOffset | 8 length | 12 partitionLeaderEpoch | 16 magic |
 *                 17 crc:uint32 | 21 attributes:int16 | 23 lastOffsetDelta:int32 |
 *                 27 baseTimestamp:int64 | 35 maxTimestamp:int64 | 43 producerId:int64 |
 *                 51 producerEpoch:int16 | 53 baseSequence:int32 | 57 recordCount:int32 |
 *                 61 records; CRC32C over attributes..end
 */
#ifndef STRATA_KAFKA_FORMAT_H
#define STRATA_KAFKA_FORMAT_H

/* What every entry shares (framing.py). */
#define LOG_OVERHEAD 12
#define SIZE_OFFSET 8
#define MAGIC_OFFSET 16
#define MIN_ENTRY_SIZE_FIELD 14
#define MAGIC_V0 0
#define MAGIC_V1 1
#define MAGIC_V2 2
#define NO_TIMESTAMP (-1)

/* Attribute bits (framing.py, batch.py). */
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_BIT 0x08
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20
#define DELETE_HORIZON_BIT 0x40

/* Classic messages, magic 0 and 1 (classic.py). */
#define CLASSIC_CRC_OFFSET 12
#define CLASSIC_CRC_START 16
#define CLASSIC_ATTRIBUTES_OFFSET 17
#define V1_TIMESTAMP_OFFSET 18
#define V0_KEY_LENGTH_OFFSET 18
#define V1_KEY_LENGTH_OFFSET 26
#define V0_MIN_SIZE_FIELD 14
#define V1_MIN_SIZE_FIELD 22
#define CLASSIC_CODECS 4

/* Record batches, magic 2 (batch.py). */
#define BATCH_LENGTH_OFFSET 8
#define BATCH_LEADER_EPOCH_OFFSET 12
#define BATCH_CRC_OFFSET 17
#define BATCH_ATTRIBUTES_OFFSET 21
#define BATCH_CRC_START 21
#define BATCH_LAST_DELTA_OFFSET 23
#define BATCH_BASE_TIMESTAMP_OFFSET 27
#define BATCH_MAX_TIMESTAMP_OFFSET 35
#define BATCH_PRODUCER_ID_OFFSET 43
#define BATCH_PRODUCER_EPOCH_OFFSET 51
#define BATCH_BASE_SEQUENCE_OFFSET 53
#define BATCH_RECORD_COUNT_OFFSET 57
#define BATCH_OVERHEAD 61
#define MIN_BATCH_LENGTH 49
#define BATCH_CODECS 5

#endif
