"""The README's examples run as written, in order, against a fresh broker.

Every ```sh and ```python block of README.md runs, in the README's order, in one
scratch directory that stands for the repository root (`.venv` and `pipeline`
link to this checkout's), with the venv's `bin` first on the PATH (what
`source .venv/bin/activate` does). The first `strata serve` line starts the
broker with its own arguments, on 127.0.0.1 and free ports; the blocks' fixed
addresses and ports (native, Kafka and admin) are mapped to the ones this run uses and
`/tmp/` to the scratch directory. Lines left out, each with its reason:
`make ...` (this test runs inside the venv `make test` made), the benchmarks
(`bench/`: minutes each, they run on their own), `docker ...` (unless docker is
present and STRATA_IMAGE_TESTS=1; tests/docker covers the image), `kcat` when it is
missing. Blocks that use Spark (pyspark, spark-submit, spark-class, the pipeline
job) run in the second test, skipped when pyspark or Java is missing.
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
from pathlib import Path

import pytest

from tests.broker_process import ROOT, BrokerProcess

README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPARK_MARKERS = ("pipeline", "spark")
TIMEOUT = 600.0  # a guard against hangs, not a speed assumption


def blocks() -> list[tuple[str, str]]:
    return [(lang, text) for lang, text in BLOCK.findall(README.read_text(encoding="utf-8"))
            if lang in ("sh", "python")]


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
    if word in ("docker", "podman") and not (shutil.which(word) and os.environ.get("STRATA_IMAGE_TESTS")):
        return f"{word}: image tests off or {word} missing"
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
        for lang, text in blocks():
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
