"""A data directory holding every kind of file Strata keeps, made by the real broker.

`seed(data_dir)` runs the broker once with ACLs on and leaves, after a clean stop:
the topic registry and topic configs (`events`, `compacted`), the Kafka state
(cluster id, a claimed producer id block), one ACL, one SCRAM user, one group
config, one client quota, a committed offset, three transactions on `events`
(the second aborted: a `.txnindex`), producer snapshots, a DELETE_RECORDS (the
log start offset 2 in `log-start-offset-checkpoint`), the recovery points, and a
compacted topic cleaned once (`cleaner-offset-checkpoint`). It returns what a
start on that directory must serve (`Expected`). `SERVE_ARGS` are the settings
every start of such a directory uses.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import confluent_kafka
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.broker_process import BrokerProcess
from tests.kafka.test_client_quotas import alter as alter_quotas

SERVE_ARGS = ("--set", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "--set", "super.users=User:ANONYMOUS", "--set", "offsets.topic.num.partitions=1",
              "--set", "transaction.state.log.num.partitions=1", "--set", "log.cleaner.backoff.ms=100")
TOPIC, COMPACTED, GROUP, USER, CLIENT = "events", "compacted", "g1", "alice", "c1"
TRANSACTIONS, PER_TRANSACTION, ABORTED = 3, 20, 1
LOG_START, COMMITTED = 2, 5
GUARD_S = 30.0  # against hangs, not a speed assumption


@dataclass
class Expected:
    committed: list[tuple[int, bytes]]  # READ_COMMITTED from LOG_START: (offset, value)
    uncommitted: list[tuple[int, bytes]]  # READ_UNCOMMITTED from LOG_START


def value(transaction: int, i: int) -> bytes:
    return b"t%d-r%02d-" % (transaction, i) + b"x" * 100  # a transaction's batch is over half a segment


def acl() -> AclBinding:
    return AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, f"User:{USER}", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)


ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def seed(data_dir: str | os.PathLike) -> Expected:
    process = BrokerProcess(data_dir, *SERVE_ARGS).start()
    try:
        client = admin(process.bootstrap)
        topics = [NewTopic(TOPIC, 1, config={"segment.bytes": "4096", "index.interval.bytes": "128"}),
                  NewTopic(COMPACTED, 1, config={"cleanup.policy": "compact", "segment.bytes": "1024",
                                                 "min.cleanable.dirty.ratio": "0.01"})]
        for future in client.create_topics(topics).values():
            future.result(GUARD_S)
        for future in client.create_acls([acl()]).values():
            future.result(GUARD_S)
        upsertion = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                 b"alice-secret")
        for future in client.alter_user_scram_credentials([upsertion]).values():
            future.result(GUARD_S)
        group = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
        for future in client.incremental_alter_configs([group]).values():
            future.result(GUARD_S)
        assert alter_quotas(process, [({"client-id": CLIENT}, {"producer_byte_rate": 1048576})]) == [(0, None)]

        producer = confluent_kafka.Producer({"bootstrap.servers": process.bootstrap, "transactional.id": "seed",
                                             "log_level": 0})
        producer.init_transactions(GUARD_S)
        for t in range(TRANSACTIONS):
            producer.begin_transaction()
            for i in range(PER_TRANSACTION):
                producer.produce(TOPIC, value(t, i), key=b"k%d" % i, partition=0)
            assert producer.flush(GUARD_S) == 0  # in the log before the abort (it would purge them)
            if t == ABORTED:
                producer.abort_transaction(GUARD_S)
            else:
                producer.commit_transaction(GUARD_S)
        compacting = confluent_kafka.Producer({"bootstrap.servers": process.bootstrap, "linger.ms": 0,
                                               "log_level": 0})
        for i in range(100):  # one batch each: segments of 1024 bytes roll, and the cleaner has work
            compacting.produce(COMPACTED, b"v%d" % i * 10, key=b"k%d" % (i % 5), partition=0)
            assert compacting.flush(GUARD_S) == 0

        consumer = confluent_kafka.Consumer({"bootstrap.servers": process.bootstrap, "group.id": GROUP,
                                             "enable.auto.commit": False, "log_level": 0})
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, COMMITTED)], asynchronous=False)
        consumer.close()
        for future in client.delete_records([TopicPartition(TOPIC, 0, LOG_START)]).values():
            future.result(GUARD_S)
        deadline = time.monotonic() + GUARD_S
        while not os.path.exists(os.path.join(process.data_dir, "cleaner-offset-checkpoint")):
            assert time.monotonic() < deadline, "the compacted topic was never cleaned"
            time.sleep(0.1)
        expected = Expected(read(process.bootstrap, "read_committed"), read(process.bootstrap, "read_uncommitted"))
        assert process.stop() == 0
    finally:
        process.close()
    written = [(t, i) for t in range(TRANSACTIONS) for i in range(PER_TRANSACTION)]
    assert len(expected.uncommitted) == len(written) - LOG_START, expected
    assert len(expected.committed) == len([w for w in written if w[0] != ABORTED]) - LOG_START
    return expected


def read(bootstrap: str, isolation: str, count: int | None = None) -> list[tuple[int, bytes]]:
    """`TOPIC`'s records from LOG_START (offset, value), read until `count` are in
    (or, without a count, until the high watermark is reached)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                                         "enable.auto.commit": False, "isolation.level": isolation,
                                         "enable.partition.eof": True, "log_level": 0})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, LOG_START)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + GUARD_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:  # noqa: SLF001 (its name)
                    if count is None or len(out) >= count:
                        return out
                    continue
                raise AssertionError(message.error())
            out.append((message.offset(), message.value()))
        raise AssertionError(f"read {len(out)} records of {count} in {GUARD_S} s")
    finally:
        consumer.close()


def log_start_offset(bootstrap: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "log_level": 0})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=GUARD_S)
        return low
    finally:
        consumer.close()


def committed(bootstrap: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                         "enable.auto.commit": False, "log_level": 0})
    try:
        return consumer.committed([TopicPartition(TOPIC, 0)], timeout=GUARD_S)[0].offset
    finally:
        consumer.close()
