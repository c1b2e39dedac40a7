"""Fixtures of the Spark data source tests: one local[2] session, one broker.

The whole folder is skipped (not failed) when pyspark, pyarrow or Java is
missing: `pip install .[spark]` and a JRE 17+ bring them (`make test` does).

- `spark`: the session of the whole run (local[2], lean: no UI, 2 shuffle
  partitions, 1 GiB driver, UTC), with `strata` and `strata-segments` registered.
- `strata`: one broker process for the whole run (tests use fresh topic names);
  tests that stop or restart a broker use the `broker` factory of tests/conftest.py.
- `fill(address, topic, ...)` creates a topic and produces numbered records.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

_missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
if _missing or not (shutil.which("java") or os.environ.get("JAVA_HOME")):
    why = f"{', '.join(_missing)} not installed" if _missing else "no Java runtime"
    pytest.skip(f"Spark pipeline tests need pyspark, pyarrow and Java ({why}); "
                f"pip install '.[spark]'", allow_module_level=True)

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.client.live_broker import LiveBroker, unique  # noqa: E402,F401  (shared with the client tests)

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.minBatchesToRetain": "10",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def spark():
    from pipeline import local_session

    # The Python workers that plan and read `strata-segments` over moto's S3 server
    # (tests/pipeline/test_remote_segments.py) take their credentials from the
    # environment the session starts with, as a user's AWS_* variables.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    session = local_session("strata-pipeline-tests", "local[2]", SPARK_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def strata(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("pipeline-broker"))
    process.start()
    yield LiveBroker(process)
    process.close()


def fill(address: str, topic: str, count: int, *, partitions: int = 1, start: int = 0,
         create: bool = True, headers: bool = False, timestamp=None, keys: int | None = None,
         configs=None, **producer_options) -> None:
    """Create `topic` (unless told not to; retention.ms=-1) and send records value b"v<i>",
    key b"k<i % keys>" (or b"k<i>"), partition i % partitions, for i in start..start+count-1."""
    from client import Admin, Producer

    if create:
        with Admin(address) as admin:
            # Records may carry old timestamps: time retention must not take them meanwhile.
            admin.create_topic(topic, partitions, {"retention.ms": "-1", **(configs or {})})
    with Producer(address, **producer_options) as producer:
        for i in range(start, start + count):
            producer.send(topic, b"v%d" % i, b"k%d" % (i % keys if keys else i),
                          partition=i % partitions,
                          timestamp_ms=timestamp(i) if timestamp else None,
                          headers=[("n", b"%d" % i), ("null", None)] if headers else None)
        producer.flush()


def read(spark, address: str, **options):
    reader = spark.read.format("strata").option("bootstrap.servers", address)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def values(df) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())
