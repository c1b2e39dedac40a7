"""One address for every command: `--bootstrap-server` takes either listener of the broker,
and the command line asks the broker where the other one is (broker/cli/addresses.py,
DESCRIBE_LISTENERS, native.advertised.listeners), against the real broker process."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

import pytest

from broker.cli import addresses, main
from broker.cli.addresses import KAFKA, NATIVE, choose, listeners_from_configs, probe
from client import Admin, BrokerUnreachable
from protocol import ListenerInfo
from tests.broker_process import BrokerProcess
from tests.cli.test_client_commands import ok, one_error_line, strata
from tests.client.live_broker import unique
from tests.security import test_sasl_cli


def native_of(process: BrokerProcess) -> str:
    return f"{process.host}:{process.port}"


secured = test_sasl_cli.secured  # a broker with SASL_SSL listeners of both protocols (a fixture)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fixed_broker(tmp_path_factory):
    """A broker as users run it: both listeners on fixed ports, nothing advertised."""
    process = BrokerProcess(tmp_path_factory.mktemp("one-address"), port=free_port(), kafka_port=free_port())
    try:
        yield process.start()
    finally:
        process.close()


class Forwarder:
    """A TCP port that forwards every connection to a target set later: what a
    container runtime's published port does."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A broker on ports of its own, reached only through other ("published") ports that it
    advertises, as a container started with -p 19000:9000 -p 19092:9092."""
    native, kafka = Forwarder(), Forwarder()
    process = BrokerProcess(
        tmp_path_factory.mktemp("published"),
        "--set", f"advertised.listeners=PLAINTEXT://127.0.0.1:{kafka.port}",
        "--set", f"native.advertised.listeners=PLAINTEXT://127.0.0.1:{native.port}")
    try:
        process.start()
        native.target, kafka.target = (process.host, process.port), (process.host, process.kafka_port)
        yield process, native, kafka
    finally:
        process.close()
        native.close()
        kafka.close()


def test_either_listener_serves_every_command(fixed_broker):
    native, kafka = native_of(fixed_broker), fixed_broker.bootstrap
    name = unique("one-address")
    assert ok(strata("topics", "create", name, "--partitions", 2, "--bootstrap-server", kafka)) == \
        f"Created topic {name}.\n"
    assert name in ok(strata("topics", "list", "--bootstrap-server", kafka)).splitlines()
    ok(strata("produce", name, "--bootstrap-server", kafka, "--partition", 1, input=b"a\nb\n"))
    assert ok(strata("consume", name, "--from-beginning", "--max-messages", 2, "--group", "g1",
                     "--bootstrap-server", kafka)) == "a\nb\n"
    assert "g1" in ok(strata("groups", "list", "--bootstrap-server", native)).splitlines()
    assert "g1" in ok(strata("groups", "list", "--bootstrap-server", kafka)).splitlines()
    assert "log.retention.hours=168" in ok(strata("configs", "describe", "--broker", "--bootstrap-server", native))
    assert f"Topic: {name}\t" in ok(strata("topics", "describe", name, "--bootstrap-server", kafka))


def test_published_ports_are_found_through_the_advertised_listeners(published):
    process, native, kafka = published
    native_at, kafka_at = f"127.0.0.1:{native.port}", f"127.0.0.1:{kafka.port}"
    name = unique("published")
    ok(strata("topics", "create", name, "--partitions", 1, "--bootstrap-server", kafka_at))
    before = native.connections
    assert name in ok(strata("topics", "list", "--bootstrap-server", kafka_at)).splitlines()
    assert native.connections > before  # the native port the broker advertises, not a guess
    ok(strata("produce", name, "--bootstrap-server", native_at, input=b"x\n"))
    ok(strata("consume", name, "--from-beginning", "--max-messages", 1, "--group", "pub", "--bootstrap-server",
              native_at))
    before = kafka.connections
    assert "pub" in ok(strata("groups", "list", "--bootstrap-server", native_at)).splitlines()
    assert kafka.connections > before
    with Admin(native_at) as admin:
        described = {(i.protocol, i.name): (i.host, i.port) for i in admin.describe_listeners()}
    assert described == {(KAFKA, "PLAINTEXT"): ("127.0.0.1", kafka.port),
                         (NATIVE, "PLAINTEXT"): ("127.0.0.1", native.port)}


def test_describe_listeners_answers_the_bound_addresses(live_broker):
    process = live_broker.process
    with Admin(live_broker.address) as admin:
        described = admin.describe_listeners()
    assert described == [ListenerInfo(KAFKA, "PLAINTEXT", "PLAINTEXT", "127.0.0.1", process.kafka_port),
                         ListenerInfo(NATIVE, "PLAINTEXT", "PLAINTEXT", "127.0.0.1", process.port)]


def test_the_probe_tells_the_protocols_apart(fixed_broker):
    assert probe(native_of(fixed_broker), None) == (NATIVE, native_of(fixed_broker))
    assert probe(fixed_broker.bootstrap, None) == (KAFKA, fixed_broker.bootstrap)
    assert probe(f"127.0.0.1:1,{fixed_broker.bootstrap}", None) == (KAFKA, fixed_broker.bootstrap)
    assert probe("127.0.0.1:1", None) == (None, "127.0.0.1:1")


def _answer(address: tuple[str, int], frame: bytes) -> bytes:
    """Everything the peer sends back until it closes or goes quiet for 2 s."""
    with socket.create_connection(address, timeout=2) as s:
        s.sendall(frame)
        out = b""
        try:
            while chunk := s.recv(4096):
                out += chunk
        except TimeoutError:
            out += b"<open>"
        return out


def test_each_listener_answers_the_other_protocol_cleanly(fixed_broker):
    api_versions = struct.pack(">hhih", 18, 0, 7, 3) + b"cli"
    native_handshake = struct.pack(">hhh", 13, 2, 3) + b"cli"
    # The native listener answers Kafka's ApiVersions as the unknown type it is: INVALID_REQUEST.
    assert _answer(fixed_broker.address, struct.pack(">i", len(api_versions)) + api_versions) == \
        b"\x00\x00\x00\x02\x00\x2a<open>"
    # The Kafka listener closes a connection that sent a native HANDSHAKE, at once.
    assert _answer(("127.0.0.1", fixed_broker.kafka_port),
                   struct.pack(">i", len(native_handshake)) + native_handshake) == b""
    assert "Traceback" not in fixed_broker.stderr_text()
    # The native client pointed at the Kafka listener says what is likely wrong.
    with pytest.raises(BrokerUnreachable, match="is 127.0.0.1:[0-9]+ the broker's native listener"), \
            Admin(fixed_broker.bootstrap, retries=0) as admin:
        admin.list_topics()


@pytest.fixture
def silent_listener():
    server = socket.create_server(("127.0.0.1", 0))
    held = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()
    for s in held:
        s.close()


@pytest.fixture
def chatty_listener():
    """Answers anything with an HTTP error, as the admin port or a web server would."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                client.recv(4096)
                client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_a_listener_of_neither_protocol_is_one_line(silent_listener, chatty_listener, monkeypatch, capsys):
    monkeypatch.setattr(addresses, "PROBE_TIMEOUT_S", 0.5)
    assert main(["groups", "list", "--bootstrap-server", silent_listener]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{silent_listener} accepted the connection but answered nothing" in err
    assert main(["topics", "list", "--bootstrap-server", chatty_listener]) == 1
    err = capsys.readouterr().err
    assert err == f"strata: {chatty_listener} answers neither Strata's native protocol nor Kafka's (a TLS " \
                  f"listener? --command-config sets security.protocol=SSL)\n"


def test_nothing_listening_is_one_line():
    err = one_error_line(strata("groups", "list", "--bootstrap-server", "127.0.0.1:1"))
    assert err.startswith("strata: cannot reach a broker at 127.0.0.1:1 (--bootstrap-server) nor a Kafka "
                          "listener at 127.0.0.1:9092 (kafka.port's default): ")
    assert "cannot reach broker at 127.0.0.1:1" in one_error_line(
        strata("topics", "list", "--bootstrap-server", "127.0.0.1:1"))


def test_an_ephemeral_native_port_is_found_through_the_kafka_listener(live_broker):
    """The test brokers take any free port (port 0): DescribeConfigs of the broker describes
    an unset native.advertised.listeners as the native listeners as bound."""
    process = live_broker.process
    name = unique("ephemeral")
    ok(strata("topics", "create", name, "--partitions", 1, "--bootstrap-server", process.bootstrap))
    assert name in ok(strata("topics", "list", "--bootstrap-server", process.bootstrap)).splitlines()
    described = ok(strata("configs", "describe", "--broker", "--bootstrap-server", process.bootstrap))
    assert f"native.advertised.listeners=PLAINTEXT://127.0.0.1:{process.port}" in described


def test_the_kafka_listener_takes_the_probe_as_no_bad_request(live_broker):
    """The command line's first words to a Kafka listener are a native HANDSHAKE: the
    listener closes that connection with an info line, not a bad-request warning."""
    process = live_broker.process
    before = len(process.log_events())  # the broker is shared: only what this command caused
    ok(strata("topics", "list", "--bootstrap-server", process.bootstrap))
    events = process.log_events()[before:]
    assert any(e.get("event") == "kafka_listener_native_handshake" for e in events)
    assert not [e for e in events if e.get("event") in ("kafka_bad_request", "kafka_unsupported_request")]


def test_choosing_the_other_listener():
    listeners = [ListenerInfo(KAFKA, "INTERNAL", "PLAINTEXT", "kafka-0", 29092),
                 ListenerInfo(KAFKA, "EXTERNAL", "PLAINTEXT", "", 19092),
                 ListenerInfo(KAFKA, "SECURE", "SSL", "", 19093),
                 ListenerInfo(NATIVE, "INTERNAL", "PLAINTEXT", "kafka-0", 29000),
                 ListenerInfo(NATIVE, "EXTERNAL", "PLAINTEXT", "", 19000)]
    # The listener of the same name as the one reached (found by its port) ...
    assert choose(listeners, "localhost:19000", KAFKA, None) == "localhost:19092"
    assert choose(listeners, "kafka-0:29000", KAFKA, None) == "kafka-0:29092"
    assert choose(listeners, "localhost:19092", NATIVE, None) == "localhost:19000"
    # ... else the one of the client's security protocol, else the first.
    assert choose(listeners, "elsewhere:1", KAFKA, {"security.protocol": "SSL"}) == "elsewhere:19093"
    assert choose(listeners, "elsewhere:1", KAFKA, None) == "kafka-0:29092"
    with pytest.raises(Exception, match="has no Kafka listener"):
        choose([listeners[-1]], "h:19000", KAFKA, None)


def test_listeners_from_the_broker_configs():
    defaults = {"host.name": "0.0.0.0", "port": "9000", "kafka.port": "9092", "listeners": "",
                "native.listeners": "", "advertised.listeners": "", "native.advertised.listeners": "",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL"}
    assert listeners_from_configs(defaults) == [ListenerInfo(KAFKA, "PLAINTEXT", "PLAINTEXT", "", 9092),
                                                ListenerInfo(NATIVE, "PLAINTEXT", "PLAINTEXT", "", 9000)]
    container = {**defaults, "advertised.listeners": "PLAINTEXT://localhost:19092",
                 "native.advertised.listeners": "PLAINTEXT://localhost:19000"}
    assert choose(listeners_from_configs(container), "localhost:19092", NATIVE, None) == "localhost:19000"
    two = {**defaults, "native.listeners": "PLAINTEXT://:9000,SSL://10.0.0.5:9001"}
    assert listeners_from_configs(two)[1:] == [ListenerInfo(NATIVE, "PLAINTEXT", "PLAINTEXT", "", 9000),
                                               ListenerInfo(NATIVE, "SSL", "SSL", "10.0.0.5", 9001)]


def test_native_advertised_listeners_name_native_listeners(tmp_path):
    from broker.config.broker_config import BrokerConfig
    from kafka_format.errors import InvalidConfigError

    config = BrokerConfig.load(overrides=["native.advertised.listeners=PLAINTEXT://published:19000"],
                               environ={}, data_dir=str(tmp_path))
    (native,) = [spec for spec in config.listeners if spec.protocol == NATIVE]
    assert native.advertised == ("published", 19000)
    with pytest.raises(InvalidConfigError, match="native.advertised.listeners: listener OTHER is not one of"):
        BrokerConfig.load(overrides=["native.advertised.listeners=OTHER://h:1"], environ={}, data_dir=str(tmp_path))


def test_the_native_sasl_ssl_listener_names_its_kafka_listener(secured):
    """Over SASL_SSL on both listeners: the probe's HANDSHAKE needs no authentication, and
    DESCRIBE_LISTENERS is asked after it (the broker's listeners here take any free port)."""
    native, admin = secured["servers"][:2], ["--command-config", secured["admin"]]
    assert strata("topics", "create", unique("sasl"), *native, *admin).returncode == 0
    listed = strata("groups", "list", *native, *admin)
    assert listed.returncode == 0, listed.stderr
    described = strata("configs", "describe", "--broker", *native, *admin)
    assert described.returncode == 0 and b"sasl.enabled.mechanisms=" in described.stdout, described.stderr
    # Without the TLS settings the listener answers neither protocol in the clear: one line.
    err = one_error_line(strata("groups", "list", *native))
    assert "answers neither Strata's native protocol nor Kafka's (a TLS listener?" in err
