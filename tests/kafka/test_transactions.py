"""The transaction coordinator with real clients against
the real broker process: confluent-kafka's and aiokafka's transactional producers,
read_committed consumers, zombie fencing, transactional offsets, restarts and the
crash matrix (STRATA_TEST_CRASH_AT kills the broker at an exact step)."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name

TIMEOUT = 20


def txn_producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10000, **extra})
    producer.init_transactions(TIMEOUT)
    return producer


def read_committed(bootstrap: str, topic: str, partitions: int, *, expected: int | None = None,
                   idle: float = 1.5) -> list[bytes]:
    """Every value a read_committed consumer gets from the topic, in partition order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("rc"),
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(500, 0.2)
            for message in batch:
                assert message.error() is None, message.error()
                got.append(message.value())
            if batch:
                quiet_since = time.monotonic()
            elif (expected is None or len(got) >= expected) and time.monotonic() - quiet_since > idle:
                break
    finally:
        consumer.close()
    return got


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], TIMEOUT)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def test_commit_and_abort_across_topics_and_offsets(bootstrap):
    a = create_topic(bootstrap, unique_name("ta"), 3)
    b = create_topic(bootstrap, unique_name("tb"), 2)
    group = unique_name("g")
    producer = txn_producer(bootstrap, unique_name("tx"))
    producer.begin_transaction()
    for i in range(30):
        producer.produce(a, value=b"a%d" % i, partition=i % 3)
        producer.produce(b, value=b"b%d" % i, partition=i % 2)
    metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    producer.send_offsets_to_transaction([TopicPartition(a, 0, 7), TopicPartition(a, 1, 8)],
                                         metadata.consumer_group_metadata(), TIMEOUT)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(a, value=b"x%d" % i, partition=i % 3)
    producer.send_offsets_to_transaction([TopicPartition(a, 0, 99)], metadata.consumer_group_metadata(), TIMEOUT)
    producer.abort_transaction(TIMEOUT)
    metadata.close()
    producer.begin_transaction()
    producer.produce(b, value=b"last", partition=0)
    producer.commit_transaction(TIMEOUT)

    assert sorted(read_committed(bootstrap, a, 3, expected=30)) == sorted(b"a%d" % i for i in range(30))
    assert sorted(read_committed(bootstrap, b, 2, expected=31)) == sorted(
        [b"b%d" % i for i in range(30)] + [b"last"])
    assert committed_offsets(bootstrap, group, a, 3) == [7, 8, -1001]


def test_zombie_is_fenced(bootstrap):
    topic = create_topic(bootstrap, unique_name("tz"), 1)
    transactional_id = unique_name("tx")
    zombie = txn_producer(bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(TIMEOUT)
    successor = txn_producer(bootstrap, transactional_id)  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(TIMEOUT)
    with pytest.raises(KafkaException) as info:
        zombie.produce(topic, value=b"late")
        zombie.commit_transaction(TIMEOUT)
    assert info.value.args[0].fatal() or info.value.args[0].txn_requires_abort()
    assert read_committed(bootstrap, topic, 1, expected=1) == [b"successor"]


def test_aiokafka_transactional_producer(bootstrap):
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = create_topic(bootstrap, unique_name("tk"), 2)
    group = unique_name("g")

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("ai"))
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send(topic, b"c%d" % i, partition=i % 2)
                await producer.send_offsets_to_transaction({AioTopicPartition(topic, 1): 4}, group)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send(topic, b"aborted", partition=0)
                    raise RuntimeError("abort")
        finally:
            await producer.stop()

    asyncio.run(run())
    assert sorted(read_committed(bootstrap, topic, 2, expected=10)) == sorted(b"c%d" % i for i in range(10))
    assert committed_offsets(bootstrap, group, topic, 2) == [-1001, 4]


def test_transaction_timeout_over_the_maximum_is_refused(bootstrap):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("tx"),
                         "transaction.timeout.ms": 900_001})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(TIMEOUT)
    assert "timeout" in str(info.value).lower()


def test_describe_list_transactions_and_producers(bootstrap, wire):
    """DescribeTransactions, ListTransactions and DescribeProducers show an open
    transaction (state, partitions, producer) and its end."""
    from tests.kafka.test_admin_apis import _nested_request, request

    topic = create_topic(bootstrap, unique_name("td"), 2)
    transactional_id = unique_name("tx")
    producer = txn_producer(bootstrap, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, value=b"v", partition=1)
    producer.flush(TIMEOUT)
    conn = wire()
    (state,) = conn.call(request(65, 0, transactional_ids=(transactional_id,))).transaction_states
    assert (state.error_code, state.transaction_state) == (0, "Ongoing")
    assert [(t.topic, tuple(t.partitions)) for t in state.topics] == [(topic, (1,))]
    listed = conn.call(request(66, 1, state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1))
    assert transactional_id in [t.transactional_id for t in listed.transaction_states]
    producers = conn.call(request(61, 0, topics=(
        _nested_request(61, 0, "topics", name=topic, partition_indexes=(1,)),)))
    (active,) = producers.topics[0].partitions[0].active_producers
    assert (active.producer_id, active.current_txn_start_offset) == (state.producer_id, 0)
    producer.commit_transaction(TIMEOUT)
    (state,) = conn.call(request(65, 0, transactional_ids=(transactional_id,))).transaction_states
    assert state.transaction_state == "CompleteCommit"
    # An unknown id: start time -1 as Kafka answers it (which kio's reader refuses): read the bytes.
    conn.send(request(65, 0, transactional_ids=("unknown-id",)))
    conn.pending.clear()
    frame = conn.recv_raw()  # flexible: correlation id, header tags, throttle, compact count, the state
    assert struct.unpack_from(">bh", frame, 9) == (2, 105)  # one state, TRANSACTIONAL_ID_NOT_FOUND
    # start time -1, producer id -1, epoch -1, no topics, no tags (state, response)
    assert frame.endswith(struct.pack(">qqh", -1, -1, -1) + bytes([1, 0, 0]))


# ---- restarts and the crash matrix ------------------------------------------------------------

def _broker(tmp_path, env=None) -> BrokerProcess:
    return BrokerProcess(tmp_path / "data", "--set", "auto.create.topics.enable=true",
                         "--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=500", env=env)


@pytest.mark.parametrize("step", ["after-add-partitions", "before-prepare", "after-prepare", "after-first-marker",
                                  "before-complete"])
def test_crash_at_each_step_leaves_transactions_whole(tmp_path, step):
    """kill -9 at `step` of a commit of six records over three partitions; after a
    restart the transaction is whole: committed everywhere once PrepareCommit is in
    `__transaction_state`, aborted everywhere before; the same transactional id
    then goes on. (A crash at the first AddPartitionsToTxn comes before any
    record is written.)"""
    broker = _broker(tmp_path, env={"STRATA_TEST_CRASH_AT": f"txn:{step}"}).start()
    try:
        topic = create_topic(broker.bootstrap, "crash", 3)
        producer = txn_producer(broker.bootstrap, "crash-tx", **{"message.timeout.ms": 5000})
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, value=b"first%d" % i, partition=i % 3)
        try:
            producer.commit_transaction(5)
        except KafkaException:
            pass
        else:  # EndTxn answers once PrepareCommit is written: the later steps may come after the answer
            assert step in ("after-first-marker", "before-complete")
        assert broker.proc.wait(TIMEOUT) == -signal.SIGKILL  # the fault point killed it
        del producer
        broker.env = None
        broker.restart()
        written = [] if step == "after-add-partitions" else [b"first%d" % i for i in range(6)]
        expected = written if step in ("after-prepare", "after-first-marker", "before-complete") else []
        successor = txn_producer(broker.bootstrap, "crash-tx")  # aborts a transaction left Ongoing
        successor.begin_transaction()
        for i in range(3):
            successor.produce(topic, value=b"next%d" % i, partition=i)
        successor.commit_transaction(TIMEOUT)
        got = read_committed(broker.bootstrap, topic, 3, expected=len(expected) + 3)
        assert sorted(got) == sorted(expected + [b"next%d" % i for i in range(3)])
        uncommitted = read_uncommitted_count(broker.bootstrap, topic, 3, expected=len(written) + 3)
        assert uncommitted == len(written) + 3  # no record lost or written twice, aborted ones included
    finally:
        broker.close()


def read_uncommitted_count(bootstrap: str, topic: str, partitions: int, *, expected: int,
                           idle: float = 1.5) -> int:
    """How many records a read_uncommitted consumer gets from the topic: it reads until it
    has `expected` and then for `idle` seconds without more, so that a record written twice
    still shows (a slow first fetch on a loaded machine does not end the count early)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("ru"),
                         "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = 0
    deadline = time.monotonic() + TIMEOUT
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(500, 0.3)
            count += sum(1 for m in batch if m.error() is None)
            if batch:
                quiet_since = time.monotonic()
            elif count >= expected and time.monotonic() - quiet_since > idle:
                break
    finally:
        consumer.close()
    return count


def test_ongoing_transaction_times_out_after_restart(tmp_path):
    """A transaction left Ongoing by a crash is aborted by the broker once its
    timeout passes, without any client: read_committed then moves past it."""
    broker = _broker(tmp_path, env={"STRATA_TEST_CRASH_AT": "txn:after-prepare"}).start()
    try:
        topic = create_topic(broker.bootstrap, "timeout", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "slow",
                             "transaction.timeout.ms": 2000})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce(topic, value=b"never")
        producer.flush(TIMEOUT)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce(topic, value=b"plain")
        plain.flush(TIMEOUT)
        broker.kill()
        del producer
        broker.env = None
        broker.restart()
        assert read_committed(broker.bootstrap, topic, 1, expected=1) == [b"plain"]
        events = [e for e in broker.log_events() if e.get("event") == "transaction_aborted_by_coordinator"]
        assert events and events[-1]["transactional_id"] == "slow"
    finally:
        broker.close()


def _transform_batches(bootstrap: str, source: str, sink: str, group: str, *, batches: int,
                       stop_half_way: bool = False) -> int:
    """Consume-transform-produce: read `source` (read_committed, from the group's
    committed offsets), write each value upper-cased to `sink` and the consumed
    offsets, in one transaction per batch of up to 20 records. With
    `stop_half_way`, the last batch is left open after half its records (the
    caller then kills the broker). Returns how many records were committed."""
    producer = txn_producer(bootstrap, "eos-loop", **{"message.timeout.ms": 5000})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    starts = consumer.committed([TopicPartition(source, p) for p in range(2)], TIMEOUT)
    consumer.assign([TopicPartition(source, tp.partition, max(tp.offset, 0)) for tp in starts])
    done = 0
    for number in range(batches):
        records = []
        deadline = time.monotonic() + 5
        while len(records) < 20 and time.monotonic() < deadline:
            records += [m for m in consumer.consume(20 - len(records), 0.3) if m.error() is None]
        if not records:
            break
        producer.begin_transaction()
        last = number == batches - 1 and stop_half_way
        for message in records[:len(records) // 2] if last else records:
            producer.produce(sink, value=message.value().upper(), partition=message.partition())
        if last:
            producer.flush(TIMEOUT)
            return done
        positions = {}
        for message in records:
            positions[message.partition()] = message.offset() + 1
        producer.send_offsets_to_transaction([TopicPartition(source, p, o) for p, o in positions.items()],
                                             consumer.consumer_group_metadata(), TIMEOUT)
        producer.commit_transaction(TIMEOUT)
        done += len(records)
    consumer.close()
    return done


def test_exactly_once_loop_survives_kill_and_restart(tmp_path):
    broker = _broker(tmp_path).start()
    try:
        source = create_topic(broker.bootstrap, "source", 2)
        sink = create_topic(broker.bootstrap, "sink", 2)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        values = [b"v%03d" % i for i in range(200)]
        for i, value in enumerate(values):
            plain.produce(source, value=value, partition=i % 2)
        plain.flush(TIMEOUT)
        _transform_batches(broker.bootstrap, source, sink, "eos", batches=4, stop_half_way=True)
        broker.kill()  # mid-transaction: half a batch written, no offsets, no commit
        broker.restart()
        _transform_batches(broker.bootstrap, source, sink, "eos", batches=100)
        got = read_committed(broker.bootstrap, sink, 2, expected=len(values))
        assert sorted(got) == sorted(v.upper() for v in values)  # each exactly once
        assert sum(committed_offsets(broker.bootstrap, "eos", source, 2)) == len(values)
    finally:
        broker.close()


def test_idle_transactional_id_expires(tmp_path):
    """transactional.id.expiration.ms: an id without a transaction for that long is
    forgotten (tombstoned), also after a restart; the next InitProducerId starts anew."""
    from tests.kafka.test_admin_apis import request
    from tests.kafka.wire import KafkaWire

    broker = BrokerProcess(tmp_path / "data", "--set", "transactional.id.expiration.ms=500",
                           "--set", "transaction.remove.expired.transaction.cleanup.interval.ms=200").start()
    try:
        def listed() -> list[str]:
            with KafkaWire(*broker.kafka_address) as conn:
                answer = conn.call(request(66, 0, state_filters=(), producer_id_filters=()))
                return [t.transactional_id for t in answer.transaction_states]

        with KafkaWire(*broker.kafka_address) as conn:
            first = conn.call(request(22, 4, transactional_id="short-lived", transaction_timeout=60_000))
        assert listed() == ["short-lived"]
        deadline = time.monotonic() + TIMEOUT
        while listed() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert listed() == []
        broker.restart()
        assert listed() == []
        with KafkaWire(*broker.kafka_address) as conn:
            again = conn.call(request(22, 4, transactional_id="short-lived", transaction_timeout=60_000))
        assert again.producer_epoch == 0 and again.producer_id != first.producer_id
    finally:
        broker.close()


def test_transactional_write_outside_the_transaction_is_refused(bootstrap, wire):
    """KIP-890's verification: a transactional batch that would open its producer's
    transaction on a partition the coordinator did not add is refused
    (INVALID_TXN_STATE), so no hanging transaction holds the last stable offset;
    a stale epoch gets INVALID_PRODUCER_EPOCH."""
    from kio.schema.errors import ErrorCode

    from kafka_format import build_batch
    from tests.kafka.test_admin_apis import request
    from tests.kafka.test_wire import produce_request

    topic = create_topic(bootstrap, unique_name("tv"), 2)
    conn = wire()
    init = conn.call(request(22, 4, transactional_id="verify-tx", transaction_timeout=60_000))
    pid, epoch = init.producer_id, init.producer_epoch

    def produce(partition: int, producer_epoch: int, sequence: int):
        batch = build_batch([(None, b"v")], producer_id=pid, producer_epoch=producer_epoch,
                            base_sequence=sequence, is_transactional=True)
        req = produce_request(9, topic, partition, batch)
        req = dataclasses.replace(req, transactional_id="verify-tx")
        (part,) = conn.call(req).responses[0].partition_responses
        return part.error_code

    assert produce(0, epoch, 0) == ErrorCode.invalid_txn_state  # no AddPartitionsToTxn yet
    add = request(24, 3, v3_and_below_transactional_id="verify-tx", v3_and_below_producer_id=pid,
                  v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                      _add_topic(topic, (0,)),))
    assert conn.call(add).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce(0, epoch, 0) == ErrorCode.none
    assert produce(1, epoch, 0) == ErrorCode.invalid_txn_state  # partition 1 was not added
    fenced = conn.call(request(22, 4, transactional_id="verify-tx", transaction_timeout=60_000))
    assert fenced.producer_epoch > epoch
    assert produce(1, epoch, 0) == ErrorCode.invalid_producer_epoch


def _add_topic(name: str, partitions: tuple[int, ...]):
    from kio.index import load_request_schema

    from broker.kafka.codec import make, nested
    return make(nested(load_request_schema(24, 3), "v3_and_below_topics"), name=name, partitions=partitions)


def test_add_partitions_batch_form_adds_and_verifies(bootstrap, wire):
    """AddPartitionsToTxn v4/v5 (the brokers' batch form, KIP-890): several ids in one
    request, each added or, with VerifyOnly, checked against its transaction:
    NONE when in it, TRANSACTION_ABORTABLE (v4: INVALID_TXN_STATE) when not, the
    id's error for a stale epoch or an unknown id."""
    from kio.index import load_request_schema

    from broker.kafka.codec import make, nested
    from tests.kafka.test_admin_apis import request

    topic = create_topic(bootstrap, unique_name("batch"), 2)
    conn = wire()
    versions = {k.api_key: k for k in conn.call(request(18, 3)).api_keys}
    assert (versions[24].min_version, versions[24].max_version) == (0, 5)
    assert versions[26].max_version == 4  # EndTxn v5 belongs to transaction version 2, not finalized
    ids = {}
    for name in ("batch-a", "batch-b"):
        init = conn.call(request(22, 4, transactional_id=name, transaction_timeout=60_000))
        ids[name] = (init.producer_id, init.producer_epoch)

    def call(version: int, *txns):
        Txn = nested(load_request_schema(24, version), "transactions")
        Topic = nested(Txn, "topics")
        req = request(24, version, transactions=tuple(
            make(Txn, transactional_id=t, producer_id=pid, producer_epoch=epoch, verify_only=verify,
                 topics=(make(Topic, name=topic, partitions=parts),)) for t, pid, epoch, verify, parts in txns))
        response = conn.call(req)
        assert response.error_code == 0
        return {r.transactional_id: {p.partition_index: p.partition_error_code
                                     for t in r.topic_results for p in t.results_by_partition}
                for r in response.results_by_transaction}

    (pid_a, epoch_a), (pid_b, epoch_b) = ids["batch-a"], ids["batch-b"]
    assert call(5, ("batch-a", pid_a, epoch_a, False, (0,)), ("batch-b", pid_b, epoch_b, False, (1,))) == {
        "batch-a": {0: 0}, "batch-b": {1: 0}}
    assert call(5, ("batch-a", pid_a, epoch_a, True, (0, 1)), ("batch-b", pid_b, epoch_b + 1, True, (1,)),
                ("batch-none", 99, 0, True, (0,))) == {
        "batch-a": {0: 0, 1: 120}, "batch-b": {1: 90}, "batch-none": {0: 49}}
    assert call(4, ("batch-a", pid_a, epoch_a, True, (1,))) == {"batch-a": {1: 48}}
    end = conn.call(request(26, 3, transactional_id="batch-a", producer_id=pid_a, producer_epoch=epoch_a,
                            committed=True))
    assert end.error_code == 0
    assert call(5, ("batch-a", pid_a, epoch_a, True, (0,))) == {"batch-a": {0: 120}}  # committed: no longer in it


def test_deleting_a_topic_of_an_open_transaction(bootstrap):
    """A topic deleted while a transaction holds it, as Kafka: its markers are
    skipped, the transaction commits on the other partitions, the coordinator
    forgets the deleted partitions, and the producer goes on."""
    from confluent_kafka.admin import AdminClient

    kept = create_topic(bootstrap, unique_name("kept"), 2)
    doomed = create_topic(bootstrap, unique_name("doomed"), 1)
    producer = txn_producer(bootstrap, unique_name("deltx"))
    producer.begin_transaction()
    for i in range(4):
        producer.produce(kept, value=b"kept%d" % i, partition=i % 2)
    producer.produce(doomed, value=b"doomed", partition=0)
    assert producer.flush(TIMEOUT) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([doomed], operation_timeout=10)[doomed].result(30)
    producer.commit_transaction(TIMEOUT)
    assert sorted(read_committed(bootstrap, kept, 2, expected=4)) == [b"kept%d" % i for i in range(4)]
    producer.begin_transaction()  # the next transaction, without the deleted topic
    producer.produce(kept, value=b"after", partition=0)
    producer.commit_transaction(TIMEOUT)
    assert sorted(read_committed(bootstrap, kept, 2, expected=5)) == sorted(
        [b"kept%d" % i for i in range(4)] + [b"after"])
