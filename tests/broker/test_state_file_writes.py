"""The JSON state files written through broker/state/json_files.py `write_document`:
the exact bytes each file holds, and what each file's failed write raises."""

from __future__ import annotations

import errno
import os

import pytest

from broker.kafka.state import KafkaState
from broker.security.credentials import ScramCredentialStore
from broker.security.scram import ScramCredential
from broker.state.internal_topics import OFFSETS_TOPIC
from broker.state.json_files import write_document
from kafka_format.errors import InvalidConfigError, KafkaStorageError


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_the_kafka_state_file_bytes(tmp_path):
    path = str(tmp_path / "strata-kafka.json")
    KafkaState(path, "q1Sh-9_ISia_zwGINzRvyQ", 1000).claim_block()  # the block 1000-1999
    assert read(path) == (b'{\n  "version": 1,\n  "cluster_id": "q1Sh-9_ISia_zwGINzRvyQ",\n'
                          b'  "producer_id_block_end": 2000\n}\n')


def test_the_scram_credentials_file_bytes(tmp_path):
    store = ScramCredentialStore.open(str(tmp_path))
    store.apply([("bob", "SCRAM-SHA-256", ScramCredential(b"s", b"k", b"v", 4096)),
                 ("alice", "SCRAM-SHA-512", ScramCredential(b"t", b"l", b"w", 8192))], [])
    assert read(store.path) == (
        b'{\n  "version": 1,\n  "users": {\n'
        b'    "alice": {\n      "SCRAM-SHA-512": {\n        "salt": "dA==",\n        "stored_key": "bA==",\n'
        b'        "server_key": "dw==",\n        "iterations": 8192\n      }\n    },\n'
        b'    "bob": {\n      "SCRAM-SHA-256": {\n        "salt": "cw==",\n        "stored_key": "aw==",\n'
        b'        "server_key": "dg==",\n        "iterations": 4096\n      }\n    }\n  }\n}\n')


def test_the_topic_registry_file_bytes(open_registry):
    registry, _ = open_registry()
    registry.create("orders", 2, [("retention.ms", "3600000")])
    registry.create("gone", 1, [])
    registry.delete("gone")
    ids = {name: registry.get(name).topic_id for name in ("orders", OFFSETS_TOPIC)}
    assert read(registry.path) == (
        b'{\n  "version": 1,\n  "topics": {\n    "__consumer_offsets": {\n      "partitions": 1,\n'
        b'      "configs": {\n        "cleanup.policy": "compact",\n        "segment.bytes": "104857600"\n'
        b'      },\n      "internal": true,\n      "id": "%s"\n    },\n'
        b'    "orders": {\n      "partitions": 2,\n      "configs": {\n        "retention.ms": "3600000"\n'
        b'      },\n      "id": "%s"\n    }\n  },\n  "deleting": []\n}\n'
    ) % (ids[OFFSETS_TOPIC].encode(), ids["orders"].encode())


# ---- failed writes: one behaviour per file ---------------------------------------------------

def test_a_failed_producer_id_block_write_is_a_storage_error_and_keeps_the_block(tmp_path):
    state = KafkaState(str(tmp_path / "missing" / "strata-kafka.json"), "q1Sh-9_ISia_zwGINzRvyQ", 1000)
    with pytest.raises(KafkaStorageError, match=r"^cannot write the Kafka listener state .*strata-kafka\.json: "):
        state.claim_block()
    assert state.next_producer_id() is None  # no block claimed


def test_a_failed_first_kafka_state_write_fails_the_start(tmp_path):
    with pytest.raises(InvalidConfigError, match=r"^cannot write Kafka listener state .*strata-kafka\.json: "):
        KafkaState.create(str(tmp_path / "missing"))


def test_a_failed_credentials_write_raises_its_os_error_and_changes_nothing(tmp_path):
    store = ScramCredentialStore(str(tmp_path / "missing" / "scram-credentials.json"), {})
    with pytest.raises(FileNotFoundError):
        store.apply([("bob", "SCRAM-SHA-256", ScramCredential(b"s", b"k", b"v", 4096))], [])
    assert store.credentials == {}


class RecordingReserve:
    """A space reserve (storage/space_reserve.py's `run`) that records the writes it runs."""

    def __init__(self) -> None:
        self.operations: list[str] = []

    def run(self, what, write):
        self.operations.append(what)
        return write()


def test_the_space_reserve_runs_the_write_and_names_it(tmp_path):
    reserve = RecordingReserve()
    path = str(tmp_path / "strata-topics.json")
    write_document(path, "topic registry", {"version": 1}, reserve=reserve)  # type: ignore[arg-type]
    assert reserve.operations == ["topic registry write"]
    assert read(path) == b'{\n  "version": 1\n}\n'


def test_a_failed_write_without_a_mapping_is_a_storage_error_naming_the_file(tmp_path):
    path = str(tmp_path / "missing" / "acls.json")
    with pytest.raises(KafkaStorageError, match=r"^cannot write the ACLs .*acls\.json: No such file"):
        write_document(path, "ACLs", {"version": 1})
    mapped = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with pytest.raises(OSError) as raised:
        write_document(path, "ACLs", {"version": 1}, error=lambda e: mapped)
    assert raised.value is mapped
