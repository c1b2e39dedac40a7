"""DescribeLogDirs (API 35, versions 1-5): the one data directory and the size of every
partition in it, as Kafka's ReplicaManager.describeLogDirs answers (what
kafka-log-dirs.sh prints).

- The log dir is the data directory's absolute path; total_bytes and usable_bytes
  (v4+) are its file system's (statvfs), is_cordoned (v5) is false.
- topics null: every partition log on the broker (internal topics included, as
  Kafka). Listed topics: as Kafka, every topic that has a log is answered, each with
  the requested partitions it has (an empty list for the others); partitions or
  topics that do not exist are left out.
- partition_size is the sum of the partition's segment sizes (Kafka's log.size),
  offset_lag 0 (the high watermark is the log end), is_future_key false.
"""

from __future__ import annotations

import os

from .codec import make, nested
from .request_types import ApiKey


class LogDirHandlers:
    def __init__(self, apis):
        self.apis = apis

    async def describe_log_dirs(self, req, ctx):
        R = ctx.response_class
        ResultR = nested(R, "results")
        TopicR = nested(ResultR, "topics")
        PartR = nested(TopicR, "partitions")
        wanted: set[tuple[str, int]] | None = None
        if req.topics is not None:
            wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for topic, partition, size in self.apis.partitions.log_sizes():
            parts = by_topic.setdefault(topic, [])
            if wanted is None or (topic, partition) in wanted:
                parts.append((partition, size))
        topics = tuple(
            make(TopicR, name=name, partitions=tuple(
                make(PartR, partition_index=partition, partition_size=size, offset_lag=0, is_future_key=False)
                for partition, size in sorted(sizes)))
            for name, sizes in sorted(by_topic.items()))
        path = os.path.abspath(self.apis.partitions.data_dir)
        total, usable = await self.apis.blocking(_space, path)
        result = make(ResultR, error_code=0, log_dir=path, topics=topics, total_bytes=total,
                      usable_bytes=usable, is_cordoned=False)
        return make(R, throttle_time=0, error_code=0, results=(result,))


def _space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `path`, as Java's FileStore."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1  # Kafka's UNKNOWN_VOLUME_BYTES
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def register(apis) -> None:
    apis.register(ApiKey.DESCRIBE_LOG_DIRS, LogDirHandlers(apis).describe_log_dirs, 1, 5)
