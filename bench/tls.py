"""TLS and SASL_SSL against PLAINTEXT on the Kafka listener, same broker, same run (issue
15's target: TLS produce >= 0.7x PLAINTEXT).

    .venv/bin/python bench/tls.py [--messages 100000] [--size 1024] [--one-record 2000] [--runs 3]

One real `python -m broker serve` process with three Kafka listeners on 127.0.0.1,
PLAINTEXT, SSL and SASL_SSL (a PEM keystore made at start with `cryptography`, EC
P-256, OpenSSL's default suite: TLS 1.3 AES-256-GCM; SASL_SSL logs in with
SCRAM-SHA-512, a credential made through AlterUserScramCredentials at start). The client is confluent-kafka
(librdkafka) in this process. Per listener, alternating, best of --runs:

- produce: one Producer (linger.ms=5, batch.size=1 MiB, acks=1, no compression),
  --messages values of --size bytes to partition 0 of a fresh topic; the clock
  runs from the first produce() to the end of flush(). The producer first delivers
  one record to another topic of the broker, untimed, so its connection, TLS
  handshake and SASL login are done: the figure is the steady-state rate. With
  --cold the clock includes them (a fresh Producer's first delivery).
- fetch: one Consumer, assign() partition 0 from offset 0, consume() in batches
  until every message is in (fetch.queue.backoff.ms=10, so librdkafka's own queue
  backoff does not dominate).
- one record: --one-record produce()+flush() round trips of one --size record
  (acks=1), p50 and p99 in milliseconds.
The ratio columns are X / PLAINTEXT for throughput and latency (latency above 1 =
slower), and PLAINTEXT / X for CPU per message. The broker's CPU is utime + stime
of its threads (/proc/<pid>/stat), the least over the runs: on a loaded machine
wall-clock throughput swings with other processes, the broker's own CPU per
message much less. From that same run, its event-loop thread's own CPU
(/proc/<pid>/task/<pid>/schedstat, nanoseconds; appends sent to the executor
after a slow inline append run on other threads) and the client's (this process:
the produce() loop and librdkafka's threads, which encrypt on SSL) with its
busiest thread's, so a reader can tell which thread limits the wall-clock figure
(the slowest stage of the pipeline: with enough cores, throughput is about one
message per CPU-time-per-message of the busiest thread). The TLS line names the protocol
and suite the SSL listener chooses (the server's order decides; a Python client
asks); the appends line says how many produce appends ran inline on the loop and
how many in the executor (a slow inline append sends large appends there for a
while, on every listener alike). The broker's sendfile and copied bytes come from
its shutdown log: PLAINTEXT fetches go by sendfile, SSL fetches are copied through
the TLS layer.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.tls_certs import CertificateAuthority  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the broker process (all threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_seconds(pid: int, tid: int) -> float:
    """On-CPU time of one thread, in nanosecond resolution (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except FileNotFoundError:
        return 0.0


def loop_thread_seconds(pid: int) -> float:
    """On-CPU time of the broker's main (event-loop) thread."""
    return thread_seconds(pid, pid)


def threads_seconds(pid: int) -> dict[int, float]:
    """On-CPU time of each thread of a process."""
    return {int(tid): thread_seconds(pid, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def client_seconds() -> float:
    """CPU time of this process (every thread): the produce() loop and librdkafka's threads."""
    return time.process_time()


def produce(conf: dict, topic: str, messages: int, size: int, warm_topic: str | None,
            broker_pid: int) -> dict[str, float]:
    """Seconds of producing `messages` values: elapsed, and CPU of the client, the
    broker and the broker's loop thread over that time. With `warm_topic` the
    producer first delivers one record there, untimed (connected, logged in)."""
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1,
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 21})
    value = b"x" * size
    if warm_topic is not None:
        producer.produce(warm_topic, value, partition=0)
        assert producer.flush(30) == 0, "warm-up record not delivered"
    cpu, broker, loop = client_seconds(), cpu_seconds(broker_pid), loop_thread_seconds(broker_pid)
    own = threads_seconds(os.getpid())
    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    busiest = max(t - own.get(tid, 0.0) for tid, t in threads_seconds(os.getpid()).items())
    out = {"elapsed": elapsed, "client": client_seconds() - cpu, "broker": cpu_seconds(broker_pid) - broker,
           "loop": loop_thread_seconds(broker_pid) - loop, "client_busy": busiest}
    assert left == 0, f"{left} messages not delivered"
    return out


def negotiated(address: tuple[str, int], ca_pem: Path) -> str:
    """The TLS protocol and suite the listener picks for a default client."""
    context = ssl.create_default_context(cafile=str(ca_pem))
    with socket.create_connection(address, timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        name, version, bits = tls.cipher()  # type: ignore[misc]
        return f"{version} {name} ({bits}-bit)"


def fetch(conf: dict, topic: str, messages: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "bench-" + uuid.uuid4().hex, "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < messages:
        assert time.monotonic() < deadline, f"fetch stalled at {got}"
        for m in consumer.consume(10000, 1.0):
            if not m.error():
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def one_record(conf: dict, topic: str, count: int, size: int) -> tuple[float, float]:
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": 0, "acks": 1})
    value = b"y" * size
    for _ in range(20):  # connect and warm up
        producer.produce(topic, value, partition=0)
        producer.flush(10)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        producer.produce(topic, value, partition=0)
        producer.flush(10)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--one-record", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cold", action="store_true",
                        help="time produce from a fresh Producer (connection, TLS handshake, SASL login included)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    work = tempfile.mkdtemp(prefix="strata-bench-tls-")
    try:
        ca = CertificateAuthority()
        keystore = ca.issue("localhost").write_pem(Path(work) / "server.pem")
        ca_pem = ca.write_pem(Path(work) / "ca.pem")
        broker = BrokerProcess(os.path.join(work, "data"), "--set",
                               "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                               "--set", "ssl.keystore.type=PEM", "--set", f"ssl.keystore.location={keystore}",
                               kafka_port=None).start()
        addresses = broker.read_listeners(4)
        confs = {name: {"bootstrap.servers": "{}:{}".format(*addresses["kafka", name])}
                 for name in ("PLAINTEXT", "SSL", "SASL_SSL")}
        confs["SSL"].update({"security.protocol": "SSL", "ssl.ca.location": str(ca_pem)})
        confs["SASL_SSL"].update({"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca_pem),
                                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench",
                                  "sasl.password": "bench-pw"})
        results: dict[str, dict[str, float]] = {name: {} for name in confs}
        try:
            admin = AdminClient(confs["PLAINTEXT"])
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bench-pw")])["bench"].result(30)
            suite = negotiated(addresses["kafka", "SSL"], ca_pem)
            for run in range(args.runs):
                for name, conf in confs.items():
                    topic = f"bench-{name.lower()}-{run}"
                    topic1 = topic + "-one"
                    for t in (topic, topic1):
                        admin.create_topics([NewTopic(t, 1)])[t].result(30)
                    pr = produce(conf, topic, args.messages, args.size, None if args.cold else topic1, broker.pid)
                    cpu1 = cpu_seconds(broker.pid)
                    f = fetch(conf, topic, args.messages)
                    cpu2 = cpu_seconds(broker.pid)
                    r = results[name]
                    r["produce"] = max(r.get("produce", 0), args.messages / pr["elapsed"])
                    r["fetch"] = max(r.get("fetch", 0), args.messages / f)
                    if pr["broker"] / args.messages * 1e6 < r.get("produce_cpu", 1e9):  # the three of one run
                        for key, part in (("produce_cpu", "broker"), ("produce_loop", "loop"), ("client_cpu", "client"),
                                          ("client_busy", "client_busy")):
                            r[key] = pr[part] / args.messages * 1e6
                    r["fetch_cpu"] = min(r.get("fetch_cpu", 1e9), (cpu2 - cpu1) / args.messages * 1e6)
                    p50, p99 = one_record(conf, topic1, args.one_record, args.size)
                    r["p50"] = min(r.get("p50", 1e9), p50)
                    r["p99"] = min(r.get("p99", 1e9), p99)
        finally:
            broker.stop()
        stopped = [e for e in broker.log_events() if e.get("event") == "broker_stopped"]
        mb = args.size / 1e6
        print(f"{args.messages} x {args.size} B values, best of {args.runs}; one record: "
              f"{args.one_record} round trips; produce {'from a fresh Producer (cold)' if args.cold else 'warm'}; "
              f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; TLS: {suite}")
        others = ("SSL", "SASL_SSL")
        print(f"{'':12} {'PLAINTEXT':>22} {'SSL':>22} {'SASL_SSL':>22} {'SSL/PT':>8} {'SASL_SSL/PT':>12}")
        for key, unit in (("produce", "msg/s"), ("fetch", "msg/s")):
            pt = results["PLAINTEXT"][key]
            cells = "".join(f" {results[n][key]:>11,.0f} {unit} {results[n][key] * mb:5.0f} MB/s" for n in others)
            ratios = "".join(f" {results[n][key] / pt:>11.2f}x" for n in others)
            print(f"{key:12} {pt:>11,.0f} {unit} {pt * mb:5.0f} MB/s{cells}{ratios}")
        for key, what in (("produce_cpu", "broker CPU"), ("produce_loop", "broker loop thread CPU"),
                          ("client_cpu", "client CPU, produce"),
                          ("client_busy", "client's busiest thread"), ("fetch_cpu", "broker CPU")):
            pt = results["PLAINTEXT"][key]
            cells = "".join(f" {results[n][key]:>15.2f} us/msg" for n in others)
            ratios = "".join(f" {pt / results[n][key]:>11.2f}x" for n in others)
            print(f"{key:12} {pt:>13.2f} us/msg{cells}{ratios} ({what})")
        for key in ("p50", "p99"):
            pt = results["PLAINTEXT"][key]
            cells = "".join(f" {results[n][key]:>19.3f} ms" for n in others)
            ratios = "".join(f" {results[n][key] / pt:>11.2f}x" for n in others)
            print(f"{'one ' + key:12} {pt:>19.3f} ms{cells}{ratios} (latency)")
        if stopped:
            s = stopped[-1]["sendfile"]
            print(f"broker: sendfile {s['bytes'] / 1e6:.0f} MB, copied through the transport "
                  f"{s['copied_bytes'] / 1e6:.0f} MB")
            appends = stopped[-1].get("appends") or {}
            print(f"broker appends: {appends.get('inline', 0)} inline, {appends.get('executor', 0)} in the "
                  f"executor, {appends.get('backoffs', 0)} backoffs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
