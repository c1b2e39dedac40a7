"""Append-time recompression (topic compression.type) against keeping the producer's codec.

One lz4 batch of 2,000 text records (about 1 MiB of record data) through
validate_and_assign under compression.type producer (the baseline: decompress to
validate, keep the bytes), lz4 (same codec: kept), zstd, gzip, snappy and
uncompressed (rewritten). Figures are best-of-5 times per batch and MB/s of
record data. Run: .venv/bin/python bench/recompress.py
"""

from __future__ import annotations

import os
import sys
from functools import partial

# Run as a script, sys.path[0] is bench/, where bench/storage.py would shadow the package.
sys.path[0] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

from bench.records_micro import best_of  # noqa: E402
from kafka_format import build_batch  # noqa: E402
from kafka_format.codecs import Codec  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.validator import validate_and_assign  # noqa: E402

TYPES = ("producer", "lz4", "zstd", "snappy", "gzip", "uncompressed")


def main() -> None:
    rows = [(b"key-%06d" % i, (b"value %06d " % i) * 40, 1_700_000_000_000 + i) for i in range(2000)]
    raw = sum(len(k) + len(v) for k, v, _ in rows)
    source = build_batch(rows, codec=Codec.LZ4)
    baseline = None
    for kind in TYPES:
        config = LogConfig.from_props({"compression.type": kind, "max.message.bytes": str(4 << 20)})
        took = best_of(partial(validate_and_assign, source, next_offset=0, now_ms=0, config=config))
        baseline = baseline or took
        stored = len(validate_and_assign(source, next_offset=0, now_ms=0, config=config).buffer)
        print(f"{kind:>12}: {took * 1000:7.2f} ms/batch {raw / took / 1e6:8.1f} MB/s  "
              f"{took / baseline:5.2f}x producer  stored {stored} B (from {len(source)} B lz4)")


if __name__ == "__main__":
    main()
