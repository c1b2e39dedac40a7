"""Property tests on a real Log: random mixes of magic 0/1/2, compressed or not,
appended (with random rolls and index intervals), then read back, closed,
reopened and recovered."""

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_format import build_batch, build_classic, iter_entries, iter_records
from kafka_format.errors import RecordListTooLargeError
from storage.clock import ManualClock
from storage.config import LogConfig
from storage.log import Log

keys = st.one_of(st.none(), st.binary(min_size=0, max_size=12))
values = st.one_of(st.none(), st.binary(min_size=0, max_size=200))
records = st.lists(st.tuples(keys, values, st.integers(0, 2**40)), min_size=1, max_size=6)
entry_kinds = st.sampled_from([(2, 0), (2, 1), (2, 2), (2, 3), (2, 4), (1, 0), (1, 1), (1, 2),
                               (1, 3), (0, 0), (0, 1), (0, 2), (0, 3)])
appends = st.lists(st.tuples(entry_kinds, records), min_size=1, max_size=12)


def build(kind, recs):
    magic, codec = kind
    if magic == 2:
        return build_batch(recs, codec=codec)
    if magic == 1:
        return build_classic(recs, magic=1, codec=codec)
    return build_classic([r[:2] for r in recs], magic=0, codec=codec)


def read_everything(log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        with log.read(offset, 1 << 20) as got:
            data = got.read()
        out.extend(r for r in iter_records(data) if r.offset >= offset)
        offset = list(iter_entries(data))[-1].last_offset + 1
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appends, st.integers(200, 4000), st.integers(0, 600))
def test_appended_sets_read_back_equal_with_contiguous_offsets(batches, segment_bytes, interval):
    config = LogConfig.from_props({"segment.bytes": segment_bytes, "index.interval.bytes": interval})
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "t-0")
        log = Log.open(path, "t", 0, config, clock=ManualClock())
        expected = []
        for kind, recs in batches:
            data = build(kind, recs)
            try:
                result = log.append(data)
            except RecordListTooLargeError:
                # Over segment.bytes as sent, or once a magic-0 wrapper was
                # recompressed with its offsets renumbered: refused, nothing written.
                assert log.log_end_offset == len(expected)
                continue
            assert result.first_offset == len(expected)
            assert result.last_offset == len(expected) + len(recs) - 1
            expected.extend((r[0], r[1]) for r in recs)
        got = read_everything(log)
        assert [r.offset for r in got] == list(range(len(expected)))
        assert [(r.key, r.value) for r in got] == expected
        # every offset can be read on its own, starting at the entry holding it
        for offset in range(len(expected)):
            with log.read(offset, 1 << 20) as one:
                first = next(iter_entries(one.read()))
                assert first.base_offset <= offset <= first.last_offset
        log.close()
        clean = Log.open(path, "t", 0, config, had_clean_shutdown=True, clock=ManualClock())
        assert [(r.key, r.value) for r in read_everything(clean)] == expected
        clean.close()
        recovered = Log.open(path, "t", 0, config, had_clean_shutdown=False, clock=ManualClock())
        assert recovered.log_end_offset == len(expected)
        assert [(r.key, r.value) for r in read_everything(recovered)] == expected
        recovered.close()
