"""`strata share-groups` through the real command line against a real broker: a share
group made by kio requests (tests/kafka/wire.py), as kafka-share-groups.sh shows it.

Deadlines are failure guards, not speed assumptions.
"""

from __future__ import annotations

import pytest

from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata, usage_error
from tests.cli.test_groups import rows
from tests.kafka.conftest import create_topic, unique_name
from tests.kafka.test_share_groups_e2e import (
    acquire_all,
    heartbeat,
    join_member,
    produce,
    share_ack,
    share_fetch,
    topic_id_of,
)
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
        # Kafka 4.2's --offsets view: GROUP TOPIC PARTITION START-OFFSET LAG; --verbose adds LEADER-EPOCH
        assert rows(ok(cli(broker, "describe", group))) == [[group, topic, "0", "2", "4"]]
        verbose = rows(ok(cli(broker, "describe", group, "--offsets", "--verbose")))
        assert verbose == [[group, topic, "0", "0", "2", "4"]]
        members = rows(ok(cli(broker, "describe", "--group", group, "--members")))
        assert members[0][1] == member and members[0][-1] == f"{topic}:0"
        state = rows(ok(cli(broker, "describe", group, "--state", "--verbose")))
        assert state[0][0] == group and "Stable" in state[0]
        refused = one_error_line(cli(broker, "reset-offsets", group, "--to-earliest", "--execute"))
        assert "not empty" in refused
        assert "has active members" in one_error_line(cli(broker, "delete", group))

        share_fetch(w, group, member, -1, None)
        heartbeat(w, group, member, -1, None)
    result = cli(broker, "describe", group, "--state")
    assert result.returncode == 0 and b"has no active members" in result.stderr
    assert rows(result.stdout.decode())[0][-2:] == ["Empty", "0"]
    assert rows(ok(cli(broker, "reset-offsets", group, "--to-offset", "1", "--execute"))) == \
        [[group, topic, "0", "1"]]
    result = cli(broker, "describe", group)
    assert result.returncode == 0 and rows(result.stdout.decode())[0][3] == "1"
    assert f"Deletion of requested share groups ('{group}') was successful." in ok(cli(broker, "delete", group))
    assert group not in ok(cli(broker, "list")).split()
    assert "does not exist" in one_error_line(cli(broker, "describe", group))


def header(out: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith("GROUP"))


def test_views_filters_dry_run_and_delete_offsets_as_kafka_4_2(broker):
    topic = create_topic(broker.bootstrap, unique_name("sq"), 2)
    group, other = unique_name("sg"), unique_name("sg")
    with KafkaWire(broker.host, broker.kafka_port) as w:
        tid = topic_id_of(w, topic)
        member, _ = join_member(w, group, topic)
        assert share_fetch(w, group, member, 0, tid, partitions=(0, 1)).error_code == 0
        quiet, _ = join_member(w, other, topic)

        # --members: Kafka's headers, the assignment as topic:0,1
        out = ok(cli(broker, "describe", group, "--members", "--verbose"))
        assert header(out) == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH",
                               "ASSIGNMENT"]
        assert rows(out)[0][4] == "2" and rows(out)[0][-1] == f"{topic}:0,1"
        # --state: --verbose puts the epochs before #MEMBERS
        out = ok(cli(broker, "describe", group, "--state", "--verbose"))
        assert header(out) == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH",
                               "#MEMBERS"]
        assert rows(out)[0][-1] == "1"
        assert header(ok(cli(broker, "describe", group, "--state"))) == ["GROUP", "COORDINATOR", "(ID)", "STATE",
                                                                         "#MEMBERS"]
        # several groups, and --all-groups, one table each in group order
        out = ok(cli(broker, "describe", group, "--group", other, "--members"))
        assert [r[0] for r in rows(out) if r[0] in (group, other)] == sorted([group, other])
        assert group in ok(cli(broker, "describe", "--all-groups", "--state"))
        assert "not both" in usage_error(cli(broker, "describe", group, "--all-groups"), "share-groups describe")

        # list --state STATES filters; a state Kafka does not know is an error
        assert group in [r[0] for r in rows(ok(cli(broker, "list", "--state", "stable,Empty")))]
        assert group not in ok(cli(broker, "list", "--state", "Empty"))
        assert "Valid states are: Empty, Stable, Dead" in one_error_line(cli(broker, "list", "--state", "Busy"))

        for m, g in ((member, group), (quiet, other)):
            share_fetch(w, g, m, -1, None)
            heartbeat(w, g, m, -1, None)
    produce(broker.bootstrap, topic, 3)

    # an Empty group: the note on stderr, and no members table
    result = cli(broker, "describe", group, "--members")
    assert result.returncode == 0 and b"has no active members" in result.stderr and b"GROUP" not in result.stdout
    # reset-offsets needs --dry-run or --execute, as kafka-share-groups.sh
    assert "--dry-run" in usage_error(cli(broker, "reset-offsets", group, "--to-latest"), "share-groups reset-offsets")
    before = rows(ok(cli(broker, "describe", group)))
    planned = ok(cli(broker, "reset-offsets", group, "--to-latest", "--dry-run", "--topic", f"{topic}:1"))
    assert header(planned) == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows(planned) == [[group, topic, "1", "0"]]
    assert rows(ok(cli(broker, "describe", group))) == before  # nothing written
    assert "not both" in one_error_line(cli(broker, "reset-offsets", group, "--to-latest", "--execute",
                                            "--all-topics", "--topic", topic))

    # delete-offsets: a TOPIC STATUS table
    out = ok(cli(broker, "delete-offsets", group, "--topic", topic))
    assert [line.split() for line in out.splitlines() if line.strip()] == [["TOPIC", "STATUS"], [topic, "Successful"]]
    assert f"Share group '{group}' has no offset information." in ok(cli(broker, "describe", group))

    # a group that has no state yet can be planned for (Kafka 4.2 initializes it with --execute)
    missing = unique_name("nope")
    assert rows(ok(cli(broker, "reset-offsets", missing, "--to-earliest", "--dry-run", "--topic", topic))) == \
        [[missing, topic, "0", "0"], [missing, topic, "1", "0"]]

    # delete: the groups that can go go; the others are named
    err = one_error_line(cli(broker, "delete", other, missing))
    assert f"Group '{missing}' is not a share group." in err and f"deleted: {other}" in err
    assert f"Deletion of requested share groups ('{group}') was successful." in ok(cli(broker, "delete", "--group",
                                                                                     group))
