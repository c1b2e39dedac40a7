"""Strata's client library for the native protocol: admin, producer, consumer.

Contract: two faces over one implementation. The asyncio classes
(`AsyncAdmin`, `AsyncProducer`, `AsyncConsumer`, also importable from
`client.aio`) hold all the logic; the blocking classes (`Admin`, `Producer`,
`Consumer`) run them on one shared event-loop thread (loop_thread.py says
why). Every wire byte goes through the `protocol` codec; message sets are
built and read with `kafka_format`. Failures are `StrataClientError`
(`.code`, `.name`) and its subclasses (`BrokerUnreachable`, ...).

    from client import Admin, Producer, Consumer
    with Admin("127.0.0.1:9092") as admin:
        admin.create_topic("orders", partitions=3)
    with Producer("127.0.0.1:9092") as producer:
        producer.send("orders", b"hello", key=b"k1").result()
    with Consumer("127.0.0.1:9092", group="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe("orders")
        for record in consumer.poll(timeout_ms=1000):
            print(record.offset, record.key, record.value)

TLS: every class takes `security={...}` with Kafka's client setting names
(client/security.py), e.g. `Admin("broker:9443", security={"security.protocol": "SSL",
"ssl.ca.location": "ca.pem"})`, plus `ssl.certificate.location` and
`ssl.key.location` for a listener with ssl.client.auth. SASL (client/sasl.py): the
same map with `security.protocol` SASL_PLAINTEXT or SASL_SSL, `sasl.mechanism`
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and `sasl.username`/`sasl.password` (or a
Java client's `sasl.jaas.config`); a refused login raises AuthenticationFailed
with the broker's reason.
"""

from .admin import EARLIEST, LATEST, Admin, AsyncAdmin, PartitionMetadata, TopicMetadata
from .connection import AsyncConnection, parse_bootstrap
from .consumer import AsyncConsumer, Consumer, TopicPartition
from .errors import BrokerUnreachable, NoOffsetForPartition, OffsetOutOfRange, RequestTimedOut, StrataClientError
from .fetch import MessageTooLargeForFetch
from .partitioner import murmur2, partition_for_key, to_positive
from .producer import COMPRESSION_CODECS, AsyncProducer, Producer
from .records import Record, RecordMetadata

__all__ = [
    "Admin", "AsyncAdmin", "Producer", "AsyncProducer", "Consumer", "AsyncConsumer",
    "AsyncConnection", "parse_bootstrap", "Record", "RecordMetadata", "TopicMetadata",
    "PartitionMetadata", "TopicPartition", "EARLIEST", "LATEST", "COMPRESSION_CODECS",
    "StrataClientError", "BrokerUnreachable", "RequestTimedOut", "OffsetOutOfRange",
    "NoOffsetForPartition", "MessageTooLargeForFetch", "murmur2", "to_positive",
    "partition_for_key",
]
