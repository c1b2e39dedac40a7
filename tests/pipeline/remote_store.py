"""A tiered partition copied to a remote store (file or moto's S3 server), for the
tests of `strata-segments` over a store; also run as the standalone cluster's driver:

    python -m tests.pipeline.remote_store MASTER STORE_URL ENDPOINT DATA_DIR OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
import uuid

from storage.remote.config import RemoteLogConfig
from storage.remote.copier import RemotePartition
from storage.remote.metadata import RemoteLogMetadataStore, TopicIdPartition
from storage.remote.store import open_remote_storage

TOPIC_ID = uuid.UUID("4b3c1d2e-5f60-4718-8293-a4b5c6d7e8f9")


def tier(data_dir, config: RemoteLogConfig, log, topic_id: uuid.UUID = TOPIC_ID):
    """Copy the rolled segments of `log` to the store; (partition, metadata store, rsm)."""
    tp = TopicIdPartition(log.topic, topic_id, log.partition)
    metadata = RemoteLogMetadataStore(os.path.join(str(data_dir), "..", f"rlm-{log.topic}-{log.partition}"))
    rsm = open_remote_storage(config)
    partition = RemotePartition(log, tp, rsm, metadata)
    result = partition.copy_pass()
    assert result.error is None, result.error
    return partition


def rows(df) -> list[list]:
    """Every row as JSON-friendly values, sorted by topic, partition, offset."""
    out = []
    for r in df.collect():
        out.append([r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key).hex(),
                    None if r.value is None else bytes(r.value).hex(), r.timestamp.isoformat(), r.timestampType,
                    [[h.key, None if h.value is None else bytes(h.value).hex()] for h in r.headers]])
    return sorted(out, key=lambda row: (row[0], row[1], row[2]))


def main() -> None:
    master, url, endpoint, data_dir, out = sys.argv[1:6]
    from pipeline import local_session

    spark = local_session("strata-remote-segments", master, {
        "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC", "spark.executor.memory": "512m",
        "spark.pyspark.python": sys.executable, "spark.cores.max": "2"})
    try:
        remote = (spark.read.format("strata-segments").option("s3.endpoint", endpoint)
                  .option("includeHeaders", "true").load(url))
        tasks = remote.rdd.getNumPartitions()
        got = rows(remote)
        last = max(r[2] for r in got) if got else -1
        local = (spark.read.format("strata-segments").option("includeHeaders", "true")
                 .option("endingOffsets", "latest").load(data_dir))
        expected = [r for r in rows(local) if r[2] <= last]
        ranged = (spark.read.format("strata-segments").option("s3.endpoint", endpoint)
                  .option("startingOffsets", json.dumps({"clicks": {"0": 73}}))
                  .option("endingOffsets", json.dumps({"clicks": {"0": 120}})).load(url))
        result = {"tasks": tasks, "remote": got, "local": expected, "schema_equal": remote.schema == local.schema,
                  "ranged": sorted(r.offset for r in ranged.collect()), "ranged_tasks": ranged.rdd.getNumPartitions(),
                  "app": spark.sparkContext.master}
    finally:
        spark.stop()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
