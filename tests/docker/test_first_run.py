"""Docker for a first run, without building the image: the README's `docker run` and
compose.yaml publish both protocols and set the advertised listener; the entry point maps
Kafka's KAFKA_ADVERTISED_LISTENERS and refuses an unwritable data directory with one line
naming it and the uids (a root-owned bind mount)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.docker.test_dockerfile import COMPOSE, ENTRYPOINT, FAKE_STRATA, ROOT, final_stage, run_serve

README = ROOT / "README.md"
IMAGE_UID = 10001


@pytest.fixture
def fake_bin(tmp_path):
    """A `strata` that prints its argv, pid and STRATA_* environment (test_dockerfile.py's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    strata = bin_dir / "strata"
    strata.write_text(FAKE_STRATA.format(python=sys.executable))
    strata.chmod(0o755)
    return bin_dir


def docker_section() -> str:
    text = README.read_text()
    return text[text.index("## Docker\n"):text.index("\n## ", text.index("## Docker\n") + 1)]


def docker_runs() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", docker_section(), re.S).group(1)
    return [cmd for cmd in block.replace("\\\n", " ").splitlines() if cmd.startswith("docker run")]


def test_readme_docker_run_publishes_both_protocols_and_advertises():
    runs = docker_runs()
    assert runs
    for cmd in runs:
        assert "-p 9000:9000" in cmd and "-p 9092:9092" in cmd, cmd
        assert "STRATA_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092" in cmd, cmd
    assert f"uid {IMAGE_UID}" in docker_section()


def test_image_runs_as_the_uid_the_readme_names():
    assert ("USER", f"{IMAGE_UID}:{IMAGE_UID}") in final_stage()
    exposed = " ".join(a for w, a in final_stage() if w == "EXPOSE").split()
    assert {"9000", "9092"} <= set(exposed)


def test_compose_publishes_both_protocols_and_advertises():
    text = COMPOSE.read_text()
    assert '"9000:9000"' in text and '"9092:9092"' in text
    assert 'STRATA_ADVERTISED_LISTENERS: "PLAINTEXT://localhost:9092"' in text
    assert f"uid {IMAGE_UID}" in text


def test_kafka_advertised_listeners_is_taken_as_strata_s(fake_bin):
    seen = run_serve(fake_bin, env={"KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://h:9092"})
    assert seen["env"]["STRATA_ADVERTISED_LISTENERS"] == "PLAINTEXT://h:9092"
    seen = run_serve(fake_bin, env={"KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://h:9092",
                                    "STRATA_ADVERTISED_LISTENERS": "PLAINTEXT://mine:9092"})
    assert seen["env"]["STRATA_ADVERTISED_LISTENERS"] == "PLAINTEXT://mine:9092"


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root without setpriv")
def test_unwritable_data_dir_is_one_clear_line(fake_bin):
    """A root-owned directory (a bind mount the host's root created) seen by the image's uid."""
    scratch = Path(tempfile.mkdtemp(prefix="strata-entrypoint-"))
    try:
        scratch.chmod(0o755)
        data = scratch / "data"
        data.mkdir(mode=0o755)
        env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "STRATA_DATA_DIR": str(data)}
        if os.geteuid() == 0:  # root writes anywhere: run as the image's uid, as the container does
            shutil.copy(ENTRYPOINT, scratch / "entrypoint.sh")
            argv = ["setpriv", f"--reuid={IMAGE_UID}", f"--regid={IMAGE_UID}", "--clear-groups",
                    "/bin/sh", str(scratch / "entrypoint.sh")]
            uid, owner = IMAGE_UID, "0:0"
        else:
            data.chmod(0o555)
            argv = ["/bin/sh", str(ENTRYPOINT)]
            uid, owner = os.geteuid(), f"{os.geteuid()}:{os.getegid()}"
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert f"the data directory {data} is not writable by uid {uid}" in lines[0]
        assert f"owned by uid:gid {owner}" in lines[0] and "chown -R" in lines[0]
    finally:
        for path in (scratch / "data", scratch):
            path.chmod(0o755)
        shutil.rmtree(scratch)
