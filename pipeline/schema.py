"""The row shape every Strata source produces: Spark's Kafka source schema.

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int[, headers array<struct<key:string,value:binary>>]

Contract: `spark_schema(include_headers)` is the Spark schema and
`arrow_schema(include_headers)` the Arrow schema that Spark expects from a
Python data source's `read()` (built by pyspark itself, so the two always
agree, nullability included). `Columns` gathers records of one partition
column by column and turns them into one `pyarrow.RecordBatch`: timestamps
are Kafka's milliseconds, shown by Spark as microsecond timestamps (a magic-0
record's -1 becomes 1969-12-31 23:59:59.999 UTC, as in Spark's Kafka source).
"""

from __future__ import annotations

from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["spark_schema", "arrow_schema", "Columns", "HEADERS_TYPE"]

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))


@lru_cache(maxsize=2)
def spark_schema(include_headers: bool = False) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


class Columns:
    """Records of one topic-partition, column by column, until `to_batch`."""

    __slots__ = ("keys", "values", "offsets", "timestamps", "timestamp_types", "headers")

    def __init__(self, include_headers: bool = False):
        self.reset(include_headers)

    def reset(self, include_headers: bool) -> None:
        """Empty every column; `headers` is None unless `include_headers`."""
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []  # ms
        self.timestamp_types: list[int] = []
        self.headers: list | None = [] if include_headers else None

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, offset: int, timestamp: int, timestamp_type: int, key, value,
               headers=()) -> None:
        self.offsets.append(offset)
        self.timestamps.append(timestamp)
        self.timestamp_types.append(timestamp_type)
        self.keys.append(key)
        self.values.append(value)
        if self.headers is not None:
            self.headers.append(headers)

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        """The gathered rows as one RecordBatch; the columns start empty again."""
        schema = arrow_schema(self.headers is not None)
        n = len(self.offsets)
        millis = pa.array(self.timestamps, pa.int64())
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(millis, 1000).cast(schema.field("timestamp").type),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.headers is not None:
            arrays.append(pa.array(
                [[{"key": k, "value": v} for k, v in hs] for hs in self.headers],
                schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.reset(self.headers is not None)
        return batch
