"""Malformed Kafka requests against the real broker (issue 14, item 5).

100,000 requests mutated from well-formed ones of every API and version the
broker advertises (bit flips, truncations, lengths and counts set to -1 or huge,
random api keys and versions; tests/robust/wire_fuzz.py) go to `strata serve`
over a few connections. The broker must answer or close (Kafka closes on a
request it cannot parse), never log a traceback or answer UNKNOWN_SERVER_ERROR
for a decoding problem, never die, and still serve a produce and a fetch after.
"""

from __future__ import annotations

import threading

from kio.index import load_request_schema

from broker.kafka import codec
from kafka_format import build_batch, iter_entries
from tests.kafka.wire import KafkaWire
from tests.robust.wire_fuzz import FuzzClient, Mutator, sample_requests

REQUESTS = 100_000
CLIENTS = 4
TOPIC = "checked"  # produced to and fetched from before and after the fuzzing
TARGET = "fuzzed"  # what the mutated requests name (some delete it, some create it again)


def _create_topic(wire: KafkaWire, name: str) -> None:
    cls = load_request_schema(19, 7)
    topic_cls = codec.nested(cls, "topics")
    response = wire.call(codec.make(cls, topics=(codec.make(topic_cls, name=name, num_partitions=1,
                                                                  replication_factor=1),),
                                    timeout=5000))
    assert int(response.topics[0].error_code) == 0


def _produce(wire: KafkaWire, value: bytes) -> int:
    cls = load_request_schema(0, 9)
    topic_cls = codec.nested(cls, "topic_data")
    partition_cls = codec.nested(topic_cls, "partition_data")
    request = codec.make(cls, acks=-1, timeout=5000, topic_data=(codec.make(
        topic_cls, name=TOPIC, partition_data=(codec.make(
            partition_cls, index=0, records=build_batch([(None, value)])),)),))
    response = wire.call(request)
    partition = response.responses[0].partition_responses[0]
    assert int(partition.error_code) == 0
    return partition.base_offset


def _fetch(wire: KafkaWire, offset: int) -> list[bytes]:
    cls = load_request_schema(1, 12)
    topic_cls = codec.nested(cls, "topics")
    partition_cls = codec.nested(topic_cls, "partitions")
    request = codec.make(cls, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20,
                         session_epoch=-1, topics=(codec.make(topic_cls, topic=TOPIC, partitions=(codec.make(
                             partition_cls, partition=0, fetch_offset=offset, log_start_offset=-1,
                             partition_max_bytes=1 << 20),)),))
    response = wire.call(request)
    partition = response.responses[0].partitions[0]
    assert int(partition.error_code) == 0
    return [record.value for entry in iter_entries(partition.records) for record in entry.records()
            if entry.base_offset >= offset]


def test_malformed_kafka_requests_never_break_the_broker(broker):
    server = broker("--set", "group.initial.rebalance.delay.ms=0")
    wire = KafkaWire(*server.kafka_address)
    _create_topic(wire, TOPIC)
    _create_topic(wire, TARGET)
    _produce(wire, b"before")
    versions = wire.call(codec.make(load_request_schema(18, 3), client_software_name="fuzz",
                                    client_software_version="1"))
    advertised = [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in versions.api_keys]
    samples = sample_requests(TARGET, advertised)
    assert len(samples) > 100

    results: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        mutator = Mutator(seed)
        frames = [mutator.mutate(samples[i % len(samples)]) for i in range(seed, REQUESTS, CLIENTS)]
        client = FuzzClient(*server.kafka_address)
        try:
            results.append(client.run(frames))
        except BaseException as e:  # reported by the test thread
            errors.append(e)
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    answered = sum(a for a, _ in results)
    reconnects = sum(r for _, r in results)
    assert answered + reconnects >= REQUESTS // 2  # most were read: answered, or refused and closed

    assert server.running
    offset = _produce(KafkaWire(*server.kafka_address), b"after")
    assert _fetch(KafkaWire(*server.kafka_address), offset) == [b"after"]
    events = server.log_events()
    failures = [e for e in events if "Traceback" in str(e)]
    assert not failures, "\n".join(e.get("exception", str(e))[-1500:] for e in failures[:3])
    assert "Traceback" not in server.stderr_text()
    assert not [e for e in events if e.get("event") in ("kafka_request_failed", "connection_failed",
                                                        "request_failed")]
    # Bad requests are logged rate-limited (broker/net/bad_request_log.py): a few lines, not thousands.
    bad = [e for e in events if e.get("event", "").startswith(("kafka_bad", "kafka_unsupported",
                                                                 "bad_frame", "bad_requests"))]
    assert 0 < len(bad) <= 200, len(bad)
    print(f"answered {answered}, connections closed by the broker {reconnects}, "
          f"bad-request log lines {len(bad)}")
