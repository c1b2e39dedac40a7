"""The broker as a process: restarts, crashes, graceful shutdown, startup errors."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

from kafka_format import iter_records
from protocol import (
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    DescribeConfigRequest,
    ErrorCode,
    FetchOffsetRequest,
    FetchRequest,
    MetadataRequest,
    OffsetsRequest,
    ProduceRequest,
    encode_request,
)
from tests.broker.conftest import batch
from tests.broker.wire import NativeClient
from tests.broker_process import BrokerProcess, run_serve

NONE = ErrorCode.NONE


def client(broker) -> NativeClient:
    return NativeClient(broker.host, broker.port)


def test_topics_and_configs_survive_a_restart(broker):
    b = broker()
    with client(b) as c:
        kept_configs = [("retention.ms", "1000"), ("segment.bytes", "4096")]
        assert c.call(CreateTopicRequest("kept", 3, kept_configs)).error == NONE
        assert c.call(CreateTopicRequest("altered", 1, [("flush.messages", "5")])).error == NONE
        assert c.call(CreateTopicRequest("dropped", 2)).error == NONE
        altered_configs = [("flush.messages", None), ("retention.bytes", "123")]
        assert c.call(AlterConfigRequest("altered", altered_configs)).error == NONE
        assert c.call(DeleteTopicRequest("dropped")).error == NONE
        for i in range(20):
            assert c.call(ProduceRequest("kept", 1, batch(b"record %d" % i))).error == NONE
    assert b.stop() == 0
    b.restart()
    with client(b) as c:
        names = [t.topic for t in c.call(MetadataRequest()).topics]
        assert names == ["altered", "kept"]
        kept = dict(c.call(DescribeConfigRequest("kept")).configs)
        assert (kept["retention.ms"], kept["segment.bytes"]) == ("1000", "4096")
        altered = dict(c.call(DescribeConfigRequest("altered")).configs)
        assert altered["flush.messages"] == "9223372036854775807" and altered["retention.bytes"] == "123"
        assert c.call(OffsetsRequest("kept", 1, -1, 1)).offsets == (20,)
        fetched = c.call(FetchRequest("kept", 1, 0, 1 << 20, 0))
        assert [r.value for r in iter_records(bytes(fetched.message_set))] == [b"record %d" % i for i in range(20)]
        assert c.call(CreateTopicRequest("dropped", 1)).error == NONE
    assert not any(name.startswith("dropped-1") for name in os.listdir(b.data_dir))


def test_committed_offsets_survive_restart_and_kill_9(broker):
    b = broker()
    with client(b) as c:
        c.call(CreateTopicRequest("t", 2))
        for group in ("alpha", "beta", "polygenelubricants"):
            assert c.call(CommitOffsetRequest(group, "t", 0, 5, f"{group} meta")).error == NONE
        assert c.call(CommitOffsetRequest("alpha", "t", 0, 6, None)).error == NONE  # latest wins
        assert c.call(CommitOffsetRequest("beta", "t", 1, 7, "")).error == NONE
    assert b.stop() == 0
    b.restart()
    with client(b) as c:
        got = {(g, p): c.call(FetchOffsetRequest(g, "t", p)) for g, p in
               (("alpha", 0), ("beta", 0), ("beta", 1), ("polygenelubricants", 0), ("gamma", 0))}
        assert {k: (r.offset, r.metadata) for k, r in got.items()} == {
            ("alpha", 0): (6, None), ("beta", 0): (5, "beta meta"), ("beta", 1): (7, ""),
            ("polygenelubricants", 0): (5, "polygenelubricants meta"), ("gamma", 0): (-1, None)}
        # Acknowledged commits survive a crash, not only a clean stop.
        assert c.call(CommitOffsetRequest("alpha", "t", 0, 100, "after restart")).error == NONE
        assert c.call(CommitOffsetRequest("delta", "t", 1, 3, None)).error == NONE
        assert c.call(ProduceRequest("t", 0, batch(b"acked"))).error == NONE
        assert c.call(ProduceRequest("t", 1, batch(b"a", b"b", b"c"))).error == NONE
        assert c.call(DeleteRecordsRequest("t", 1, 2)).log_start_offset == 2
    assert b.kill() == -signal.SIGKILL
    b.restart()
    with client(b) as c:
        assert (c.call(FetchOffsetRequest("alpha", "t", 0)).offset,
                c.call(FetchOffsetRequest("alpha", "t", 0)).metadata) == (100, "after restart")
        assert c.call(FetchOffsetRequest("delta", "t", 1)).offset == 3
        assert c.call(OffsetsRequest("t", 0, -1, 1)).offsets == (1,)
        assert c.call(OffsetsRequest("t", 1, -2, 1)).offsets == (2,)  # the deletion held too
    recovered = [e for e in b.log_events() if e.get("event") == "logs_loaded"]
    assert [e["clean_shutdown"] for e in recovered][-1] is False  # the kill was noticed


def test_sigterm_leaves_clean_marker_and_checkpoints(broker):
    b = broker("--set", "log.initial.task.delay.ms=0")
    with client(b) as c:
        c.call(CreateTopicRequest("t", 2))
        for i in range(5):
            c.call(ProduceRequest("t", 1, batch(b"%d" % i)))
        # Requests already read when SIGTERM arrives are answered, a long poll included.
        # One write, so one read on the broker: once the first answer is here, the
        # broker holds the long poll and the METADATA behind it.
        requests = [MetadataRequest(["t"]), FetchRequest("t", 0, 0, 4096, 60_000), MetadataRequest(["t"])]
        c.sock.sendall(b"".join(encode_request(r) for r in requests))
        c.pending.extend(r.TYPE for r in requests)
        assert c.recv().error == NONE
        assert b.stop(signal.SIGTERM) == 0
        assert c.recv().message_set == b""
        assert c.recv().topics[0].error == NONE
        assert c.at_eof()
    files = set(os.listdir(b.data_dir))
    assert {".kafka_cleanshutdown", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
            "strata-topics.json"} <= files
    with open(os.path.join(b.data_dir, "recovery-point-offset-checkpoint")) as f:
        lines = f.read().splitlines()
    assert lines[0] == "0" and "t 1 5" in lines[2:] and "t 0 0" in lines[2:]
    events = [e["event"] for e in b.log_events()]
    assert "shutdown_requested" in events and events[-1] == "broker_stopped"
    b.restart()  # the clean marker means no recovery scan
    assert [e for e in b.log_events() if e["event"] == "logs_loaded"][-1]["clean_shutdown"] is True
    assert b.stop(signal.SIGINT) == 0


def test_periodic_checkpoint_runs(broker, tmp_path):
    b = broker("--set", "log.initial.task.delay.ms=0", "--set", "log.flush.offset.checkpoint.interval.ms=50")
    with client(b) as c:
        c.call(CreateTopicRequest("t", 1))
        c.call(ProduceRequest("t", 0, batch(b"x")))
    path = os.path.join(b.data_dir, "log-start-offset-checkpoint")
    import time
    deadline = time.monotonic() + 30  # a guard, not a speed assumption
    while time.monotonic() < deadline:
        if os.path.exists(path) and "t 0 0" in Path(path).read_text():
            break
        time.sleep(0.05)
    else:
        raise AssertionError("checkpoint never written while running")
    assert b.stop() == 0


def one_line_error(code: int, stdout: str, stderr: str) -> str:
    """The failure is one `strata: ...` line, the last on stderr; anything before it
    is structured log (JSON, since stderr is not a terminal)."""
    assert code != 0
    assert stdout == ""
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith("strata: "), stderr
    for line in lines[:-1]:
        assert json.loads(line)["event"], stderr
    return lines[-1]


def test_bad_configuration_is_one_line(tmp_path):
    line = one_line_error(*run_serve("--data-dir", str(tmp_path), "--set", "no.such.setting=1", "--strict"))
    assert "no.such.setting" in line
    line = one_line_error(*run_serve("--data-dir", str(tmp_path), "--port", "http"))
    assert "port" in line
    config = tmp_path / "server.properties"
    config.write_text("num.partitions = zero\n")
    line = one_line_error(*run_serve("--data-dir", str(tmp_path), "--config", str(config)))
    assert "num.partitions" in line and "server.properties" in line
    line = one_line_error(*run_serve("--data-dir", str(tmp_path), "--config", str(tmp_path / "missing")))
    assert "cannot read config file" in line
    line = one_line_error(*run_serve("--port", "0"))
    assert "data directory" in line
    (tmp_path / "a-file").write_text("")
    line = one_line_error(*run_serve("--data-dir", str(tmp_path / "a-file"), "--port", "0"))
    assert "a-file" in line


def test_environment_settings_apply(broker):
    b = broker(env={"STRATA_NUM_PARTITIONS": "4", "STRATA_NOT_A_SETTING": "x"})
    with client(b) as c:
        c.call(CreateTopicRequest("t", -1))
        assert len(c.call(MetadataRequest(["t"])).topics[0].partitions) == 4
    assert any(e.get("event") == "unknown_environment_setting" and e.get("variable") == "STRATA_NOT_A_SETTING"
               for e in b.log_events())


def test_busy_port_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line_error(*run_serve("--data-dir", str(tmp_path), "--host", "127.0.0.1", "--port", str(port)))
    assert line == f"strata: cannot listen on 127.0.0.1:{port}: Address already in use"
    # The failed start left the directory usable and unlocked.
    with BrokerProcess(tmp_path) as b:
        b.start()
        assert b.stop() == 0


def test_locked_data_dir_is_one_line(broker):
    b = broker()
    code, stdout, stderr = run_serve("--data-dir", b.data_dir, "--host", "127.0.0.1", "--port", "0")
    line = one_line_error(code, stdout, stderr)
    assert "in use by another process" in line
    # Nothing else but the first line (strata_starting): the lock is the first thing storage does.
    assert [json.loads(x)["event"] for x in stderr.strip().splitlines()[:-1]] == ["strata_starting"]
    with client(b) as c:  # the first broker is unharmed
        assert c.call(MetadataRequest()).error == NONE
