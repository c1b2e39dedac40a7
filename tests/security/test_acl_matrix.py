"""The ACL matrix (issue 15): for each request type of both protocols, a principal
holding exactly the ACL Kafka checks gets the answer, and one holding nothing, or
the nearest operation that does not imply it, gets Kafka's authorization error.
Against the real broker process, on its mTLS listeners (User:CN=...,OU=tests);
raw kio requests (tests/kafka/wire.py) and native frames (tests/broker/wire.py)
show each error code where it sits in the response.

Principals: admin (super user) sets the scene; alice holds the ACLs each case
needs; bob holds a near miss (e.g. DESCRIBE where READ is needed) or nothing;
carol holds DESCRIBE and CLUSTER_ACTION on the cluster (and DESCRIBE on one KIP-848
group, to see its topics refused)."""

from __future__ import annotations

import ssl

import pytest

from broker.kafka.codec import make, nested
from protocol import (
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    DescribeConfigRequest,
    FetchItem,
    FetchOffsetRequest,
    FetchRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceItem,
    ProduceRequest,
)
from tests.broker.conftest import batch
from tests.broker.test_acls import acl_broker, allow, create_acls, kconf
from tests.broker.wire import NativeClient
from tests.kafka.wire import KafkaWire
from tests.tls_certs import CertificateAuthority

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AclOperation,
    AdminClient,
    NewTopic,
    ResourceType,
)
from kio.index import load_request_schema  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
ALICE, BOB, CAROL = "User:CN=alice,OU=tests", "User:CN=bob,OU=tests", "User:CN=carol,OU=tests"
T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER, ResourceType.TRANSACTIONAL_ID
CLUSTER = "kafka-cluster"
Op = AclOperation


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    return {"ca_pem": ca.write_pem(d / "ca.pem"), "server_pem": ca.issue("localhost").write_pem(d / "server.pem"),
            **{cn: ca.issue(cn, server=False).write_split(d, cn) for cn in ("admin", "alice", "bob", "carol")}}


def req(api_key: int, version: int, *path: str, **values):
    """A kio request entity (or, with a path of field names, a nested one)."""
    cls = load_request_schema(api_key, version)
    for field in path:
        cls = nested(cls, field)
    return make(cls, **values)


def tls_socket(b, who, protocol):
    host, port = b.addresses[protocol, "MTLS"]
    context = ssl.create_default_context(cafile=str(b.pki["ca_pem"]))
    context.load_cert_chain(*map(str, b.pki[who]))
    return host, port, context


def kafka(b, who) -> KafkaWire:
    host, port, context = tls_socket(b, who, "kafka")
    conn = KafkaWire(host, port)
    conn.sock = context.wrap_socket(conn.sock, server_hostname="localhost")
    return conn


def native(b, who) -> NativeClient:
    host, port, context = tls_socket(b, who, "native")
    conn = NativeClient(host, port)
    conn.sock = context.wrap_socket(conn.sock, server_hostname="localhost")
    return conn


@pytest.fixture(scope="module")
def broker_module(tmp_path_factory):
    """The `broker` factory (tests/conftest.py), for the module: its brokers outlive one test."""
    from tests.broker_process import BrokerProcess

    started = []

    def start(*serve_args, data_dir=None, **options):
        directory = data_dir if data_dir is not None else tmp_path_factory.mktemp("broker")
        started.append(BrokerProcess(directory, *serve_args, **options))
        return started[-1].start()

    yield start
    for process in started:
        process.close()


@pytest.fixture(scope="module")
def matrix(broker_module, pki):
    """One broker with the topics, groups and ACLs every case below uses."""
    b = acl_broker(broker_module, pki)
    b.pki = pki
    admin = AdminClient(kconf(b, "admin"))
    for name in ("t-a", "t-b", "t-cp", "t-del"):
        admin.create_topics([NewTopic(name, 1)])[name].result(10)
    producer = confluent_kafka.Producer(kconf(b, "admin"))
    producer.produce("t-a", b"a")
    producer.produce("t-b", b"b")
    assert producer.flush(10) == 0
    for group in ("g-of", "g-od", "g-dg", "g-dg-bob", "g-hidden"):
        consumer = confluent_kafka.Consumer(kconf(b, "admin", **{"group.id": group}))
        consumer.commit(offsets=[confluent_kafka.TopicPartition("t-a", 0, 1),
                                 confluent_kafka.TopicPartition("t-b", 0, 1)], asynchronous=False)
        consumer.close()
    create_acls(admin, [
        # groups: OffsetFetch DESCRIBE, OffsetDelete DELETE, DeleteGroups DELETE, KIP-848 READ
        allow(ALICE, G, "g-of", Op.DESCRIBE), allow(BOB, G, "g-of", Op.DESCRIBE_CONFIGS),
        allow(ALICE, G, "g-od", Op.DELETE), allow(BOB, G, "g-od", Op.READ),
        allow(ALICE, G, "g-dg", Op.DELETE), allow(BOB, G, "g-dg-bob", Op.READ),
        allow(ALICE, G, "g-848", Op.READ), allow(BOB, G, "g-848", Op.DESCRIBE), allow(CAROL, G, "g-848", Op.DESCRIBE),
        # topics: t-a readable by alice, describable by bob; t-b nothing for either
        allow(ALICE, T, "t-a", Op.READ), allow(BOB, T, "t-a", Op.DESCRIBE),
        allow(ALICE, T, "t-a", Op.WRITE),
        allow(ALICE, T, "t-cp", Op.ALTER), allow(BOB, T, "t-cp", Op.WRITE),
        allow(ALICE, T, "t-del", Op.DELETE), allow(BOB, T, "t-del", Op.ALTER),
        allow(ALICE, T, "t-a", Op.ALTER_CONFIGS), allow(BOB, T, "t-cp", Op.DESCRIBE_CONFIGS),
        allow(ALICE, X, "tx-a", Op.DESCRIBE),
        # the remaining request types: g-cm READ / ALTER_CONFIGS for alice, DESCRIBE for bob
        allow(ALICE, G, "g-cm", Op.READ), allow(ALICE, G, "g-cm", Op.ALTER_CONFIGS), allow(BOB, G, "g-cm", Op.DESCRIBE),
        allow(ALICE, T, "t-a", Op.DELETE),
        # the cluster: alice ALTER and ALTER_CONFIGS; bob CREATE; carol DESCRIBE and CLUSTER_ACTION
        allow(ALICE, C, CLUSTER, Op.ALTER), allow(ALICE, C, CLUSTER, Op.ALTER_CONFIGS),
        allow(BOB, C, CLUSTER, Op.CREATE),
        allow(CAROL, C, CLUSTER, Op.DESCRIBE), allow(CAROL, C, CLUSTER, Op.CLUSTER_ACTION),
    ])
    return b


# ---- Kafka: groups ------------------------------------------------------------------------------

def test_offset_fetch_describe_on_group_and_topics(matrix):
    def fetch(who, topics):
        group = req(9, 8, "groups", group_id="g-of", topics=topics)
        with kafka(matrix, who) as conn:
            (answer,) = conn.call(req(9, 8, groups=(group,), require_stable=False)).groups
        return answer.error_code, {t.name: [(p.error_code, p.committed_offset) for p in t.partitions]
                                   for t in answer.topics}

    asked = tuple(req(9, 8, "groups", "topics", name=n, partition_indexes=(0,)) for n in ("t-a", "t-b"))
    assert fetch("alice", asked) == (0, {"t-a": [(0, 1)], "t-b": [(TOPIC_AUTHORIZATION_FAILED, -1)]})
    assert fetch("alice", None) == (0, {"t-a": [(0, 1)]})  # every topic: the undescribable ones are left out
    assert fetch("bob", asked) == (GROUP_AUTHORIZATION_FAILED, {})
    with kafka(matrix, "bob") as conn:  # v7: one group, the top-level error
        one = conn.call(req(9, 7, group_id="g-of", topics=None, require_stable=False))
    assert one.error_code == GROUP_AUTHORIZATION_FAILED


def test_offset_delete_delete_on_group_read_on_topics(matrix):
    def delete(who):
        topics = tuple(req(47, 0, "topics", name=n, partitions=(req(47, 0, "topics", "partitions",
                                                                      partition_index=0),)) for n in ("t-a", "t-b"))
        with kafka(matrix, who) as conn:
            answer = conn.call(req(47, 0, group_id="g-od", topics=topics))
        return answer.error_code, {t.name: [p.error_code for p in t.partitions] for t in answer.topics}

    assert delete("bob") == (GROUP_AUTHORIZATION_FAILED, {})  # READ on the group is not DELETE
    assert delete("alice") == (0, {"t-a": [0], "t-b": [TOPIC_AUTHORIZATION_FAILED]})


def test_delete_groups_delete_on_each_group(matrix):
    with kafka(matrix, "bob") as conn:
        answer = conn.call(req(42, 2, groups_names=("g-dg-bob",)))
    assert [(r.group_id, r.error_code) for r in answer.results] == [("g-dg-bob", GROUP_AUTHORIZATION_FAILED)]
    with kafka(matrix, "alice") as conn:
        answer = conn.call(req(42, 2, groups_names=("g-dg", "g-hidden")))
    assert [(r.group_id, r.error_code) for r in answer.results] == [("g-dg", 0),
                                                                   ("g-hidden", GROUP_AUTHORIZATION_FAILED)]


def test_describe_and_list_groups_describe_on_group(matrix):
    with kafka(matrix, "alice") as conn:
        described = conn.call(req(15, 5, groups=("g-of", "g-hidden"), include_authorized_operations=True)).groups
        listed = {g.group_id for g in conn.call(req(16, 4, states_filter=())).groups}
    assert [(g.group_id, g.error_code) for g in described] == [("g-of", 0), ("g-hidden", GROUP_AUTHORIZATION_FAILED)]
    assert described[0].authorized_operations == 1 << Op.DESCRIBE.value
    assert {"g-of", "g-hidden"} <= listed  # alice's ALTER on the cluster implies DESCRIBE: every group
    with kafka(matrix, "bob") as conn:
        listed = {g.group_id for g in conn.call(req(16, 4, states_filter=())).groups}
    assert "g-dg-bob" in listed and not {"g-of", "g-hidden"} & listed  # only those bob may DESCRIBE
    with kafka(matrix, "carol") as conn:  # DESCRIBE on the cluster: every group
        listed = {g.group_id for g in conn.call(req(16, 4, states_filter=())).groups}
    assert {"g-of", "g-hidden"} <= listed


def test_find_coordinator_describe_on_group_or_transactional_id(matrix):
    with kafka(matrix, "alice") as conn:
        groups = conn.call(req(10, 4, key_type=0, coordinator_keys=("g-of", "g-hidden"))).coordinators
        txns = conn.call(req(10, 4, key_type=1, coordinator_keys=("tx-a", "tx-b"))).coordinators
        old = conn.call(req(10, 3, key_type=0, key="g-hidden"))
    assert [(c.key, c.error_code) for c in groups] == [("g-of", 0), ("g-hidden", GROUP_AUTHORIZATION_FAILED)]
    assert [(c.key, c.error_code) for c in txns] == [("tx-a", 0), ("tx-b", TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    assert old.error_code == GROUP_AUTHORIZATION_FAILED


def test_consumer_group_heartbeat_and_describe(matrix):
    def heartbeat(who, topics):
        with kafka(matrix, who) as conn:
            return conn.call(req(68, 0, group_id="g-848", member_id="", member_epoch=0, rebalance_timeout=30000,
                                 subscribed_topic_names=topics, topic_partitions=())).error_code

    assert heartbeat("bob", ("t-a",)) == GROUP_AUTHORIZATION_FAILED  # DESCRIBE on the group is not READ
    assert heartbeat("alice", ("t-a", "t-b")) == TOPIC_AUTHORIZATION_FAILED  # no DESCRIBE on t-b
    assert heartbeat("alice", ("t-a",)) == 0
    with kafka(matrix, "alice") as conn:
        groups = conn.call(req(69, 0, group_ids=("g-848", "g-hidden"), include_authorized_operations=False)).groups
    assert [(g.group_id, g.error_code) for g in groups] == [("g-848", 0), ("g-hidden", GROUP_AUTHORIZATION_FAILED)]
    assert {t.topic_name for m in groups[0].members for t in m.target_assignment.topic_partitions} == {"t-a"}
    with kafka(matrix, "carol") as conn:  # DESCRIBE on the group, not on t-a, which it is assigned
        (group,) = conn.call(req(69, 0, group_ids=("g-848",), include_authorized_operations=False)).groups
    assert (group.error_code, group.members) == (TOPIC_AUTHORIZATION_FAILED, ())


def test_consumer_group_heartbeat_regex_assigns_only_describable_topics(matrix):
    """A regex subscription (KIP-848, v1) is assigned only the matching topics the
    member's principal may DESCRIBE (Kafka 4's filterTopicDescribeAuthorizedTopics):
    no error, the others are simply not its topics; DESCRIBE granted later applies
    at the next heartbeat (a new group epoch, the topic assigned)."""
    admin = AdminClient(kconf(matrix, "admin"))
    for name in ("re-x1", "re-x2"):
        admin.create_topics([NewTopic(name, 1)])[name].result(10)
    create_acls(admin, [allow(ALICE, G, "g-848-re", Op.READ), allow(ALICE, T, "re-x1", Op.DESCRIBE)])
    with kafka(matrix, "admin") as conn:
        topics = conn.call(req(3, 12, topics=tuple(req(3, 12, "topics", topic_id=None, name=n)
                                                   for n in ("re-x1", "re-x2")),
                               allow_auto_topic_creation=False, include_topic_authorized_operations=False)).topics
    ids = {t.name: t.topic_id for t in topics}

    def heartbeat(conn, member_id, epoch):
        answer = conn.call(req(68, 1, group_id="g-848-re", member_id=member_id, member_epoch=epoch,
                               rebalance_timeout=30000, subscribed_topic_regex="re-x.*", topic_partitions=()))
        assert answer.error_code == 0, answer.error_message
        assigned = None if answer.assignment is None else {
            t.topic_id: tuple(t.partitions) for t in answer.assignment.topic_partitions}
        return answer.member_epoch, assigned

    member = "regex-member-1"
    with kafka(matrix, "alice") as conn:
        epoch, assigned = heartbeat(conn, member, 0)
        assert assigned == {ids["re-x1"]: (0,)}
        create_acls(admin, [allow(ALICE, T, "re-x2", Op.DESCRIBE)])
        later, assigned = heartbeat(conn, member, epoch)
        assert later > epoch and assigned == {ids["re-x1"]: (0,), ids["re-x2"]: (0,)}
    with kafka(matrix, "alice") as conn:  # ConsumerGroupDescribe shows the regex and the two topics
        (group,) = conn.call(req(69, 1, group_ids=("g-848-re",), include_authorized_operations=False)).groups
    assert group.error_code == 0 and group.members[0].subscribed_topic_regex == "re-x.*"
    assert {t.topic_name for t in group.members[0].target_assignment.topic_partitions} == {"re-x1", "re-x2"}


def test_confluent_consumer_regex_subscription_gets_only_describable_topics(matrix):
    """librdkafka with group.protocol=consumer sends the regex to the broker: the
    consumer of `^re-y.*` is assigned the one topic alice may describe."""
    admin = AdminClient(kconf(matrix, "admin"))
    for name in ("re-y1", "re-y2"):
        admin.create_topics([NewTopic(name, 1)])[name].result(10)
    create_acls(admin, [allow(ALICE, G, "g-848-re-y", Op.READ), allow(ALICE, T, "re-y1", Op.READ)])
    consumer = confluent_kafka.Consumer(kconf(matrix, "alice", **{
        "group.id": "g-848-re-y", "group.protocol": "consumer", "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe(["^re-y.*"])
        assigned: list = []
        for _ in range(100):
            consumer.poll(0.2)
            assigned = consumer.assignment()
            if assigned:
                break
        assert [(p.topic, p.partition) for p in assigned] == [("re-y1", 0)]
    finally:
        consumer.close()


# ---- Kafka: the cluster -------------------------------------------------------------------------

def test_cluster_apis(matrix):
    def codes(who):
        with kafka(matrix, who) as conn:
            log_dirs = conn.call(req(35, 4, topics=None)).error_code
            listing = conn.call(req(46, 0, timeout=1000, topics=None)).error_code
            elect = conn.call(req(43, 2, election_type=0, timeout=1000, topic_partitions=(
                req(43, 2, "topic_partitions", topic="t-a", partitions=(0,)),)))
            reassign = conn.call(req(45, 0, timeout=1000, topics=(req(45, 0, "topics", name="t-a", partitions=(
                req(45, 0, "topics", "partitions", partition_index=0, replicas=None),)),)))
            quotas = conn.call(req(48, 1, components=(), strict=False)).error_code
            entity = req(49, 1, "entries", "entity", entity_type="client-id", entity_name="c1")
            op = req(49, 1, "entries", "ops", key="producer_byte_rate", value=1024.0, remove=False)
            altered = conn.call(req(49, 1, entries=(req(49, 1, "entries", entity=(entity,), ops=(op,)),),
                                    validate_only=True))
        return {"DescribeLogDirs": log_dirs, "ListPartitionReassignments": listing,
                "ElectLeaders": (elect.error_code, [p.error_code for r in elect.replica_election_results
                                                    for p in r.partition_result]),
                "AlterPartitionReassignments": (reassign.error_code, [p.error_code for r in reassign.responses
                                                                      for p in r.partitions]),
                "DescribeClientQuotas": quotas, "AlterClientQuotas": [e.error_code for e in altered.entries]}

    denied = CLUSTER_AUTHORIZATION_FAILED
    alice, bob, carol = codes("alice"), codes("bob"), codes("carol")
    # alice: ALTER (which implies DESCRIBE) and ALTER_CONFIGS (which implies DESCRIBE_CONFIGS)
    assert alice["DescribeLogDirs"] == alice["ListPartitionReassignments"] == 0
    assert alice["ElectLeaders"][0] == 0 and alice["ElectLeaders"][1] != [denied]
    assert alice["AlterPartitionReassignments"][0] != denied
    assert alice["DescribeClientQuotas"] == 0 and alice["AlterClientQuotas"] == [0]
    # carol: DESCRIBE only
    assert carol["DescribeLogDirs"] == carol["ListPartitionReassignments"] == 0
    assert carol["ElectLeaders"] == (denied, [denied])
    assert carol["AlterPartitionReassignments"] == (denied, [denied])
    assert carol["DescribeClientQuotas"] == denied and carol["AlterClientQuotas"] == [denied]
    # bob: CREATE only
    assert bob == {"DescribeLogDirs": denied, "ListPartitionReassignments": denied, "ElectLeaders": (denied, [denied]),
                   "AlterPartitionReassignments": (denied, [denied]), "DescribeClientQuotas": denied,
                   "AlterClientQuotas": [denied]}


# ---- Kafka: topics ------------------------------------------------------------------------------

def test_create_partitions_alter_on_topic(matrix):
    def grow(who):
        with kafka(matrix, who) as conn:
            answer = conn.call(req(37, 3, topics=(req(37, 3, "topics", name="t-cp", count=2, assignments=None),),
                                   timeout=10000, validate_only=True))
        return [r.error_code for r in answer.results]

    assert grow("bob") == [TOPIC_AUTHORIZATION_FAILED]  # WRITE is not ALTER
    assert grow("alice") == [0]


def test_describe_producers_read_on_topic(matrix):
    def describe(who):
        with kafka(matrix, who) as conn:
            answer = conn.call(req(61, 0, topics=(req(61, 0, "topics", name="t-a", partition_indexes=(0,)),)))
        return [p.error_code for t in answer.topics for p in t.partitions]

    assert describe("bob") == [TOPIC_AUTHORIZATION_FAILED]  # DESCRIBE is not READ
    assert describe("alice") == [0]


def test_offset_for_leader_epoch_describe_on_topic_or_cluster_action(matrix):
    def epochs(who):
        topics = tuple(req(23, 4, "topics", topic=n, partitions=(req(23, 4, "topics", "partitions", partition=0,
                                                                      current_leader_epoch=-1, leader_epoch=0),))
                       for n in ("t-a", "t-b"))
        with kafka(matrix, who) as conn:
            answer = conn.call(req(23, 4, replica_id=-1, topics=topics))
        return {t.topic: [p.error_code for p in t.partitions] for t in answer.topics}

    assert epochs("bob") == {"t-a": [0], "t-b": [TOPIC_AUTHORIZATION_FAILED]}
    assert epochs("carol") == {"t-a": [0], "t-b": [0]}  # CLUSTER_ACTION on the cluster: every topic


def test_describe_topic_partitions_describe_on_topic(matrix):
    with kafka(matrix, "bob") as conn:
        named = conn.call(req(75, 0, topics=(req(75, 0, "topics", name="t-a"), req(75, 0, "topics", name="t-b")),
                              response_partition_limit=100, cursor=None)).topics
        every = conn.call(req(75, 0, topics=(), response_partition_limit=100, cursor=None)).topics
    assert [(t.name, t.error_code) for t in named] == [("t-a", 0), ("t-b", TOPIC_AUTHORIZATION_FAILED)]
    assert [t.name for t in every] == ["t-a", "t-cp", "t-del"]  # bob's WRITE and ALTER imply DESCRIBE


# ---- native ------------------------------------------------------------------------------------

def test_native_request_types(matrix):
    def run(who, request):
        with native(matrix, who) as conn:
            return conn.call(request)

    fetch = MultiFetchRequest([FetchItem("t-a", 0, 0, 4096), FetchItem("t-b", 0, 0, 4096)])
    assert [i.error for i in run("alice", fetch).items] == [0, TOPIC_AUTHORIZATION_FAILED]
    assert [i.error for i in run("bob", fetch).items] == [TOPIC_AUTHORIZATION_FAILED] * 2  # DESCRIBE is not READ
    produce = MultiProduceRequest([ProduceItem("t-a", 0, batch(b"n")), ProduceItem("t-b", 0, batch(b"n"))])
    assert [i.error for i in run("alice", produce).items] == [0, TOPIC_AUTHORIZATION_FAILED]
    assert [i.error for i in run("bob", produce).items] == [TOPIC_AUTHORIZATION_FAILED] * 2
    offsets = OffsetsRequest("t-a", 0, OffsetsRequest.LATEST, 1)
    assert run("bob", offsets).error == 0  # DESCRIBE
    assert run("carol", offsets).error == TOPIC_AUTHORIZATION_FAILED
    assert run("alice", AlterConfigRequest("t-a", [("retention.ms", "3600000")])).error == 0
    assert run("bob", AlterConfigRequest("t-cp", [("retention.ms", "3600000")])).error == TOPIC_AUTHORIZATION_FAILED
    assert run("bob", DeleteTopicRequest("t-del")).error == TOPIC_AUTHORIZATION_FAILED  # ALTER is not DELETE
    assert run("alice", DeleteTopicRequest("t-del")).error == 0


# ---- the remaining request types ---------------------------------------------------------------

def test_classic_group_and_offset_apis(matrix):
    def join(who):
        with kafka(matrix, who) as conn:
            return conn.call(req(11, 9, group_id="g-cm", session_timeout=10000, rebalance_timeout=10000,
                                 member_id="", protocol_type="consumer", reason=None, protocols=(
                                     req(11, 9, "protocols", name="range", metadata=b""),))).error_code

    assert join("bob") == GROUP_AUTHORIZATION_FAILED  # DESCRIBE on the group is not READ
    assert join("alice") == 79  # MEMBER_ID_REQUIRED: past the check, the usual first answer

    def commit(who):
        topics = tuple(req(8, 8, "topics", name=n, partitions=(req(8, 8, "topics", "partitions", partition_index=0,
                                                                     committed_offset=1, committed_leader_epoch=-1,
                                                                     committed_metadata=""),))
                       for n in ("t-a", "t-b"))
        with kafka(matrix, who) as conn:
            answer = conn.call(req(8, 8, group_id="g-cm", generation_id_or_member_epoch=-1, member_id="",
                                   group_instance_id=None, topics=topics))
        return {t.name: [p.error_code for p in t.partitions] for t in answer.topics}

    assert commit("bob") == {"t-a": [GROUP_AUTHORIZATION_FAILED], "t-b": [GROUP_AUTHORIZATION_FAILED]}
    assert commit("alice") == {"t-a": [0], "t-b": [TOPIC_AUTHORIZATION_FAILED]}  # READ on each topic

    def list_offsets(who):
        topics = tuple(req(2, 7, "topics", name=n, partitions=(req(2, 7, "topics", "partitions", partition_index=0,
                                                                     current_leader_epoch=-1, timestamp=-1),))
                       for n in ("t-a", "t-b"))
        with kafka(matrix, who) as conn:
            answer = conn.call(req(2, 7, replica_id=-1, isolation_level=0, topics=topics))
        return {t.name: [p.error_code for p in t.partitions] for t in answer.topics}

    assert list_offsets("bob") == {"t-a": [0], "t-b": [TOPIC_AUTHORIZATION_FAILED]}  # DESCRIBE

    def delete_records(who):
        topic = req(21, 2, "topics", name="t-a", partitions=(req(21, 2, "topics", "partitions", partition_index=0,
                                                                   offset=0),))
        with kafka(matrix, who) as conn:
            answer = conn.call(req(21, 2, topics=(topic,), timeout=10000))
        return [p.error_code for t in answer.topics for p in t.partitions]

    assert delete_records("bob") == [TOPIC_AUTHORIZATION_FAILED]  # DESCRIBE is not DELETE
    assert delete_records("alice") == [0]


def test_configs_and_scram_apis(matrix):
    def alter_configs(who, resource_type, name, key, value):
        config = req(44, 1, "resources", "configs", name=key, config_operation=0, value=value)
        with kafka(matrix, who) as conn:
            resource = req(44, 1, "resources", resource_type=resource_type, resource_name=name, configs=(config,))
            (answer,) = conn.call(req(44, 1, validate_only=True, resources=(resource,))).responses
        return answer.error_code

    group_key = ("consumer.session.timeout.ms", "45000")
    assert alter_configs("bob", 32, "g-cm", *group_key) == GROUP_AUTHORIZATION_FAILED  # GROUP: ALTER_CONFIGS on it
    assert alter_configs("alice", 32, "g-cm", *group_key) == 0
    assert alter_configs("carol", 4, "", "log.retention.ms", "3600000") == CLUSTER_AUTHORIZATION_FAILED  # BROKER
    assert alter_configs("alice", 4, "", "log.retention.ms", "3600000") != CLUSTER_AUTHORIZATION_FAILED

    def scram(who):
        upsert = req(51, 0, "upsertions", name="u1", mechanism=1, iterations=4096, salt=b"salt",
                     salted_password=b"p" * 32)
        with kafka(matrix, who) as conn:
            described = conn.call(req(50, 0, users=None)).error_code
            altered = [r.error_code for r in conn.call(req(51, 0, deletions=(), upsertions=(upsert,))).results]
        return described, altered

    assert scram("bob") == (CLUSTER_AUTHORIZATION_FAILED, [CLUSTER_AUTHORIZATION_FAILED])
    assert scram("carol") == (0, [CLUSTER_AUTHORIZATION_FAILED])  # DESCRIBE, not ALTER
    assert scram("alice") == (0, [0])  # ALTER implies DESCRIBE


def test_native_single_resource_types(matrix):
    def error(who, request):
        with native(matrix, who) as conn:
            return conn.call(request).error

    assert error("alice", FetchRequest("t-a", 0, 0, 4096)) == 0
    assert error("bob", FetchRequest("t-a", 0, 0, 4096)) == TOPIC_AUTHORIZATION_FAILED  # DESCRIBE is not READ
    assert error("alice", ProduceRequest("t-a", 0, batch(b"one"))) == 0
    assert error("alice", ProduceRequest("t-b", 0, batch(b"one"))) == TOPIC_AUTHORIZATION_FAILED
    assert error("alice", CommitOffsetRequest("g-cm", "t-a", 0, 1)) == 0
    assert error("bob", CommitOffsetRequest("g-cm", "t-a", 0, 1)) == GROUP_AUTHORIZATION_FAILED
    assert error("alice", CommitOffsetRequest("g-cm", "t-b", 0, 1)) == TOPIC_AUTHORIZATION_FAILED
    assert error("bob", FetchOffsetRequest("g-cm", "t-a", 0)) == 0  # DESCRIBE on both
    assert error("carol", FetchOffsetRequest("g-cm", "t-a", 0)) == GROUP_AUTHORIZATION_FAILED
    assert error("bob", DeleteRecordsRequest("t-a", 0, 0)) == TOPIC_AUTHORIZATION_FAILED
    assert error("alice", DeleteRecordsRequest("t-a", 0, 0)) == 0
    assert error("bob", DescribeConfigRequest("t-cp")) == 0  # DESCRIBE_CONFIGS
    assert error("carol", DescribeConfigRequest("t-cp")) == TOPIC_AUTHORIZATION_FAILED
    assert error("carol", CreateTopicRequest("t-new", 1)) == TOPIC_AUTHORIZATION_FAILED
    assert error("bob", CreateTopicRequest("t-new", 1)) == 0  # CREATE on the cluster
