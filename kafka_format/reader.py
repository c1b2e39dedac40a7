"""The rich reader: log entries with every header field, and their records.

Contract: `iter_entries(buf, start)` yields a `LogEntry` for each whole entry
and stops quietly at a trailing entry cut short (as a consumer sees the end of
a fetch); an entry whose size or magic makes no sense raises
CorruptRecordError. A LogEntry reads its header at once and its records only
when asked (`records()`, and for a compressed classic wrapper `base_offset`
and `record_count`, which need the inner set). CRCs are checked only by
`is_valid()` / `ensure_valid()`; `iter_records(buf)` checks them unless told
not to. Records carry absolute offsets; records of a LogAppendTime batch or
wrapper report its timestamp, as Kafka clients do.

A LogEntry keeps a reference to `buf` (no copy, no memoryview pinning a
bytearray), so `buf` must not change while the entry is in use.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import accel
from .batch import (
    BATCH_CODECS,
    BATCH_HEADER,
    BATCH_OVERHEAD,
    CONTROL_BIT,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_BIT,
    batch_crc,
    decode_records,
)
from .classic import (
    CLASSIC_CODECS,
    HEADERS,
    KEY_LENGTH_OFFSET,
    LENGTH,
    MIN_SIZE_FIELD,
    InnerMessage,
    inner_messages,
    message_crc,
    message_lengths,
)
from .codecs import Codec, decompress
from .errors import CorruptRecordError
from .framing import (
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
    Record,
)


class LogEntry:
    """One entry of a log or message set: a batch, a message or a wrapper."""

    __slots__ = ("_buf", "position", "size", "magic", "crc", "attributes", "codec",
                 "timestamp_type", "last_offset", "max_timestamp", "base_timestamp",
                 "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
                 "_offset_field", "_count", "_inner")

    def __init__(self, buf, position: int = 0):
        self._buf = buf
        self.position = position
        offset, size_field = ENTRY_PREFIX.unpack_from(buf, position)
        if size_field < MIN_ENTRY_SIZE_FIELD or len(buf) - position < LOG_OVERHEAD + size_field:
            raise CorruptRecordError(f"entry at {position}: size {size_field} is bad or cut short")
        self.size = LOG_OVERHEAD + size_field
        self.magic = magic = buf[position + MAGIC_OFFSET]
        self._offset_field = offset
        self._inner: tuple[bytes, list[InnerMessage]] | None = None
        if magic == MAGIC_V2:
            if size_field < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"entry at {position}: batch length {size_field} too short")
            (_, _, self.partition_leader_epoch, _, self.crc, self.attributes, last_delta,
             self.base_timestamp, self.max_timestamp, self.producer_id, self.producer_epoch,
             self.base_sequence, self._count) = BATCH_HEADER.unpack_from(buf, position)
            self.last_offset = offset + last_delta
        elif magic <= 1:
            if size_field < MIN_SIZE_FIELD[magic]:
                raise CorruptRecordError(f"entry at {position}: size {size_field} too short for magic {magic}")
            fields = HEADERS[magic].unpack_from(buf, position)
            self.crc, self.attributes = fields[2], fields[4]
            self.max_timestamp = self.base_timestamp = fields[5] if magic else NO_TIMESTAMP
            self.last_offset = offset
            self.partition_leader_epoch = self.producer_id = self.base_sequence = -1
            self.producer_epoch = -1
            self._count = None if self.attributes & CODEC_MASK else 1
        else:
            raise CorruptRecordError(f"entry at {position}: unknown magic {magic}")
        self.codec = self.attributes & CODEC_MASK
        self.timestamp_type = (LOG_APPEND_TIME if magic and self.attributes & TIMESTAMP_TYPE_BIT
                               else CREATE_TIME)

    def __repr__(self) -> str:
        return (f"LogEntry(position={self.position}, size={self.size}, magic={self.magic}, "
                f"codec={self.codec}, last_offset={self.last_offset})")

    # ---- header-derived views --------------------------------------------------------

    @property
    def is_transactional(self) -> bool:
        return self.magic == MAGIC_V2 and bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return self.magic == MAGIC_V2 and bool(self.attributes & CONTROL_BIT)

    @property
    def base_offset(self) -> int:
        """The first offset: a batch's baseOffset, a compressed wrapper's first inner offset."""
        if self.magic == MAGIC_V2 or self._count == 1:
            return self._offset_field
        _, messages = self._inner_set()
        if self.magic == 1:
            return self._offset_field - messages[-1].offset + messages[0].offset
        return messages[0].offset

    @property
    def record_count(self) -> int:
        if self._count is None:
            self._count = len(self._inner_set()[1])
        return self._count

    def entry_bytes(self) -> bytes:
        """The entry exactly as stored."""
        return bytes(self._buf[self.position:self.position + self.size])

    # ---- checking ------------------------------------------------------------------------

    def is_valid(self) -> bool:
        try:
            self.ensure_valid()
        except CorruptRecordError:
            return False
        return True

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError unless the entry's CRC, lengths and codec check out."""
        pos, end = self.position, self.position + self.size
        if self.magic == MAGIC_V2:
            if batch_crc(self._buf, pos, end) != self.crc:
                raise CorruptRecordError(f"entry at {pos}: batch fails its CRC32C")
            if self.codec >= BATCH_CODECS:
                raise CorruptRecordError(f"entry at {pos}: unknown codec {self.codec}")
            return
        message_lengths(self._buf, pos, self.magic, end)
        if message_crc(self._buf, pos, end) != self.crc:
            raise CorruptRecordError(f"entry at {pos}: message fails its CRC32")
        if self.codec >= CLASSIC_CODECS:
            raise CorruptRecordError(f"entry at {pos}: codec {self.codec} not allowed with magic {self.magic}")

    # ---- records ----------------------------------------------------------------------

    def records(self) -> list[Record]:
        """The entry's records, decompressed, with absolute offsets."""
        buf, pos, end = self._buf, self.position, self.position + self.size
        if self.magic == MAGIC_V2:
            payload, start = buf, pos + BATCH_OVERHEAD
            if self.codec != Codec.NONE:
                payload = decompress(self.codec, memoryview(buf)[start:end], magic=MAGIC_V2)
                start, end = 0, len(payload)
            return decode_records(payload, start, end, self._count, self._offset_field,
                                  self.base_timestamp, self.attributes, self.max_timestamp)
        if self.codec == Codec.NONE:
            key_len, value_len = message_lengths(buf, pos, self.magic, end)
            key_pos = pos + KEY_LENGTH_OFFSET[self.magic] + LENGTH.size
            return [Record(self._offset_field, self.max_timestamp, self.timestamp_type,
                           _slice(buf, key_pos, key_len),
                           _slice(buf, key_pos + max(key_len, 0) + LENGTH.size, value_len))]
        inner, messages = self._inner_set()
        shift = self._offset_field - messages[-1].offset if self.magic == 1 else 0
        log_append = self.timestamp_type == LOG_APPEND_TIME
        return [Record(m.offset + shift, self.max_timestamp if log_append else m.timestamp,
                       self.timestamp_type, _slice(inner, m.key_position, m.key_len),
                       _slice(inner, m.value_position, m.value_len))
                for m in messages]

    def first_record_at(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the entry's first record with a timestamp >=
        `timestamp` and an offset >= `starting_offset`, or None. A batch is
        walked without decoding keys and values."""
        if self.magic == MAGIC_V2:
            buf, start, end = self._buf, self.position + BATCH_OVERHEAD, self.position + self.size
            if self.codec != Codec.NONE:
                buf = decompress(self.codec, memoryview(buf)[start:end], magic=MAGIC_V2)
                start, end = 0, len(buf)
            log_append = self.timestamp_type == LOG_APPEND_TIME
            if log_append and self.max_timestamp < timestamp:
                return None
            min_delta = -(1 << 63) if log_append else max(timestamp - self.base_timestamp, -(1 << 63))
            if min_delta < 1 << 63:
                found, delta, offset_delta = accel.find_timestamp(
                    buf, start, end, self._count, min_delta,
                    max(starting_offset - self._offset_field, -(1 << 63)))
                if found >= 0:  # else malformed: the decoding walk below says how
                    if not found:
                        return None
                    return (self.max_timestamp if log_append else self.base_timestamp + delta,
                            self._offset_field + offset_delta)
        for record in self.records():
            if record.timestamp >= timestamp and record.offset >= starting_offset:
                return record.timestamp, record.offset
        return None

    def _inner_set(self) -> tuple[bytes, list[InnerMessage]]:
        if self._inner is None:
            pos, end = self.position, self.position + self.size
            key_len, value_len = message_lengths(self._buf, pos, self.magic, end)
            if value_len < 0:
                raise CorruptRecordError(f"entry at {pos}: compressed message has no value")
            value_pos = pos + KEY_LENGTH_OFFSET[self.magic] + 2 * LENGTH.size + max(key_len, 0)
            inner = decompress(self.codec, memoryview(self._buf)[value_pos:end], magic=self.magic)
            messages = inner_messages(inner, self.magic)
            if not messages:
                raise CorruptRecordError(f"entry at {pos}: compressed message holds no messages")
            self._inner = (inner, messages)
        return self._inner


def _slice(buf, pos: int, length: int) -> bytes | None:
    return None if length < 0 else bytes(buf[pos:pos + length])


def iter_entries(buf, start: int = 0) -> Iterator[LogEntry]:
    """Each whole entry from `start` on; stops at a trailing entry cut short."""
    pos, end = start, len(buf)
    while end - pos > MAGIC_OFFSET:
        size_field = ENTRY_PREFIX.unpack_from(buf, pos)[1]
        if size_field < MIN_ENTRY_SIZE_FIELD:
            raise CorruptRecordError(f"entry at {pos}: size {size_field} is below {MIN_ENTRY_SIZE_FIELD}")
        if pos + LOG_OVERHEAD + size_field > end:
            return
        entry = LogEntry(buf, pos)
        yield entry
        pos += entry.size


def iter_records(buf, *, check_crc: bool = True) -> Iterator[Record]:
    """Every record of every whole entry, in order (CRCs checked unless told not to)."""
    for entry in iter_entries(buf):
        if check_crc:
            entry.ensure_valid()
        yield from entry.records()
