"""Storage benchmarks: each figure next to a baseline measured in the same run.

    .venv/bin/python bench/storage.py [--mb 256] [--lookup-gb 1] [--dir DIR]

- append: 1 KiB messages in 1 MiB message sets (v2: one batch per set; v1: one
  classic message each) through Log.append (in place, as the broker appends a
  request frame), against plain os.write of the same bytes to a file in the
  same directory, each set in its own buffer on both sides. Target >= 0.9x.
  For v2 it also prints os.write after a CRC32C of each batch (the log's own
  CRC function): the ceiling of any append that checks CRCs as Kafka does.
  The log reserves disk blocks ahead of its appends (storage/log.py,
  RESERVE_AHEAD_BYTES), which makes its writes cheaper than a plain write; so
  both magics also print os.write into blocks reserved the same way, the
  like-for-like line that shows what validation and indexing cost.
- recovery: LogSegment.recover over the written log, against reading the same
  file and computing each entry's CRC with the same CRC functions. Target >= 0.5x.
- lookups: offset and timestamp lookups on logs of growing size up to
  --lookup-gb; per-lookup time stays flat as the log grows (O(log n)); also
  the time to open the big log after a clean close.
Figures are best-of-N wall times; ratios are what to compare across machines.
The C accelerators (setup.py) are used when built; STRATA_PURE_PYTHON=1 measures
the pure-Python paths instead.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import logging  # noqa: E402

import structlog  # noqa: E402

from kafka_format import build_batch, build_classic  # noqa: E402
from kafka_format.accel import crc32c  # noqa: E402  (the CRC functions the log uses)
from kafka_format.framing import crc32  # noqa: E402
from storage.clock import SystemClock  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.file_records import ENTRY_HEAD  # noqa: E402
from storage.fileutil import reserve_blocks  # noqa: E402
from storage.log import RESERVE_AHEAD_BYTES, Log  # noqa: E402
from storage.segment import LogSegment  # noqa: E402

MIB = 1 << 20
VALUE = b"x" * 1024


def message_set(magic: int, base_ts: int) -> tuple[bytes, int]:
    """A ~1 MiB set of 1 KiB messages and its message count."""
    count = MIB // len(VALUE)
    while True:  # the most 1 KiB messages that fit in 1 MiB with their overhead
        records = [(b"key-%d" % i, VALUE, base_ts + i) for i in range(count)]
        data = build_batch(records) if magic == 2 else build_classic(records, magic=magic)
        if len(data) <= MIB:
            return data, count
        count -= 1 + (len(data) - MIB) // len(VALUE)


def best_of_each(runs: int, *fns) -> list[float]:
    """The best time of each function over `runs` rounds, one call of each per
    round, so that a slow spell of a noisy machine hits all of them alike."""
    best = [float("inf")] * len(fns)
    for _ in range(runs):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], fn())
    return best


# Every path gets its own copy of the sets, one buffer per set, as the broker
# receives each request frame into a new buffer. (Writing one 1 MiB buffer
# over and over writes from a hot cache while the log reads cold frames: not
# the same work.)
def plain_write(workdir: str, data: bytes, sets: int, checked: bool = False, reserved: bool = False) -> float:
    """Baseline: os.write `sets` copies of `data` to a file, optionally checking each
    batch CRC first or reserving blocks ahead as FileRecords.append does."""
    path = os.path.join(workdir, "plain.bin")
    frames = [bytearray(data) for _ in range(sets)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    reserved_end = written = 0
    start = time.perf_counter()
    for frame in frames:
        if checked:  # the one check no validating append can skip: the batch CRC
            crc32c(memoryview(frame)[21:])
        if reserved and written + len(frame) > reserved_end:  # as FileRecords.append
            reserved_end = written + len(frame) + RESERVE_AHEAD_BYTES
            reserve_blocks(fd, written, reserved_end - written)
        written += os.write(fd, frame)
    elapsed = time.perf_counter() - start
    os.close(fd)
    os.unlink(path)
    return elapsed


def append_through_log(workdir: str, magic: int, data: bytes, sets: int) -> float:
    """Log.append `sets` copies of `data` to a fresh log in workdir/append-v<magic>."""
    directory = os.path.join(workdir, f"append-v{magic}")
    shutil.rmtree(directory, ignore_errors=True)
    log = Log.open(directory, "bench", 0, LogConfig(), clock=SystemClock())
    # As the broker does: each set arrives in its own request frame,
    # which the log may patch in place.
    frames = [bytearray(data) for _ in range(sets)]
    start = time.perf_counter()
    for frame in frames:
        log.append(frame, in_place=True)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def bench_append(workdir: str, total_mb: int, runs: int) -> None:
    print(f"\n== append: {total_mb} MiB of 1 KiB messages in 1 MiB sets, best of {runs}")
    for magic in (2, 1):
        data, count = message_set(magic, 1_700_000_000_000)
        sets = max(1, total_mb * MIB // len(data))
        fns = [partial(plain_write, workdir, data, sets), partial(append_through_log, workdir, magic, data, sets),
               partial(plain_write, workdir, data, sets, reserved=True)]
        if magic == 2:
            fns.append(partial(plain_write, workdir, data, sets, checked=True))
        base, ours, reserved, *floor = best_of_each(runs, *fns)
        mb = sets * len(data) / MIB
        print(f"v{magic}: Log.append {mb / ours:8.1f} MiB/s {sets * count / ours:10.0f} msgs/s | "
              f"os.write {mb / base:8.1f} MiB/s | ratio {base / ours:.2f}x (target >= 0.9)")
        print(f"    like for like: os.write into reserved blocks {mb / reserved:8.1f} MiB/s; "
              f"Log.append is {reserved / ours:.2f}x of it")
        if floor:
            print(f"    reference: os.write after crc32c of each batch {mb / floor[0]:8.1f} MiB/s, "
                  f"ratio {base / floor[0]:.2f}x: the most a CRC-checking append can reach here")


def crc_walk(path: str) -> float:
    """Baseline: read the file in 8 MiB chunks and check each entry's CRC."""
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    position = 0
    while position < size:
        buf = memoryview(os.pread(fd, max(8 * MIB, 12), position))
        pos = 0
        while pos + 12 <= len(buf):
            _, length = ENTRY_HEAD.unpack_from(buf, pos)
            end = pos + 12 + length
            if end > len(buf):
                break
            if buf[pos + 16] == 2:
                crc32c(buf[pos + 21:end])
            else:
                crc32(buf[pos + 16:end])
            pos = end
        if pos == 0:
            break  # a torn tail (not in these files)
        position += pos
    os.close(fd)
    return time.perf_counter() - start


def timed_recover(segment: LogSegment) -> float:
    """Seconds the segment's recovery scan takes."""
    start = time.perf_counter()
    segment.recover(LogConfig().segment_index_bytes)
    return time.perf_counter() - start


def bench_recovery(workdir: str, runs: int) -> None:
    print(f"\n== recovery scan of the logs written above, best of {runs}")
    for magic in (2, 1):
        directory = os.path.join(workdir, f"append-v{magic}")
        log = Log.open(directory, "bench", 0, LogConfig(), clock=SystemClock())
        segment = log.active_segment
        path = segment.log.path
        size = segment.size

        base, ours = best_of_each(runs, partial(crc_walk, path), partial(timed_recover, segment))
        log.close()
        mb = size / MIB
        print(f"v{magic}: recover {mb / ours:8.1f} MiB/s | read+CRC {mb / base:8.1f} MiB/s | "
              f"ratio {base / ours:.2f}x (target >= 0.5)")


def bench_lookups(workdir: str, gb: float) -> None:
    print(f"\n== lookups: offset and timestamp, logs up to {gb:g} GiB (one segment)")
    directory = os.path.join(workdir, "lookups")
    shutil.rmtree(directory, ignore_errors=True)
    config = LogConfig.from_props({"segment.bytes": 2**31 - 1})
    log = Log.open(directory, "bench", 0, config, clock=SystemClock())
    data, count = message_set(2, 0)
    target_sizes = [s for s in (16 * MIB, 128 * MIB, int(gb * 1024) * MIB) if s <= gb * 1024 * MIB]
    rng = random.Random(1)
    ts = 0
    for target in target_sizes:
        while log.size_in_bytes < target:
            batch = bytearray(build_batch([(b"k", VALUE, ts + i) for i in range(count)]))
            ts += count
            log.append(batch)
        end = log.log_end_offset
        offsets = [rng.randrange(end) for _ in range(2000)]
        start = time.perf_counter()
        for offset in offsets:
            log.read(offset, 1).release()
        per_offset = (time.perf_counter() - start) / len(offsets)
        stamps = [rng.randrange(ts) for _ in range(300)]
        start = time.perf_counter()
        for stamp in stamps:
            log.offset_for_timestamp(stamp)
        per_ts = (time.perf_counter() - start) / len(stamps)
        print(f"{log.size_in_bytes / MIB:7.0f} MiB, {end:9d} records: offset lookup {per_offset * 1e6:7.1f} us, "
              f"timestamp lookup {per_ts * 1e6:8.1f} us")
    log.close()
    start = time.perf_counter()
    reopened = Log.open(directory, "bench", 0, config, clock=SystemClock(), had_clean_shutdown=True)
    opened_in = time.perf_counter() - start
    print(f"open after a clean close ({reopened.size_in_bytes / MIB:.0f} MiB): {opened_in * 1000:.1f} ms")
    reopened.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256, help="MiB appended per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lookup-gb", type=float, default=1.0, help="0: skip the lookups")
    parser.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    # The log's debug lines (producer-state rebuilds on every open) are not figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    workdir = args.dir or tempfile.mkdtemp(prefix="strata-bench-", dir=os.getcwd())
    os.makedirs(workdir, exist_ok=True)
    try:
        bench_append(workdir, args.mb, args.runs)
        bench_recovery(workdir, args.runs)
        if args.lookup_gb > 0:
            bench_lookups(workdir, args.lookup_gb)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
