"""Native METADATA against the real broker process, over raw sockets: missing topics
created when asked and allowed, with the broker defaults, and not when switched off."""

from __future__ import annotations

from protocol import (
    ErrorCode,
    MetadataRequest,
    ProduceRequest,
)
from tests.broker.conftest import batch
from tests.broker.wire import NativeClient
from tests.broker_process import BrokerProcess

NONE = ErrorCode.NONE


# ---- METADATA auto-creation -----------------------------------------------------------------

def test_metadata_creates_missing_topics_when_asked_and_allowed(connect):
    c = connect()
    c.handshake()
    (created,) = c.call(MetadataRequest(["auto-created"], True)).topics
    assert created.error == NONE and len(created.partitions) == 1  # num.partitions
    (missing,) = c.call(MetadataRequest(["not-asked"], False)).topics
    assert missing.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (bad,) = c.call(MetadataRequest(["bad name"], True)).topics
    assert bad.error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.call(ProduceRequest("auto-created", 0, batch(b"a"))).error == NONE
    v1 = connect()  # version 1 never creates
    (plain,) = v1.call(MetadataRequest(["v1-never"])).topics
    assert plain.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_auto_creation_uses_the_broker_defaults_and_respects_the_switch(tmp_path):
    on = BrokerProcess(tmp_path / "on", "--set", "num.partitions=3", kafka_port=None).start()
    off = BrokerProcess(tmp_path / "off", "--set", "auto.create.topics.enable=false", kafka_port=None).start()
    try:
        with NativeClient(on.host, on.port) as c:
            c.handshake()
            (created,) = c.call(MetadataRequest(["three"], True)).topics
            assert created.error == NONE and len(created.partitions) == 3
        with NativeClient(off.host, off.port) as c:
            c.handshake()
            (refused,) = c.call(MetadataRequest(["never"], True)).topics
            assert refused.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert c.call(MetadataRequest(["never"])).topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        on.close()
        off.close()
