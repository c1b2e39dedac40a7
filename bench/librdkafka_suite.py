"""librdkafka's own integration tests against Strata's Kafka listener.

    .venv/bin/python bench/librdkafka_suite.py [--source DIR | --tree DIR] [--tests 0001,0012,...]
                                               [--jobs 2] [--timeout 900] [--kafka-version 4.0.0]
                                               [--group-protocol classic|consumer]
                                               [--bootstrap HOST:PORT] [--keep] [--no-kafka-tools]

What it does:

1. builds librdkafka and its test runner (`./configure --disable-curl --disable-gssapi`,
   `make libs`, `make -C tests test-runner`) in a temporary copy of `--source` (a librdkafka
   checkout or bare git repository; default the mirror /work/.mirror/confluentinc+librdkafka/repo).
   `--tree DIR` runs an already built tree instead (left as it is). Building needs a C/C++
   toolchain and the -dev packages of OpenSSL, zlib, zstd, lz4 and Cyrus SASL.
2. starts a real broker (`python -m broker serve`) on a fresh data directory, Kafka listener on
   127.0.0.1 and a free port, with the settings of librdkafka's default test scenario
   (auto.create.topics.enable=true, num.partitions=4) and an authorizer open to everyone where no
   ACL says otherwise (BROKER_SETTINGS); `--bootstrap` uses a running broker instead.
3. runs each test alone (`TESTS=NNNN ./test-runner -L`: -L leaves out the broker-less mock tests
   that share its number; TEST_KAFKA_VERSION=`--kafka-version`, so version-gated tests run and
   expect what that Kafka does; `--group-protocol consumer` sets TEST_CONSUMER_GROUP_PROTOCOL),
   `--jobs` at a time, each under `--timeout` seconds, with stand-ins for the two Kafka
   command-line tools some tests call (KAFKA_TOOL_STANDIN), and prints one line per test
   (PASS / FAIL / TIMEOUT / SKIP: the runner's own skip, with its reason), a table and the
   counts. Each test's output is kept in the work directory with `--keep`; otherwise the work
   directory (build, data, logs) is deleted at the end.

The default list is every test of librdkafka's suite that needs a broker, minus those in
NOT_SINGLE_BROKER (each with the reason one Strata broker cannot serve it). Not part of
`make test`: a build takes ~5 minutes on two cores and the run ~25 minutes with --jobs 2.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.broker_process import BrokerProcess  # noqa: E402

MIRROR = Path("/work/.mirror/confluentinc+librdkafka/repo")

# Tests of the suite that need a broker, by number (test-runner runs every test whose name
# starts with the number given in TESTS).
BROKER_TESTS = """
0001 0002 0003 0005 0007 0008 0011 0012 0013 0014 0015 0016 0017 0018 0019 0020 0021 0022
0026 0028 0029 0030 0031 0033 0034 0035 0036 0038 0039 0040 0041 0042 0044 0045 0047 0048
0049 0050 0051 0052 0053 0054 0055 0056 0057 0059 0060 0061 0063 0064 0065 0067 0068 0069
0070 0073 0075 0076 0077 0081 0082 0083 0084 0085 0086 0088 0089 0090 0091 0092 0093 0094
0097 0098 0099 0101 0102 0103 0107 0109 0110 0111 0112 0113 0114 0115 0118 0119 0122 0123
0125 0126 0127 0129 0130 0132 0135 0137 0139 0140 0142 0150
0170 0171 0172 0173 0174 0175 0176 0177 0178 0179 0180 0181 0184 0185
""".split()  # noqa: SIM905 - rows of numbers read better than a list literal

# librdkafka's default test scenario (tests/scenarios/default.json: topic auto-creation, 4
# partitions) and what its trivup clusters configure: an authorizer that lets everyone do what no
# ACL forbids (0081 creates, describes and deletes ACLs). Group settings stay Kafka's defaults
# (0102 and 0113 count rebalances, which group.initial.rebalance.delay.ms=3000 coalesces).
BROKER_SETTINGS = (
    "auto.create.topics.enable=true",
    "num.partitions=4",
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found=true",
    # The share-consumer tests (0170-0185) set share.record.lock.duration.ms=3000 on their groups.
    "group.share.min.record.lock.duration.ms=1000",
)

# Tests one Strata broker cannot serve, and why. "rf 3": the test creates its topics with
# replication factor 3 (a cluster of three brokers); with 1 instead the ones marked (+) pass.
NOT_SINGLE_BROKER: dict[str, str] = {
    "0098": "Java TransactionProducerCli (KAFKA_PATH) and rf 3 (+ librdkafka-producer half, rf 1)",
    "0101": "fetch from follower: three brokers in racks (rf 3)",
    "0103": "rf 3 (+)",
    "0107": "rf 3 (+, against a broker with auto.create.topics.enable=false, scenario noautocreate)",
    "0111": "rf 3 (+, scenario noautocreate as 0107)",
    "0126": "SASL/OAUTHBEARER with trivup's OIDC token endpoint",
    "0135": "a SASL listener, rf 3 and share consumers (Kafka 4.2, KIP-932); its two SASL subtests pass",
    "0142": "a SASL listener with connections.max.reauth.ms, rf 3 and share consumers (Kafka 4.2)",
    "0097": "trivup's SSL_* environment (CA, broker and client certificates)",
}

# Kafka's command-line tools some tests run from $KAFKA_PATH/bin (0052, 0077: kafka-topics.sh
# --create with --config; 0045: --alter/--delete; 0109, 0115, 0119: kafka-acls.sh --add/--remove
# on a topic), stood in for by confluent-kafka's AdminClient with the options those tests use.
KAFKA_TOOL_STANDIN = """
import argparse, sys
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewPartitions, NewTopic, ResourcePatternType, ResourceType)
tool, args = sys.argv[1], sys.argv[2:]
p = argparse.ArgumentParser(prog=tool)
for flag in ("--create", "--alter", "--delete", "--add", "--remove", "--force"):
    p.add_argument(flag, action="store_true")
for option in ("--bootstrap-server", "--topic", "--operation", "--allow-principal", "--deny-principal",
               "--allow-host", "--deny-host"):
    p.add_argument(option)
p.add_argument("--partitions", type=int)
p.add_argument("--replication-factor", type=int)
p.add_argument("--config", action="append", default=[])
a = p.parse_args(args)
admin = AdminClient({"bootstrap.servers": a.bootstrap_server})
if tool == "kafka-topics.sh":
    if a.create:
        configs = dict(c.split("=", 1) for c in a.config)
        futures = admin.create_topics([NewTopic(a.topic, a.partitions or 1, a.replication_factor or 1,
                                                config=configs)])
    elif a.alter:
        futures = admin.create_partitions([NewPartitions(a.topic, a.partitions)])
    else:
        futures = admin.delete_topics([a.topic])
else:
    permission = AclPermissionType.ALLOW if a.allow_principal else AclPermissionType.DENY
    binding = (ResourceType.TOPIC, a.topic, ResourcePatternType.LITERAL, a.allow_principal or a.deny_principal,
               a.allow_host or a.deny_host or "*", getattr(AclOperation, a.operation.upper()), permission)
    futures = (admin.create_acls([AclBinding(*binding)]) if a.add
               else admin.delete_acls([AclBindingFilter(*binding)]))
for future in futures.values():
    future.result(30)
"""


def write_kafka_tools(kafka_path: Path) -> None:
    (kafka_path / "bin").mkdir(parents=True)
    (kafka_path / "standin.py").write_text(KAFKA_TOOL_STANDIN)
    for tool in ("kafka-topics.sh", "kafka-acls.sh"):
        script = kafka_path / "bin" / tool
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{kafka_path / "standin.py"}" {tool} "$@"\n')
        script.chmod(0o755)


ANSI_RE = re.compile(r"\x1b\[[0-9;]*m|\x1b\(B")
PASSED_RE = re.compile(r"=+ Test \d{4}\w* PASSED =+")
FAILED_RE = re.compile(r'### Test "([^"]+)" failed at (\S+?):? at ')


def build_tree(source: Path, work: Path) -> Path:
    tree = work / "librdkafka"
    subprocess.run(["git", "clone", "-q", str(source), str(tree)], check=True)
    log = (work / "build.log").open("w")
    for cmd in (["./configure", "--disable-curl", "--disable-gssapi"],
                ["make", "-j2", "libs"], ["make", "-j2", "-C", "tests", "test-runner"]):
        print("build:", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=tree, check=True, stdout=log, stderr=subprocess.STDOUT)
    return tree


def run_one(tests_dir: Path, conf: Path, number: str, args, out_dir: Path,
            tools_env: dict[str, str]) -> tuple[str, str, float]:
    env = dict(os.environ, TESTS=number, TEST_KAFKA_VERSION=args.kafka_version,
               RDKAFKA_TEST_CONF=str(conf), **tools_env,
               LD_LIBRARY_PATH=f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}")
    if args.group_protocol == "consumer":
        env["TEST_CONSUMER_GROUP_PROTOCOL"] = "consumer"
    start = time.monotonic()
    out_file = out_dir / f"{number}.log"
    with out_file.open("w") as out:
        try:
            proc = subprocess.run(["./test-runner", "-S", "-L"], cwd=tests_dir, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=args.timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    elapsed = time.monotonic() - start
    text = ANSI_RE.sub("", out_file.read_text(errors="replace"))
    if code is None:
        return "TIMEOUT", last_line(text), elapsed
    if code == 0:
        ran = PASSED_RE.search(text) is not None
        return ("PASS" if ran else "SKIP"), ("" if ran else skip_reason(text)), elapsed
    return "FAIL", failure(text, code), elapsed


def failure(text: str, code: int) -> str:
    """The first failure's test name, place and message (test-runner's "### Test ... failed at")."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = FAILED_RE.search(line)
        if match and match.group(1) != "<MAIN>":
            message = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{match.group(1)} {match.group(2)}: {message}"[:200]
    return f"exit {code}: {last_line(text)}"


def skip_reason(text: str) -> str:
    reasons = [line.split("SKIPPING TEST:", 1)[1].strip() for line in text.splitlines() if "SKIPPING TEST:" in line]
    own = [r for r in reasons if not r.startswith("Filtered due to negative test flags")]
    return ((own or reasons or [""])[0])[:160]


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=MIRROR, help="librdkafka checkout or git repo")
    parser.add_argument("--tree", type=Path, help="an already built librdkafka tree (not deleted)")
    parser.add_argument("--tests", help="comma-separated test numbers (default: the single-broker ones)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--kafka-version", default="4.0.0")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic",
                        help="the consumers' group.protocol (consumer: KIP-848's ConsumerGroupHeartbeat)")
    parser.add_argument("--bootstrap", help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--no-kafka-tools", action="store_true",
                        help="no stand-ins for kafka-topics.sh / kafka-acls.sh (those tests then fail)")
    args = parser.parse_args()

    tests = (args.tests.split(",") if args.tests
             else [t for t in BROKER_TESTS if t not in NOT_SINGLE_BROKER])
    work = Path(tempfile.mkdtemp(prefix="strata-librdkafka-"))
    broker = None
    try:
        tree = args.tree or build_tree(args.source, work)
        tests_dir = tree / "tests"
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker = BrokerProcess(work / "data", *(a for kv in BROKER_SETTINGS for a in ("--set", kv)),
                                   admin_port=None)
            broker.start()
            bootstrap = broker.bootstrap
        conf = work / "test.conf"
        conf.write_text(f"bootstrap.servers={bootstrap}\n")
        tools_env: dict[str, str] = {}
        if not args.no_kafka_tools:
            write_kafka_tools(work / "kafka")
            tools_env = {"KAFKA_PATH": str(work / "kafka"), "BROKERS": bootstrap}
        out_dir = work / "out"
        out_dir.mkdir()
        print(f"broker {bootstrap}; {len(tests)} tests, {args.jobs} at a time", flush=True)
        results: dict[str, tuple[str, str, float]] = {}
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(run_one, tests_dir, conf, t, args, out_dir, tools_env): t for t in tests}
            for fut in concurrent.futures.as_completed(futures):
                number = futures[fut]
                results[number] = fut.result()
                status, why, secs = results[number]
                print(f"{number}  {status:7} {secs:6.1f}s  {why}", flush=True)
        print("\n| test | result | seconds | first failure line |\n|---|---|---|---|")
        for number in tests:
            status, why, secs = results[number]
            print(f"| {number} | {status} | {secs:.0f} | {why.replace('|', '/')} |")
        counts = {s: sum(1 for r in results.values() if r[0] == s)
                  for s in ("PASS", "FAIL", "TIMEOUT", "SKIP")}
        not_run = {} if args.tests else NOT_SINGLE_BROKER
        for number, reason in sorted(not_run.items()):
            print(f"| {number} | NOT RUN | | {reason} |")
        print(f"\npassed {counts['PASS']}, failed {counts['FAIL']}, timed out {counts['TIMEOUT']}, "
              f"skipped by the runner {counts['SKIP']}, not run (not single-broker) {len(not_run)}")
        if args.keep:
            print(f"work directory kept: {work}")
        return 0 if counts["FAIL"] == counts["TIMEOUT"] == 0 else 1
    finally:
        if broker is not None:
            broker.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
