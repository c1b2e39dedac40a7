"""The Kafka error code and words both protocols answer for what a request met.

`error_code`: a StrataError's own code (storage/io_errors.py turns OSErrors into
them), except that a log closed under the request by a topic deletion reads as
UNKNOWN_TOPIC_OR_PARTITION; anything else is UNKNOWN_SERVER_ERROR, logged.
`error_reason(code, error)` gives the words answered with that code (the native
protocol's version-2 `message`; the Kafka listener's `error_message` is the same
`str(error)`): the StrataError's own message, which names the key, value and limit.
"""

from __future__ import annotations

from typing import Any

import structlog

from kafka_format.errors import KafkaStorageError, StrataError
from protocol import ErrorCode

log = structlog.get_logger("strata.partitions")


def error_reason(code: int, error: BaseException | None) -> str | None:
    """The words answered with `code` for `error`: the StrataError's message when
    the code is its own; None otherwise (an unexpected error's details stay in the
    broker's log, as Kafka leaves UNKNOWN_SERVER_ERROR unexplained)."""
    if isinstance(error, StrataError) and error.code == code:
        return str(error) or None
    return None


def strata_error(error: BaseException) -> StrataError | None:
    """`error` when it is a StrataError (its details may be answered), else None."""
    return error if isinstance(error, StrataError) else None


def error_code(error: BaseException, partition_log: Any, live: Any) -> int:
    """The Kafka code to answer for `error`, met while serving `partition_log`
    (`live(topic, partition)` gives the partition's open log now). A log closed
    under the request by a topic deletion reads as an unknown partition; an error
    that is no StrataError is logged and answers UNKNOWN_SERVER_ERROR."""
    if not isinstance(error, StrataError):
        log.error("partition_request_failed", error=repr(error),
                  topic=getattr(partition_log, "topic", None),
                  partition=getattr(partition_log, "partition", None), exc_info=error)
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if isinstance(error, KafkaStorageError) and partition_log is not None and \
            live(partition_log.topic, partition_log.partition) is not partition_log:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return error.code
