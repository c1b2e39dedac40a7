"""`strata share-groups` through the real command line against a real broker: a share
group made by kio requests (tests/kafka/wire.py), as kafka-share-groups.sh shows it.

Deadlines are failure guards, not speed assumptions.
"""

from __future__ import annotations

import pytest

from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata
from tests.cli.test_groups import rows
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.test_share_groups_e2e import acquire_all, heartbeat, join_member, produce, share_ack, \
    share_fetch, topic_id_of
from tests.kafka.wire import KafkaWire


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("share-groups-cli"))
    try:
        yield process.start()
    finally:
        process.close()


def cli(broker, *args):
    return strata("share-groups", *args, "--bootstrap-server", f"{broker.host}:{broker.port}",
                  "--kafka-bootstrap-server", broker.bootstrap)


def test_list_describe_reset_delete(broker):
    topic = create_topic(broker.bootstrap, unique_name("sq"), 1)
    group = unique_name("sg")
    with KafkaWire(broker.host, broker.kafka_port) as w:
        tid = topic_id_of(w, topic)
        member, _ = join_member(w, group, topic)
        assert share_fetch(w, group, member, 0, tid).error_code == 0
        produce(broker.bootstrap, topic, 6)
        runs, epoch = acquire_all(w, group, member, tid, 6, epoch=1)
        assert share_ack(w, group, member, epoch, tid, {0: [(0, 1, [1])]}).error_code == 0

        assert group in ok(cli(broker, "list")).split()
        assert [group, "Stable"] in rows(ok(cli(broker, "list", "--state")))
        assert rows(ok(cli(broker, "describe", group))) == [[group, topic, "0", "0", "2", "4"]]
        members = rows(ok(cli(broker, "describe", "--group", group, "--members")))
        assert members[0][1] == member and members[0][-1] == f"{topic}:0"
        state = rows(ok(cli(broker, "describe", group, "--state", "--verbose")))
        assert state[0][0] == group and "Stable" in state[0]
        refused = one_error_line(cli(broker, "reset-offsets", group, "--to-earliest", "--execute"))
        assert "not empty" in refused
        assert "has active members" in one_error_line(cli(broker, "delete", group))

        share_fetch(w, group, member, -1, None)
        heartbeat(w, group, member, -1, None)
    result = cli(broker, "describe", group)
    assert result.returncode == 0 and b"has no active members" in result.stderr
    assert rows(ok(cli(broker, "reset-offsets", group, "--to-offset", "1", "--execute"))) == \
        [[group, topic, "0", "1"]]
    result = cli(broker, "describe", group)
    assert result.returncode == 0 and rows(result.stdout.decode())[0][4] == "1"
    assert f"Deletion of requested share groups ('{group}') was successful." in ok(cli(broker, "delete", group))
    assert group not in ok(cli(broker, "list")).split()
    assert "does not exist" in one_error_line(cli(broker, "describe", group))
