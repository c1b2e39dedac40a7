"""The README's examples run as written, in order, against a fresh broker.

Every ```sh and ```python block of README.md runs, in the README's order, in one
scratch directory that stands for the repository root (`.venv` and `pipeline`
link to this checkout's), with the venv's `bin` first on the PATH (what
`source .venv/bin/activate` does). The first `strata serve` line starts the
broker with its own arguments, on 127.0.0.1 and free ports; the blocks' fixed
addresses and ports (native, Kafka and admin) are mapped to the ones this run uses and
`/tmp/` to the scratch directory. Lines left out, each with its reason:
`make ...` (this test runs inside the venv `make test` made), the benchmarks
(`bench/`: minutes each, they run on their own), `kcat` when it is missing. Blocks
that use Spark (pyspark, spark-submit, spark-class, the pipeline job) run in the
second test, skipped when pyspark or Java is missing.

The blocks of the Docker section run in the third test (`make test-docker`, where
podman is: tests/docker/runtime.py), in a copy of this checkout's files (what a fresh
clone holds), with `docker` run by podman and `docker compose` by podman-compose, and
the host ports, the container's name and the volume's mapped to ones this run owns.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.broker_process import ROOT, BrokerProcess
from tests.docker.runtime import ENV as CONTAINERS_ENV
from tests.docker.runtime import image_ids, podman, require

README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPARK_MARKERS = ("pipeline", "spark")
TIMEOUT = 600.0  # a guard against hangs, not a speed assumption


DOCKER_SECTION = "## Docker"


def blocks(*, docker: bool = False) -> list[tuple[str, str]]:
    """The sh and python blocks in order: those of the Docker section (with its
    subsections) when `docker`, else all the others."""
    readme = README.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(readme):
        lang, text = match.groups()
        section = re.findall(r"^## .*$", readme[:match.start()], re.M)
        in_docker = bool(section) and section[-1].strip() == DOCKER_SECTION
        if lang in ("sh", "python") and in_docker == docker:
            found.append((lang, text))
    return found


def commands(text: str) -> list[str]:
    """The logical lines of a shell block (backslash continuations joined), comments
    and blank lines left out."""
    out, pending = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line)
    return out


def uses_spark(text: str) -> bool:
    return any(marker in text for marker in SPARK_MARKERS)


def skip_reason(command: str) -> str | None:
    word = command.split()[0]
    if word == "make":
        return "make: this test runs inside the venv make test made"
    if "bench/" in command:
        return "benchmark"
    if word == "kcat" and not shutil.which("kcat"):
        return "kcat missing"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Readme:
    """The scratch root, the broker the README's `strata serve` line starts, and the
    substitutions that point the blocks at them."""

    def __init__(self, root: Path):
        self.root = root
        (root / ".venv").symlink_to(Path(sys.prefix))
        (root / "pipeline").symlink_to(ROOT / "pipeline")
        self.broker: BrokerProcess | None = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
        self.env["PATH"] = f"{root / '.venv' / 'bin'}{os.pathsep}{self.env['PATH']}"
        self.env["PYTHONPATH"] = str(ROOT)
        self.subs: dict[str, str] = {"/tmp/": f"{root}/tmp/"}
        (root / "tmp").mkdir()
        self.skipped: list[str] = []

    def start_broker(self, command: str) -> None:
        args = command.split()[2:]
        data_dir = args[args.index("--data-dir") + 1]
        del args[args.index("--data-dir"):args.index("--data-dir") + 2]
        self.broker = BrokerProcess(self.root / data_dir, *args).start()
        master, ui_master, ui_worker = free_port(), free_port(), free_port()
        self.subs.update({"localhost:9000": f"127.0.0.1:{self.broker.port}",
                          "localhost:9092": f"127.0.0.1:{self.broker.kafka_port}",
                          "localhost:9644": f"127.0.0.1:{self.broker.admin_port}",
                          ":7077": f":{master}", "--port 7077": f"--port {master}",
                          "--webui-port 8080": f"--webui-port {ui_master}",
                          "--webui-port 8081": f"--webui-port {ui_worker}"})

    def substitute(self, text: str) -> str:
        for old, new in self.subs.items():
            text = text.replace(old, new)
        return text

    def run_sh(self, text: str) -> None:
        kept = []
        for command in commands(text):
            if command.startswith("strata serve"):
                if self.broker is None:
                    self.start_broker(command)
                continue
            reason = skip_reason(command)
            if reason:
                self.skipped.append(f"{command}  ({reason})")
                continue
            kept.append(command)
        if kept:
            self.run(["bash", "-e", "-o", "pipefail", "-c", self.substitute("\n".join(kept))], text)

    def run_python(self, text: str) -> None:
        self.run([sys.executable, "-c", self.substitute(text)], text)

    def run(self, argv: list[str], block: str) -> None:
        process = subprocess.Popen(argv, cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=TIMEOUT)
        finally:
            # whatever the block left running in the background (a Spark master, ...)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        assert process.returncode == 0, f"README block failed (exit {process.returncode}):\n{block}\n" \
                                        f"--- output ---\n{output}"

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()


def run_blocks(tmp_path: Path, *, spark: bool) -> Readme:
    readme = Readme(tmp_path)
    try:
        for lang, text in blocks(docker=False):
            if uses_spark(text) and not spark:
                continue
            if lang == "sh":
                readme.run_sh(text)
            elif readme.broker is not None:
                readme.run_python(text)
        return readme
    finally:
        readme.close()


def test_readme_blocks_run_in_order(tmp_path):
    readme = run_blocks(tmp_path, spark=False)
    assert readme.broker is not None, "no strata serve line in the README"
    # the CLI block's produce and consume went through: the dump shows the records
    assert any(p.name.startswith("events-") for p in (tmp_path / "data").iterdir())


def _spark_missing() -> str | None:
    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "no Java runtime"
    return None


@pytest.mark.skipif(_spark_missing() is not None, reason=f"README's Spark blocks: {_spark_missing()}")
def test_readme_blocks_with_spark_run_in_order(tmp_path):
    """All the blocks again, the Spark ones included: the pipeline on local[*] and the job
    through spark-submit on a standalone cluster (master and worker from the wheel)."""
    run_blocks(tmp_path, spark=True)
    assert (tmp_path / "tmp" / "event-counts").is_dir()
    assert any((tmp_path / "tmp" / "spark-work").iterdir())  # the worker ran the job's executors


# ---- the Docker section ---------------------------------------------------------------------

DOCKER_SHIM = """#!/bin/sh
# docker's CLI, as podman takes it: `docker compose` is podman-compose.
if [ "$1" = compose ]; then shift; exec podman-compose "$@"; fi
exec podman "$@"
"""
# Lines the test cannot run as written, each with its reason.
DOCKER_LEFT_OUT = {"broker.example.com": "needs the user's certificates and DNS name",
                   "<container>": "names the user's container"}
IMAGE = "localhost/strata:latest"  # what `docker build -t strata .` tags


def checkout_copy(into: Path) -> None:
    """This checkout's files as a fresh clone has them: tracked and new ones, not ignored ones."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


@pytest.mark.docker
def test_readme_docker_section_runs_in_order(tmp_path):
    """The Docker section's blocks, in order, as one user in one shell at the root of a fresh
    clone: build, run on a volume, wait for ready, produce, stop, run again with a copied and
    mounted server.properties, consume what was produced, stop, compose up and down. Its fixed
    host ports, container name and volume are mapped to this run's (also in the copy's
    compose.yaml; COMPOSE_PROJECT_NAME names the compose project), so that nothing of the
    machine's is used or removed. Lines that need the user's own files or names are left out
    (DOCKER_LEFT_OUT)."""
    require()
    root = tmp_path / "strata"
    root.mkdir()
    checkout_copy(root)
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "docker").write_text(DOCKER_SHIM)
    (shims / "docker").chmod(0o755)

    run = uuid.uuid4().hex[:12]
    name, volume, project = f"strata-readme-{run}", f"strata-readme-{run}", f"strata-readme-{run}"
    native, kafka, admin = free_port(), free_port(), free_port()
    subs = {"localhost:9000": f"127.0.0.1:{native}",
            "-p 9000:9000": f"-p 127.0.0.1:{native}:9000", "-p 9092:9092": f"-p 127.0.0.1:{kafka}:9092",
            "PLAINTEXT://localhost:9092": f"PLAINTEXT://127.0.0.1:{kafka}",
            "strata-data:/var/lib/strata": f"{volume}:/var/lib/strata",
            "--name strata ": f"--name {name} ", "docker stop strata": f"docker stop {name}",
            "docker rm strata": f"docker rm {name}", "docker exec strata ": f"docker exec {name} "}
    compose = root / "docker" / "compose.yaml"
    text = compose.read_text()
    for old, new in {'"9000:9000"': f'"127.0.0.1:{native}:9000"', '"9092:9092"': f'"127.0.0.1:{kafka}:9092"',
                     '"9644:9644"': f'"127.0.0.1:{admin}:9644"',
                     "PLAINTEXT://localhost:9092": f"PLAINTEXT://127.0.0.1:{kafka}"}.items():
        assert old in text, old
        text = text.replace(old, new)
    compose.write_text(text)

    env = {k: v for k, v in CONTAINERS_ENV.items() if not k.startswith("STRATA_")}
    # BUILDAH_FORMAT=docker: `docker build` keeps the HEALTHCHECK under podman too.
    env.update(PATH=f"{shims}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               BUILDAH_FORMAT="docker", COMPOSE_PROJECT_NAME=project)
    previous = podman("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout.strip()
    before = set(image_ids())
    left_out: list[str] = []
    outputs: list[str] = []
    try:
        section = blocks(docker=True)
        assert section, "no block in the README's Docker section"
        for lang, block in section:
            assert lang == "sh", block
            kept = []
            for command in commands(block):
                reason = next((why for mark, why in DOCKER_LEFT_OUT.items() if mark in command), None)
                if reason:
                    left_out.append(f"{command}  ({reason})")
                    continue
                for old, new in subs.items():
                    command = command.replace(old, new)
                kept.append(command)
            if kept:
                outputs.append(run_script(kept, block, root, env))
        # the record produced before the restart, consumed after it from the same volume
        assert "hello from the host" in outputs[0].splitlines(), outputs[0]
        # the section built the image, ran it twice and compose once, and left nothing running
        assert podman("image", "exists", IMAGE, check=False).returncode == 0
        assert podman("ps", "-q", "--filter", f"name={name}").stdout.strip() == ""
        assert podman("ps", "-q", "--filter", f"label=io.podman.compose.project={project}").stdout.strip() == ""
        listing = podman("run", "--rm", "-v", f"{volume}:/var/lib/strata", IMAGE, "ls", "-a",
                         "/var/lib/strata").stdout.split()
        assert ".kafka_cleanshutdown" in listing and "docker-events-0" in listing, listing
    finally:
        subprocess.run(["podman-compose", "-f", str(compose), "down", "-v", "-t", "0"], env=env, cwd=root,
                       capture_output=True, timeout=300)
        podman("rm", "-f", "--time", "0", name, check=False)
        podman("volume", "rm", "-f", volume, check=False)
        if previous:  # the machine's own strata image, tagged again
            podman("tag", previous, IMAGE, check=False)
        else:
            podman("rmi", IMAGE, check=False)
        # the layers the section's builds added and nothing else names (a build that failed midway)
        ours = [i for i, names in image_ids().items() if i not in before and not names]
        if ours:
            podman("rmi", "-f", *ours, check=False, timeout=300)


def run_script(commands_: list[str], block: str, root: Path, env: dict[str, str]) -> str:
    """The commands in one bash (-x: each echoed), in the scratch root; their output."""
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-x", "-c", "\n".join(commands_)], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, f"README block failed (exit {result.returncode}):\n{block}\n" \
                                   f"--- output ---\n{result.stdout}"
    return result.stdout
