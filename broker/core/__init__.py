"""The broker core: the one protocol-neutral surface both protocols' adapters
(broker/native/, broker/kafka/) call. `PartitionService` (service.py) composes
the parts, one job each: appends.py (the append policy), reads.py and
waiting.py (the isolated read, the one long poll), charges.py (the quota charge
rule), errors.py, authorization.py (named authorization rules), limits.py (the
request-size caps); types.py holds the protocol-neutral types."""

from .appends import (
    APPENDS_PER_JOB,
    INLINE_APPEND_MAX_BYTES,
    INLINE_BACKOFF_S,
    LARGE_INLINE_APPEND_MAX_BYTES,
    SLOW_INLINE_APPEND_S,
    Answer,
    Appender,
    AppendStats,
    append_outcome,
)
from .errors import error_reason, strata_error
from .reads import INLINE_READ_BYTES, MemorySlice, release_all, reply_part, reply_records
from .service import PartitionService
from .types import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AppendOutcome,
    AppendResult,
    FetchIsolation,
    FetchSpec,
    IsolatedRead,
    OffsetKind,
    OffsetQuery,
    PartitionLog,
    RecordSlice,
    TimestampOffset,
    TopicPartition,
)
from .waiting import AppendWatcher, PartitionWaiters, Wait

__all__ = ["APPENDS_PER_JOB", "Answer", "AppendOutcome", "AppendResult", "AppendStats", "AppendWatcher", "Appender",
           "FetchIsolation", "FetchSpec", "INLINE_APPEND_MAX_BYTES", "INLINE_BACKOFF_S", "INLINE_READ_BYTES",
           "IsolatedRead", "LARGE_INLINE_APPEND_MAX_BYTES", "MemorySlice", "OffsetKind", "OffsetQuery", "PartitionLog",
           "PartitionService", "PartitionWaiters", "READ_COMMITTED", "READ_UNCOMMITTED", "RecordSlice",
           "SLOW_INLINE_APPEND_S", "TimestampOffset", "TopicPartition", "Wait", "append_outcome", "error_reason",
           "release_all", "reply_part", "reply_records", "strata_error"]
