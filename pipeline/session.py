"""A SparkSession set up for the Strata sources, for jobs, tests and the bench.

Contract: `local_session(app, master=None, conf=None)` returns the active
session or builds one, with both formats registered. Python workers run this
interpreter (PYSPARK_PYTHON defaults to sys.executable, so the workers find
pyarrow and the Strata packages without an activated venv). The master is
`master` when given, else whatever spark-submit set, else `local[*]`.
`conf` entries are applied as given (tests pass their lean settings).
A local master (`local[...]`) binds the driver to loopback: SPARK_LOCAL_IP
defaults to 127.0.0.1 (unless set) for the JVM this starts, and
spark.driver.host / spark.driver.bindAddress to 127.0.0.1 (unless `conf` sets
them), so nothing listens beyond this machine and Spark does not warn that the
host name resolves to a loopback address.
"""

from __future__ import annotations

import os
import sys

__all__ = ["local_session"]
LOOPBACK = "127.0.0.1"


def local_session(app: str = "strata-pipeline", master: str | None = None,
                  conf: dict[str, str] | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from . import register

    builder = SparkSession.builder.appName(app)
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not under_spark_submit:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    settings = dict(conf or {})
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        for key in ("spark.driver.host", "spark.driver.bindAddress"):
            settings.setdefault(key, LOOPBACK)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
