"""A batch the broker refuses as too large is split, so only the record too large by
itself fails (Kafka's producer splits too): the real broker, a topic whose
max.message.bytes is below the producer's batch.size."""

import pytest

from client import Admin, Consumer, Producer, StrataClientError
from protocol import ErrorCode

from .live_broker import unique

LONG_LINGER_MS = 600_000


@pytest.fixture
def small_topic(live_broker):
    name = unique("split")
    with Admin(live_broker.address) as admin:
        admin.create_topic(name, 1, {"max.message.bytes": "1000"})
    return name


def test_only_the_oversized_record_fails(live_broker, small_topic):
    values = [b"a" * 300, b"b" * 300, b"c" * 300, b"x" * 2000, b"d" * 300, b"e" * 300, b"f" * 10]
    with Producer(live_broker.address, linger_ms=LONG_LINGER_MS) as producer:
        futures = [producer.send(small_topic, v) for v in values]
        producer.flush()
    errors = [f.exception() for f in futures]
    assert [e is not None for e in errors] == [v.startswith(b"x") for v in values]
    assert isinstance(errors[3], StrataClientError) and errors[3].code == ErrorCode.MESSAGE_TOO_LARGE
    offsets = [f.result().offset for i, f in enumerate(futures) if i != 3]
    assert offsets == list(range(6))  # the others in order, each once
    with Consumer(live_broker.address) as consumer:
        consumer.assign(small_topic, [0])
        consumer.seek(small_topic, 0, 0)
        got = []
        while len(got) < 6:
            got += [r.value for r in consumer.poll(timeout_ms=5000)]
    assert got == [v for v in values if not v.startswith(b"x")]
