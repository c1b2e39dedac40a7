"""The real image, built and run with podman the way a user runs it (`make test-docker`).

Run only when STRATA_IMAGE_TESTS=1 (tests/conftest.py); skipped where podman or the base image
`python:3.11-slim-bookworm` is missing, and failed there under CI (tests/docker/runtime.py;
../shared/tools/containers-setup provides both with no registry access, and its env.sh is read
here when the caller has not sourced it). One image per session (conftest.py's `image`).

Covered: the image's metadata (non-root user, ports, volume, healthcheck, tini entry point);
a broker on a named volume with both listeners published on free ports of 127.0.0.1 and the
Kafka listener advertised there: 10,000 keyed records produced and consumed by confluent-kafka
through the advertised listener and 10,000 by the host's `strata` command line through the
native port; the process tree (tini -> broker, no shell left, not root); the HEALTHCHECK
reporting healthy; JSON log lines; `podman stop` (SIGTERM, SIGKILL after 10 s) -> exit 0 with
the clean-shutdown marker and checkpoints on the volume; a second container on the same volume
that serves every record, with a mounted server.properties and STRATA_* overrides taking effect
in the documented order; the entry point's command mode; docker/compose.yaml run by
podman-compose. Everything created is removed, pass or fail.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.docker.runtime import ENV, podman, say

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's: strata, podman-compose
NATIVE_PORT = 9000
KAFKA_PORT = 9092
ADMIN_PORT = 9644
READY_TIMEOUT_S = 180  # generous: a loaded 2-core CI machine, not a speed assumption
STOP_TIMEOUT_S = 10  # podman stop --time (docker's default): SIGKILL only after this
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"  # storage/manager.py's CLEAN_SHUTDOWN_FILE
CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
UID = "10001"
RECORDS = 10_000
KEYS = 100


# ---- podman -----------------------------------------------------------------------------------

def inspect(obj: str, fmt: str) -> str:
    return podman("inspect", "--format", fmt, obj).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A running container and the host ports its listeners are published on."""

    def __init__(self, name: str, native: int, kafka: int):
        self.name = name
        self.native = native
        self.kafka = kafka

    @property
    def server(self) -> str:
        """The native listener, for the `strata` command line."""
        return f"127.0.0.1:{self.native}"

    @property
    def bootstrap(self) -> str:
        """The Kafka listener, for Kafka clients: the address it advertises."""
        return f"127.0.0.1:{self.kafka}"


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

    def run(self, volume: str, *options: str, args: tuple[str, ...] = ()) -> Broker:
        """`podman run -d` on the volume, both listeners published on free ports of 127.0.0.1
        and each advertised at its published address."""
        for _attempt in range(3):
            name = f"strata-test-{uuid.uuid4().hex[:12]}"
            self.containers.append(name)
            broker = Broker(name, free_port(), free_port())
            result = podman("run", "-d", "--name", name,
                            "-p", f"127.0.0.1:{broker.native}:{NATIVE_PORT}",
                            "-p", f"127.0.0.1:{broker.kafka}:{KAFKA_PORT}",
                            "-e", f"STRATA_ADVERTISED_LISTENERS=PLAINTEXT://{broker.bootstrap}",
                            "-e", f"STRATA_NATIVE_ADVERTISED_LISTENERS=PLAINTEXT://{broker.server}",
                            "-v", f"{volume}:/var/lib/strata", *options, self.image, *args, check=False)
            if result.returncode == 0:
                return broker
            # another process took a port between free_port() and podman binding it: new ports
            if "address already in use" not in result.stderr:
                raise AssertionError(f"podman run -> {result.returncode}\n{result.stdout}\n{result.stderr}")
            podman("rm", "-f", name, check=False)
        raise AssertionError("podman run: the free ports were taken three times")

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


def wait_ready(broker: Broker) -> None:
    """Returns once the broker answers METADATA through its published native port and the
    image's HEALTHCHECK reports the container healthy. Podman runs the check on a timer only
    where systemd is; `podman healthcheck run` runs it now, as the timer would."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    problem = "not started"
    while time.monotonic() < deadline:
        state = inspect(broker.name, "{{.State.Status}}")
        if state not in ("created", "running"):
            out, err = logs(broker.name)
            pytest.fail(f"container {state} before answering:\n{out}\n{err}")
        if state == "running":
            problem = HEALTHCHECK.check("127.0.0.1", broker.native, timeout=2.0)
            if problem is None:
                check = podman("healthcheck", "run", broker.name, check=False)
                if check.returncode == 0 and health_status(broker.name) == "healthy":
                    return
                problem = f"healthcheck: {health_status(broker.name)} {check.stdout.strip()} {check.stderr.strip()}"
        time.sleep(0.5)
    out, err = logs(broker.name)
    pytest.fail(f"not ready within {READY_TIMEOUT_S} s ({problem}):\n{out}\n{err}")


def cli(*args: str, input: str | None = None, timeout: float = 300) -> str:
    """The host's `strata` command (the venv's console script), as a user runs it."""
    result = subprocess.run([str(BIN / "strata"), *args], capture_output=True, text=True,
                            input=input, timeout=timeout, cwd=ROOT)
    assert result.returncode == 0, f"strata {' '.join(args)}: {result.stderr}"
    return result.stdout


def keyed_records(tag: str) -> list[tuple[str, str]]:
    """RECORDS (key, value) pairs over KEYS keys, values of varying length."""
    return [(f"key-{i % KEYS}", f"{tag}-{i} {'x' * (i % 7)}") for i in range(RECORDS)]


def cli_produce(broker: Broker, topic: str, records: list[tuple[str, str]]) -> None:
    lines = "".join(f"{key}:{value}\n" for key, value in records)
    cli("produce", topic, "--key-separator", ":", "--bootstrap-server", broker.server, input=lines)


def cli_consume(broker: Broker, topic: str, count: int) -> list[tuple[str, str]]:
    out = cli("consume", topic, "--bootstrap-server", broker.server, "--from-beginning", "--print-key",
              "--max-messages", str(count), "--timeout-ms", "60000")
    return [tuple(line.split("\t", 1)) for line in out.splitlines()]


def kafka_produce(broker: Broker, topic: str, records: list[tuple[str, str]]) -> dict[str, set[int]]:
    """confluent-kafka's Producer through the advertised listener; the partitions each key
    was written to, from the delivery reports."""
    from confluent_kafka import Producer

    partitions: dict[str, set[int]] = {}
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            partitions.setdefault(msg.key().decode(), set()).add(msg.partition())

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all"})
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value=value.encode(), key=key.encode(), on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(1.0)
        producer.poll(0)
    assert producer.flush(120) == 0, "records left undelivered"
    assert errors == []
    assert sum(map(len, partitions.values())) == len(partitions)  # one partition per key
    return partitions


def kafka_consume(broker: Broker, topic: str, count: int) -> list[tuple[str, str, int]]:
    """confluent-kafka's Consumer in a new group, from the beginning, through the advertised
    listener: (key, value, partition) of `count` records."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[tuple[str, str, int]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append((msg.key().decode(), msg.value().decode(), msg.partition()))
    finally:
        consumer.close()
    return got


def advertised(broker: Broker) -> list[str]:
    """The broker addresses Metadata announces to a Kafka client."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
    return [f"{b.host}:{b.port}" for b in metadata.brokers.values()]


def create_kafka_topic(broker: Broker, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(60)


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
    """`podman stop` (SIGTERM, then SIGKILL after STOP_TIMEOUT_S); asserts that the broker
    ended on SIGTERM, before the SIGKILL: exit code 0 (a SIGKILL is 137), and no word of
    podman's that it resorted to SIGKILL."""
    started = time.monotonic()
    result = podman("stop", "--time", str(STOP_TIMEOUT_S), container, timeout=STOP_TIMEOUT_S + 60)
    took = time.monotonic() - started
    code = inspect(container, "{{.State.ExitCode}}")
    out, err = logs(container)
    assert code == "0", f"exit code {code} after {took:.1f} s:\n{out}\n{err}"
    assert "SIGKILL" not in result.stderr, f"stopped by SIGKILL, not by the broker: {result.stderr}"
    return took


def check_json_logs(container: str) -> list[dict]:
    """Every log line is a JSON object, except the ready lines the CLI prints to stdout."""
    out, err = logs(container)
    events, other = [], []
    for line in (out + "\n" + err).splitlines():
        if not line.strip():
            continue
        if line.startswith(("strata listening on ", "strata kafka listening on ", "strata admin listening on ",
                            "strata listener ")):
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
    # native, Kafka, admin (HTTP)
    assert sorted(config["ExposedPorts"]) == [f"{NATIVE_PORT}/tcp", f"{KAFKA_PORT}/tcp", f"{ADMIN_PORT}/tcp"]
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
    wait_ready(first)
    assert health_status(first.name) == "healthy"
    say(request.config, f"first container healthy in {time.monotonic() - started:.1f} s")
    port, server = first.native, first.server

    # The `strata` command line through the native port: 10,000 keyed records.
    messages = keyed_records("message")
    assert cli("topics", "create", "events", "--partitions", "3", "--bootstrap-server", server) \
        == "Created topic events.\n"
    cli_produce(first, "events", messages)
    consumed = cli_consume(first, "events", len(messages))
    assert sorted(consumed) == sorted(messages)
    (topic,) = call(port, MetadataRequest(("events",))).topics
    assert len(topic.partitions) == 3
    assert sum(p.log_end_offset for p in topic.partitions) == len(messages)

    # One address for every command: the command line finds the other listener at its
    # published port through the one it is given.
    assert "events" in cli("topics", "list", "--bootstrap-server", first.bootstrap).splitlines()
    cli("groups", "list", "--bootstrap-server", server)

    # confluent-kafka through the Kafka listener, which advertises its published address.
    assert advertised(first) == [first.bootstrap]
    records = keyed_records("record")
    create_kafka_topic(first, "kafka-events", 3)
    placed = kafka_produce(first, "kafka-events", records)
    got = kafka_consume(first, "kafka-events", len(records))
    assert sorted((k, v) for k, v, _ in got) == sorted(records)
    assert all({p} == placed[k] for k, _, p in got)  # each key read from the partition it went to
    assert len({p for ps in placed.values() for p in ps}) == 3

    # tini is PID 1 and the broker its direct child: the entry point exec'd, no shell in between.
    procs = json.loads(podman("exec", first.name, "python", "-c", PROCESS_TREE).stdout)
    assert procs["1"]["cmd"][0].endswith("tini")
    serve = ["serve", "--data-dir", "/var/lib/strata", "--host", "0.0.0.0", "--port", str(NATIVE_PORT),
             "--config", "/etc/strata/server.properties"]
    (broker,) = [p for p in procs.values() if "serve" in p["cmd"]]
    assert broker["cmd"][-len(serve) - 1:] == ["/opt/strata/bin/strata", *serve], broker
    assert broker["ppid"] == 1 and broker["uid"] == int(UID)  # not root

    # The HEALTHCHECK, run by podman inside the container.
    check = podman("healthcheck", "run", first.name, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert health_status(first.name) == "healthy"

    took = stop(first.name)
    say(request.config, f"graceful stop in {took:.1f} s")
    logged = check_json_logs(first.name)
    events = [e["event"] for e in logged]
    assert "broker_started" in events and "broker_stopped" in events
    # e.g. no unknown_environment_setting: the entry point's own STRATA_* stay out of the broker's
    assert [e for e in logged if e["level"] not in ("debug", "info")] == []

    # The volume: clean-shutdown marker, checkpoints, partition directories, owned by the user.
    listing = resources.once("sh", "-c", "cd /var/lib/strata && stat -c '%u %n' .* *", volume=volume).stdout
    owners = dict(reversed(line.split(" ", 1)) for line in listing.splitlines())
    for name in (CLEAN_SHUTDOWN_MARKER, *CHECKPOINTS, "events-0", "events-1", "events-2", "kafka-events-0"):
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
    wait_ready(second)
    port, server = second.native, second.server
    consumed = cli_consume(second, "events", len(messages))
    assert sorted(consumed) == sorted(messages)
    assert "events" in cli("topics", "list", "--bootstrap-server", server).splitlines()
    got = kafka_consume(second, "kafka-events", len(records))
    assert sorted((k, v) for k, v, _ in got) == sorted(records)
    assert all({p} == placed[k] for k, _, p in got)

    assert call(port, CreateTopicRequest("defaults", -1)).error == ErrorCode.NONE
    (topic,) = call(port, MetadataRequest(("defaults",))).topics
    assert len(topic.partitions) == 2  # STRATA_NUM_PARTITIONS beats the file's 4
    configs = dict(call(port, DescribeConfigRequest("defaults")).configs)
    assert configs["segment.bytes"] == "1048576"  # from the mounted file
    assert configs["retention.ms"] == str(72 * 3_600_000)  # --set beats the environment

    stop(second.name)
    loaded = [e for e in check_json_logs(second.name) if e["event"] == "logs_loaded"]
    assert loaded and loaded[0].get("clean_shutdown") is True, loaded


def test_mounted_server_properties_is_applied(resources, tmp_path):
    """The user's own server.properties mounted over the image's: its num.partitions is the
    partition count of a topic created without one (the native and Kafka's CreateTopics)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from protocol import CreateTopicRequest, ErrorCode, MetadataRequest

    props = tmp_path / "server.properties"
    props.write_text((ROOT / "docker" / "server.properties").read_text().replace(
        "\nnum.partitions=1\n", "\nnum.partitions=5\n"))
    props.chmod(0o644)
    broker = resources.run(resources.volume(), "-v", f"{props}:/etc/strata/server.properties:ro")
    wait_ready(broker)
    assert call(broker.native, CreateTopicRequest("native-default", -1)).error == ErrorCode.NONE
    (topic,) = call(broker.native, MetadataRequest(("native-default",))).topics
    assert len(topic.partitions) == 5
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("kafka-default")])["kafka-default"].result(60)  # the broker's default
    assert len(admin.list_topics("kafka-default", timeout=30).topics["kafka-default"].partitions) == 5
    stop(broker.name)


def compose_file(image: str, tmp_path: Path, native: int, kafka: int, admin: int) -> Path:
    """docker/compose.yaml as it is, but for what a test must not share with the machine: the
    host ports (free ones, on 127.0.0.1), the advertised address that follows them, and the
    image (this session's build; the file's build section stays, pointing at this checkout)."""
    doc = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    (service,) = doc["services"].values()
    published = {NATIVE_PORT: native, KAFKA_PORT: kafka, ADMIN_PORT: admin}
    ports = []
    for mapping in service["ports"]:
        host, container = map(int, mapping.split(":"))
        assert host == container, mapping
        ports.append(f"127.0.0.1:{published[container]}:{container}")
    service["ports"] = ports
    assert service["environment"]["STRATA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://localhost:{KAFKA_PORT}"
    service["environment"]["STRATA_ADVERTISED_LISTENERS"] = f"PLAINTEXT://127.0.0.1:{kafka}"
    service["build"]["context"] = str(ROOT)
    service["image"] = image
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_compose_starts_the_same_service(image, tmp_path, request):
    """docker/compose.yaml, run by podman-compose: the image's service, healthy, serving both
    protocols on the published ports, its named volume kept across `stop`/`start`."""
    project = f"strata-test-{uuid.uuid4().hex[:12]}"
    native, kafka, admin = free_port(), free_port(), free_port()
    path = compose_file(image, tmp_path, native, kafka, admin)
    env = {**ENV, "COMPOSE_PROJECT_NAME": project}

    def compose(*args: str, timeout: float = 300) -> str:
        result = subprocess.run([str(BIN / "podman-compose"), "-f", str(path), *args], env=env,
                                capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
        assert result.returncode == 0, f"podman-compose {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    try:
        compose("up", "-d", "--no-build")
        (name,) = podman("ps", "-a", "--filter", f"label=io.podman.compose.project={project}",
                         "--format", "{{.Names}}").stdout.split()
        broker = Broker(name, native, kafka)
        wait_ready(broker)
        assert inspect(name, "{{.ImageName}}") == image
        assert inspect(name, "{{.Config.User}}") in ("", f"{UID}:{UID}")  # the image's user
        mounts = json.loads(podman("inspect", "--format", "{{json .Mounts}}", name).stdout)
        assert [(m["Name"], m["Destination"]) for m in mounts] == [(f"{project}_strata-data", "/var/lib/strata")]

        records = keyed_records("compose")[:1000]
        assert advertised(broker) == [broker.bootstrap]
        placed = kafka_produce(broker, "compose-events", records)
        assert len({p for ps in placed.values() for p in ps}) == 3  # STRATA_NUM_PARTITIONS: "3"
        assert "compose-events" in cli("topics", "list", "--bootstrap-server", broker.server).splitlines()

        compose("stop")
        assert inspect(name, "{{.State.ExitCode}}") == "0"
        compose("start")
        wait_ready(broker)
        got = kafka_consume(broker, "compose-events", len(records))
        assert sorted((k, v) for k, v, _ in got) == sorted(records)
        compose("stop")
        assert inspect(name, "{{.State.ExitCode}}") == "0"
        listing = podman("run", "--rm", "-v", f"{project}_strata-data:/var/lib/strata", image,
                         "ls", "-a", "/var/lib/strata").stdout.split()
        assert CLEAN_SHUTDOWN_MARKER in listing
    finally:
        subprocess.run([str(BIN / "podman-compose"), "-f", str(path), "down", "-v", "-t", "0"], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)


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
