"""Group APIs when the offsets log cannot be written: Kafka's coordinator answers
NOT_COORDINATOR (16) for a disk error (CoordinatorOperationExceptionHelper), which
clients retry after looking the coordinator up; never UNKNOWN_SERVER_ERROR. Writes
to `__consumer_offsets` segments fail with ENOSPC through os.pwrite, as on a full disk."""

from __future__ import annotations

import errno
import os

from tests.kafka.test_groups_apis import DELETE_GROUPS, OFFSET_COMMIT, app, call, create_topic, entity, request  # noqa: F401

REAL_PWRITE = os.pwrite
NOT_COORDINATOR = 16


def offsets_log_full(fd, data, offset):
    if "__consumer_offsets-" in os.readlink(f"/proc/self/fd/{fd}"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return REAL_PWRITE(fd, data, offset)


async def commit(broker, group: str) -> int:
    part = entity(OFFSET_COMMIT, 8, "topics", "partitions", partition_index=0, committed_offset=5,
                  committed_metadata="")
    response = await call(broker, request(OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1,
                                          member_id="", topics=(entity(OFFSET_COMMIT, 8, "topics", name="t",
                                                                       partitions=(part,)),)))
    return response.topics[0].partitions[0].error_code


async def test_a_full_disk_answers_not_coordinator_and_commits_resume(app, monkeypatch):
    broker = await app("offsets.topic.num.partitions=1")
    await create_topic(broker, "t", 1)
    assert await commit(broker, "g") == 0
    monkeypatch.setattr(os, "pwrite", offsets_log_full)
    assert await commit(broker, "g") == NOT_COORDINATOR
    response = await call(broker, request(DELETE_GROUPS, 2, groups_names=("g",)))
    assert response.results[0].error_code == NOT_COORDINATOR
    monkeypatch.setattr(os, "pwrite", REAL_PWRITE)
    assert await commit(broker, "g") == 0
