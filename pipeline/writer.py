"""Writing DataFrames to topics, batch and streaming, as Spark's Kafka sink does.

Contract:
- `check_write_schema(schema, options)` runs on the driver before any task:
  `value` (string or binary) is required; `key` (string or binary),
  `headers` (array<struct<key:string,value:binary>>), `partition` (int) and
  `topic` (string) are optional; other columns are ignored. Without the
  `topic` option a `topic` column is required; with it, the option wins over
  the column. Wrong types raise OptionError naming the column.
- Each task sends its rows with one `client.Producer` (batched per
  partition, retried on transport failures) and returns only after every
  record is acknowledged; the first failed record fails the task, which Spark
  retries. Strings are encoded as UTF-8, a null key or partition leaves the
  choice to the producer's partitioner (murmur2 of the key, else sticky), a
  null value is a tombstone, a null topic (no option) fails the task.
- Topics are created on first write when the broker allows it, as Kafka's
  producer does: `ensure_topic(options)` runs on the driver before any task and
  asks METADATA for the `topic` option's topic with allowAutoTopicCreation, so a
  missing topic is created with the broker's defaults (auto.create.topics.enable,
  num.partitions) or the write stops at once with an OptionError naming the
  topic; topics from the `topic` column are created by each task's producer the
  same way.
- Delivery is at-least-once: a retried task or a replayed micro-batch sends
  its records again, and `commit`/`abort` have nothing to undo.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from .offsets import OptionError
from .options import WriteOptions
from .schema import HEADERS_TYPE

__all__ = ["check_write_schema", "ensure_topic", "StrataBatchWriter", "StrataStreamWriter", "WriteResult",
           "write_batches"]

log = logging.getLogger("pipeline")
CHECK_EVERY = 1024  # look at finished sends this often, so errors surface early


@dataclass
class WriteResult(WriterCommitMessage):
    records: int


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("Required attribute 'value' not found")
    if not isinstance(fields["value"], (StringType, BinaryType)):
        raise OptionError(f"value attribute type must be a string or binary, got "
                          f"{fields['value'].simpleString()}")
    if "key" in fields and not isinstance(fields["key"], (StringType, BinaryType)):
        raise OptionError(f"key attribute type must be a string or binary, got "
                          f"{fields['key'].simpleString()}")
    if options.topic is None and "topic" not in fields:
        raise OptionError("topic option required when no 'topic' attribute is present. Use "
                          "the topic option for setting a topic.")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"topic attribute type must be a string, got "
                          f"{fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"partition attribute type must be an int, got "
                          f"{fields['partition'].simpleString()}")
    if "headers" in fields and fields["headers"].simpleString() != HEADERS_TYPE.simpleString():
        raise OptionError(f"headers attribute type must be "
                          f"{HEADERS_TYPE.simpleString()}, got {fields['headers'].simpleString()}")


def ensure_topic(options: WriteOptions) -> None:
    """Driver side: the `topic` option's topic exists, created by the broker when
    missing and allowed; else OptionError naming it (see the module contract)."""
    if options.topic is None:
        return
    from client import Admin, StrataClientError

    try:
        with Admin(options.bootstrap, request_timeout_ms=options.request_timeout_ms,
                   retries=options.retries, security=dict(options.security)) as admin:
            admin.describe_topic(options.topic, auto_create=True)
    except StrataClientError as e:
        raise OptionError(str(e)) from None


def _column(batch, name: str, n: int) -> list:
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else [None] * n


def write_batches(options: WriteOptions, batches: Iterator) -> int:
    """Send every row of the Arrow batches; return how many were acknowledged."""
    from client import Producer

    sent = 0
    pending: deque = deque()

    def check(block: bool) -> None:
        while pending and (block or pending[0].done()):
            error = pending.popleft().exception()
            if error is not None:
                raise error

    with Producer(options.bootstrap, **options.producer_options()) as producer:
        for batch in batches:
            n = batch.num_rows
            values = _column(batch, "value", n)
            keys = _column(batch, "key", n)
            partitions = _column(batch, "partition", n)
            headers = _column(batch, "headers", n)
            topics = [options.topic] * n if options.topic else _column(batch, "topic", n)
            send = producer.send
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise OptionError("null topic present in the data. Use the topic option for "
                                      "setting a topic.")
                h = headers[i]
                pending.append(send(topic, values[i], keys[i], partition=partitions[i],
                                    headers=[(x["key"], x["value"]) for x in h] if h else None))
                if len(pending) % CHECK_EVERY == 0:
                    check(block=False)
            sent += n
        producer.flush()
        check(block=True)
    return sent


class StrataBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions):
        self.options = options

    def write(self, iterator) -> WriteResult:
        return WriteResult(write_batches(self.options, iterator))

    def commit(self, messages) -> None:
        total = sum(m.records for m in messages if m is not None)
        log.info("wrote %d records to Strata", total)

    def abort(self, messages) -> None:
        sent = sum(m.records for m in messages if m is not None)
        log.warning("write aborted; %d records already sent stay in their topics "
                    "(at-least-once)", sent)


class StrataStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions):
        self.options = options

    def write(self, iterator) -> WriteResult:
        return WriteResult(write_batches(self.options, iterator))

    def commit(self, messages, batchId: int) -> None:
        total = sum(m.records for m in messages if m is not None)
        log.info("micro-batch %d: wrote %d records to Strata", batchId, total)

    def abort(self, messages, batchId: int) -> None:
        log.warning("micro-batch %d aborted; records already sent stay in their topics "
                    "(at-least-once)", batchId)
