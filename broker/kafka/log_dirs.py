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
- With tiered storage, a second result stands for the remote store (Kafka's
  response has no remote-size field; a second log dir is what its admin client
  and kafka-log-dirs.sh already list, as for a broker with two log.dirs): its
  log_dir is the store's URL (rsm.config.url's bucket and prefix or directory,
  never credentials), total_bytes and usable_bytes -1 (Kafka's
  UNKNOWN_VOLUME_BYTES), and it lists every tiered partition (the same topic
  filter) with partition_size the bytes of its finished remote segments (Kafka's
  RemoteLogSizeBytes). The first result's sizes stay the local ones.
"""

from __future__ import annotations

import os

from .codec import make, nested
from .request_types import ApiKey

UNKNOWN_VOLUME_BYTES = -1  # Kafka's DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES


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

        def topics(sizes) -> tuple:
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for topic, partition, size in sizes:
                parts = by_topic.setdefault(topic, [])
                if wanted is None or (topic, partition) in wanted:
                    parts.append((partition, size))
            return tuple(
                make(TopicR, name=name, partitions=tuple(
                    make(PartR, partition_index=partition, partition_size=size, offset_lag=0, is_future_key=False)
                    for partition, size in sorted(found)))
                for name, found in sorted(by_topic.items()))

        path = os.path.abspath(self.apis.partitions.data_dir)
        total, usable = await self.apis.blocking(_space, path)
        results = [make(ResultR, error_code=0, log_dir=path, topics=topics(self.apis.partitions.log_sizes()),
                        total_bytes=total, usable_bytes=usable, is_cordoned=False)]
        remote = self.apis.partitions.remote_log_sizes()
        if remote is not None:
            url, sizes = remote
            results.append(make(ResultR, error_code=0, log_dir=url, topics=topics(sizes),
                                total_bytes=UNKNOWN_VOLUME_BYTES, usable_bytes=UNKNOWN_VOLUME_BYTES,
                                is_cordoned=False))
        return make(R, throttle_time=0, error_code=0, results=tuple(results))


def _space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `path`, as Java's FileStore."""
    try:
        st = os.statvfs(path)
    except OSError:
        return UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def register(apis) -> None:
    apis.register(ApiKey.DESCRIBE_LOG_DIRS, LogDirHandlers(apis).describe_log_dirs, 1, 5)
