"""The pipeline job end to end on the shared local[2] session, with the README's arguments.

`main(argv)` is the whole `python -m pipeline.jobs.key_counts` command but the JVM
start: run in this process it uses the tests' session (a second JVM would cost most
of the suite's time budget on two shared cores); the CLI itself is checked with --help.
"""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline.jobs.key_counts import main
from tests.broker_process import ROOT
from tests.pipeline.conftest import fill, read, unique

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def test_key_counts_job_topic_to_parquet_to_topic(spark, strata, tmp_path, capsys):
    topic, counts_topic = unique("events"), unique("counts")
    # 3 keys; records i at T0 + i seconds: minute windows [22:13, 22:14) holds i < 40.
    fill(strata.address, topic, 120, partitions=2, keys=3, timestamp=lambda i: T0 + 1000 * i)
    # The output topic does not exist yet, as in the README: the sink creates it (auto.create.topics.enable).
    out = tmp_path / "counts.parquet"
    argv = ["--bootstrap-servers", strata.address, "--topic", topic, "--window", "1 minute",
            "--parquet", str(out), "--output-topic", counts_topic, "--master", "local[2]"]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().endswith(f"-> topic {counts_topic}: 9 rows")

    rows = spark.read.parquet(str(out)).collect()
    got = {(r.window_start.isoformat(), r.key): r["count"] for r in rows}
    # i in [0, 40) -> 22:13, [40, 100) -> 22:14, [100, 120) -> 22:15; key k<i % 3>.
    expected = {}
    for i in range(120):
        minute = "2023-11-14T22:13:00" if i < 40 else "2023-11-14T22:14:00" if i < 100 else \
            "2023-11-14T22:15:00"
        expected[(minute, f"k{i % 3}")] = expected.get((minute, f"k{i % 3}"), 0) + 1
    assert got == expected

    back = read(spark, strata.address, subscribe=counts_topic).collect()
    records = sorted(((bytes(r.key).decode(), json.loads(bytes(r.value))) for r in back),
                     key=lambda kv: (kv[0], kv[1]["window_start"]))
    assert len(records) == 9
    assert records[0] == ("k0", {"window_start": "2023-11-14T22:13:00.000Z",
                                 "window_end": "2023-11-14T22:14:00.000Z", "key": "k0",
                                 "count": 14})


def test_key_counts_job_reports_errors_in_one_line(spark, strata, tmp_path, capsys):
    argv = ["--bootstrap-servers", strata.address, "--topic", unique("absent"),
            "--parquet", str(tmp_path / "x")]
    assert main(argv) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("key_counts: ") and "does not exist" in last, last
    assert spark.range(3).count() == 3  # still running


def test_key_counts_command_line():
    done = subprocess.run([sys.executable, "-m", "pipeline.jobs.key_counts", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--bootstrap-servers" in done.stdout
    done = subprocess.run([sys.executable, "-m", "pipeline.jobs.key_counts"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "required" in done.stderr
