"""Run benchmarks on an earlier commit and on this tree, taking turns, and compare.

    .venv/bin/python bench/against.py --base REV [--rounds 2] [--bench NAME ...]
                                      [--dir DIR]

A benchmark in bench/ compares Strata against a baseline measured in the same
run; this script compares Strata against Strata: the same benchmark scripts run
on REV (exported with `git archive` into a scratch directory, its C
accelerators built there in place with this venv's compiler settings) and on
the working tree, base then head in one round and head then base in the next,
so both sides see the same moments of a noisy machine. Both sides run with this
venv's interpreter and packages, and each runs its own copy of the benchmark
script, so a figure means what that commit's script meant by it.

Each benchmark prints its summary lines (the lines without a leading "run N:"
progress prefix that carry a figure: msgs/s, MiB/s, MB/s, us, ratio). The
report pairs each summary line of head with the same line of base (by its
position and first words) and prints the ratio of their first figure, head
over base, per round, with the benchmark's own target where the line states
one. With more than one round, each benchmark ends with the median of each
line's figure over the rounds for head and for base and their ratio, which one
round that other work on the machine slowed does not move. For throughput a
ratio above 1 is head faster; for lines whose first figure is a time (us, ms,
p50/p99) a ratio below 1 is head faster.

The default set is what the one-core restructuring (issue 13) promised to hold:
native produce, fetch and p99 (bench/broker.py), storage append and recovery
(bench/storage.py), and Kafka-protocol produce and consume at 100 B and 1 KiB
with broker CPU per message (bench/kafka.py, librdkafka's C client, with its
default consumer settings on both sides, which older scripts cannot change).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

BENCHES: dict[str, list[str]] = {
    "broker": ["bench/broker.py", "--mb", "256", "--runs", "3", "--latency-requests", "5000"],
    "storage": ["bench/storage.py", "--mb", "128", "--runs", "3", "--lookup-gb", "0"],
    "kafka": ["bench/kafka.py", "--runs", "3"],
}

FIGURE = re.compile(r"(msgs/s|MiB/s|MB/s|\bus\b|us/msg|ratio|\bms\b)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
FIGURE_WORD = re.compile(r"-?\d+(?:\.\d+)?x?:?")  # 1626.2, 0.88x, 0.88x:
SECTION = re.compile(r"^== ")


@dataclass
class Summary:
    """One run's summary lines of one benchmark: (section, line) in print order."""

    lines: list[tuple[str, str]] = field(default_factory=list)


def export_tree(rev: str, into: str) -> str:
    """`git archive` REV into INTO and build its C accelerators in place."""
    os.makedirs(into)
    archive = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", rev],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=into,
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"building the C accelerators of {rev} failed:\n{built.stderr[-2000:]}")
    return into


def summary_of(output: str) -> Summary:
    summary = Summary()
    section = ""
    for raw in output.splitlines():
        line = raw.rstrip()
        if SECTION.match(line):
            section = re.split(r"[:,]", line[3:])[0].strip()
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("run ") or stripped.startswith("warning"):
            continue
        if FIGURE.search(stripped) and NUMBER.search(stripped):
            summary.lines.append((section, stripped))
    return summary


def run_bench(tree: str, argv: list[str]) -> Summary:
    env = dict(os.environ, PYTHONPATH=tree, STRATA_REQUIRE_NATIVE="1")
    done = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} in {tree} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return summary_of(done.stdout)


def key_of(section: str, line: str) -> str:
    words = re.split(r"\s+", line)
    head = [w for w in words[:3] if not FIGURE_WORD.fullmatch(w)]
    return f"{section} | {' '.join(head[:2])}"


def first_number(line: str) -> float | None:
    """The line's first figure: the first word that is a number (0.88x and 12: count;
    the 50 of p50 does not)."""
    for word in re.split(r"\s+", line):
        if FIGURE_WORD.fullmatch(word):
            return float(word.rstrip(":").rstrip("x"))
    return None


def compare(base: Summary, head: Summary, figures: dict[str, list[tuple[float, float]]] | None = None) -> list[str]:
    """The report lines pairing HEAD's summary lines with BASE's; each pair's first
    figures (head, base) are also added to FIGURES under the pair's key."""
    base_by_key: dict[str, list[str]] = {}
    for section, line in base.lines:
        base_by_key.setdefault(key_of(section, line), []).append(line)
    report = []
    seen: dict[str, int] = {}
    for section, line in head.lines:
        key = key_of(section, line)
        index = seen.get(key, 0)
        seen[key] = index + 1
        candidates = base_by_key.get(key, [])
        if index >= len(candidates):
            report.append(f"  {key}: head only: {line}")
            continue
        ours, theirs = first_number(line), first_number(candidates[index])
        ratio = f"{ours / theirs:6.2f}x" if ours and theirs else "   n/a "
        if figures is not None and ours is not None and theirs is not None:
            figures.setdefault(key, []).append((ours, theirs))
        report.append(f"  {ratio}  {key}\n           head: {line}\n           base: {candidates[index]}")
    return report


def medians(name: str, figures: dict[str, list[tuple[float, float]]]) -> list[str]:
    """Per summary line over all rounds: the median head figure, the median base figure
    and their ratio (head over base), which one slow round does not move."""
    report = [f"\n== {name}, medians over the rounds (head / base)"]
    for key, pairs in figures.items():
        ours = statistics.median(head for head, _ in pairs)
        theirs = statistics.median(base for _, base in pairs)
        ratio = f"{ours / theirs:6.2f}x" if theirs else "   n/a "
        report.append(f"  {ratio}  {key}: head {ours:g}, base {theirs:g} ({len(pairs)} rounds)")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of base+head (default 2)")
    parser.add_argument("--bench", action="append", choices=sorted(BENCHES), default=[],
                        help="benchmarks to run (default: all)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    names = args.bench or list(BENCHES)
    scratch = tempfile.mkdtemp(prefix="strata-against-", dir=args.dir)
    try:
        base_tree = export_tree(args.base, os.path.join(scratch, "base"))
    except (subprocess.CalledProcessError, RuntimeError) as e:
        shutil.rmtree(scratch, ignore_errors=True)
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"strata against {args.base}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"{args.rounds} rounds of {', '.join(names)}")
    try:
        for name in names:
            figures: dict[str, list[tuple[float, float]]] = {}
            for round_number in range(args.rounds):
                order = [("base", base_tree), ("head", ROOT)]
                if round_number % 2:
                    order.reverse()
                results = {side: run_bench(tree, BENCHES[name]) for side, tree in order}
                print(f"\n== {name}, round {round_number + 1} ({' then '.join(s for s, _ in order)}, "
                      f"load {os.getloadavg()[0]:.1f})")
                print("\n".join(compare(results["base"], results["head"], figures)), flush=True)
            if args.rounds > 1:
                print("\n".join(medians(name, figures)), flush=True)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
