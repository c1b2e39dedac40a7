"""The real image, built and run with podman the way a user runs it (`make test-docker`).

Skipped unless STRATA_IMAGE_TESTS=1 (conftest.py), and skipped when podman or the base image
`python:3.11-slim-bookworm` is missing (../shared/tools/containers-setup provides both with
no registry access; its env.sh is read here when the caller has not sourced it).

Covered: the image's metadata (non-root user, port, volume, healthcheck, tini entry point);
a broker on a named volume, published on 127.0.0.1, that the host's `strata` CLI creates a
topic on, produces to and consumes from; the process tree (tini -> broker, no shell left);
`podman healthcheck run`; JSON log lines; `podman stop` (SIGTERM) -> exit 0 with the
clean-shutdown marker and checkpoints on the volume; a second container on the same volume
that reads everything back, with a mounted server.properties and STRATA_* overrides taking
effect in the documented order; the entry point's command mode. Everything created is removed,
pass or fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "python:3.11-slim-bookworm"
NATIVE_PORT = 9000
READY_TIMEOUT_S = 180  # generous: a loaded 2-core CI machine, not a speed assumption
BUILD_TIMEOUT_S = 1800
STOP_TIMEOUT_S = 60  # podman stop --time: SIGKILL only after this
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
UID = "10001"


# ---- podman -----------------------------------------------------------------------------------

def containers_env() -> dict[str, str]:
    """os.environ, plus containers-setup's env.sh when it has not been sourced."""
    env = dict(os.environ)
    if "CONTAINERS_STORAGE_CONF" in env:
        return env
    env_file = Path(os.environ.get("CTR", "/var/tmp/strata-containers")) / "env.sh"
    if env_file.is_file():
        for line in env_file.read_text().splitlines():
            words = shlex.split(line)
            if words[:1] == ["export"]:
                env.update(word.split("=", 1) for word in words[1:] if "=" in word)
    return env


ENV = containers_env()


def podman(*args: str, timeout: float = 120, check: bool = True, input: str | None = None):
    result = subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True,
                            timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def inspect(obj: str, fmt: str) -> str:
    return podman("inspect", "--format", fmt, obj).stdout.strip()


def say(config, line: str) -> None:
    """A timing line on the terminal, past pytest's output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write(f"\n[test_image] {line}\n")
        return
    with capture.global_and_fixture_disabled():
        reporter.write(f"\n[test_image] {line}\n")


def image_ids() -> dict[str, list[str]]:
    """Every image, intermediate ones included: id -> names."""
    return {i["Id"]: i.get("Names") or [] for i in json.loads(podman("images", "-a", "--format", "json").stdout)}


@pytest.fixture(scope="module")
def image(request):
    if shutil.which("podman") is None:
        pytest.skip("podman not installed (../shared/tools/containers-setup installs it)")
    if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
        pytest.skip(f"base image {BASE_IMAGE} not present (run ../shared/tools/containers-setup, "
                    f"or podman pull {BASE_IMAGE})")
    tag = f"localhost/strata-test:{uuid.uuid4().hex[:12]}"
    before = set(image_ids())
    started = time.monotonic()
    try:
        # --format docker: the OCI format has no HEALTHCHECK. --pull=never: no registry here.
        podman("build", "--pull=never", "--format", "docker", "-t", tag, str(ROOT), timeout=BUILD_TIMEOUT_S)
        say(request.config, f"podman build: {time.monotonic() - started:.0f} s")
        yield tag
    finally:
        # The image and the layers this build added (the builder stage, cache entries); layers
        # that were there before are a cache this build reused, and stay.
        ours = [i for i, names in image_ids().items() if i not in before and set(names) <= {tag}]
        if ours:
            podman("rmi", "-f", *ours, check=False, timeout=300)


class Resources:
    """Containers and volumes of one test, removed at teardown whatever happened."""

    def __init__(self, image: str):
        self.image = image
        self.containers: list[str] = []
        self.volumes: list[str] = []

    def volume(self) -> str:
        name = f"strata-test-{uuid.uuid4().hex[:12]}"
        podman("volume", "create", name)
        self.volumes.append(name)
        return name

    def run(self, volume: str, *options: str, args: tuple[str, ...] = ()) -> str:
        name = f"strata-test-{uuid.uuid4().hex[:12]}"
        self.containers.append(name)
        podman("run", "-d", "--name", name, "-p", f"127.0.0.1::{NATIVE_PORT}",
               "-v", f"{volume}:/var/lib/strata", *options, self.image, *args)
        return name

    def once(self, *args: str, volume: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """`podman run --rm` of the image with a command (the entry point's command mode)."""
        mounts = ["-v", f"{volume}:/var/lib/strata"] if volume else []
        name = f"strata-test-{uuid.uuid4().hex[:12]}"
        self.containers.append(name)  # --rm removes it; cleanup covers a timeout
        return podman("run", "--rm", "--name", name, *mounts, self.image, *args, timeout=timeout)

    def cleanup(self) -> None:
        for name in self.containers:
            podman("rm", "-f", "--time", "0", name, check=False)
        for name in self.volumes:
            podman("volume", "rm", "-f", name, check=False)


@pytest.fixture
def resources(image):
    res = Resources(image)
    try:
        yield res
    finally:
        res.cleanup()


# ---- talking to the broker ----------------------------------------------------------------------

def load_healthcheck():
    spec = importlib.util.spec_from_file_location("strata_healthcheck", ROOT / "docker" / "healthcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HEALTHCHECK = load_healthcheck()


def logs(container: str) -> tuple[str, str]:
    result = podman("logs", container, check=False)
    return result.stdout, result.stderr


def host_port(container: str) -> int:
    # "127.0.0.1:41234" (the host port was left for podman to choose: no race for a free port)
    mapping = podman("port", container, f"{NATIVE_PORT}/tcp").stdout.strip().splitlines()[0]
    return int(mapping.rsplit(":", 1)[1])


def wait_ready(container: str) -> int:
    """The host port once the broker answers METADATA through it."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    port, problem = None, "not started"
    while time.monotonic() < deadline:
        state = inspect(container, "{{.State.Status}}")
        if state not in ("created", "running"):
            out, err = logs(container)
            pytest.fail(f"container {state} before answering:\n{out}\n{err}")
        if state == "running":
            port = port or host_port(container)
            problem = HEALTHCHECK.check("127.0.0.1", port, timeout=2.0)
            if problem is None:
                return port
        time.sleep(0.5)
    out, err = logs(container)
    pytest.fail(f"no answer within {READY_TIMEOUT_S} s ({problem}):\n{out}\n{err}")


def cli(*args: str, input: str | None = None, timeout: float = 120) -> str:
    result = subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True,
                            input=input, timeout=timeout, cwd=ROOT)
    assert result.returncode == 0, f"strata {' '.join(args)}: {result.stderr}"
    return result.stdout


def call(port: int, request):
    """One native request, its parsed response."""
    from protocol import FrameDecoder, encode_request, parse_response

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_request(request))
        decoder = FrameDecoder()
        while (frame := decoder.next_frame()) is None:
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            decoder.feed(chunk)
        return parse_response(request.TYPE, frame)


def stop(container: str) -> float:
    """`podman stop` (SIGTERM, then SIGKILL after STOP_TIMEOUT_S); asserts a clean exit 0."""
    started = time.monotonic()
    podman("stop", "--time", str(STOP_TIMEOUT_S), container, timeout=STOP_TIMEOUT_S + 60)
    took = time.monotonic() - started
    code = inspect(container, "{{.State.ExitCode}}")
    out, err = logs(container)
    assert code == "0", f"exit code {code} after {took:.1f} s:\n{out}\n{err}"
    assert took < STOP_TIMEOUT_S, "stopped by SIGKILL, not by the broker"
    return took


def check_json_logs(container: str) -> list[dict]:
    """Every log line is a JSON object, except the ready lines the CLI prints to stdout."""
    out, err = logs(container)
    events, other = [], []
    for line in (out + "\n" + err).splitlines():
        if not line.strip():
            continue
        if line.startswith(("strata listening on ", "strata kafka listening on ", "strata listener ")):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            other.append(line)
            continue
        assert isinstance(event, dict) and {"event", "level", "timestamp"} <= set(event), line
        events.append(event)
    assert other == [], "log lines that are not JSON:\n" + "\n".join(other)
    assert f"strata listening on 0.0.0.0:{NATIVE_PORT}" in out.splitlines() + err.splitlines()
    return events


def health_status(container: str) -> str:
    for fmt in ("{{.State.Health.Status}}", "{{.State.Healthcheck.Status}}"):
        result = podman("inspect", "--format", fmt, container, check=False)
        if result.returncode == 0 and result.stdout.strip() not in ("", "<no value>"):
            return result.stdout.strip()
    return ""


# ---- tests --------------------------------------------------------------------------------------

def test_image_metadata(image):
    config = json.loads(podman("image", "inspect", "--format", "{{json .Config}}", image).stdout)
    assert config["User"] == f"{UID}:{UID}"
    assert sorted(config["ExposedPorts"]) == [f"{NATIVE_PORT}/tcp", "9092/tcp"]  # native, Kafka
    assert list(config["Volumes"]) == ["/var/lib/strata"]
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "/usr/local/bin/strata-entrypoint"]
    assert "STRATA_LOG_FORMAT=json" in config["Env"]
    # Docker keeps HEALTHCHECK in .Config; podman shows it at the top level of the inspect output.
    details = json.loads(podman("image", "inspect", image).stdout)[0]
    healthcheck = config.get("Healthcheck") or details.get("Healthcheck") or {}
    assert healthcheck.get("Test") == ["CMD", "/opt/strata/bin/python", "/usr/local/lib/strata/healthcheck.py"]
    assert "Cmd" not in config or not config["Cmd"]  # not the base image's `python3`


def test_command_mode_and_cli_in_the_image(resources):
    """A non-option first argument runs as a command, here the image's own `strata` CLI."""
    result = resources.once("strata", "--help")
    assert "serve" in result.stdout and "topics" in result.stdout
    assert resources.once("id", "-u").stdout.strip() == UID
    assert resources.once("cat", "/etc/strata/server.properties").stdout == \
        (ROOT / "docker" / "server.properties").read_text()


def test_broker_lifecycle_on_a_volume(resources, tmp_path, request):
    from protocol import CreateTopicRequest, DescribeConfigRequest, ErrorCode, MetadataRequest

    volume = resources.volume()

    # ---- first container: create, produce, consume --------------------------------------------
    started = time.monotonic()
    first = resources.run(volume)
    port = wait_ready(first)
    say(request.config, f"first container ready in {time.monotonic() - started:.1f} s")
    server = f"127.0.0.1:{port}"
    messages = [f"message-{i} {'x' * (i % 7)}" for i in range(200)]

    assert cli("topics", "create", "events", "--partitions", "3", "--bootstrap-server", server) \
        == "Created topic events.\n"
    cli("produce", "events", "--bootstrap-server", server, input="\n".join(messages) + "\n")
    consumed = cli("consume", "events", "--bootstrap-server", server, "--from-beginning",
                   "--max-messages", str(len(messages)), "--timeout-ms", "60000").splitlines()
    assert sorted(consumed) == sorted(messages)
    (topic,) = call(port, MetadataRequest(("events",))).topics
    assert len(topic.partitions) == 3
    assert sum(p.log_end_offset for p in topic.partitions) == len(messages)

    # tini is PID 1 and the broker its direct child: the entry point exec'd, no shell in between.
    procs = json.loads(podman("exec", first, "python", "-c", PROCESS_TREE).stdout)
    assert procs["1"]["cmd"][0].endswith("tini")
    serve = ["serve", "--data-dir", "/var/lib/strata", "--host", "0.0.0.0", "--port", str(NATIVE_PORT),
             "--config", "/etc/strata/server.properties"]
    (broker,) = [p for p in procs.values() if "serve" in p["cmd"]]
    assert broker["cmd"][-len(serve) - 1:] == ["/opt/strata/bin/strata", *serve], broker
    assert broker["ppid"] == 1 and broker["uid"] == int(UID)

    # The HEALTHCHECK, run by podman inside the container.
    check = podman("healthcheck", "run", first, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert health_status(first) == "healthy"

    took = stop(first)
    say(request.config, f"graceful stop in {took:.1f} s")
    logged = check_json_logs(first)
    events = [e["event"] for e in logged]
    assert "broker_started" in events and "broker_stopped" in events
    # e.g. no unknown_environment_setting: the entry point's own STRATA_* stay out of the broker's
    assert [e for e in logged if e["level"] not in ("debug", "info")] == []

    # The volume: clean-shutdown marker, checkpoints, partition directories, owned by the user.
    listing = resources.once("sh", "-c", "cd /var/lib/strata && stat -c '%u %n' .* *", volume=volume).stdout
    owners = dict(reversed(line.split(" ", 1)) for line in listing.splitlines())
    for name in (CLEAN_SHUTDOWN_MARKER, *CHECKPOINTS, "events-0", "events-1", "events-2"):
        assert owners.get(name) == UID, listing
    checkpoint = resources.once("cat", f"/var/lib/strata/{CHECKPOINTS[0]}", volume=volume).stdout
    assert {line.rsplit(" ", 1)[0] for line in checkpoint.splitlines()[2:]} >= \
        {"events 0", "events 1", "events 2"}, checkpoint

    # ---- second container, same volume: the data is back; file < environment < arguments ------
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=4\nlog.segment.bytes=1048576\nlog.retention.hours=24\n")
    props.chmod(0o644)
    second = resources.run(volume, "-v", f"{props}:/etc/strata/server.properties:ro",
                           "-e", "STRATA_NUM_PARTITIONS=2", "-e", "STRATA_LOG_RETENTION_HOURS=48",
                           args=("--set", "log.retention.hours=72"))
    port = wait_ready(second)
    server = f"127.0.0.1:{port}"
    consumed = cli("consume", "events", "--bootstrap-server", server, "--from-beginning",
                   "--max-messages", str(len(messages)), "--timeout-ms", "60000").splitlines()
    assert sorted(consumed) == sorted(messages)
    assert "events" in cli("topics", "list", "--bootstrap-server", server).splitlines()

    assert call(port, CreateTopicRequest("defaults", -1)).error == ErrorCode.NONE
    (topic,) = call(port, MetadataRequest(("defaults",))).topics
    assert len(topic.partitions) == 2  # STRATA_NUM_PARTITIONS beats the file's 4
    configs = dict(call(port, DescribeConfigRequest("defaults")).configs)
    assert configs["segment.bytes"] == "1048576"  # from the mounted file
    assert configs["retention.ms"] == str(72 * 3_600_000)  # --set beats the environment

    stop(second)
    loaded = [e for e in check_json_logs(second) if e["event"] == "logs_loaded"]
    assert loaded and loaded[0].get("clean_shutdown") is True, loaded


PROCESS_TREE = """
import json, os
out = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = [a.decode() for a in f.read().split(b"\\0") if a]
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        continue
    out[pid] = {"cmd": cmd, "ppid": int(status["PPid"]), "uid": int(status["Uid"].split()[0])}
print(json.dumps(out))
"""
