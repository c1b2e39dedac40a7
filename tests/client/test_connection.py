"""The connection layer: addresses, pipelining, timeouts, errors."""

import asyncio

import pytest

from client import AsyncAdmin, BrokerUnreachable, RequestTimedOut, StrataClientError
from client.connection import AsyncConnection, parse_bootstrap
from client.errors import raise_for
from protocol import ErrorCode, MetadataRequest

from .fake_broker import FakeBroker


@pytest.fixture
async def fake():
    broker = FakeBroker({"t": 2})
    broker.address = await broker.start()
    yield broker
    await broker.stop()


def test_parse_bootstrap():
    assert parse_bootstrap("localhost:9092") == [("localhost", 9092)]
    assert parse_bootstrap("[::1]:9092, 10.0.0.1:1") == [("::1", 9092), ("10.0.0.1", 1)]
    for bad in ("localhost", ":9092", "h:0", "h:99999", "h:x", "", "[::1]"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_errors_carry_code_and_name():
    with pytest.raises(StrataClientError) as e:
        raise_for(ErrorCode.TOPIC_ALREADY_EXISTS, "create topic 'x'")
    assert e.value.code == 36 and e.value.name == "TOPIC_ALREADY_EXISTS"
    assert str(e.value) == "create topic 'x': topic already exists (TOPIC_ALREADY_EXISTS)"
    with pytest.raises(StrataClientError) as e:
        raise_for(99, "something")
    assert e.value.code == 99 and e.value.name == "UNKNOWN_ERROR_CODE_99"
    raise_for(ErrorCode.NONE, "fine")  # no error, no exception
    assert BrokerUnreachable("x").retriable and not StrataClientError("x").retriable


async def test_pipelined_answers_are_matched_in_order(fake):
    connection = await AsyncConnection.open(fake.address)
    names = [("t",), ("missing",), ()] * 20
    responses = await asyncio.gather(*(connection.request(MetadataRequest(n)) for n in names))
    for asked, response in zip(names, responses, strict=True):
        assert tuple(t.topic for t in response.topics) == (asked or ("t",))
    connection.close()


async def test_a_timeout_fails_everything_outstanding_and_closes(fake):
    connection = await AsyncConnection.open(fake.address)
    fake.hang = True
    first = asyncio.ensure_future(connection.request(MetadataRequest(()), timeout_ms=100))
    second = asyncio.ensure_future(connection.request(MetadataRequest(()), timeout_ms=600_000))
    with pytest.raises(RequestTimedOut):
        await first
    # A late answer to the first would be matched to the second: the connection is
    # closed, and the second request fails with the same error at once.
    with pytest.raises(RequestTimedOut):
        await second
    assert connection.closed
    with pytest.raises(StrataClientError):
        await connection.request(MetadataRequest(()))


async def test_a_session_reconnects_after_a_timeout(fake):
    admin = AsyncAdmin(fake.address, request_timeout_ms=100, retries=0)
    fake.hang = True
    with pytest.raises(RequestTimedOut):
        await admin.list_topics()
    fake.hang = False
    assert await admin.list_topics() == ["t"]  # a fresh connection
    assert fake.connections == 2
    await admin.close()


async def test_unreachable_names_the_address(fake):
    await fake.stop()
    with pytest.raises(BrokerUnreachable) as e:
        await AsyncConnection.open(fake.address)
    assert fake.address in str(e.value) and "refused" in str(e.value)
    await fake.start()


async def test_a_version_1_broker_keeps_the_connection_at_version_1(fake):
    """The fake broker knows no HANDSHAKE (it answers INVALID_REQUEST with an empty
    body, as a version-1 broker does): the client stays at version 1 and works."""
    connection = await AsyncConnection.open(fake.address)
    try:
        assert connection.version == 1
        response = await connection.request(MetadataRequest(("t",), True))  # v1: no auto-creation field
        assert response.topics[0].error == ErrorCode.NONE and len(response.topics[0].partitions) == 2
    finally:
        connection.close()


def test_the_broker_reason_replaces_the_generic_words():
    with pytest.raises(StrataClientError) as e:
        raise_for(ErrorCode.INVALID_CONFIG, "create topic 'x'", "retention.ms: 'abc' is not a valid long")
    assert str(e.value) == "create topic 'x': retention.ms: 'abc' is not a valid long (INVALID_CONFIG)"
    assert e.value.reason == "retention.ms: 'abc' is not a valid long"
