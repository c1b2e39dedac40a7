"""Compaction throughput and memory: the cleaner against a plain copy of the same bytes.

    .venv/bin/python bench/compaction.py                  # 200+ MB, 1M keys, ~3 versions a key
    .venv/bin/python bench/compaction.py --mb 50 --keys 250000 --profile   # smaller, with pyinstrument
    .venv/bin/python bench/compaction.py --pure-python    # the cleaner without storage._ccleaner

What it does:
1. Writes a compacted log of at least --mb MB: every one of --keys distinct keys once
   (shuffled), then random updates until the size is reached (about three versions
   a key), in uncompressed batches of --batch records, values sized so that a record
   is about --record-bytes; the log is rolled so all of it is cleanable.
2. Baseline, same run: a plain copy of the same segment files (read 1 MiB at a
   time, write to a new file, fsync), as the cleaner also reads, writes and fsyncs.
3. In a fresh child process (so its peak RSS is the clean's): opens the log and
   cleans it to the end (as many rounds as the dedupe buffer needs), then checks
   that every key's latest record is there. Reports MB/s (input bytes / time),
   the ratio to the copy, the cleaner's own stats, and peak memory (RSS growth
   during the clean, and with --tracemalloc the Python heap peak of a second clean
   of a fresh copy) against the dedupe buffer. The cleaner uses the C extension
   storage._ccleaner when it is built (the first line of the result says which);
   --pure-python runs the child with STRATA_PURE_PYTHON=1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kafka_format import build_batch, iter_entries  # noqa: E402
from storage.clock import ManualClock  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.log import Log  # noqa: E402

MB = 1_000_000
SEGMENT_BYTES = 256 * 1024 * 1024


def key_of(i: int) -> bytes:
    return b"key-%07d" % i


def plan(keys: int, records: int, seed: int):
    """The key of every record: each key once (shuffled), then random updates."""
    rng = random.Random(seed)
    first = list(range(keys))
    rng.shuffle(first)
    yield from first
    for _ in range(records - keys):
        yield rng.randrange(keys)


def build(directory: str, args) -> dict:
    clock = ManualClock(1_700_000_000_000)
    # written as delete, made compact after: appends then only check CRCs (fast to build)
    log = Log.open(directory, "bench", 0, LogConfig.from_props({"segment.bytes": SEGMENT_BYTES}), clock=clock)
    value = b"v" * max(1, args.record_bytes - 30)
    per_record = len(build_batch([(key_of(0), value, 0)] * 100)) / 100
    records = max(args.keys, int(args.mb * MB / per_record) + 1)
    batch = []
    written = 0
    started = time.perf_counter()
    for n, k in enumerate(plan(args.keys, records, args.seed)):
        batch.append((key_of(k), b"%09d" % n + value, clock.now_ms))
        if len(batch) == args.batch:
            log.append(build_batch(batch))
            written += len(batch)
            batch = []
            clock.advance(1)
    if batch:
        log.append(build_batch(batch))
        written += len(batch)
    log.roll()
    log.flush()
    size = log.size_in_bytes
    log.close()
    return {"records": written, "keys": args.keys, "bytes": size,
            "build_seconds": round(time.perf_counter() - started, 1)}


def plain_copy(directory: str, out_dir: str) -> tuple[float, float]:
    """Read every segment file and write it to a new file, fsync: (seconds, CPU seconds)."""
    started = time.perf_counter()
    cpu_started = time.process_time()
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(directory, name), "rb", buffering=0) as src, \
                open(os.path.join(out_dir, name), "wb", buffering=0) as dst:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                dst.write(chunk)
            os.fsync(dst.fileno())
    return time.perf_counter() - started, time.process_time() - cpu_started


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def clean_child(directory: str, dedupe: int, io_buffer: int, trace: bool, profile: bool, seed: int,
                keys: int, records: int) -> None:
    """Runs in a child process: clean to the end, report JSON on stdout."""
    from storage import accel
    from storage.cleaner import Cleaner
    from storage.offset_map import OffsetMap

    clock = ManualClock(1_700_000_000_000 + 10**9)
    config = LogConfig.from_props({"segment.bytes": SEGMENT_BYTES, "cleanup.policy": "compact"})
    log = Log.open(directory, "bench", 0, config, clock=clock, had_clean_shutdown=True)
    target = log.active_segment.base_offset
    input_bytes = sum(s.size for s in log.segments.snapshot() if s.base_offset < target)
    offset_map = OffsetMap(dedupe)
    cleaner = Cleaner(offset_map, io_buffer_size=io_buffer, clock=clock)
    if trace:
        import tracemalloc
        tracemalloc.start()
    profiler = None
    if profile:
        from pyinstrument import Profiler
        profiler = Profiler()
        profiler.start()
    rss_before = rss_bytes()
    first_dirty, rounds, stats_list = 0, 0, []
    started = time.perf_counter()
    cpu_started = time.process_time()
    while first_dirty < target:
        end, stats = cleaner.clean(log, first_dirty, target)
        offset_map.clear()
        stats_list.append(stats.fields())
        first_dirty, rounds = end, rounds + 1
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"seconds": seconds, "cpu_seconds": cpu_seconds, "rounds": rounds, "input_bytes": input_bytes,
           "native": accel.is_native(offset_map.key_map),
           "output_bytes": sum(s.size for s in log.segments.snapshot() if s.base_offset < target),
           "rss_growth": max(0, peak_rss - rss_before), "stats": stats_list}
    if trace:
        import tracemalloc
        out["python_heap_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False), file=sys.stderr)
    if not trace and not profile:
        out["verified"] = verify(log, seed, keys, records, target)
    log.close()
    print(json.dumps(out))


def verify(log, seed: int, keys: int, records: int, target: int) -> bool:
    """Every key's latest record is in the log, and nothing else below `target`."""
    expected = {}
    for n, k in enumerate(plan(keys, records, seed)):
        expected[k] = n
    found = {}
    for segment in log.segments.snapshot():
        data = segment.log.read(0, segment.size)
        for entry in iter_entries(data):
            for r in entry.records():
                k = int(r.key[4:])
                if r.offset < target:
                    assert k not in found, f"key {k} twice in the cleaned range"
                found[k] = r.offset
    return found == expected


def run_child(directory: str, args, records: int, trace: bool = False, profile: bool = False) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", directory, "--dedupe-buffer", str(args.dedupe_buffer),
           "--io-buffer", str(args.io_buffer), "--seed", str(args.seed), "--keys", str(args.keys),
           "--records", str(records)]
    if trace:
        cmd.append("--tracemalloc")
    if profile:
        cmd.append("--profile")
    env = dict(os.environ, STRATA_PURE_PYTHON="1") if args.pure_python else None
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr}")
    if profile:
        print(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=200, help="log size to write (MB, 10^6 bytes)")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=70, help="about how big a record is")
    parser.add_argument("--batch", type=int, default=100, help="records per batch")
    parser.add_argument("--dedupe-buffer", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--io-buffer", type=int, default=512 * 1024)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    parser.add_argument("--tracemalloc", action="store_true", help="also measure the Python heap peak")
    parser.add_argument("--profile", action="store_true", help="also profile a clean with pyinstrument")
    parser.add_argument("--pure-python", action="store_true", help="clean without the C extension")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return clean_child(args.child, args.dedupe_buffer, args.io_buffer, args.tracemalloc, args.profile,
                           args.seed, args.keys, args.records)

    work = args.dir or tempfile.mkdtemp(prefix="strata-bench-compaction-")
    os.makedirs(work, exist_ok=True)
    source = os.path.join(work, "bench-0")
    shutil.rmtree(source, ignore_errors=True)
    built = build(source, args)
    print(f"log: {built['bytes'] / MB:.1f} MB, {built['records']:,} records, {built['keys']:,} keys "
          f"(built in {built['build_seconds']} s)")

    copy_dir = os.path.join(work, "copy")
    os.makedirs(copy_dir, exist_ok=True)
    plain_copy(source, copy_dir)  # warm the page cache the same way for both
    shutil.rmtree(copy_dir)
    os.makedirs(copy_dir)
    copy_seconds, copy_cpu = plain_copy(source, copy_dir)
    shutil.rmtree(copy_dir)
    copy_rate = built["bytes"] / MB / copy_seconds
    print(f"plain copy (read + write + fsync): {copy_rate:8.1f} MB/s  ({copy_seconds:.2f} s, "
          f"{copy_cpu:.2f} s CPU)")

    target = os.path.join(work, "clean-0")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    result = run_child(target, args, built["records"])
    rate = result["input_bytes"] / MB / result["seconds"]
    print(f"cleaner: {'native (storage._ccleaner)' if result['native'] else 'pure Python'}")
    print(f"compaction:                        {rate:8.1f} MB/s  ({result['seconds']:.2f} s, "
          f"{result['cpu_seconds']:.2f} s CPU, "
          f"{result['rounds']} round(s), {result['input_bytes'] / MB:.1f} MB -> "
          f"{result['output_bytes'] / MB:.1f} MB)")
    cpu_rate = result["input_bytes"] / MB / result["cpu_seconds"]
    print(f"ratio to the copy: {rate / copy_rate:.3f}x by wall clock; per CPU second of the cleaner "
          f"{cpu_rate:.1f} MB/s (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    for i, s in enumerate(result["stats"]):
        print(f"  round {i + 1}: map {s['map_seconds']} s, clean {s['clean_seconds']} s, "
              f"{s['map_entries']:,} keys in the map ({s['map_bytes'] / 2**20:.0f} MiB, "
              f"{s['map_utilization']:.0%} of the buffer), kept {s['records_kept']:,} of {s['records_read']:,} "
              f"records, entries copied/rebuilt/dropped {s['entries_copied']}/{s['entries_rebuilt']}/"
              f"{s['entries_dropped']}")
    print(f"peak memory: RSS +{result['rss_growth'] / 2**20:.0f} MiB during the clean; dedupe buffer "
          f"{args.dedupe_buffer / 2**20:.0f} MiB ({result['rss_growth'] / args.dedupe_buffer:.0%})")
    print(f"every key's latest record present, one per key: {result['verified']}")
    if args.tracemalloc:
        shutil.rmtree(target)
        shutil.copytree(source, target)
        traced = run_child(target, args, built["records"], trace=True)
        print(f"python heap peak (tracemalloc, a second clean of a fresh copy): "
              f"{traced['python_heap_peak'] / 2**20:.0f} MiB "
              f"({traced['python_heap_peak'] / args.dedupe_buffer:.0%} of the dedupe buffer)")
    if args.profile:
        shutil.rmtree(target)
        shutil.copytree(source, target)
        run_child(target, args, built["records"], profile=True)
    if not args.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
