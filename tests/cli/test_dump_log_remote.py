"""`strata dump-log` on remote segments (tiered storage): objects of moto's S3 server
on loopback and of a file store, by URL, by path, and a topic's segments with
--remote; the output is the local files' output, the object's URL in place of the path."""

from __future__ import annotations

import os

import obstore
import pytest

from broker.cli import main
from storage.remote.store import SEGMENT_SUFFIX, object_key
from tests.pipeline.remote_store import tier
from tests.storage.remote.conftest import file_config, remote_config, s3_config, s3_server  # noqa: F401
from tests.storage.remote.helpers import fill, open_tiered_log


@pytest.fixture
def tiered(tmp_path, remote_config, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    log = open_tiered_log(tmp_path / "data" / "clicks-0")
    fill(log, 3)
    partition = tier(tmp_path / "data", remote_config, log)
    yield remote_config, partition, tmp_path / "data" / "clicks-0"
    log.close()
    partition.metadata.close()


def dump(capsys, *args):
    try:
        code = main(["dump-log", *map(str, args)])
    except SystemExit as e:  # a usage error: argparse's exit 2
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def endpoint_args(config) -> list[str]:
    return ["--s3-endpoint", config.s3_endpoint] if config.s3_endpoint else []


def body(out: str) -> list[str]:
    """The lines after each `Dumping` line."""
    return [line for line in out.splitlines() if not line.startswith("Dumping ")]


@pytest.mark.parametrize("suffix", [".log", ".index", ".timeindex", ".txnindex"])
def test_a_remote_object_dumps_as_the_local_file(tiered, capsys, suffix):
    config, partition, local_dir = tiered
    segment = partition.metadata.readable_segments(partition.tp)[1]
    url = f"{config.location}/{object_key(segment, suffix)}"
    local = local_dir / f"{segment.start_offset:020d}{suffix}"
    code, out, err = dump(capsys, url, "--deep-iteration", *endpoint_args(config))
    assert code == 0 and err == "", err
    assert out.splitlines()[0] == f"Dumping {url}"
    local_code, local_out, _ = dump(capsys, local, "--deep-iteration")
    if suffix in (".index", ".timeindex"):
        assert body(out) == body(local_out)[:len(body(out))]  # the copy holds the valid entries only
        assert len(body(out)) > 0
    else:
        assert body(out) == body(local_out)
    if suffix == ".log":
        assert sum(line.startswith("| offset: ") for line in body(out)) == 50


def test_remote_lists_a_topics_finished_segments(tiered, capsys):
    config, partition, local_dir = tiered
    finished = partition.metadata.readable_segments(partition.tp)
    code, out, err = dump(capsys, "--remote", str(config.location), "--topic", "clicks", "--partition", "0",
                          "--print-data-log", *endpoint_args(config))
    assert code == 0 and err == "", err
    headers = [line for line in out.splitlines() if line.startswith("Dumping ")]
    assert headers == [f"Dumping {config.location}/{object_key(m, SEGMENT_SUFFIX)}" for m in finished]
    payloads = [line for line in out.splitlines() if " payload: " in line]
    assert len(payloads) == 150 and payloads[0].split(" key: ")[1].startswith("k0 payload: value-0-")
    local = [dump(capsys, local_dir / f"{m.start_offset:020d}.log", "--print-data-log")[1] for m in finished]
    assert body(out) == [line for text in local for line in body(text)]


def test_remote_problems_name_the_object(tiered, capsys):
    config, partition, _ = tiered
    segment = partition.metadata.readable_segments(partition.tp)[0]
    key = object_key(segment, SEGMENT_SUFFIX)
    data = bytes(obstore.get(partition.rsm.store, key).bytes())
    obstore.put(partition.rsm.store, key, data[:-7])  # a torn tail
    url = f"{config.location}/{key}"
    code, out, err = dump(capsys, url, *endpoint_args(config))
    assert code == 1
    assert err.startswith(f"{url}: torn tail: the last ")
    assert "invalid bytes at the end of" in out


def test_a_file_store_object_is_a_plain_segment_file(tiered, capsys, file_config):  # noqa: F811
    config, partition, _ = tiered
    if config.location.scheme != "file":
        pytest.skip("the file store's objects only")
    segment = partition.metadata.readable_segments(partition.tp)[2]
    path = os.path.join(config.location.prefix, object_key(segment, ".index"))
    code, out, err = dump(capsys, path)
    assert code == 0 and err == "" and "offset: 119 position: 2291" in out


def test_remote_errors(tiered, capsys):
    config, _, _ = tiered
    extra = endpoint_args(config)
    assert dump(capsys, "--remote", str(config.location), "--topic", "nope", *extra)[2] == \
        f"strata: {config.location}: no finished remote segments of nope\n"
    code, _, err = dump(capsys, "--remote", str(config.location), *extra)
    assert code == 2 and "--remote needs --topic" in err
    code, _, err = dump(capsys, "--topic", "clicks")
    assert code == 2 and "--topic and --partition go with --remote" in err
    code, _, err = dump(capsys, "--remote", "file:///nonexistent/store", "--topic", "t")
    assert code == 1 and err == "strata: remote store file:///nonexistent/store: no such directory\n"
    assert not os.path.exists("/nonexistent/store")
    code, _, err = dump(capsys, "--remote", "gs://bucket", "--topic", "t")
    assert code == 1 and "must start with s3:// or file://" in err and "Traceback" not in err
    missing = f"{config.location}/clicks-Dz6MGn0rTFWOEVqdPCsfAA/0/00000000000000000000-Dz6MGn0rTFWOEVqdPCsfAA.log"
    code, _, err = dump(capsys, missing, *extra)
    assert code == 1 and "is missing" in err or "no such file" in err
    code, _, err = dump(capsys, f"{config.location}/x.log", *extra)
    assert code == 1 and ("not the URL of a remote segment object" in err or "no such file" in err)
