"""The broker's reasons (native protocol version 2) in the client's exceptions and the
CLI's one-line errors, and topics created on first write when the broker allows it."""

import pytest

from client import Admin, Producer, StrataClientError
from client.connection import AsyncConnection
from client.loop_thread import LoopThread
from protocol import ErrorCode
from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata
from tests.client.live_broker import unique

BAD_RETENTION = "retention.ms: 'abc' is not a valid long"


def test_the_client_speaks_version_2_and_surfaces_the_reason(live_broker):
    async def version():
        conn = await AsyncConnection.open(live_broker.address)
        try:
            return conn.version
        finally:
            conn.close()

    assert LoopThread.shared().run(version()) == 2
    with Admin(live_broker.address) as admin, pytest.raises(StrataClientError) as e:
        admin.create_topic(unique("bad"), 1, {"retention.ms": "abc"})
    assert e.value.code == ErrorCode.INVALID_CONFIG and e.value.reason == BAD_RETENTION
    assert str(e.value).endswith(f"{BAD_RETENTION} (INVALID_CONFIG)")


def test_topics_create_prints_the_reason(live_broker):
    name = unique("cli-bad-config")
    err = one_error_line(strata("topics", "create", name, "--config", "retention.ms=abc",
                                "--bootstrap-server", live_broker.address))
    assert BAD_RETENTION in err and "INVALID_CONFIG" in err


def test_a_too_large_line_names_its_number_size_and_the_limit(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("cli-too-large")
    ok(strata("topics", "create", name, "--config", "max.message.bytes=1000", *server))
    lines = b"small\n" + b"x" * 5000 + b"\nafter\n"
    err = one_error_line(strata("produce", name, *server, input=lines))
    assert "line 2 (5000 bytes)" in err and "max.message.bytes 1000" in err and "MESSAGE_TOO_LARGE" in err


def test_produce_creates_a_missing_topic_with_the_broker_defaults(live_broker):
    server = ("--bootstrap-server", live_broker.address)
    name = unique("cli-auto")
    ok(strata("produce", name, *server, input=b"a\nb\n"))
    with Admin(live_broker.address) as admin:
        assert admin.offsets(name, 0, -1) == [2]
    with Producer(live_broker.address, linger_ms=0) as producer:
        other = unique("client-auto")
        assert producer.send_and_wait(other, b"v").offset == 0


def test_without_auto_creation_the_error_names_the_topic(tmp_path):
    broker = BrokerProcess(tmp_path, "--set", "auto.create.topics.enable=false", kafka_port=None).start()
    try:
        address = f"{broker.host}:{broker.port}"
        name = unique("cli-no-auto")
        err = one_error_line(strata("produce", name, "--bootstrap-server", address, input=b"x\n"))
        assert repr(name) in err and "auto.create.topics.enable" in err and "UNKNOWN_TOPIC_OR_PARTITION" in err
        with Producer(address) as producer, pytest.raises(StrataClientError) as e:
            producer.send_and_wait(name, b"v")
        assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and name in str(e.value)
        with Admin(address) as admin:
            assert name not in admin.list_topics()
    finally:
        broker.close()
