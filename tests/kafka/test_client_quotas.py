"""Client quotas (DescribeClientQuotas 48 / AlterClientQuotas 49) and their
enforcement by throttling, as Kafka's ClientQuotaManager: a client over its byte
rate gets `throttle_time_ms` in its Produce/Fetch answer and its connection is
muted for that time after the answer (KIP-219); a native connection, whose
layouts have no throttle field, is muted alike. The assertions look at the
answers and at the broker's counters, never at how long anything took."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from broker.kafka.codec import make, nested
from kafka_format import build_batch
from protocol import CreateTopicRequest, ProduceRequest
from tests.broker.wire import NativeClient
from tests.broker_process import BrokerProcess
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.test_wire import fetch_request, produce_request
from tests.kafka.wire import KafkaWire

KIB = 1024
CHUNK = 128 * KIB
TIMEOUT = 30


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("quota-broker"), "--set", "auto.create.topics.enable=true")
    try:
        yield process.start()
    finally:
        process.close()


def alter_request(entries: list[tuple[dict, dict]], validate_only: bool = False, version: int = 1):
    """entries: ({entity type: name or None}, {key: value or None to remove})."""
    cls = load_request_schema(49, version)
    E = nested(cls, "entries")
    Ent, Op = nested(E, "entity"), nested(E, "ops")
    return make(cls, validate_only=validate_only, entries=tuple(
        make(E, entity=tuple(make(Ent, entity_type=t, entity_name=n) for t, n in entity.items()),
             ops=tuple(make(Op, key=k, value=0.0 if v is None else float(v), remove=v is None)
                       for k, v in ops.items()))
        for entity, ops in entries))


def describe_request(components: list[tuple[str, int, str | None]], strict: bool = False, version: int = 1):
    cls = load_request_schema(48, version)
    C = nested(cls, "components")
    return make(cls, strict=strict, components=tuple(make(C, entity_type=t, match_type=m, match=n)
                                                      for t, m, n in components))


def described(response) -> dict:
    assert response.error_code == 0, response.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in response.entries}


def alter(broker, entries, **kwargs) -> list[tuple[int, str | None]]:
    with KafkaWire(*broker.kafka_address) as conn:
        response = conn.call(alter_request(entries, **kwargs))
    return [(e.error_code, e.error_message) for e in response.entries]


def metric(broker, name: str, **labels: str) -> float:
    with urllib.request.urlopen(broker.admin_url("/metrics"), timeout=TIMEOUT) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.partition(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def eventually_at_least(broker, value: float, name: str, **labels: str) -> float:
    """The counter once it reaches `value` (the mute follows the reply on the broker's
    loop; this waits for that, bounded against hangs only)."""
    deadline = time.monotonic() + TIMEOUT
    while (got := metric(broker, name, **labels)) < value and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def test_alter_and_describe_round_trip_with_defaults_and_specific_entities(quota_broker):
    entries = [
        ({"client-id": None}, {"producer_byte_rate": 1000}),
        ({"client-id": "c1"}, {"consumer_byte_rate": 2000, "producer_byte_rate": 3000}),
        ({"user": "alice", "client-id": "c1"}, {"request_percentage": 50}),
        ({"user": None}, {"consumer_byte_rate": 4000}),
        ({"ip": None}, {"connection_creation_rate": 10}),
    ]
    assert alter(quota_broker, entries) == [(0, None)] * len(entries)
    with KafkaWire(*quota_broker.kafka_address) as conn:
        everything = described(conn.call(describe_request([])))
        assert everything == {
            (("client-id", None),): {"producer_byte_rate": 1000.0},
            (("client-id", "c1"),): {"consumer_byte_rate": 2000.0, "producer_byte_rate": 3000.0},
            (("client-id", "c1"), ("user", "alice")): {"request_percentage": 50.0},
            (("user", None),): {"consumer_byte_rate": 4000.0},
            (("ip", None),): {"connection_creation_rate": 10.0},
        }
        assert set(described(conn.call(describe_request([("client-id", 1, None)], strict=True)))) == \
            {(("client-id", None),)}
        assert set(described(conn.call(describe_request([("client-id", 0, "c1")])))) == \
            {(("client-id", "c1"),), (("client-id", "c1"), ("user", "alice"))}
        assert set(described(conn.call(describe_request([("client-id", 2, None)], strict=True)))) == \
            {(("client-id", "c1"),)}
        assert set(described(conn.call(describe_request([("user", 0, "alice"), ("client-id", 2, None)])))) == \
            {(("client-id", "c1"), ("user", "alice"))}
        bad = conn.call(describe_request([("group", 0, "g")]))
        assert bad.error_code == ErrorCode.invalid_request and "group" in bad.error_message

    # Remove keys: an entity left with none is gone; validate_only changes nothing.
    assert alter(quota_broker, [({"client-id": "c1"}, {"producer_byte_rate": None})]) == [(0, None)]
    assert alter(quota_broker, [({"user": "alice", "client-id": "c1"}, {"request_percentage": None})]) == [(0, None)]
    assert alter(quota_broker, [({"client-id": "c9"}, {"producer_byte_rate": 5})], validate_only=True) == [(0, None)]
    with KafkaWire(*quota_broker.kafka_address) as conn:
        now = described(conn.call(describe_request([("client-id", 0, "c1")])))
        assert now == {(("client-id", "c1"),): {"consumer_byte_rate": 2000.0}}
        assert described(conn.call(describe_request([("client-id", 0, "c9")]))) == {}

    # Bad entries are refused one by one with the reason; the good one applies.
    answers = alter(quota_broker, [
        ({"client-id": "c2"}, {"producer_byte_rate": 100}),
        ({"client-id": "c3"}, {"no_such_quota": 1}),
        ({"ip": "10.0.0.1", "user": "bob"}, {"connection_creation_rate": 1}),
        ({"client-id": "c4"}, {"producer_byte_rate": -5}),
        ({"client-id": "c5"}, {"producer_byte_rate": 1.5}),
        ({"ip": None}, {"producer_byte_rate": 1}),
    ])
    assert answers[0] == (0, None)
    assert [code for code, _ in answers[1:]] == [ErrorCode.invalid_request] * 5
    assert "no_such_quota" in answers[1][1] and "IP" in answers[2][1]
    assert all(message for _, message in answers[1:])
    with KafkaWire(*quota_broker.kafka_address) as conn:
        assert set(described(conn.call(describe_request([("client-id", 2, None)], strict=True)))) == \
            {(("client-id", "c1"),), (("client-id", "c2"),)}
    # Leave only what the throttling tests set themselves.
    alter(quota_broker, [({"client-id": None}, {"producer_byte_rate": None}),
                         ({"user": None}, {"consumer_byte_rate": None})])


def test_quotas_survive_a_restart(broker):
    process = broker()
    assert alter(process, [({"client-id": "kept"}, {"producer_byte_rate": 4096}),
                           ({"user": "carol", "client-id": None}, {"consumer_byte_rate": 8192})]) == [(0, None)] * 2
    process.restart()
    with KafkaWire(*process.kafka_address) as conn:
        assert described(conn.call(describe_request([]))) == {
            (("client-id", "kept"),): {"producer_byte_rate": 4096.0},
            (("client-id", None), ("user", "carol")): {"consumer_byte_rate": 8192.0},
        }


def test_kafka_produce_over_its_byte_rate_is_throttled_and_muted(quota_broker):
    """100 KiB/s over Kafka's 10 s minimum window: the eighth 128 KiB request brings
    the rate to 1 MiB / 10 s, over the quota; the seven before are under it."""
    client = unique_name("slow-producer-")
    assert alter(quota_broker, [({"client-id": client}, {"producer_byte_rate": 100 * KIB})]) == [(0, None)]
    topic = create_topic(quota_broker.bootstrap, unique_name("quota"))
    mutes = metric(quota_broker, "kafka_network_socketserver_throttle_mutes_total", protocol="kafka")
    throttled = metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="produce")
    record = b"x" * (CHUNK - 200)
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        throttles = []
        for _ in range(8):
            response = conn.call(produce_request(9, topic, 0, build_batch([(None, record)])))
            assert response.responses[0].partition_responses[0].error_code == 0
            throttles.append(int(response.throttle_time.total_seconds() * 1000))
    assert throttles[:7] == [0] * 7 and throttles[7] > 0
    assert eventually_at_least(quota_broker, mutes + 1, "kafka_network_socketserver_throttle_mutes_total",
                               protocol="kafka") >= mutes + 1
    assert metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="produce") == throttled + 1
    # Another client id has no quota: never throttled.
    with KafkaWire(*quota_broker.kafka_address, client_id="unlimited") as conn:
        response = conn.call(produce_request(9, topic, 0, build_batch([(None, record)] * 8)))
        assert response.throttle_time.total_seconds() == 0


def test_confluent_producer_reports_the_broker_throttle(quota_broker):
    from confluent_kafka import Producer

    client = unique_name("slow-confluent-")
    assert alter(quota_broker, [({"client-id": client}, {"producer_byte_rate": 100 * KIB})]) == [(0, None)]
    topic = create_topic(quota_broker.bootstrap, unique_name("quota"))
    events = []
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "client.id": client,
                         "linger.ms": 5, "throttle_cb": lambda event: events.append(event.throttle_time)})
    for _ in range(12):
        producer.produce(topic, value=b"y" * (100 * KIB), partition=0)
    assert producer.flush(TIMEOUT) == 0
    producer.poll(0)
    assert any(t > 0 for t in events), events


def test_a_fetch_over_the_consumer_byte_rate_is_answered_empty_with_a_throttle(quota_broker):
    """KIP-219: the fetch that would take the rate over the quota answers no
    partitions, only `throttle_time_ms`; its bytes do not count, so the same offset
    is answered once the throttle time has passed and nothing is lost."""
    client = unique_name("slow-reader-")
    topic = create_topic(quota_broker.bootstrap, unique_name("quota"))
    record = b"z" * (CHUNK - 200)
    with KafkaWire(*quota_broker.kafka_address) as conn:
        for _ in range(10):
            conn.call(produce_request(9, topic, 0, build_batch([(None, record)])))
    assert alter(quota_broker, [({"client-id": client}, {"consumer_byte_rate": 100 * KIB})]) == [(0, None)]
    throttled = metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="fetch")
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        offset, answers = 0, []
        while offset < 10 and len(answers) < 1000:
            response = conn.call(fetch_request(12, [(topic, 0, offset, CHUNK)]))
            throttle = int(response.throttle_time.total_seconds() * 1000)
            answers.append(throttle)
            if throttle:
                assert response.error_code == 0 and response.responses == () and response.session_id == 0
                continue
            assert len(response.responses[0].partitions[0].records) > CHUNK // 2
            offset += 1
    assert offset == 10, answers
    assert answers[:7] == [0] * 7 and answers[7] > 0, answers
    assert metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="fetch") >= throttled + 1


def test_a_throttled_incremental_fetch_keeps_its_session(quota_broker):
    """An incremental fetch (KIP-227) over the quota answers its session id, no
    partitions and the throttle; the session goes on at the next epoch and reads the
    same offset again (Kafka's IncrementalFetchContext.getThrottledResponse)."""
    client = unique_name("session-reader-")
    topic = create_topic(quota_broker.bootstrap, unique_name("quota"))
    record = b"s" * (CHUNK - 200)
    with KafkaWire(*quota_broker.kafka_address) as conn:
        for _ in range(10):
            conn.call(produce_request(9, topic, 0, build_batch([(None, record)])))
    assert alter(quota_broker, [({"client-id": client}, {"consumer_byte_rate": 100 * KIB})]) == [(0, None)]
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        full = conn.call(fetch_request(12, [(topic, 0, 0, CHUNK)], session_id=0, session_epoch=0))
        session = full.session_id
        assert session != 0 and full.throttle_time.total_seconds() == 0
        offset, epoch, throttled = 1, 1, 0
        while offset < 10 and epoch < 1000:
            response = conn.call(fetch_request(12, [(topic, 0, offset, CHUNK)], session_id=session,
                                               session_epoch=epoch))
            epoch += 1
            assert response.error_code == 0 and response.session_id == session
            if response.throttle_time.total_seconds() > 0:
                assert response.responses == ()
                throttled += 1
                continue
            (part,) = response.responses[0].partitions
            assert len(part.records) > CHUNK // 2
            offset += 1
    assert offset == 10 and throttled >= 1


def test_confluent_consumer_observes_the_fetch_throttle_and_gets_every_record(quota_broker):
    from confluent_kafka import Consumer

    client = unique_name("slow-consumer-")
    topic = create_topic(quota_broker.bootstrap, unique_name("quota"))
    record = b"c" * (CHUNK - 200)
    with KafkaWire(*quota_broker.kafka_address) as conn:
        for _ in range(12):
            conn.call(produce_request(9, topic, 0, build_batch([(None, record)])))
    assert alter(quota_broker, [({"client-id": client}, {"consumer_byte_rate": 100 * KIB})]) == [(0, None)]
    events = []
    consumer = Consumer({"bootstrap.servers": quota_broker.bootstrap, "client.id": client,
                         "group.id": unique_name("g"), "auto.offset.reset": "earliest",
                         "throttle_cb": lambda event: events.append(event.throttle_time)})
    try:
        consumer.subscribe([topic])
        got, deadline = 0, time.monotonic() + TIMEOUT
        while got < 12 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert len(message.value()) == len(record)
                got += 1
        consumer.poll(0.1)
    finally:
        consumer.close()
    assert got == 12
    assert any(t > 0 for t in events), events


def test_native_producer_is_throttled_by_delayed_reads(quota_broker):
    """The native layouts have no throttle field: a native connection over its quota
    (client id from its HANDSHAKE) is muted after the answer instead."""
    client = unique_name("native-slow-")
    assert alter(quota_broker, [({"client-id": client}, {"producer_byte_rate": 100 * KIB})]) == [(0, None)]
    mutes = metric(quota_broker, "kafka_network_socketserver_throttle_mutes_total", protocol="native")
    throttled = metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="produce")
    record = b"n" * (CHUNK - 300)
    with NativeClient(*quota_broker.address) as conn:
        conn.handshake(2, client_id=client)
        topic = unique_name("quota")
        assert conn.call(CreateTopicRequest(topic, 1)).error == 0
        for _ in range(9):
            assert conn.call(ProduceRequest(topic, 0, build_batch([(None, record)]))).error == 0
    assert eventually_at_least(quota_broker, mutes + 1, "kafka_network_socketserver_throttle_mutes_total",
                               protocol="native") >= mutes + 1
    assert metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="produce") >= throttled + 1


def metadata_request(version: int = 12):
    cls = load_request_schema(3, version)
    return make(cls, topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False)


def test_request_percentage_throttles_every_kind_of_request(quota_broker):
    """request_percentage 0.01 (0.01% of one thread: 1 ms of handler time per 10 s
    window): some request soon goes over it, whatever its kind, and gets
    `throttle_time_ms` (Kafka's ClientRequestQuotaManager, at most one sample long);
    Produce then answers the request-time throttle without any byte-rate quota."""
    client = unique_name("busy-")
    topic = create_topic(quota_broker.bootstrap, unique_name("quota"))
    assert alter(quota_broker, [({"client-id": client}, {"request_percentage": 0.01})]) == [(0, None)]
    throttled = metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="request")
    try:
        with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
            throttles = []
            while not any(throttles) and len(throttles) < 2000:
                throttles.append(int(conn.call(metadata_request()).throttle_time.total_seconds() * 1000))
            assert 0 < throttles[-1] <= 1000, throttles[-5:]
            response = conn.call(produce_request(9, topic, 0, build_batch([(None, b"tiny")])))
            assert response.responses[0].partition_responses[0].error_code == 0
            assert 0 < response.throttle_time.total_seconds() * 1000 <= 1000
            response = conn.call(fetch_request(12, [(topic, 0, 0, CHUNK)]))
            assert response.throttle_time.total_seconds() > 0 and response.responses == ()
        assert metric(quota_broker, "kafka_server_quota_throttled_requests_total",
                      quota_type="request") >= throttled + 3
        # Another client id is not limited.
        with KafkaWire(*quota_broker.kafka_address, client_id="unlimited") as conn:
            assert all(conn.call(metadata_request()).throttle_time.total_seconds() == 0 for _ in range(20))
    finally:
        alter(quota_broker, [({"client-id": client}, {"request_percentage": None})])


def test_native_requests_over_request_percentage_are_muted(quota_broker):
    from protocol import MetadataRequest

    client = unique_name("native-busy-")
    assert alter(quota_broker, [({"client-id": client}, {"request_percentage": 0.01})]) == [(0, None)]
    throttled = metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="request")
    mutes = metric(quota_broker, "kafka_network_socketserver_throttle_mutes_total", protocol="native")
    try:
        with NativeClient(*quota_broker.address) as conn:
            conn.handshake(2, client_id=client)
            for _ in range(2000):
                assert conn.call(MetadataRequest()).error == 0
                if metric(quota_broker, "kafka_server_quota_throttled_requests_total",
                          quota_type="request") > throttled:
                    break
        assert metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="request") > throttled
        assert eventually_at_least(quota_broker, mutes + 1, "kafka_network_socketserver_throttle_mutes_total",
                                   protocol="native") >= mutes + 1
    finally:
        alter(quota_broker, [({"client-id": client}, {"request_percentage": None})])


def test_a_native_fetch_over_the_consumer_quota_answers_no_records(quota_broker):
    """The native FETCH has no throttle field: over the quota it answers an empty
    message set (the offsets as usual) and the connection is muted; the client
    asks again and gets the same records, none lost."""
    from protocol import FetchRequest

    client = unique_name("native-reader-")
    record = b"f" * (CHUNK - 300)
    with NativeClient(*quota_broker.address) as conn:
        conn.handshake(2, client_id=client)
        topic = unique_name("quota")
        assert conn.call(CreateTopicRequest(topic, 1)).error == 0
        for _ in range(10):
            assert conn.call(ProduceRequest(topic, 0, build_batch([(None, record)]))).error == 0
    assert alter(quota_broker, [({"client-id": client}, {"consumer_byte_rate": 100 * KIB})]) == [(0, None)]
    throttled = metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="fetch")
    with NativeClient(*quota_broker.address) as conn:
        conn.handshake(2, client_id=client)
        offset, empty, asked = 0, 0, 0
        while offset < 10 and asked < 1000:
            asked += 1
            response = conn.call(FetchRequest(topic, 0, offset, CHUNK))
            assert response.error == 0 and response.high_watermark == 10
            if not len(response.message_set):
                empty += 1
                continue
            offset += 1
    assert offset == 10 and empty >= 1
    assert metric(quota_broker, "kafka_server_quota_throttled_requests_total", quota_type="fetch") >= throttled + 1


def test_confluent_producer_reports_a_request_time_throttle(quota_broker):
    """librdkafka reports the throttle of request_percentage (no byte-rate quota set)."""
    from confluent_kafka import Producer

    client = unique_name("busy-confluent-")
    topic = create_topic(quota_broker.bootstrap, unique_name("quota"))
    assert alter(quota_broker, [({"client-id": client}, {"request_percentage": 0.01})]) == [(0, None)]
    events = []
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "client.id": client, "linger.ms": 0,
                         "throttle_cb": lambda event: events.append(event.throttle_time)})
    try:
        for _ in range(500):
            producer.produce(topic, value=b"r", partition=0)
            producer.flush(TIMEOUT)
            if events:
                break
        producer.poll(0)
    finally:
        alter(quota_broker, [({"client-id": client}, {"request_percentage": None})])
    assert any(t > 0 for t in events), events
