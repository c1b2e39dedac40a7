"""Crash recovery in the spirit of Kafka's LogSegmentTest and LogLoaderTest.

A crash is simulated by abandoning a Log without closing it (its files stay as
a killed process leaves them: indexes preallocated, no marker) and opening the
directory again with had_clean_shutdown=False."""

import os
import random

import pytest

from kafka_format import build_batch, build_classic, iter_records

from .test_log import read_all


def fill(log, count, per_batch=3, seed=0):
    rng = random.Random(seed)
    expected = []
    for _ in range(count):
        kind = rng.choice(["v2", "v2z", "v1", "v0", "v1z"])
        recs = [(b"k%d" % (len(expected) + j), os.urandom(rng.randrange(1, 40)), 1000 + len(expected) + j)
                for j in range(per_batch)]
        if kind == "v2":
            data = build_batch(recs)
        elif kind == "v2z":
            data = build_batch(recs, codec=1)
        elif kind == "v1":
            data = build_classic(recs, magic=1)
        elif kind == "v1z":
            data = build_classic(recs, magic=1, codec=3)
        else:
            data = build_classic([r[:2] for r in recs], magic=0)
        log.append(data)
        expected.extend((r[0], r[1]) for r in recs)
    return expected


def small(i):
    """Batches of one equal size, so segment.bytes counts them exactly."""
    return build_batch([(b"k%03d" % i, b"v", 1)])


def segment_path(tmp_path, base, suffix=".log"):
    return tmp_path / "topic-0" / f"{base:020d}{suffix}"


def entry_starts(path):
    """Start positions of the entries of a .log file."""
    data = path.read_bytes()
    starts, pos = [], 0
    while pos + 12 <= len(data):
        starts.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    return starts


def contents(log):
    return [(r.key, r.value) for r in read_all(log)]


@pytest.mark.parametrize("seed", range(8))
def test_torn_tail_keeps_every_whole_entry(open_log, tmp_path, seed):
    log = open_log()
    expected = fill(log, 12, seed=seed)
    path = segment_path(tmp_path, 0)
    size = path.stat().st_size
    starts = entry_starts(path)
    original = path.read_bytes()
    cut = random.Random(seed).randrange(starts[1] + 1, size)
    os.truncate(path, cut)
    whole_end = max(e for e in starts[1:] + [size] if e <= cut)
    survivors = [(r.key, r.value) for r in iter_records(original[:whole_end])]
    again = open_log(had_clean_shutdown=False)
    assert path.stat().st_size == whole_end
    assert contents(again) == survivors == expected[: len(survivors)]
    assert again.log_end_offset == len(survivors)


@pytest.mark.parametrize("seed", range(8))
def test_random_garbage_on_the_active_log_is_cut_and_every_record_survives(open_log, tmp_path, seed):
    log = open_log()
    expected = fill(log, 10, seed=seed)
    path = segment_path(tmp_path, 0)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(random.Random(seed).randbytes(random.Random(seed).randrange(1, 300)))
    again = open_log(had_clean_shutdown=False)
    assert path.stat().st_size == size
    assert contents(again) == expected
    again.append(build_batch([(b"after", b"crash")]))
    assert contents(again)[-1] == (b"after", b"crash")


@pytest.mark.parametrize("seed", range(12))
def test_a_flipped_byte_cuts_the_log_at_that_entry(open_log, tmp_path, seed):
    log = open_log()
    expected = fill(log, 10, seed=seed)
    path = segment_path(tmp_path, 0)
    starts = entry_starts(path)
    rng = random.Random(seed)
    victim = rng.randrange(len(starts))
    end = starts[victim + 1] if victim + 1 < len(starts) else path.stat().st_size
    data = bytearray(path.read_bytes())
    at = rng.randrange(starts[victim] + 12, end)  # inside the entry, past offset and size
    data[at] ^= 1 << rng.randrange(8)
    survivors = [(r.key, r.value) for r in iter_records(bytes(data[:starts[victim]]))]
    path.write_bytes(bytes(data))
    again = open_log(had_clean_shutdown=False)
    assert contents(again) == survivors == expected[: len(survivors)]
    assert path.stat().st_size == starts[victim]


def test_corruption_in_an_early_segment_drops_every_later_segment(open_log, tmp_path):
    one = len(small(0))
    log = open_log(segment_bytes=one * 4)
    for i in range(12):
        log.append(small(i))
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    path = segment_path(tmp_path, 4)
    data = bytearray(path.read_bytes())
    data[one + 30] ^= 0xFF  # second entry of segment 4
    path.write_bytes(bytes(data))
    again = open_log(had_clean_shutdown=False, segment_bytes=one * 4)
    assert [s.base_offset for s in again.segments] == [0, 4]
    assert again.log_end_offset == 5
    assert not segment_path(tmp_path, 8).exists()


def test_segments_below_the_recovery_point_are_not_scanned(open_log, tmp_path):
    one = len(small(0))
    log = open_log(segment_bytes=one * 4)
    for i in range(12):
        log.append(small(i))
    path = segment_path(tmp_path, 0)
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    again = open_log(had_clean_shutdown=False, recovery_point=8, segment_bytes=one * 4)
    assert again.log_end_offset == 12
    assert path.stat().st_size == 4 * one  # as Kafka: flushed segments are trusted


def test_a_clean_shutdown_skips_the_scan(open_log, tmp_path):
    log = open_log(index_interval_bytes=64)
    fill(log, 6)
    log.close()
    path = segment_path(tmp_path, 0)
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF  # would be caught by a scan; it lies before the last index entry
    path.write_bytes(bytes(data))
    again = open_log(had_clean_shutdown=True, index_interval_bytes=64)
    assert again.log_end_offset == 18
    assert path.stat().st_size == len(data)


@pytest.mark.parametrize("damage", ["torn", "garbage", "flipped"])
def test_a_bad_tail_after_a_clean_shutdown_is_recovered_before_appends_follow_it(open_log, tmp_path, damage):
    log = open_log()
    expected = fill(log, 6)
    log.close()
    path = segment_path(tmp_path, 0)
    whole = path.read_bytes()
    if damage == "torn":  # a copy of the first entry, cut short
        path.write_bytes(whole + whole[:30])
    elif damage == "garbage":  # bytes that parse as an entry header with a wild offset
        path.write_bytes(whole + (2**40).to_bytes(8, "big") + (40).to_bytes(4, "big") + bytes(40))
    else:  # the last entry's last byte
        path.write_bytes(whole[:-1] + bytes([whole[-1] ^ 0xFF]))
    again = open_log(had_clean_shutdown=True)
    kept = expected if damage != "flipped" else expected[:-3]
    assert again.log_end_offset == len(kept)
    again.append(build_batch([(b"after", b"the-tail")]))
    # A crash now: everything appended after the recovered tail survives the scan.
    crashed = open_log(had_clean_shutdown=False)
    assert contents(crashed) == kept + [(b"after", b"the-tail")]


def test_garbage_after_a_crash_leaves_no_index_entry_behind(open_log, tmp_path):
    log = open_log(index_interval_bytes=1)
    fill(log, 10)
    path = segment_path(tmp_path, 0)
    starts = entry_starts(path)
    survivors = len(list(iter_records(path.read_bytes()[:starts[5]])))
    os.truncate(path, starts[5] + 3)
    again = open_log(had_clean_shutdown=False, index_interval_bytes=1)
    index = again.active_segment.offset_index
    assert all(index.entry(n)[1] < starts[5] for n in range(index.entries))
    assert again.log_end_offset == survivors
    again.append(build_batch([(b"x", b"y", 5)]))
    assert again.log_end_offset == survivors + 1


@pytest.mark.parametrize("damage", ["delete", "truncate", "zeros"])
def test_missing_or_corrupt_index_files_are_rebuilt(open_log, tmp_path, damage):
    one = len(small(0))
    log = open_log(segment_bytes=one * 5, index_interval_bytes=1)
    for i in range(12):
        log.append(small(i))
    log.close()
    for suffix in (".index", ".timeindex"):
        path = segment_path(tmp_path, 5, suffix)
        if damage == "delete":
            path.unlink()
        elif damage == "truncate":
            os.truncate(path, path.stat().st_size - 3)
        else:
            path.write_bytes(bytes(4 * (8 if suffix == ".index" else 12)))
    again = open_log(had_clean_shutdown=True, segment_bytes=one * 5, index_interval_bytes=1)
    segment = list(again.segments)[1]
    assert segment.offset_index.entries == 4
    assert segment.offset_index.lookup(7) == (7, 2 * one)
    assert again.offset_for_timestamp(1).offset == 0
    assert [r.offset for r in read_all(again, 6)] == list(range(6, 12))


def test_leftover_deleted_and_cleaned_files_are_removed(open_log, tmp_path):
    log = open_log()
    fill(log, 3)
    log.close()
    directory = tmp_path / "topic-0"
    for name in ("00000000000000000100.log.deleted", "00000000000000000100.index.deleted",
                 "00000000000000000000.log.cleaned", "00000000000000000000.timeindex.cleaned",
                 "00000000000000000200.index", "00000000000000000200.timeindex"):
        (directory / name).write_bytes(b"junk")
    again = open_log()
    assert sorted(os.listdir(directory)) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        "00000000000000000009.snapshot"]  # the close's producer-state snapshot
    assert again.log_end_offset == 9


def test_a_swap_file_replaces_the_segments_it_covers(open_log, tmp_path):
    one = len(small(0))
    log = open_log(segment_bytes=one * 3)
    for i in range(9):
        log.append(small(i))
    log.close()
    directory = tmp_path / "topic-0"
    # A cleaner's output for segments 0 and 3: keeps offsets 2 and 5 only.
    swap = bytearray()
    for offset in (2, 5):
        entry = bytearray(build_batch([(b"kept", b"v", 1)]))
        entry[0:8] = offset.to_bytes(8, "big")
        swap += entry
    (directory / "00000000000000000000.log.swap").write_bytes(bytes(swap))
    (directory / "00000000000000000000.index.swap").write_bytes(b"junk!!!!")
    again = open_log(segment_bytes=one * 3)
    assert [s.base_offset for s in again.segments] == [0, 6]
    assert [r.offset for r in read_all(again)] == [2, 5, 6, 7, 8]
    assert not any(name.endswith(".swap") for name in os.listdir(directory))


def test_a_swap_from_an_unfinished_clean_is_dropped(open_log, tmp_path):
    log = open_log()
    expected = fill(log, 3)
    log.close()
    directory = tmp_path / "topic-0"
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    (directory / "00000000000000000000.log.swap").write_bytes(b"partial")
    again = open_log(had_clean_shutdown=False)
    assert contents(again) == expected
    assert sorted(os.listdir(directory)) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]


def test_an_entry_larger_than_the_scan_chunk_is_recovered(open_log, tmp_path, monkeypatch):
    import storage.segment as segment_module
    monkeypatch.setattr(segment_module, "RECOVERY_CHUNK", 256)
    log = open_log()
    log.append(build_batch([(b"big", os.urandom(2000), 1)]))
    log.append(build_batch([(b"small", b"v", 2)]))
    log.append(build_batch([(b"big2", os.urandom(3000), 3)]))
    again = open_log(had_clean_shutdown=False)
    assert [r.key for r in read_all(again)] == [b"big", b"small", b"big2"]


def test_log_start_offset_beyond_the_data_starts_afresh(open_log, tmp_path):
    log = open_log()
    fill(log, 2)
    log.close()
    again = open_log(log_start_offset=100)
    assert (again.log_start_offset, again.log_end_offset) == (100, 100)
    assert again.append(build_batch([(b"k", b"v", 1)])).first_offset == 100


def test_recovered_records_are_readable_by_iter_records(open_log, tmp_path):
    log = open_log()
    expected = fill(log, 5)
    data = segment_path(tmp_path, 0).read_bytes()
    assert [(r.key, r.value) for r in iter_records(data)] == expected


def test_entries_whose_offsets_do_not_fit_the_segment_are_cut(open_log, tmp_path):
    """A crashed segment holding an entry more than 2**31 offsets past its base (only
    a damaged or foreign file can): recovery keeps the entries before it, whose
    offsets fit the segment's relative offsets, and cuts the file there."""
    log = open_log()
    for i in range(3):
        log.append(small(i))
    path = segment_path(tmp_path, 0)
    kept = path.stat().st_size
    far = bytearray(build_batch([(b"far", b"v", 1), (b"far2", b"v", 2)], base_offset=2**31 + 5))
    with open(path, "ab") as f:
        f.write(far)
        f.write(build_batch([(b"after", b"v", 3)], base_offset=2**31 + 7))
    again = open_log(had_clean_shutdown=False)
    assert [r.key for r in read_all(again)] == [b"k000", b"k001", b"k002"]
    assert path.stat().st_size == kept
    assert again.log_end_offset == 3
