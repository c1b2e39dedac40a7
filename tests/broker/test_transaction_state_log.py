"""`__transaction_state` in Kafka's TransactionLogKey / TransactionLogValue layouts,
read back by the coordinator at start; transactional offsets in `__consumer_offsets`
applied only by their COMMIT marker when read back (broker/state/group_offsets.py)."""

from __future__ import annotations

import struct

from broker.config.broker_config import BrokerConfig
from broker.kafka.transactions.state import TxnMetadata, TxnState
from broker.kafka.transactions.state_log import (
    TransactionStateLog,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker.state.group_offsets import GroupOffsets
from broker.state.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from broker.state.topic_registry import TopicRegistry
from storage.manager import LogManager


def test_key_layout():
    assert encode_key("tx") == bytes.fromhex("0000" "0002") + b"tx"
    assert decode_key(encode_key("tx")) == "tx"
    assert decode_key(bytes.fromhex("0001") + b"\x00\x00") is None  # another key version


def test_value_layout_version_1():
    meta = TxnMetadata("tx", 1000, 3, 60_000, TxnState.ONGOING, {("b", 1), ("a", 0), ("a", 2)}, 1_700, 1_800)
    value = encode_value(meta)
    expected = (struct.pack(">hqhib", 1, 1000, 3, 60_000, 1)
                + bytes([3])  # compact array: 2 topics
                + bytes([2]) + b"a" + bytes([3]) + struct.pack(">ii", 0, 2) + bytes([0])
                + bytes([2]) + b"b" + bytes([2]) + struct.pack(">i", 1) + bytes([0])
                + struct.pack(">qq", 1_800, 1_700) + bytes([0]))  # no tagged fields
    assert value == expected
    assert decode_value("tx", value) == meta


def test_empty_state_has_null_partitions_and_tags_round_trip():
    meta = TxnMetadata("tx", 7, 0, 1000, TxnState.EMPTY, set(), -1, 5, previous_producer_id=6,
                       client_version=2)
    value = encode_value(meta)
    assert value[struct.calcsize(">hqhib")] == 0  # null TransactionPartitions
    assert value.endswith(bytes([2, 0, 8]) + struct.pack(">q", 6) + bytes([2, 2]) + struct.pack(">h", 2))
    assert decode_value("tx", value) == meta


def test_value_version_0_is_read():
    raw = (struct.pack(">hqhib", 0, 5, 1, 9000, 4) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
           + struct.pack(">ii", 1, 0) + struct.pack(">qq", 20, 10))
    meta = decode_value("old", raw)
    assert (meta.producer_id, meta.state, meta.partitions, meta.start_ms) == (5, TxnState.COMPLETE_COMMIT,
                                                                                {("t", 0)}, 10)


def _storage(tmp_path):
    config = BrokerConfig.load(overrides=[], data_dir=str(tmp_path), environ={})
    registry = TopicRegistry(str(tmp_path), config.log_defaults, num_partitions=1)
    registry.load()
    manager = LogManager(str(tmp_path), config_for=registry.log_config)
    manager.startup()
    registry.reconcile(manager)
    registry.ensure_internal_topic(1)
    registry.ensure_internal_topic(2, TRANSACTION_STATE_TOPIC)

    def get_log(topic, partition):
        return manager.get_or_create_log(topic, partition, registry.log_config(topic))

    return registry, manager, get_log


def test_state_log_is_rebuilt_latest_wins_and_tombstones(tmp_path):
    registry, manager, get_log = _storage(tmp_path)
    state_log = TransactionStateLog(get_log, lambda: 2, lambda topic, partition: None)
    first = TxnMetadata("a", 1, 0, 1000, TxnState.EMPTY, set(), -1, 1)
    state_log.write(first)
    state_log.write(first.moved(TxnState.ONGOING, 2, partitions={("t", 0)}, start_ms=2))
    state_log.write(TxnMetadata("b", 2, 0, 1000, TxnState.EMPTY, set(), -1, 1))
    state_log.write(TxnMetadata("b", 2, 0, 1000, TxnState.EMPTY, set(), -1, 3).moved(TxnState.DEAD, 4))
    loaded = state_log.load(manager.logs())
    assert list(loaded) == ["a"]
    assert (loaded["a"].state, loaded["a"].partitions) == (TxnState.ONGOING, {("t", 0)})
    manager.shutdown()


def test_transactional_offsets_apply_only_when_committed(tmp_path):
    registry, manager, get_log = _storage(tmp_path)
    registry.create("t", 1, ())
    offsets = GroupOffsets(registry, get_log)
    offsets_log = get_log(OFFSETS_TOPIC, 0)
    assert offsets.commit_transactional("g", 100, 0, [("t", 0, 5, None, -1)]) == [None]
    assert offsets.fetch("g", "t", 0) is None  # pending until the COMMIT marker
    offsets_log.append_txn_marker(100, 0, 0, True)
    offsets.complete_transaction(100, True)
    assert offsets.fetch("g", "t", 0).offset == 5
    offsets.commit_transactional("g", 100, 0, [("t", 0, 9, "m", -1)])
    offsets_log.append_txn_marker(100, 0, 0, False)
    offsets.complete_transaction(100, False)
    offsets.commit_transactional("g", 101, 0, [("t", 0, 11, None, -1)])  # left open
    assert offsets.fetch("g", "t", 0).offset == 5

    reloaded = GroupOffsets(registry, get_log)
    reloaded.load(manager.logs())
    assert reloaded.fetch("g", "t", 0).offset == 5  # the aborted and the open one are not committed
    offsets_log.append_txn_marker(101, 0, 0, True)
    reloaded.complete_transaction(101, True)  # the coordinator finishing it after the restart
    assert reloaded.fetch("g", "t", 0).offset == 11
    manager.shutdown()


def test_each_id_writes_to_its_partition_under_its_key(tmp_path):
    """Kafka's partitionFor (abs(javaHashCode) % partitions, followed when the count
    changes); a Dead id's tombstone carries the same key."""
    from broker.state.group_offsets import partition_for

    _, manager, get_log = _storage(tmp_path)
    count = [2]
    written = []
    state_log = TransactionStateLog(get_log, lambda: count[0], lambda topic, partition: written.append(partition))
    ids = ["a", "b", "producer-17", "x" * 40]
    for transactional_id in ids:
        partition, batch = state_log.record(TxnMetadata(transactional_id, 1, 0, 1000, TxnState.EMPTY, set(), -1, 1))
        assert partition == state_log.partition_for(transactional_id) == partition_for(transactional_id, 2)
        assert encode_key(transactional_id) in batch
    count[0] = 50
    assert [state_log.partition_for(i) for i in ids] == [partition_for(i, 50) for i in ids]
    count[0] = 2
    dead = TxnMetadata("a", 1, 0, 1000, TxnState.EMPTY, set(), -1, 1).moved(TxnState.DEAD, 2)
    state_log.write(dead)
    assert written == [partition_for("a", 2)]
    loaded = state_log.load(manager.logs())
    assert "a" not in loaded
    state_log.write(TxnMetadata("a", 2, 0, 1000, TxnState.EMPTY, set(), -1, 3))  # the id starts over
    assert state_log.load(manager.logs())["a"].producer_id == 2
    manager.shutdown()
