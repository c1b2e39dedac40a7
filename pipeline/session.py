"""A SparkSession set up for the Strata sources, for jobs, tests and the bench.

Contract: `local_session(app, master=None, conf=None)` returns the active
session or builds one, with both formats registered. Python workers run this
interpreter (PYSPARK_PYTHON defaults to sys.executable, so the workers find
pyarrow and the Strata packages without an activated venv). The master is
`master` when given, else whatever spark-submit set, else `local[*]`.
`conf` entries are applied as given (tests pass their lean settings).
"""

from __future__ import annotations

import os
import sys

__all__ = ["local_session"]


def local_session(app: str = "strata-pipeline", master: str | None = None,
                  conf: dict[str, str] | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from . import register

    builder = SparkSession.builder.appName(app)
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is not None:
        builder = builder.master(master)
    elif not under_spark_submit:
        builder = builder.master("local[*]")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
