"""Group APIs when the offsets log cannot be written: Kafka's coordinator answers
NOT_COORDINATOR (16) for a disk error (CoordinatorOperationExceptionHelper), which
clients retry after looking the coordinator up; never UNKNOWN_SERVER_ERROR. Writes
to `__consumer_offsets` segments fail with ENOSPC through os.pwrite, as on a full disk."""

from __future__ import annotations

import errno
import os

from tests.kafka.test_groups_apis import DELETE_GROUPS, OFFSET_COMMIT, call, create_topic, entity, request

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


async def test_a_consumer_group_heartbeat_on_a_full_disk_answers_not_coordinator(app, monkeypatch):
    """KIP-848 groups: the heartbeat's records cannot be written, so it is answered
    NOT_COORDINATOR; once the disk has room the next heartbeat writes them."""
    broker = await app("offsets.topic.num.partitions=1")
    await create_topic(broker, "t", 1)

    def heartbeat(member: str):
        return call(broker, request(68, 1, group_id="cg", member_id=member, member_epoch=0, instance_id=None,
                                    rack_id=None, rebalance_timeout=30_000, subscribed_topic_names=("t",),
                                    subscribed_topic_regex=None, server_assignor=None, topic_partitions=()))

    monkeypatch.setattr(os, "pwrite", offsets_log_full)
    assert (await heartbeat("m1")).error_code == NOT_COORDINATOR
    monkeypatch.setattr(os, "pwrite", REAL_PWRITE)
    joined = await heartbeat("m2")
    assert joined.error_code == 0
    assert broker.kafka.consumer_groups.pending() == []  # everything is in the log now, m1's join too
    stored = broker.kafka.offsets.group_records()
    assert any(key.endswith(b"m1") for key in stored) and any(key.endswith(b"m2") for key in stored)
