"""Errors raised by the storage engine.

Each error carries the Kafka error code it turns into on the wire, so that the
protocol layer maps exceptions to codes in one place and storage never imports
protocol code.
"""

from __future__ import annotations


class StrataError(Exception):
    """Base class; `code` is Kafka's numeric error code."""

    code = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(StrataError):
    code = 1


class CorruptRecordError(StrataError):
    """Bad bytes: a size, CRC, magic or codec payload that does not check out."""

    code = 2


class UnknownTopicOrPartitionError(StrataError):
    code = 3


class MessageTooLargeError(StrataError):
    """One entry is larger than `max.message.bytes`."""

    code = 10


class InvalidTopicError(StrataError):
    code = 17


class RecordListTooLargeError(StrataError):
    """A whole message set is larger than `segment.bytes`."""

    code = 18


class TopicAlreadyExistsError(StrataError):
    code = 36


class InvalidPartitionsError(StrataError):
    code = 37


class InvalidConfigError(StrataError):
    code = 40


class InvalidRequestError(StrataError):
    code = 42


class InvalidRecordError(StrataError):
    """Well-formed bytes that break a rule: a keyless record on a compacted topic,
    a batch whose record count disagrees with its offset range."""

    code = 87


KEYLESS_ON_COMPACTED = "Compacted topic cannot accept message without key"


class RecordValidationError(InvalidRecordError):
    """Records of one batch (or compressed wrapper) that break a rule, each named by
    its index in that batch (Kafka's RecordValidationException, KIP-467): the set
    is refused whole, and a Kafka Produce answers `record_errors` so the client
    fails those records alone and retries the others. The message is Kafka's
    summary of the first three."""

    def __init__(self, record_errors: list[tuple[int, str]]):
        self.record_errors = tuple(record_errors)
        shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                          for index, message in self.record_errors[:3])
        super().__init__(f"One or more records have been rejected due to {len(self.record_errors)} record "
                         f"errors in total, and only showing the first three errors at most: [{shown}]")

    def in_partition(self, topic: str, partition: int) -> RecordValidationError:
        """This error with each keyless record's message naming the partition, as
        Kafka's does ("... in topic partition orders-0"); the validator does not
        know it. Other messages (timestamps) name none, as Kafka's."""
        return type(self)([(index, f"{message} in topic partition {topic}-{partition}"
                            if message == KEYLESS_ON_COMPACTED else message)
                           for index, message in self.record_errors])


class InvalidTimestampError(RecordValidationError):
    """Records of one batch whose CreateTime timestamps lie outside the topic's
    window (message.timestamp.before.max.ms / after.max.ms): Kafka's
    INVALID_TIMESTAMP with its record errors, which may also name keyless records
    of the same batch. The message is Kafka's, the same for every such batch."""

    code = 32

    def __init__(self, record_errors: list[tuple[int, str]]):
        super().__init__(record_errors)
        self.args = ("One or more records have been rejected due to invalid timestamp",)


class InvalidOffsetError(StrataError):
    """An index append or a segment append out of offset order (a bug or a corrupt file)."""

    code = -1


class KafkaStorageError(StrataError):
    """The log directory cannot be used (I/O error, log closed)."""

    code = 56


class CorruptIndexError(StrataError):
    """An index file that fails its sanity check (bad length, entries out of order);
    the log deletes and rebuilds it from the segment."""

    code = -1


class OutOfOrderSequenceError(StrataError):
    """An idempotent producer's batch does not follow its last sequence (storage/producer_state.py)."""

    code = 45


class DuplicateSequenceError(StrataError):
    """Kafka's DUPLICATE_SEQUENCE_NUMBER; unused: a duplicate batch is answered with its
    original offsets, as modern Kafka does."""

    code = 46


class InvalidProducerEpochError(StrataError):
    """A batch from an older epoch of an idempotent producer (fenced)."""

    code = 47


class InvalidTxnStateError(StrataError):
    """A producer's write that breaks its transaction's state (a non-transactional
    batch while its transaction is open)."""

    code = 48


class TransactionCoordinatorFencedError(StrataError):
    """A transaction marker from an older coordinator epoch than the partition has seen."""

    code = 52
