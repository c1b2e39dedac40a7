"""Per-key record counts over time windows: a topic into Parquet, and back into a topic.

    python -m pipeline.jobs.key_counts --bootstrap-servers localhost:9000 --topic events \
        --window "1 minute" --parquet /tmp/event-counts --output-topic event-counts

Stage 1 reads `--topic` (a batch read of the `strata` source, from
`--starting-offsets` to `--ending-offsets`, Spark's Kafka JSON or
earliest/latest), groups the records by `window(timestamp, --window)` and key
(the key as UTF-8 text; null keys count under null), and writes one row per
(window_start, window_end, key) with its `count` to `--parquet` (replaced).
Stage 2, with `--output-topic`, reads that Parquet back and writes one record
per row to the topic: key = the key, value = the row as JSON
{"window_start": "...", "window_end": "...", "key": ..., "count": n}
(timestamps in ISO 8601, UTC).

Runs on local[*] by default (`--master` to choose), or under spark-submit
(whose master is used):

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/spark-submit --master 'local[2]' \
        pipeline/jobs/key_counts.py --bootstrap-servers localhost:9000 --topic events ...

It prints one summary line; errors print one line and exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

if __package__ in (None, ""):  # run as a file (spark-submit pipeline/jobs/key_counts.py)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.jobs.key_counts",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-servers", required=True, help="the broker, HOST:PORT")
    p.add_argument("--topic", required=True, help="the topic to count (comma list allowed)")
    p.add_argument("--window", default="1 minute", help="window length (Spark interval)")
    p.add_argument("--parquet", required=True, help="output directory of the counts (replaced)")
    p.add_argument("--output-topic", help="also write the counts to this topic, as JSON")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--ending-offsets", default="latest")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark settings")
    return p.parse_args(argv)


def count_by_window(spark, args):
    from pyspark.sql import functions as F

    records = (spark.read.format("strata").option("bootstrap.servers", args.bootstrap_servers)
               .option("subscribe", args.topic)
               .option("startingOffsets", args.starting_offsets)
               .option("endingOffsets", args.ending_offsets).load())
    return (records.groupBy(F.window("timestamp", args.window).alias("w"),
                            F.col("key").cast("string").alias("key"))
            .count()
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                    "key", "count"))


def to_topic(spark, args) -> None:
    from pyspark.sql import functions as F

    counts = spark.read.parquet(args.parquet)
    iso = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
    value = F.to_json(F.struct(F.date_format("window_start", iso).alias("window_start"),
                               F.date_format("window_end", iso).alias("window_end"),
                               "key", "count"))
    out = counts.select(F.col("key"), value.alias("value"))
    (out.write.format("strata").mode("append").option("bootstrap.servers", args.bootstrap_servers)
     .option("topic", args.output_topic).save())


def run(spark, args) -> str:
    count_by_window(spark, args).write.mode("overwrite").parquet(args.parquet)
    summary = f"key_counts: (window, key) counts of {args.topic} -> {args.parquet}"
    if args.output_topic:
        to_topic(spark, args)
        summary += f" -> topic {args.output_topic}"
    rows = spark.read.parquet(args.parquet).count()
    return summary + f": {rows} rows"


def one_line(e: BaseException) -> str:
    """The cause of a failure in one line: a Python error raised in a Spark worker comes
    back inside a JVM message with its traceback; its last `Name: message` line is the cause."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    causes = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    if causes:
        return causes[-1]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


def main(argv=None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    from pipeline import local_session

    conf = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false"}
    conf.update(item.split("=", 1) for item in args.conf)
    own_session = SparkSession.getActiveSession() is None
    spark = local_session("strata-key-counts", args.master, conf)
    if own_session:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        print(run(spark, args), flush=True)
        return 0
    except Exception as e:  # one line, no traceback
        print(f"key_counts: {one_line(e)}", file=sys.stderr)
        return 1
    finally:
        if own_session:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
