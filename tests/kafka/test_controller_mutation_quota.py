"""controller_mutation_rate (KIP-599) as Kafka's ControllerMutationQuotaManager:
CreateTopics, CreatePartitions and DeleteTopics (and the native CREATE_TOPIC /
DELETE_TOPIC) count partitions on a token bucket per user/client-id (burst =
quota × controller.quota.window.num × controller.quota.window.size.seconds, here
0.1 × 11 × 1 = 1.1). A request version that can answer it gets
THROTTLING_QUOTA_EXCEEDED for the topics met with the bucket below zero and the
rest goes ahead; older versions are accepted and only throttled. The quota is
small enough (0.1 partition per second) that the bucket cannot refill during a
test: nothing here depends on how fast the machine is."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema

from broker.kafka.codec import make, nested
from protocol import CreateTopicRequest, DeleteTopicRequest
from tests.broker.wire import NativeClient
from tests.broker_process import BrokerProcess
from tests.cli.test_quotas_cli import ok, strata
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.test_client_quotas import alter, eventually_at_least, metric
from tests.kafka.wire import KafkaWire

THROTTLING_QUOTA_EXCEEDED = 89
RATE = 0.1  # partitions per second: the bucket holds 1.1 and refills 0.1 per second
MUTES = "kafka_network_socketserver_throttle_mutes_total"
THROTTLED = "kafka_server_quota_throttled_requests_total"


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("mutation-quota-broker"),
                            "--set", "auto.create.topics.enable=true")
    try:
        yield process.start()
    finally:
        process.close()


def limited_client(broker, prefix: str) -> str:
    client = unique_name(prefix)
    assert alter(broker, [({"client-id": client}, {"controller_mutation_rate": RATE})]) == [(0, None)]
    return client


def create_topics_request(version: int, topics: list[tuple[str, int]], validate_only: bool = False):
    cls = load_request_schema(19, version)
    T = nested(cls, "topics")
    return make(cls, timeout=30_000, validate_only=validate_only, topics=tuple(
        make(T, name=name, num_partitions=count, replication_factor=-1, assignments=(), configs=())
        for name, count in topics))


def delete_topics_request(version: int, names: list[str]):
    cls = load_request_schema(20, version)
    if version >= 6:
        T = nested(cls, "topics")
        return make(cls, timeout=30_000, topics=tuple(make(T, name=n, topic_id=None) for n in names))
    return make(cls, timeout=30_000, topic_names=tuple(names))


def create_partitions_request(version: int, growth: list[tuple[str, int]]):
    cls = load_request_schema(37, version)
    T = nested(cls, "topics")
    return make(cls, timeout=30_000, validate_only=False,
                topics=tuple(make(T, name=n, count=c, assignments=None) for n, c in growth))


def throttle_ms(response) -> int:
    return int(response.throttle_time.total_seconds() * 1000)


def topic_exists(broker, name: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return name in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics


def test_create_topics_over_the_quota_refuses_the_topics_that_exceed_it(quota_broker):
    """The bucket (1.1) lets 1 partition, then 10 (it may go below zero: Kafka's
    strict quota checks before recording), then refuses the third topic with
    THROTTLING_QUOTA_EXCEEDED and the time the bucket needs to climb back to zero
    (-(1.1 - 11) / 0.1 s = 99 s, less the time since)."""
    client = limited_client(quota_broker, "mutator-")
    a, b, c = (unique_name("mut") for _ in range(3))
    throttled = metric(quota_broker, THROTTLED, quota_type="controller_mutation")
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        response = conn.call(create_topics_request(7, [(a, 1), (b, 10), (c, 1)]))
    codes = {t.name: (t.error_code, t.error_message) for t in response.topics}
    assert codes[a] == (0, None) and codes[b] == (0, None)
    assert codes[c] == (THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
    assert 60_000 < throttle_ms(response) <= 99_000
    assert topic_exists(quota_broker, b) and not topic_exists(quota_broker, c)
    assert metric(quota_broker, THROTTLED, quota_type="controller_mutation") >= throttled + 1
    # The quota is per client: another client id creates freely.
    with KafkaWire(*quota_broker.kafka_address, client_id=unique_name("free-")) as conn:
        response = conn.call(create_topics_request(7, [(c, 1)]))
    assert response.topics[0].error_code == 0 and throttle_ms(response) == 0


def test_failed_and_validate_only_creations(quota_broker):
    """A topic that fails its checks counts nothing; a validate-only one counts its
    partitions, as Kafka's controller counts them."""
    client = limited_client(quota_broker, "validator-")
    existing = create_topic(quota_broker.bootstrap, unique_name("mut"))
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        failed = conn.call(create_topics_request(7, [(existing, 50)]))
        assert failed.topics[0].error_code == 36 and throttle_ms(failed) == 0  # TOPIC_ALREADY_EXISTS
        checked = conn.call(create_topics_request(7, [(unique_name("mut"), 5)], validate_only=True))
        assert checked.topics[0].error_code == 0 and throttle_ms(checked) == 0
        refused = conn.call(create_topics_request(7, [(unique_name("mut"), 1)], validate_only=True))
    assert refused.topics[0].error_code == THROTTLING_QUOTA_EXCEEDED and throttle_ms(refused) > 0


def test_metadata_auto_creation_counts_without_throttling_the_metadata_answer(quota_broker):
    """Kafka's Metadata creates missing topics on the permissive quota: they count,
    and the Metadata answer itself is not throttled for them."""
    client = limited_client(quota_broker, "auto-creator-")
    names = [unique_name("mut") for _ in range(2)]
    cls = load_request_schema(3, 12)
    T = nested(cls, "topics")
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        metadata = conn.call(make(cls, topics=tuple(make(T, topic_id=None, name=n) for n in names),
                                  allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert [t.error_code for t in metadata.topics] == [0, 0] and throttle_ms(metadata) == 0
        refused = conn.call(create_topics_request(7, [(unique_name("mut"), 1)]))
    assert refused.topics[0].error_code == THROTTLING_QUOTA_EXCEEDED


def test_old_create_topics_versions_are_accepted_and_throttled(quota_broker):
    """CreateTopics v5 cannot answer THROTTLING_QUOTA_EXCEEDED: every topic is
    created (Kafka's permissive quota), the answer carries the throttle time and
    the connection is muted after it."""
    client = limited_client(quota_broker, "old-mutator-")
    names = [unique_name("mut") for _ in range(3)]
    mutes = metric(quota_broker, MUTES, protocol="kafka")
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        response = conn.call(create_topics_request(5, [(names[0], 1), (names[1], 10), (names[2], 1)]))
    assert [t.error_code for t in response.topics] == [0, 0, 0]
    assert 60_000 < throttle_ms(response) <= 109_000  # (1.1 - 12) / 0.1 s
    assert all(topic_exists(quota_broker, n) for n in names)
    assert eventually_at_least(quota_broker, mutes + 1, MUTES, protocol="kafka") >= mutes + 1


@pytest.mark.parametrize(("version", "strict"), [(6, True), (4, False)])
def test_delete_topics_counts_the_partitions_deleted(quota_broker, version, strict):
    client = limited_client(quota_broker, "deleter-")
    names = [create_topic(quota_broker.bootstrap, unique_name("mut"), partitions)
             for partitions in (1, 10, 1)]
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        response = conn.call(delete_topics_request(version, names))
    codes = {r.name: r.error_code for r in response.responses}
    assert codes == {names[0]: 0, names[1]: 0, names[2]: THROTTLING_QUOTA_EXCEEDED if strict else 0}
    assert throttle_ms(response) > 60_000
    assert topic_exists(quota_broker, names[2]) == strict


@pytest.mark.parametrize(("version", "strict"), [(3, True), (2, False)])
def test_create_partitions_counts_the_partitions_added(quota_broker, version, strict):
    client = limited_client(quota_broker, "grower-")
    names = [create_topic(quota_broker.bootstrap, unique_name("mut")) for _ in range(3)]
    with KafkaWire(*quota_broker.kafka_address, client_id=client) as conn:
        response = conn.call(create_partitions_request(version, [(names[0], 2), (names[1], 12), (names[2], 2)]))
    codes = {r.name: (r.error_code, r.error_message) for r in response.results}
    assert codes[names[0]] == (0, None) and codes[names[1]] == (0, None)
    assert codes[names[2]] == ((THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
                               if strict else (0, None))
    assert throttle_ms(response) > 60_000


def test_confluent_admin_client_is_throttled(quota_broker):
    """librdkafka (2.x) sends CreateTopics v4 and DeleteTopics v4, below the strict
    versions: its topics are all created and it reports the throttle."""
    from confluent_kafka.admin import AdminClient, NewTopic

    client = limited_client(quota_broker, "confluent-admin-")
    events = []
    admin = AdminClient({"bootstrap.servers": quota_broker.bootstrap, "client.id": client,
                         "throttle_cb": lambda event: events.append(event.throttle_time)})
    names = [unique_name("mut") for _ in range(2)]
    futures = admin.create_topics([NewTopic(names[0], 1), NewTopic(names[1], 10)], operation_timeout=10)
    for name in names:
        futures[name].result(30)
    for _ in range(100):
        admin.poll(0.1)
        if events:
            break
    assert events and events[0] > 60, events  # seconds


def test_strata_quotas_cli_sets_the_rate_that_native_creations_are_held_to(quota_broker):
    """`strata quotas --alter --add-config controller_mutation_rate=...`; the native
    CREATE_TOPIC / DELETE_TOPIC count against it (permissive: always done) and a
    connection over it is muted after the answer (NATIVE.md rule 30)."""
    client = unique_name("native-mutator-")
    kafka = ["--kafka-bootstrap-server", "{}:{}".format(*quota_broker.kafka_address)]
    assert ok(strata("quotas", "--alter", "--entity-type", "clients", "--entity-name", client,
                     "--add-config", f"controller_mutation_rate={RATE}", *kafka)) == \
        f"Completed updating config for client {client}.\n"
    assert f"controller_mutation_rate={RATE}" in ok(strata("quotas", "--describe", "--entity-type", "clients",
                                                            "--entity-name", client, *kafka))
    mutes = metric(quota_broker, MUTES, protocol="native")
    throttled = metric(quota_broker, THROTTLED, quota_type="controller_mutation")
    topic = unique_name("mut")
    with NativeClient(*quota_broker.address) as conn:
        conn.handshake(2, client_id=client)
        assert conn.call(CreateTopicRequest(topic, 12)).error == 0
    assert topic_exists(quota_broker, topic)
    assert eventually_at_least(quota_broker, mutes + 1, MUTES, protocol="native") >= mutes + 1
    assert metric(quota_broker, THROTTLED, quota_type="controller_mutation") >= throttled + 1
    with NativeClient(*quota_broker.address) as conn:
        conn.handshake(2, client_id=client)
        assert conn.call(DeleteTopicRequest(topic)).error == 0
    assert not topic_exists(quota_broker, topic)
    assert eventually_at_least(quota_broker, mutes + 2, MUTES, protocol="native") >= mutes + 2
