"""Fetch sessions with real clients. kafka-python keeps an incremental fetch
session per broker (enable_incremental_fetch_sessions, on by default);
librdkafka (confluent-kafka) sends sessionless fetches (session id 0, epoch -1)
and is answered whole, as before."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.kafka.conftest import unique_name


def produce(bootstrap: str, records: list[tuple[str, int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, partition, value in records:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0


def consume_until(consumer, wanted: int, timeout: float = 30.0) -> set[tuple[str, int, bytes]]:
    got: set[tuple[str, int, bytes]] = set()
    deadline = time.monotonic() + timeout
    while len(got) < wanted and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.update((r.topic, r.partition, r.value) for r in records)
    return got


def test_kafka_python_consumes_many_partitions_through_a_session(bootstrap, new_topic):
    from kafka import KafkaConsumer

    wide, narrow = new_topic(partitions=60), new_topic(partitions=4)
    produce(bootstrap, [(t, p, b"first") for t, n in ((wide, 60), (narrow, 4)) for p in range(n)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=unique_name("g"), auto_offset_reset="earliest",
                             enable_auto_commit=False, metadata_max_age_ms=500, fetch_max_wait_ms=200,
                             enable_incremental_fetch_sessions=True)
    try:
        consumer.subscribe([wide, narrow])
        assert len(consume_until(consumer, 64)) == 64
        # new data on a few partitions arrives, and only that
        produce(bootstrap, [(wide, 7, b"a"), (wide, 42, b"b"), (narrow, 3, b"c")])
        assert consume_until(consumer, 3) == {(wide, 7, b"a"), (wide, 42, b"b"), (narrow, 3, b"c")}
        handlers = consumer._fetcher._session_handlers  # noqa: SLF001 - the client's session state
        (handler,) = handlers.values()
        assert handler.next_metadata.session_id != 0 and handler.next_metadata.epoch >= 2
        # partitions added while subscribed are picked up (a rebalance adds them to the session)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(narrow, 6)])[narrow].result(30)
        time.sleep(1.5)  # metadata refresh (metadata_max_age_ms) and rebalance
        consume_until(consumer, 1, timeout=3)
        produce(bootstrap, [(narrow, 4, b"d"), (narrow, 5, b"e")])
        assert consume_until(consumer, 2) == {(narrow, 4, b"d"), (narrow, 5, b"e")}
        # a topic deleted under the session: the rest keeps flowing
        admin.delete_topics([narrow], operation_timeout=10)[narrow].result(30)
        time.sleep(1.0)
        produce(bootstrap, [(wide, 0, b"f")])
        assert (wide, 0, b"f") in consume_until(consumer, 1)
        assert handler.next_metadata.session_id != 0
    finally:
        consumer.close()


def test_confluent_consumer_of_many_partitions_is_answered_sessionless(bootstrap, new_topic):
    from confluent_kafka import Consumer

    topic = new_topic(partitions=60)
    produce(bootstrap, [(topic, p, b"first") for p in range(60)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.subscribe([topic])
        got: set[tuple[int, bytes]] = set()

        def read(wanted: int) -> None:
            deadline = time.monotonic() + 30
            while len(got) < wanted and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and not message.error():
                    got.add((message.partition(), message.value()))

        read(60)
        assert len(got) == 60
        produce(bootstrap, [(topic, 5, b"a"), (topic, 50, b"b")])
        read(62)
        assert {(5, b"a"), (50, b"b")} <= got
    finally:
        consumer.close()
