"""Append-time validation and offset assignment (Kafka's LogValidator).

Contract: `validate_and_assign(data, *, next_offset, now_ms, config)` checks a
producer's message set and returns a `ValidatedSet` whose buffer is ready to
append: offsets assigned from `next_offset`, batches restamped with leader
epoch 0, timestamps set for LogAppendTime. The caller's bytes are not touched
(unless it passes `in_place=True` and gives them up): the work happens on one
private bytearray copy, and any bad entry refuses the whole set by raising, so
nothing half-assigned reaches the log.

Errors (kafka_format.errors): CorruptRecordError for bad bytes (an empty set, a
trailing partial entry, a bad size, CRC, magic, record structure or compressed
payload); MessageTooLargeError for an entry over max.message.bytes (size
including the 12-byte overhead, as Kafka's sizeInBytes); InvalidRecordError for
rule breaks (a batch whose count is not lastOffsetDelta + 1 or is 0, a control
batch, a producer id without a sequence, zstd before magic 2, nested
compression, an empty wrapper); RecordValidationError (an InvalidRecordError)
for records that break a rule one by one, each named by its index in its batch
or compressed wrapper (KIP-467's record errors): keyless records on a compacted
topic and CreateTime timestamps outside the topic's window
(message.timestamp.before.max.ms / after.max.ms, or the deprecated
difference.max.ms where those are Long.MAX; Kafka 3.6+'s LogValidator), all of
the first batch that has any, raised as InvalidTimestampError (INVALID_TIMESTAMP)
when one is a timestamp's;
RecordListTooLargeError for a set larger than segment.bytes.

Work per entry, not per record, where the format allows: an uncompressed batch
is checked by header and CRC alone (its records are walked only on a compacted
topic, to find keyless ones, or under a timestamp window); an uncompressed classic message is one header.
Compressed entries are decompressed and walked, as Kafka does. Entries are
patched in place, except a compressed classic wrapper whose inner offsets must
change (always for v0, whose inner offsets are absolute; for v1 when they are
not 0..n-1) or a compressed batch whose offset deltas are not 0..n-1: those
are rebuilt and recompressed with their own codec.

Timestamps: under LogAppendTime every v1 message, v1 wrapper and batch gets
timestamp (maxTimestamp) = now_ms and attribute bit 3, CRC recomputed; under
CreateTime a client-set bit 3 is cleared (as Kafka's setMaxTimestamp does), a
v1 wrapper takes its largest inner timestamp and a compressed batch its
largest record timestamp. `max_timestamp` / `offset_of_max_timestamp` are
shallow: the first entry reaching the largest timestamp, and its last offset
(-1 / -1 when no entry has a timestamp, e.g. all magic 0).

Compression: a topic whose compression.type is not `producer` gets every record
batch in that codec; a batch of another codec is rewritten around its records
(storage/recompress.py), and max.message.bytes applies to the result.

Deviations from Kafka, on purpose: a set may mix magics and hold several
compressed entries, each validated on its own (Kafka rebuilds a legacy set into
one wrapper); an uncompressed batch's maxTimestamp is trusted, not recomputed.
"""

from __future__ import annotations

from typing import NamedTuple

from kafka_format import accel
from kafka_format.batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BATCH_CODECS,
    BATCH_HEADER,
    BATCH_OVERHEAD,
    CONTROL_BIT,
    INT16,
    INT32,
    INT64,
    LEADER_EPOCH_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_BIT,
    UINT32,
    batch_crc,
    decode_records,
    summarize_records,
)
from kafka_format.batch import CRC_OFFSET as BATCH_CRC_OFFSET
from kafka_format.builder import build_batch
from kafka_format.classic import ATTRIBUTES_OFFSET as CLASSIC_ATTRIBUTES_OFFSET
from kafka_format.classic import (
    CLASSIC_CODECS,
    KEY_LENGTH_OFFSET,
    LENGTH,
    MIN_SIZE_FIELD,
    TIMESTAMP,
    TIMESTAMP_OFFSET,
    V0_HEADER,
    V1_HEADER,
    append_message,
    inner_messages,
    message_crc,
    message_lengths,
)
from kafka_format.classic import CRC_OFFSET as CLASSIC_CRC_OFFSET
from kafka_format.classic import CRC_START as CLASSIC_CRC_START
from kafka_format.codecs import Codec, compress, decompress
from kafka_format.entries import EntryTable
from kafka_format.errors import (
    KEYLESS_ON_COMPACTED,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordListTooLargeError,
    RecordValidationError,
)
from kafka_format.framing import (
    CODEC_MASK,
    CREATE_TIME,
    ENTRY_PREFIX,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_ENTRY_SIZE_FIELD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
)
from kafka_format.framing import crc32 as framing_crc32

from .config import LogConfig, Target
from .recompress import recompress_batch

# The set being assigned: a private copy, or the caller's own writable buffer (`in_place`).
WritableBuffer = bytearray | memoryview

LEADER_EPOCH_ON_APPEND = 0  # a single-node broker: the leader epoch never moves


class ValidatedSet(NamedTuple):
    buffer: WritableBuffer  # to write as it is: offsets assigned
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int  # last offset of the first entry holding max_timestamp
    log_append_time: int  # now_ms under LogAppendTime, else -1
    entries: EntryTable  # positions relative to `buffer`
    record_count: int
    # Some batch carries a producer id (an idempotent producer): only then does
    # the log's producer state need to look at the set.
    has_producer_ids: bool = False


class _Assigned(NamedTuple):
    """What validating one batch or compressed wrapper gives back to the set loop."""

    last_offset: int
    max_timestamp: int
    record_count: int
    codec: int
    rebuilt: bytes | None  # the entry's new bytes when it could not be patched in place


class _Rules(NamedTuple):
    """What the per-entry checks need: the set's clock and its topic's rules
    (LogConfig works each out once per config)."""

    now_ms: int
    log_append: bool
    compact: bool
    target: Target | None  # compression.type's codec; None: the producer's (recompress.py)
    window: tuple[int, int] | None  # CreateTime: (before, after) max ms around now_ms; None: any

    @property
    def checks_records(self) -> bool:
        """Each record must be looked at (keys on a compacted topic, timestamps)."""
        return self.compact or self.window is not None


def _java_long(value: int) -> int:
    """`value` wrapped to a signed 64-bit long, as Kafka's arithmetic prints it."""
    return (value + 2**63) % 2**64 - 2**63


def _record_error(index: int, offset: int, key_len: int, timestamp: int,
                  rules: _Rules) -> tuple[int, str, bool] | None:
    """(index, message, is a timestamp error) for a record that breaks a rule, else
    None, as Kafka's LogValidator.validateRecord: the key first, then the timestamp."""
    if rules.compact and key_len < 0:
        return index, KEYLESS_ON_COMPACTED, False
    if rules.window is not None and timestamp != NO_TIMESTAMP:
        before, after = rules.window
        if timestamp < rules.now_ms - before or timestamp > rules.now_ms + after:
            return index, (f"Timestamp {timestamp} of message with offset {offset} is out of range. "
                           f"The timestamp should be within [{_java_long(rules.now_ms - before)}, "
                           f"{_java_long(rules.now_ms + after)}]"), True
    return None


def _refuse(errors: list[tuple[int, str, bool]]) -> None:
    """Raise the record errors of one batch, if any: INVALID_TIMESTAMP when one is a
    timestamp's (Kafka's processRecordErrors), else INVALID_RECORD."""
    if not errors:
        return
    pairs = [(index, message) for index, message, _ in errors]
    if any(is_timestamp for _, _, is_timestamp in errors):
        raise InvalidTimestampError(pairs)
    raise RecordValidationError(pairs)


def validate_and_assign(data, *, next_offset: int, now_ms: int, config: LogConfig,
                        in_place: bool = False) -> ValidatedSet:
    """Validate a producer's message set and assign offsets from `next_offset`.

    With `in_place`, a writable `data` the caller gives up (a request frame it
    will drop either way) is patched where it lies instead of in a copy: on the
    append path that spares copying every byte once."""
    view_of_data = memoryview(data)
    buf: WritableBuffer = view_of_data if in_place and not view_of_data.readonly else bytearray(data)
    end = len(buf)
    if end == 0:
        raise CorruptRecordError("empty message set")
    log_append, compact, target, window = (config.log_append_time, config.compact, config.compression_target,
                                           config.timestamp_window)
    rules: _Rules | None = None  # made for the first entry the plain run leaves
    # The run takes uncompressed batches as they are: not when they must be compressed,
    # nor when each record's timestamp must be checked.
    takes_plain_runs = (target is None or target.codec == Codec.NONE) and window is None
    max_bytes = config.max_message_bytes
    first_offset = next_offset
    entries = EntryTable()
    rebuilds: list[tuple[int, int, bytes]] = []  # (position, old end, new bytes)
    shift = 0  # how far rebuilds so far have moved later entries
    max_timestamp = offset_of_max = NO_TIMESTAMP
    record_count = 0
    has_producer_ids = False
    view = memoryview(buf)
    pos = 0
    while pos < end:
        if takes_plain_runs:
            # Uncompressed classic messages and batches that need only their
            # offsets, as many as follow (the Python twin: none); the entry it
            # stops at (compressed, a timestamp to set, a compacted topic's
            # batch, a bad one) is handled below, which also raises every error.
            pos, next_offset, max_timestamp, offset_of_max, plain_records, plain_ids = \
                accel.assign_plain_run(view, pos, end, next_offset, max_bytes, compact, log_append, now_ms, shift,
                                       max_timestamp, offset_of_max, entries.rows, framing_crc32, accel.crc32c)
            record_count += plain_records
            has_producer_ids = has_producer_ids or plain_ids
            if pos >= end:
                break
        if rules is None:
            rules = _Rules(now_ms, log_append, compact, target, window)
        remaining = end - pos
        if remaining <= MAGIC_OFFSET:
            raise CorruptRecordError(f"entry at {pos} is cut short after {remaining} bytes")
        size = ENTRY_PREFIX.unpack_from(buf, pos)[1]
        magic = buf[pos + MAGIC_OFFSET]
        if size < MIN_ENTRY_SIZE_FIELD or magic > MAGIC_V2:
            raise CorruptRecordError(f"entry at {pos} has a bad size {size} or magic {magic}")
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > end:
            raise CorruptRecordError(f"entry at {pos} ({entry_end - pos} bytes) is cut short after {remaining}")
        if entry_end - pos > max_bytes:
            raise MessageTooLargeError(
                f"entry at {pos} is {entry_end - pos} bytes, over max.message.bytes {max_bytes}")

        if magic != MAGIC_V2:
            # A classic message.
            if size < MIN_SIZE_FIELD[magic]:
                raise CorruptRecordError(f"message at {pos} is too short for magic {magic}")
            if magic:
                _, _, crc, _, attributes, timestamp = V1_HEADER.unpack_from(buf, pos)
            else:
                _, _, crc, _, attributes = V0_HEADER.unpack_from(buf, pos)
                timestamp = NO_TIMESTAMP
            key_len, value_len = message_lengths(buf, pos, magic, entry_end)
            value_at = pos + KEY_LENGTH_OFFSET[magic] + LENGTH.size + max(key_len, 0)
            if framing_crc32(view[pos + CLASSIC_CRC_START:entry_end]) != crc:
                raise CorruptRecordError(f"message at {pos} fails its CRC32")
            codec = attributes & CODEC_MASK
            if codec:
                done = _assign_wrapper(buf, pos, entry_end, magic, attributes, timestamp,
                                       value_at, value_len, next_offset, rules)
            else:
                if rules.checks_records:  # a batch of one record, as Kafka sees it
                    problem = _record_error(0, INT64.unpack_from(buf, pos)[0], key_len, timestamp, rules)
                    _refuse([problem] if problem else [])
                INT64.pack_into(buf, pos, next_offset)
                if magic and (log_append or attributes & TIMESTAMP_TYPE_BIT):
                    old_timestamp = timestamp
                    if log_append:
                        timestamp = now_ms
                    _set_timestamp(buf, pos, entry_end, attributes, old_timestamp, timestamp, log_append)
                entries.add(pos + shift, size + LOG_OVERHEAD, magic, next_offset, timestamp, 0)
                if timestamp > max_timestamp:
                    max_timestamp, offset_of_max = timestamp, next_offset
                record_count += 1
                next_offset += 1
                pos = entry_end
                continue
        else:
            done = _assign_batch(buf, pos, entry_end, next_offset, rules)
            if not has_producer_ids:
                has_producer_ids = INT64.unpack_from(buf, pos + PRODUCER_ID_OFFSET)[0] >= 0
            codec = done.codec

        entry_size = entry_end - pos
        if done.rebuilt is not None:
            if len(done.rebuilt) > max_bytes:
                raise MessageTooLargeError(
                    f"entry at {pos} is {len(done.rebuilt)} bytes once rebuilt, "
                    f"over max.message.bytes {max_bytes}")
            rebuilds.append((pos, entry_end, done.rebuilt))
            entry_size = len(done.rebuilt)
        entries.add(pos + shift, entry_size, magic, done.last_offset, done.max_timestamp, codec)
        shift += entry_size - (entry_end - pos)
        if done.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = done.max_timestamp, done.last_offset
        record_count += done.record_count
        next_offset = done.last_offset + 1
        pos = entry_end

    view.release()
    if rebuilds:
        buf = _splice(buf, rebuilds)
    if len(buf) > config.segment_bytes:
        raise RecordListTooLargeError(
            f"message set of {len(buf)} bytes is over segment.bytes {config.segment_bytes}")
    return ValidatedSet(buf, first_offset, next_offset - 1, max_timestamp, offset_of_max,
                        now_ms if log_append else NO_TIMESTAMP, entries, record_count, has_producer_ids)


def _splice(buf: WritableBuffer, rebuilds: list[tuple[int, int, bytes]]) -> bytearray:
    view = memoryview(buf)
    out = bytearray()
    done = 0
    for start, old_end, new in rebuilds:
        out += view[done:start]
        out += new
        done = old_end
    out += view[done:]
    view.release()
    return out


# ---- magic 2 ---------------------------------------------------------------------


def _assign_batch(buf: WritableBuffer, pos: int, entry_end: int, next_offset: int,
                  rules: _Rules) -> _Assigned:
    if entry_end - pos - LOG_OVERHEAD < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at {pos} is shorter than a batch header")
    (_, _, _, _, crc, attributes, last_delta, base_timestamp, header_max_timestamp, producer_id,
     producer_epoch, base_sequence, count) = BATCH_HEADER.unpack_from(buf, pos)
    if batch_crc(buf, pos, entry_end) != crc:
        raise CorruptRecordError(f"batch at {pos} fails its CRC32C")
    codec = attributes & CODEC_MASK
    if codec >= BATCH_CODECS:
        raise CorruptRecordError(f"batch at {pos} has unknown codec {codec}")
    if last_delta < 0 or count <= 0 or count != last_delta + 1:
        raise InvalidRecordError(
            f"batch at {pos}: recordCount {count} does not match lastOffsetDelta {last_delta}")
    if attributes & CONTROL_BIT:
        raise InvalidRecordError(f"batch at {pos}: clients may not write control batches")
    if producer_id >= 0 and base_sequence < 0:
        raise InvalidRecordError(
            f"batch at {pos}: producer id {producer_id} with invalid sequence {base_sequence}")

    records_at = pos + BATCH_OVERHEAD
    max_timestamp = rules.now_ms if rules.log_append else header_max_timestamp
    target = rules.target
    new_codec = codec if target is None else target.codec
    payload: bytes | memoryview
    producer_base_offset = INT64.unpack_from(buf, pos + BASE_OFFSET_OFFSET)[0]
    if codec == Codec.NONE:
        # Trusted as they are (header + CRC), unless keys or timestamps matter.
        if rules.window is not None or (
                rules.compact and summarize_records(buf, records_at, entry_end, count).has_null_key):
            _check_records(buf, records_at, entry_end, count, producer_base_offset, base_timestamp, rules)
        payload = memoryview(buf)[records_at:entry_end]
    else:
        payload = decompress(codec, memoryview(buf)[records_at:entry_end], magic=MAGIC_V2)
        summary = summarize_records(payload, 0, len(payload), count)
        if rules.window is not None or (rules.compact and summary.has_null_key):
            _check_records(payload, 0, len(payload), count, producer_base_offset, base_timestamp, rules)
        if not rules.log_append:  # as Kafka, a compressed batch's maxTimestamp is recomputed
            max_timestamp = base_timestamp + summary.max_timestamp_delta
        if not summary.offset_deltas_in_order:
            # Some clients number records wrongly; Kafka rebuilds rather than refuses.
            records = decode_records(payload, 0, len(payload), count, 0, base_timestamp,
                                     attributes & ~TIMESTAMP_TYPE_BIT, max_timestamp)
            rebuilt = build_batch(
                [(r.key, r.value, r.timestamp, r.headers) for r in records],
                base_offset=next_offset, codec=new_codec, base_timestamp=base_timestamp,
                timestamp_type=LOG_APPEND_TIME if rules.log_append else CREATE_TIME,
                producer_id=producer_id, producer_epoch=producer_epoch,
                base_sequence=base_sequence, partition_leader_epoch=LEADER_EPOCH_ON_APPEND,
                is_transactional=bool(attributes & TRANSACTIONAL_BIT), max_timestamp=max_timestamp,
                compression_level=None if target is None else target.level)
            return _Assigned(next_offset + last_delta, max_timestamp, count, new_codec, rebuilt)

    if target is not None and new_codec != codec:
        type_bit = TIMESTAMP_TYPE_BIT if rules.log_append else 0
        rebuilt = recompress_batch(buf, pos, payload, target, base_offset=next_offset,
                                   leader_epoch=LEADER_EPOCH_ON_APPEND,
                                   attributes=(attributes & ~TIMESTAMP_TYPE_BIT) | type_bit,
                                   max_timestamp=max_timestamp)
        return _Assigned(next_offset + last_delta, max_timestamp, count, new_codec, rebuilt)

    # Both outside the CRC: restamped without recomputing it.
    INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, next_offset)
    INT32.pack_into(buf, pos + LEADER_EPOCH_OFFSET, LEADER_EPOCH_ON_APPEND)
    new_attributes = attributes | TIMESTAMP_TYPE_BIT if rules.log_append else attributes & ~TIMESTAMP_TYPE_BIT
    if new_attributes != attributes or max_timestamp != header_max_timestamp:
        INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, new_attributes)
        INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
        UINT32.pack_into(buf, pos + BATCH_CRC_OFFSET, batch_crc(buf, pos, entry_end))
    return _Assigned(next_offset + last_delta, max_timestamp, count, codec, None)


def _check_records(records, pos: int, end: int, count: int, base_offset: int, base_timestamp: int,
                   rules: _Rules) -> None:
    """Raise the record errors (keyless on a compacted topic, a CreateTime timestamp
    outside the window) of a batch's records (records[pos:end], `count` of them),
    each named by its index in the batch and its offset as the producer sent it."""
    decoded = decode_records(records, pos, end, count, base_offset, base_timestamp, 0, NO_TIMESTAMP)
    problems = (_record_error(i, r.offset, -1 if r.key is None else len(r.key), r.timestamp, rules)
                for i, r in enumerate(decoded))
    _refuse([p for p in problems if p is not None])


# ---- magic 0 and 1 -----------------------------------------------------------------


def _assign_wrapper(buf: WritableBuffer, pos: int, entry_end: int, magic: int, attributes: int,
                    timestamp: int, value_at: int, value_len: int, next_offset: int,
                    rules: _Rules) -> _Assigned:
    """A compressed classic message, whose size, lengths and CRC were checked."""
    codec = attributes & CODEC_MASK
    if codec == Codec.ZSTD:
        raise InvalidRecordError(f"message at {pos}: zstd needs magic 2, not {magic}")
    if codec >= CLASSIC_CODECS:
        raise CorruptRecordError(f"message at {pos} has unknown codec {codec}")
    if value_len < 0:
        raise CorruptRecordError(f"compressed message at {pos} has no value")
    inner = decompress(codec, memoryview(buf)[value_at + LENGTH.size:entry_end], magic=magic)
    messages = inner_messages(inner, magic)
    if not messages:
        raise InvalidRecordError(f"compressed message at {pos} holds no messages")
    for m in messages:
        if m.attributes & CODEC_MASK:
            raise InvalidRecordError(f"compressed message at {pos} holds a compressed message")
    if rules.checks_records:
        problems = (_record_error(i, m.offset, m.key_len, m.timestamp, rules) for i, m in enumerate(messages))
        _refuse([p for p in problems if p is not None])
    last_offset = next_offset + len(messages) - 1
    if magic == 0:
        new_timestamp = NO_TIMESTAMP
    elif rules.log_append:
        new_timestamp = rules.now_ms
    else:
        new_timestamp = max(m.timestamp for m in messages)

    if magic == 1 and all(m.offset == i for i, m in enumerate(messages)):
        INT64.pack_into(buf, pos, last_offset)
        _set_timestamp(buf, pos, entry_end, attributes, timestamp, new_timestamp, rules.log_append)
        return _Assigned(last_offset, new_timestamp, len(messages), codec, None)

    # Inner offsets must change (v0: always, they are absolute; v1: when not
    # 0..n-1). They sit outside the inner CRCs; the wrapper is built anew.
    renumbered = bytearray(inner)
    for i, m in enumerate(messages):
        INT64.pack_into(renumbered, m.position, i if magic == 1 else next_offset + i)
    type_bit = TIMESTAMP_TYPE_BIT if magic == 1 and rules.log_append else 0
    rebuilt = bytearray()
    append_message(rebuilt, last_offset, magic, codec | type_bit, new_timestamp, None,
                   compress(codec, renumbered, magic=magic))
    return _Assigned(last_offset, new_timestamp, len(messages), codec, bytes(rebuilt))


def _set_timestamp(buf: WritableBuffer, pos: int, entry_end: int, attributes: int, old_timestamp: int,
                   timestamp: int, log_append: bool) -> None:
    """Set a v1 message's timestamp and type bit, recomputing the CRC if either changes."""
    new_attributes = attributes | TIMESTAMP_TYPE_BIT if log_append else attributes & ~TIMESTAMP_TYPE_BIT
    if new_attributes == attributes and timestamp == old_timestamp:
        return
    buf[pos + CLASSIC_ATTRIBUTES_OFFSET] = new_attributes & 0xFF
    TIMESTAMP.pack_into(buf, pos + TIMESTAMP_OFFSET, timestamp)
    UINT32.pack_into(buf, pos + CLASSIC_CRC_OFFSET, message_crc(buf, pos, entry_end))
