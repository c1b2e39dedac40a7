"""`strata-segments` over a remote store on Spark's standalone cluster (a master and a
worker from the pyspark wheel, as in the README): the executors, in the worker's own
processes, read the remote segments straight from moto's S3 server and from the file
store; the rows and schema are the local reader's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline.remote_store import tier
from tests.storage.remote.conftest import file_config, free_port, remote_config, s3_config, s3_server  # noqa: F401
from tests.storage.remote.helpers import fill, open_tiered_log

REPO = Path(__file__).resolve().parents[2]


def _wait_for(path: Path, text: str, process: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the {what} exited with {process.returncode}: {path.read_text()[-2000:]}")
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the {what} did not log {text!r} within {timeout} s: {path.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with one worker (2 cores). The worker's environment has no
    AWS_* variables: executors get what they need from their tasks."""
    import pyspark

    root = tmp_path_factory.mktemp("standalone")
    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYSPARK_", "SPARK_"))}
    env["SPARK_LOG_DIR"] = str(root)
    env["PYSPARK_PYTHON"] = sys.executable
    processes = []
    try:
        master_log = root / "master.log"
        with open(master_log, "wb") as out:
            master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                       "--port", str(port), "--webui-port", str(free_port())],
                                      stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        processes.append(master)
        _wait_for(master_log, "I have been elected leader", master, "Spark master")
        worker_log = root / "worker.log"
        with open(worker_log, "wb") as out:
            worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                                       f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "2",
                                       "--memory", "1g", "--webui-port", str(free_port()),
                                       "--work-dir", str(root / "work")],
                                      stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        processes.append(worker)
        _wait_for(worker_log, "Successfully registered with master", worker, "Spark worker")
        yield f"spark://127.0.0.1:{port}", root / "work"
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def test_remote_segments_on_a_standalone_cluster(cluster, tmp_path, remote_config):  # noqa: F811
    master, work_dir = cluster
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    log = open_tiered_log(data_dir / "clicks-0")
    fill(log, 4)
    partition = tier(data_dir, remote_config, log)
    fill(log, 1)  # a local tail past the store
    log.flush()
    out = tmp_path / "result.json"
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for key in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
        env.pop(key, None)
    try:
        done = subprocess.run([sys.executable, "-m", "tests.pipeline.remote_store", master,
                               str(remote_config.location), remote_config.s3_endpoint, str(data_dir), str(out)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
    finally:
        log.close()
        partition.metadata.close()
    result = json.loads(out.read_text())
    assert result["app"] == master
    assert result["tasks"] == 4  # one per remote segment
    assert [r[2] for r in result["remote"]] == list(range(200))
    assert result["remote"] == result["local"]
    assert result["schema_equal"]
    assert result["ranged"] == list(range(73, 120)) and result["ranged_tasks"] == 2
    assert any(work_dir.iterdir())  # the worker ran the executors
