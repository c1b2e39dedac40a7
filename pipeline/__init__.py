"""Strata's Spark data sources (pyspark >= 4.2 with pyarrow; no JVM jars).

    from pipeline import StrataDataSource, register
    register(spark)      # formats "strata" (the broker) and "strata-segments" (segment files)
    df = (spark.read.format("strata").option("bootstrap.servers", "localhost:9000")
          .option("subscribe", "events").load())

`strata` mirrors Spark's built-in Kafka source (options, schema, offsets JSON,
data-loss handling; see README "Pipelines on Spark"): source.py (batch and
stream readers), writer.py (batch and stream writers), planning.py (offset
ranges, driver side), fetcher.py (range reads, executor side), decode.py (log
entries into Arrow columns), segments.py (`strata-segments`), options.py and
offsets.py (option parsing, offsets JSON), schema.py, session.py (a local
SparkSession set up for these sources), jobs/ (runnable pipeline jobs).
"""

from .segments import StrataSegmentsDataSource
from .session import local_session
from .source import StrataDataSource

__all__ = ["StrataDataSource", "StrataSegmentsDataSource", "register", "local_session"]


def register(spark) -> None:
    """Register both formats, `strata` and `strata-segments`, with `spark`."""
    spark.dataSource.register(StrataDataSource)
    spark.dataSource.register(StrataSegmentsDataSource)
