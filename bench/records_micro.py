"""Micro-benchmark of the record layer's hot paths (not part of the test run).

Measures validate_and_assign and scan_entries throughput on a 1 MiB message
set of 1 KiB values, laid out as one v2 batch and as v1 messages, against a
plain bytes copy of the same size. Run: .venv/bin/python bench/records_micro.py
"""

from __future__ import annotations

import os
import sys
import time
from functools import partial

# Run as a script, sys.path[0] is bench/, where bench/storage.py would shadow the package.
sys.path[0] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

from kafka_format import build_batch, build_classic, scan_entries  # noqa: E402
from kafka_format.codecs import Codec  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.validator import validate_and_assign  # noqa: E402

MIB = 1 << 20
VALUE = 1024


def best_of(fn, repeat: int = 5, number: int = 20) -> float:
    """Seconds per call, best of `repeat` runs of `number` calls."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def main() -> None:
    count = MIB // VALUE
    rows = [(b"key-%06d" % i, os.urandom(VALUE), 1_700_000_000_000 + i) for i in range(count)]
    config = LogConfig(max_message_bytes=4 * MIB)
    sets = {
        "v2 batch (1 entry)": build_batch(rows),
        "v1 messages": build_classic(rows, magic=1),
        "v2 batch, compact": build_batch(rows),
        "v2 batch, lz4": build_batch(rows, codec=Codec.LZ4),
        "v1 wrapper, lz4": build_classic(rows, magic=1, codec=Codec.LZ4),
    }
    # Random values: the lz4 sets do not shrink, so MB/s counts the same bytes.
    payload = sets["v1 messages"]
    copy = best_of(lambda: bytearray(payload))
    print(f"{'plain bytearray copy':<28} {len(payload) / copy / MIB:9.0f} MB/s")
    for name, data in sets.items():
        cfg = LogConfig(max_message_bytes=4 * MIB, cleanup_policy=("compact",)) if "compact" in name else config
        t = best_of(partial(validate_and_assign, data, next_offset=1000, now_ms=1, config=cfg))
        s = best_of(partial(scan_entries, data))
        print(f"{name:<28} validate {len(data) / t / MIB:7.0f} MB/s   scan {len(data) / s / MIB:7.0f} MB/s")
    for name, cfg in (("v1 messages, LogAppendTime", LogConfig(max_message_bytes=4 * MIB,
                                                               message_timestamp_type="LogAppendTime")),):
        data = sets["v1 messages"]
        t = best_of(partial(validate_and_assign, data, next_offset=1000, now_ms=1, config=cfg))
        print(f"{name:<28} validate {len(data) / t / MIB:7.0f} MB/s")


if __name__ == "__main__":
    main()
