"""A local Spark session binds to loopback without the user setting SPARK_LOCAL_IP
(pipeline/session.py): the driver listens on 127.0.0.1 and Spark does not warn that the host
name resolves to a loopback address."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.broker_process import ROOT

PROBE = """
from pipeline import local_session
spark = local_session("loopback-probe", conf={"spark.ui.enabled": "false"})
conf = spark.sparkContext.getConf()
print(conf.get("spark.driver.host"), conf.get("spark.driver.bindAddress"), spark.sparkContext.master)
spark.stop()
"""


def test_the_tests_session_binds_to_loopback(spark):
    conf = spark.sparkContext.getConf()
    assert (conf.get("spark.driver.host"), conf.get("spark.driver.bindAddress")) == ("127.0.0.1", "127.0.0.1")


def test_a_local_session_binds_to_loopback_without_spark_local_ip():
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "PYSPARK_GATEWAY_PORT")}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["127.0.0.1", "127.0.0.1", "local[*]"]
    assert "loopback address" not in done.stderr and "SPARK_LOCAL_IP" not in done.stderr
