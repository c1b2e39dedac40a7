"""SCRAM users seeded offline (`strata users set|list|delete --data-dir`, Kafka's
kafka-storage format --add-scram), then a real broker started on that data
directory and real SCRAM logins with confluent-kafka; the Docker entry point's
STRATA_SCRAM_USERS_FILE hook."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from broker.security.add_scram import parse_add_scram
from broker.security.scram import MECHANISMS, credential_from_password

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ck = pytest.importorskip("confluent_kafka")


def strata(*args, env=None):
    return subprocess.run([sys.executable, "-m", "broker", *map(str, args)], capture_output=True, text=True,
                          timeout=60, env=env)


def login_error(b, mechanism, user, password):
    """None when a SCRAM login and a produce work, else the error reported."""
    host, port = b.addresses["kafka", "SASL_PLAINTEXT"]
    errors = []
    producer = ck.Producer({"bootstrap.servers": f"{host}:{port}", "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                            "message.timeout.ms": 5000, "error_cb": errors.append})
    delivered = []
    producer.produce("seeded", b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(10)
    if delivered and delivered[0] is None:
        return None
    return errors[0] if errors else delivered[0]


def test_add_scram_parses_as_kafka():
    user, mechanism, credential = parse_add_scram(
        'SCRAM-SHA-512=[name=alice,salt="c2FsdA==",iterations=8192,password=alice-secret]')
    assert (user, mechanism) == ("alice", "SCRAM-SHA-512")
    assert credential == credential_from_password(MECHANISMS["SCRAM-SHA-512"], "alice-secret", 8192, b"salt")
    for argument, message in (
            ("SCRAM-SHA-1=[name=a,password=p]", "The add-scram mechanism SCRAM-SHA-1 is not supported"),
            ("SCRAM-SHA-256=name=a,password=p", "Expected configuration string to start with ["),
            ("SCRAM-SHA-256=[password=p]", "You must supply 'name' to add-scram"),
            ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword'"),
            ("SCRAM-SHA-256=[name=a,saltedpassword=cA==]", "You must supply 'salt' with 'saltedpassword'"),
            ("SCRAM-SHA-256=[name=a,password=p,iterations=100]", "The 'iterations' value must be >= 4096"),
            ("SCRAM-SHA-256=[name=a,password=p,colour=red]", "Unknown SCRAM configurations: colour")):
        with pytest.raises(ValueError, match=message.replace("[", r"\[")):
            parse_add_scram(argument)


def test_users_seeded_offline_log_in_to_the_broker(broker, tmp_path):
    data = tmp_path / "data"
    seeded = strata("users", "set", "--data-dir", data, "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-pw]",
                    "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-pw,iterations=8192]")
    assert seeded.returncode == 0, seeded.stderr
    assert seeded.stdout == "Completed updating config for user alice.\n"
    carol = strata("users", "set", "carol", "--mechanism", "SCRAM-SHA-512", "--data-dir", data,
                   env={"STRATA_USER_PASSWORD": "carol-pw", "PATH": "/usr/bin:/bin"})
    assert carol.returncode == 0, carol.stderr
    listed = strata("users", "list", "--data-dir", data)
    assert listed.stdout.splitlines() == [
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096,"
        "SCRAM-SHA-512=iterations=8192",
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=4096"]
    stored = (data / "scram-credentials.json").read_text()
    assert "alice-pw" not in stored and "carol-pw" not in stored  # salted and hashed only

    b = broker("--set", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
               "--set", "native.listeners=PLAINTEXT://127.0.0.1:0", data_dir=data, kafka_port=None)
    b.addresses = b.read_listeners(3)
    assert login_error(b, "SCRAM-SHA-256", "alice", "alice-pw") is None
    assert login_error(b, "SCRAM-SHA-512", "alice", "alice-pw") is None
    assert login_error(b, "SCRAM-SHA-512", "carol", "carol-pw") is None
    wrong = login_error(b, "SCRAM-SHA-512", "carol", "nope")
    assert wrong is not None and wrong.code() == ck.KafkaError._AUTHENTICATION

    # The running broker holds the data directory: an offline change is refused, nothing changes.
    refused = strata("users", "set", "--data-dir", data, "--add-scram", "SCRAM-SHA-256=[name=dave,password=x]")
    assert refused.returncode == 1 and "in use by a running broker" in refused.stderr, refused.stderr
    assert (data / "scram-credentials.json").read_text() == stored
    b.stop()
    deleted = strata("users", "delete", "alice", "--mechanism", "SCRAM-SHA-256", "--data-dir", data)
    assert deleted.returncode == 0, deleted.stderr
    assert "SCRAM-SHA-256" not in strata("users", "list", "alice", "--data-dir", data).stdout
    b.restart()
    b.addresses = b.read_listeners(3)
    failed = login_error(b, "SCRAM-SHA-256", "alice", "alice-pw")
    assert failed is not None and failed.code() == ck.KafkaError._AUTHENTICATION
    assert login_error(b, "SCRAM-SHA-512", "alice", "alice-pw") is None


@pytest.mark.parametrize("args, code, message", [
    (("--add-scram", "SCRAM-SHA-1=[name=a,password=p]"), 1, "--add-scram: The add-scram mechanism SCRAM-SHA-1"),
    (("--add-scram", "SCRAM-SHA-256=[name=a,password=p,iterations=99]"), 1, "must be >= 4096"),
    (("alice", "--add-scram", "SCRAM-SHA-256=[name=a,password=p]"), 2, "names the user"),
    (("alice", "--password", "p", "--iterations", "100"), 1, "--iterations 100: must be 4096..16384"),
    (("--add-scram-file", "/nonexistent"), 1, "cannot read it"),
])
def test_offline_errors_change_nothing(tmp_path, args, code, message):
    result = strata("users", "set", "--data-dir", tmp_path, *args)
    assert result.returncode == code and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "scram-credentials.json").exists()
    online = strata("users", "set", "--add-scram", "SCRAM-SHA-256=[name=a,password=p]")
    assert online.returncode == 2 and "need --data-dir" in online.stderr


def test_docker_entrypoint_seeds_the_scram_users_file(tmp_path):
    """STRATA_SCRAM_USERS_FILE: `strata users set --data-dir ... --add-scram-file ...` runs
    before the broker (a fake `strata` records each call)."""
    from tests.docker.test_dockerfile import FAKE_STRATA, serve_argv
    from tests.docker.test_dockerfile import run_entrypoint as run

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "strata"
    fake.write_text(FAKE_STRATA.format(python=sys.executable))
    fake.chmod(0o755)
    users = tmp_path / "users.txt"
    users.write_text("# seeded at start\nSCRAM-SHA-512=[name=alice,password=alice-secret]\n")
    data = tmp_path / "data"
    data.mkdir()
    env = {"STRATA_SCRAM_USERS_FILE": str(users), "STRATA_DATA_DIR": str(data), "STRATA_CONFIG": ""}
    _, out, err = run(bin_dir, env=env)
    seeding, serving = json.loads(err), json.loads(out)
    assert seeding["argv"] == ["users", "set", "--data-dir", str(data), "--add-scram-file", str(users)]
    assert serving["argv"] == serve_argv(str(data)) and "STRATA_SCRAM_USERS_FILE" not in serving["env"]
    proc, _, err = run(bin_dir, env={**env, "STRATA_SCRAM_USERS_FILE": str(tmp_path / "nope")}, check=False)
    assert proc.returncode == 2 and "STRATA_SCRAM_USERS_FILE" in err


def test_docker_entrypoint_with_the_real_cli(tmp_path):
    """The hook with the real `strata` (serve replaced by --help): the file's users land salted
    and hashed in the data directory, and a bad line stops the container with Kafka's message."""
    from tests.docker.test_dockerfile import ENTRYPOINT

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "strata").write_text(f"#!/bin/sh\nexec {sys.executable} -m broker \"$@\"\n")
    (bin_dir / "strata").chmod(0o755)
    users = tmp_path / "users.txt"
    users.write_text("SCRAM-SHA-256=[name=alice,password=alice-secret]\n")
    data = tmp_path / "data"
    data.mkdir()
    from tests.broker_process import ROOT

    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "STRATA_SCRAM_USERS_FILE": str(users),
           "STRATA_DATA_DIR": str(data), "STRATA_CONFIG": ""}
    done = subprocess.run(["/bin/sh", str(ENTRYPOINT), "--help"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Completed updating config for user alice." in done.stderr
    listed = strata("users", "list", "--data-dir", data).stdout
    assert "'alice' are SCRAM-SHA-256=iterations=4096" in listed
    users.write_text("SCRAM-SHA-256=[name=bob]\n")
    bad = subprocess.run(["/bin/sh", str(ENTRYPOINT), "--help"], env=env, capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert bad.returncode == 1 and "You must supply one of 'password' or 'saltedpassword'" in bad.stderr
