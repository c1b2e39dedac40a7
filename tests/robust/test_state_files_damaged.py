"""Every file Strata keeps in its data directory, damaged before a start.

One data directory is seeded by the real broker (tests/robust/state_seed.py) and
copied for each case; one file is then damaged: emptied, torn (cut mid-record),
overwritten with garbage, replaced by a directory, made unreadable (skipped as
root, where chmod does not stop reads), or left with a stray `<file>.tmp` from a
write a crash interrupted. broker/SERVER.md ("Files in the data directory") has
the rule each case checks:

- REFUSE: state that no log can rebuild and whose loss would be silent harm
  (ACLs, SCRAM users, quotas, group and topic configs, the cluster id and producer
  ids), and any directory in a file's place: the start fails with exit code 1,
  the last line of stderr is one `strata: ...` line naming the file and what to
  do, no traceback, and the file is as it was.
- SERVE: what Kafka rebuilds (checkpoints, indexes, producer snapshots, the
  transaction index) is rebuilt, with a warning: the broker starts and serves
  every record at its offset, READ_COMMITTED still hides the aborted
  transaction, the committed offset, the ACL and the user are there, a new record
  is accepted, and the broker stops cleanly. A damaged log-start-offset checkpoint
  starts the log at its first segment (Kafka's rule): the log start offset is 0.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest

pytest.importorskip("confluent_kafka")
import confluent_kafka  # noqa: E402

from tests.broker_process import run_serve  # noqa: E402
from tests.robust import state_seed  # noqa: E402
from tests.robust.state_seed import LOG_START, SERVE_ARGS, TOPIC  # noqa: E402

REFUSE, SERVE = "refuse", "serve"
EMPTY, TORN, GARBAGE, DIRECTORY, UNREADABLE, LEFTOVER_TMP = "empty", "torn", "garbage", "directory", "unreadable", "tmp"
DAMAGES = (EMPTY, TORN, GARBAGE, DIRECTORY, UNREADABLE, LEFTOVER_TMP)

# The files a user or client set, which no log can rebuild: every damage refuses,
# before the logs are opened.
JSON_STATE = ("acls.json", "scram-credentials.json", "client-quotas.json", "group-configs.json",
              "strata-kafka.json", "strata-topics.json")
# Rebuilt from the logs (Kafka's rules); a directory in their place, or a file that
# cannot be read at all, refuses.
CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
# `events` has segments 0, 21 (the aborted transaction and its marker) and 42.
PARTITION_FILES = (f"{TOPIC}-0/*.snapshot",  # the newest producer snapshot
                   f"{TOPIC}-0/00000000000000000021.txnindex",  # the aborted transaction
                   f"{TOPIC}-0/00000000000000000021.index", f"{TOPIC}-0/00000000000000000021.timeindex",
                   "__transaction_state-0/*.snapshot", "__consumer_offsets-0/*.snapshot")


def expectation(name: str, damage: str) -> str:
    if damage == LEFTOVER_TMP:
        return SERVE
    if name in JSON_STATE or damage == DIRECTORY:
        return REFUSE
    if damage == UNREADABLE:
        return SERVE if name == "cleaner-offset-checkpoint" else REFUSE
    return SERVE


CASES = ([(name, damage) for name in JSON_STATE + CHECKPOINTS + PARTITION_FILES for damage in DAMAGES]
         + [("cleaner-offset-checkpoint", damage) for damage in DAMAGES]
         + [(".kafka_cleanshutdown", DIRECTORY), (".lock", DIRECTORY), (".lock", GARBAGE),
            (".strata-space-reserve", GARBAGE)])


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("seeded") / "data"
    expected = state_seed.seed(data_dir)
    yield data_dir, expected
    shutil.rmtree(data_dir, ignore_errors=True)


def resolve(data_dir, name: str) -> str:
    directory, _, pattern = name.rpartition("/")
    if pattern.startswith("*"):
        found = sorted(f for f in os.listdir(data_dir / directory) if f.endswith(pattern[1:]))
        assert found, f"the seed holds no {name}"
        name = f"{directory}/{found[-1]}"
    path = str(data_dir / name)
    assert os.path.exists(path), f"the seed holds no {name}"
    return path


def damage(path: str, how: str) -> None:
    with open(path, "rb") as f:
        content = f.read()
    if how == EMPTY:
        open(path, "wb").close()
    elif how == TORN:
        with open(path, "wb") as f:
            f.write(content[: len(content) // 2])
    elif how == GARBAGE:
        with open(path, "wb") as f:
            f.write(random.Random(path).randbytes(max(len(content), 64)))
    elif how == DIRECTORY:
        os.unlink(path)
        os.mkdir(path)
    elif how == UNREADABLE:
        os.chmod(path, 0)
    elif how == LEFTOVER_TMP:
        with open(path + ".tmp", "wb") as f:
            f.write(content[: len(content) // 2] + b"\x00torn")


def fingerprint(path: str):
    if os.path.isdir(path):
        return "directory", sorted(os.listdir(path))
    with open(path, "rb") as f:
        return "file", f.read()


@pytest.mark.parametrize(("name", "how"), CASES, ids=[f"{n.replace('/', ':')}-{d}" for n, d in CASES])
def test_a_damaged_file_is_rebuilt_or_refused_in_one_line(seeded, tmp_path, broker, name, how):
    if how == UNREADABLE and os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    seed_dir, expected = seeded
    data_dir = tmp_path / "data"
    shutil.copytree(seed_dir, data_dir)
    path = resolve(data_dir, name)
    damage(path, how)
    try:
        if expectation(name, how) == REFUSE:
            assert_refused(data_dir, path)
        else:
            assert_served(broker(*SERVE_ARGS, data_dir=data_dir), expected,
                          log_start=0 if name == "log-start-offset-checkpoint" and how != LEFTOVER_TMP else LOG_START)
    finally:
        if how == UNREADABLE:
            os.chmod(path, 0o644)


def tree(data_dir) -> dict[str, object]:
    out: dict[str, object] = {}
    for root, dirs, files in os.walk(data_dir):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), data_dir)] = "directory"
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), data_dir)] = f.read()
    return out


def assert_refused(data_dir, path: str) -> None:
    before = fingerprint(path)
    # The state files read before the logs are opened: their refusal touches nothing at all.
    untouched = tree(data_dir) if os.path.basename(path) in JSON_STATE else None
    code, _, err = run_serve("--data-dir", str(data_dir), "--port", "0", *SERVE_ARGS)
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert code == 1, err
    assert "Traceback" not in err, err
    assert last.startswith("strata: ") and path in last, last
    assert any(word in last for word in ("restore it", "move the directory away", "the broker runs as")), last
    assert fingerprint(path) == before
    if untouched is not None:
        assert tree(data_dir) == untouched


def assert_served(process, expected: state_seed.Expected, log_start: int) -> None:
    bootstrap = process.bootstrap
    assert state_seed.read(bootstrap, "read_uncommitted", len(expected.uncommitted)) == expected.uncommitted
    assert state_seed.read(bootstrap, "read_committed", len(expected.committed)) == expected.committed
    assert state_seed.log_start_offset(bootstrap) == log_start
    assert state_seed.committed(bootstrap) == state_seed.COMMITTED
    client = state_seed.admin(bootstrap)
    assert client.describe_acls(state_seed.ANY_ACL).result(state_seed.GUARD_S) == [state_seed.acl()]
    users = client.describe_user_scram_credentials([state_seed.USER])
    assert users[state_seed.USER].result(state_seed.GUARD_S).user == state_seed.USER
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    delivered = []
    producer.produce(TOPIC, b"after the damage", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(state_seed.GUARD_S) == 0 and delivered == [None]
    assert process.stop() == 0
    assert "Traceback" not in process.stderr_text()


# JSON that parses but is not the file's document: every entry is checked at start.
WRONG_DOCUMENTS = {
    "acls.json": {"version": 1, "acls": [{"resource_type": 2, "name": "events"}]},
    "scram-credentials.json": {"version": 1, "users": {"alice": {"SCRAM-SHA-256": {
        "salt": "not base64!", "stored_key": "", "server_key": "", "iterations": 4096}}}},
    "client-quotas.json": {"version": 1, "quotas": [{"entity": 5, "values": {}}]},
    "group-configs.json": {"version": 1, "groups": ["g1"]},
    "strata-kafka.json": {"version": 1, "cluster_id": "only"},
    "strata-topics.json": {"version": 1, "topics": {TOPIC: {"partitions": "many"}}},
}


@pytest.mark.parametrize("name", JSON_STATE)
@pytest.mark.parametrize("document", ["wrong shape", "another version"])
def test_a_state_file_holding_another_document_is_refused_in_one_line(seeded, tmp_path, name, document):
    import json

    seed_dir, _ = seeded
    data_dir = tmp_path / "data"
    shutil.copytree(seed_dir, data_dir)
    path = resolve(data_dir, name)
    content = WRONG_DOCUMENTS[name] if document == "wrong shape" else {"version": 99}
    with open(path, "w") as f:
        json.dump(content, f)
    assert_refused(data_dir, path)
