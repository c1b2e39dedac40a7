"""The cleaner (Kafka's Cleaner, in the spirit of LogCleanerTest): what stays and
what goes, offsets kept, untouched entries byte for byte, tombstones and their
delete horizon, keyless records, every format, rounds when the map fills,
grouping, collisions, the swap and a crash at each of its steps."""

from __future__ import annotations

import os
import random

import pytest

from kafka_format import build_batch, build_classic, iter_entries, scan_entries
from kafka_format.batch import DELETE_HORIZON_BIT
from kafka_format.codecs import Codec
from storage import _pycleaner, accel
from storage.cleaner import Cleaner, CleaningAborted, group_segments_by_size
from storage.config import LogConfig
from storage.log import Log
from storage.offset_map import DIGEST_SIZE, OffsetMap
from storage.segment_swap import SwapAborted

DAY = 86_400_000


# ---- helpers -------------------------------------------------------------------------------------

def compact_config(**overrides) -> LogConfig:
    props = {"cleanup.policy": "compact", "segment.bytes": 1024}
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig.from_props(props)


def open_log(path, clock, had_clean_shutdown=True, **overrides) -> Log:
    return Log.open(str(path), "topic", 0, compact_config(**overrides), clock=clock,
                    had_clean_shutdown=had_clean_shutdown)


def entries(log):
    """Every entry of every segment: (LogEntry, raw bytes)."""
    out = []
    for segment in log.segments.snapshot():
        data = segment.log.read(0, segment.size)
        result = scan_entries(data)
        assert result.problem is None, result.problem  # sizes, CRCs, offsets in order
        out += [(e, e.entry_bytes()) for e in iter_entries(data)]
    return out


def records(log):
    return [r for e, _ in entries(log) for r in e.records()]


def latest_by_key(recs):
    latest = {}
    for r in recs:
        if r.key is not None:
            latest[r.key] = (r.offset, r.value)
    return latest


def clean(log, clock, *, budget=1 << 22, first_dirty=None, offset_map=None, **kwargs):
    offset_map = offset_map or OffsetMap(budget)
    first = log.log_start_offset if first_dirty is None else first_dirty
    return Cleaner(offset_map, clock=clock, **kwargs).clean(log, first, log.active_segment.base_offset)


def fill(log, clock, batches, keys=10, per_batch=5, seed=0, value_size=8, **batch_args):
    rng = random.Random(seed)
    for _ in range(batches):
        recs = [(b"key-%d" % rng.randrange(keys), b"%d-" % rng.randrange(10**6) + b"v" * value_size,
                 clock.time_ms()) for _ in range(per_batch)]
        log.append(build_batch(recs, **batch_args))
        clock.advance(1)


def assert_cleaned(before, after):
    """`after` holds exactly the latest record of every key of `before` that was
    in the cleaned range, in offset order, with offsets, values and timestamps unchanged."""
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    assert latest_by_key(after) == latest_by_key(before)
    by_offset = {r.offset: r for r in before}
    for r in after:
        assert r == by_offset[r.offset]


# ---- what stays ------------------------------------------------------------------------------------

def test_the_latest_record_of_each_key_stays_with_its_offset(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    fill(log, clock, 60)
    before = records(log)
    active_before = log.active_segment
    end, stats = clean(log, clock)
    after = records(log)
    assert_cleaned(before, after)
    assert end == active_before.base_offset
    # In the cleaned range, one record per key.
    cleaned = [r for r in after if r.offset < end]
    assert len({r.key for r in cleaned}) == len(cleaned)
    assert log.active_segment is active_before  # never touched
    assert stats.records.records_read == sum(1 for r in before if r.offset < end)
    assert stats.records.records_kept + stats.records_dropped == stats.records.records_read
    assert stats.bytes_written < stats.bytes_read


def test_untouched_batches_are_copied_byte_for_byte(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    for i in range(20):
        log.append(build_batch([(b"dup", b"%d" % i, 1)]))  # superseded, every one but the last
        log.append(build_batch([(b"unique-%d" % i, b"x" * 30, 2)]))  # each key once: untouched
    log.roll()
    before = {e.last_offset: raw for e, raw in entries(log)}
    clean(log, clock)
    after = {e.last_offset: raw for e, raw in entries(log)}
    for i in range(20):
        assert after[2 * i + 1] == before[2 * i + 1]
    assert [o for o in after if o % 2 == 0] == [38]


def test_rebuilt_batches_keep_base_offset_last_offset_and_header_fields(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    log.append(build_batch([(b"a", b"1", 100), (b"b", b"2", 105), (b"c", b"3", 110)],
                           producer_id=7, producer_epoch=3, base_sequence=0))
    log.append(build_batch([(b"a", b"4", 200)]))
    log.roll()
    clean(log, clock)
    (first, raw), (second, _) = entries(log)
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 2)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 3, 0)
    assert first.base_timestamp == 105 and first.max_timestamp == 110  # Kafka: the first kept record's
    assert [(r.offset, r.key, r.timestamp) for r in first.records()] == [(1, b"b", 105), (2, b"c", 110)]
    assert first.is_valid() and second.last_offset == 3


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_compressed_batches_are_rebuilt_with_their_codec(tmp_path, clock, codec):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    fill(log, clock, 30, keys=7, codec=codec)
    log.roll()
    before = records(log)
    clean(log, clock)
    assert_cleaned(before, records(log))
    assert {e.codec for e, _ in entries(log)} == {codec}


@pytest.mark.parametrize("magic,codec", [(0, Codec.NONE), (1, Codec.NONE), (0, Codec.GZIP),
                                         (1, Codec.SNAPPY), (1, Codec.LZ4)])
def test_classic_messages_and_wrappers(tmp_path, clock, magic, codec):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    rng = random.Random(1)
    for i in range(30):
        recs = [(b"k%d" % rng.randrange(6), b"value-%d" % (i * 4 + j), 1000 + i) for j in range(4)]
        log.append(build_classic(recs, magic=magic, codec=codec))
    log.roll()
    before = records(log)
    clean(log, clock)
    after = records(log)
    assert_cleaned(before, after)
    for e, _ in entries(log):
        assert e.is_valid()
        if e.magic < 2 and e.codec:
            inner = e.records()
            assert e.last_offset == inner[-1].offset  # the wrapper carries its last inner offset


def test_a_mixed_log_of_every_format(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=2000)
    rng = random.Random(3)
    for i in range(80):
        recs = [(b"k%d" % rng.randrange(12), b"v%d" % i, 1000 + i)]
        kind = i % 5
        if kind == 0:
            data = build_batch(recs * 2, codec=Codec.LZ4)
        elif kind == 1:
            data = build_classic(recs, magic=0)
        elif kind == 2:
            data = build_classic(recs * 3, magic=1, codec=Codec.GZIP)
        else:
            data = build_batch(recs)
        log.append(data)
    log.roll()
    before = records(log)
    clean(log, clock)
    clean(log, clock)  # a second clean of a clean log changes nothing it should not
    assert_cleaned(before, records(log))


def test_keyless_records_are_dropped(tmp_path, clock):
    path = tmp_path / "t-0"
    log = Log.open(str(path), "topic", 0, LogConfig.from_props({"segment.bytes": 100_000}), clock=clock)
    log.append(build_batch([(None, b"no key", 1), (b"k", b"keyed", 2), (None, b"again", 3)]))
    log.append(build_classic([(None, b"classic keyless", 4)], magic=1))
    log.roll()
    log.update_config(compact_config(segment_bytes=100_000))  # made compacted later, as Kafka allows
    _, stats = clean(log, clock)
    assert [(r.offset, r.key) for r in records(log)] == [(1, b"k")]
    assert stats.records.keyless_dropped == 3


def test_the_active_segment_is_never_cleaned(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    fill(log, clock, 20, keys=2)
    before = [(e.last_offset, raw) for e, raw in entries(log)]
    end, stats = clean(log, clock)
    assert end == 0 and stats.groups == 0
    assert [(e.last_offset, raw) for e, raw in entries(log)] == before


def test_records_past_the_first_uncleanable_offset_are_untouched(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400)
    fill(log, clock, 40, keys=3)
    bases = [s.base_offset for s in log.segments]
    limit = bases[len(bases) // 2]
    tail_before = [(e.last_offset, raw) for e, raw in entries(log) if e.last_offset >= limit]
    end, _ = Cleaner(OffsetMap(1 << 20), clock=clock).clean(log, 0, limit)
    assert end == limit
    assert [(e.last_offset, raw) for e, raw in entries(log) if e.last_offset >= limit] == tail_before


def test_each_group_ends_at_the_last_offset_of_the_segments_it_replaces(tmp_path, clock):
    """All records of a group's last segment superseded: an empty batch keeps its
    last offset, so a `.swap` left by a crash replaces exactly its group."""
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300)
    for i in range(12):
        log.append(build_batch([(b"same", b"%d" % i, 1)]))
    segments = list(log.segments)[:-1]
    ends = [s.read_next_offset() - 1 for s in segments]
    clean(log, clock)
    for segment in list(log.segments)[:-1]:
        assert segment.read_next_offset() - 1 in ends
    empties = [e for e, _ in entries(log) if e.magic == 2 and e.record_count == 0]
    assert empties and all(e.is_valid() for e in empties)
    active = log.active_segment.base_offset
    # the map covers the cleanable range only: its latest record of the key stays
    assert [r.offset for r in records(log) if r.offset < active] == [active - 1]


# ---- tombstones -------------------------------------------------------------------------------------

def test_tombstones_get_a_delete_horizon_then_go_after_delete_retention_ms(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000, delete_retention_ms=DAY)
    log.append(build_batch([(b"gone", b"value", 1), (b"kept", b"value", 2)]))
    log.append(build_batch([(b"gone", None, 3)]))
    log.roll()
    now = clock.time_ms()
    clean(log, clock)
    tomb_entry = [e for e, _ in entries(log) if any(r.value is None for r in e.records())][0]
    assert tomb_entry.attributes & DELETE_HORIZON_BIT
    assert tomb_entry.base_timestamp == now + DAY  # the horizon, Kafka's layout
    assert [r.timestamp for r in tomb_entry.records()] == [3]  # record timestamps unchanged
    assert latest_by_key(records(log)) == {b"kept": (1, b"value"), b"gone": (2, None)}

    clock.advance(DAY - 1)
    clean(log, clock)  # not yet
    assert b"gone" in latest_by_key(records(log))
    clock.advance(1)
    log.append(build_batch([(b"other", b"x", 5)]))
    log.roll()
    _, stats = clean(log, clock)
    assert latest_by_key(records(log)) == {b"kept": (1, b"value"), b"other": (3, b"x")}
    assert stats.records.tombstones_dropped == 1


def test_a_tombstone_removes_every_older_value_of_its_key(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000, delete_retention_ms=0)
    for i in range(5):
        log.append(build_batch([(b"k", b"v%d" % i, i)]))
    log.append(build_batch([(b"k", None, 9)]))
    log.roll()
    clean(log, clock)  # the horizon is set (now + 0)...
    assert [(r.offset, r.value) for r in records(log)] == [(5, None)]
    clock.advance(1)
    clean(log, clock)  # ...and passed at the next clean
    assert records(log) == []


def test_classic_tombstones_follow_kafkas_legacy_horizon(tmp_path, clock):
    """Magic 0/1 have no horizon field: a tombstone goes once its segment was last
    modified delete.retention.ms before the last clean segment was."""
    log = open_log(tmp_path / "t-0", clock, segment_bytes=40, delete_retention_ms=DAY)
    for key, value in [(b"k", b"v"), (b"k", None), (b"x", b"y"), (b"z", b"y"), (b"w", b"y")]:
        log.append(build_classic([(key, value, 1)], magic=1))
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3, 4]
    clean(log, clock)  # nothing clean yet: the tombstone stays, the value it deletes goes
    assert [(r.key, r.value) for r in records(log)][:2] == [(b"k", None), (b"x", b"y")]

    def set_mtimes(seconds):
        for segment, when in zip(log.segments, seconds, strict=False):
            os.utime(segment.log.path, (when, when))

    old = 1_600_000_000
    set_mtimes([old, old, old + DAY // 1000 - 1])  # the last clean segment: less than a day newer
    Cleaner(OffsetMap(1 << 20), clock=clock).clean(log, 3, 4)
    assert (b"k", None) in [(r.key, r.value) for r in records(log)]
    set_mtimes([old, old, old + DAY // 1000 + 1])  # now more than a day newer
    Cleaner(OffsetMap(1 << 20), clock=clock).clean(log, 3, 4)
    assert b"k" not in [r.key for r in records(log)]


# ---- the offset map: rounds and collisions -----------------------------------------------------------

@pytest.mark.parametrize("twin", [
    pytest.param("python", id="python"),
    pytest.param("c", id="c", marks=pytest.mark.skipif(not accel.NATIVE, reason="not built"))])
def test_a_small_map_cleans_in_rounds_and_converges(tmp_path, clock, twin):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=600)
    fill(log, clock, 120, keys=40, per_batch=4)
    before = records(log)
    target = log.active_segment.base_offset
    # about 20 keys: several rounds (a 32-slot table, whose doubling to 64 slots would
    # need 3 KiB, and pass 1's bits; the Python twin charges the same)
    budget = 2800
    key_map = _pycleaner.KeyMap if twin == "python" else accel.KeyMap
    first_dirty, rounds = 0, 0
    while first_dirty < target:
        end, stats = clean(log, clock, first_dirty=first_dirty,
                           offset_map=OffsetMap(budget, key_map=key_map))
        assert first_dirty < end <= target
        assert stats.map["map_bytes"] <= budget
        first_dirty, rounds = end, rounds + 1
    assert rounds > 2
    end, _ = clean(log, clock, budget=1 << 22)  # one full round dedupes across the rounds' ranges
    after = records(log)
    assert_cleaned(before, after)
    assert len({r.key for r in after if r.offset < end}) == len([r for r in after if r.offset < end])


def test_keys_whose_digests_collide_are_never_lost(tmp_path, clock):
    """Every key through the digest path, and one digest for all: Kafka's map would
    keep one key of them all; here every key keeps its latest value."""
    log = open_log(tmp_path / "t-0", clock, segment_bytes=500)
    fill(log, clock, 80, keys=25, per_batch=3)
    before = records(log)
    colliding = OffsetMap(1 << 22, inline_key_limit=0, digest=lambda key: b"\x01" * DIGEST_SIZE)
    _, stats = clean(log, clock, offset_map=colliding)
    assert stats.map["map_collisions"] == 24
    assert_cleaned(before, records(log))
    # and again, now with the collisions between the clean part and a new dirty part
    first_dirty = log.active_segment.base_offset
    fill(log, clock, 40, keys=25, per_batch=3, seed=9)
    before = records(log)
    colliding = OffsetMap(1 << 22, inline_key_limit=0, digest=lambda key: b"\x01" * DIGEST_SIZE)
    clean(log, clock, offset_map=colliding, first_dirty=first_dirty)
    assert_cleaned(before, records(log))


class _EqualsAnything:
    def __eq__(self, other):
        return True


class DigestOnlyMap(OffsetMap):
    """Kafka's SkimpyOffsetMap semantics: a digest stands for its key."""

    def _key_at(self, offset):
        return _EqualsAnything()


@pytest.mark.parametrize("map_class,victim_survives", [(DigestOnlyMap, False), (OffsetMap, True)],
                         ids=["digest-only-as-kafka", "strata"])
def test_a_digest_collision_loses_a_live_key_only_in_a_digest_only_map(tmp_path, clock, map_class,
                                                                        victim_survives):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    log.append(build_batch([(b"victim", b"live value", 1)]))
    log.append(build_batch([(b"attacker", b"x", 2)]))
    log.roll()
    same_digest = lambda key: b"same".ljust(DIGEST_SIZE, b"\x00")  # noqa: E731
    clean(log, clock, offset_map=map_class(1 << 20, inline_key_limit=0, digest=same_digest))
    assert (b"victim" in latest_by_key(records(log))) == victim_survives


# ---- grouping ---------------------------------------------------------------------------------------

def test_groups_fit_segment_bytes_and_index_sizes(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300, index_interval_bytes=1)
    fill(log, clock, 40, keys=1000)
    segments = list(log.segments)[:-1]
    size = segments[0].size
    groups = group_segments_by_size(segments, 3 * size, 10**9, log.active_segment.base_offset)
    assert all(sum(s.size for s in g) <= 3 * size for g in groups)
    assert [s for g in groups for s in g] == segments
    index = segments[0].offset_index.size_in_bytes
    by_index = group_segments_by_size(segments, 10**9, 2 * index, log.active_segment.base_offset)
    assert all(sum(s.offset_index.size_in_bytes for s in g) <= 2 * index for g in by_index)
    assert len(by_index) >= len(segments) // 2


def test_groups_never_span_more_than_int32_offsets():
    class Fake:
        def __init__(self, base):
            self.base_offset, self.size = base, 10

            class Index:
                size_in_bytes = 8
            self.offset_index = self.time_index = Index()

    # a segment's last offset is taken as the next base - 1 (the first uncleanable - 1 for the last)
    segments = [Fake(0), Fake(1000), Fake(2**31)]
    groups = group_segments_by_size(segments, 10**9, 10**9, 2**31 + 100)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 1000], [2**31]]


def test_a_second_clean_merges_small_segments_up_to_segment_bytes(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400)
    fill(log, clock, 80, keys=5)
    count_before = len(log.segments)
    clean(log, clock)
    clean(log, clock)
    assert len(log.segments) < count_before
    assert all(s.size <= 400 for s in log.segments)


# ---- the swap ---------------------------------------------------------------------------------------

def test_the_swap_leaves_only_final_names_and_deletes_old_files_later(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400, file_delete_delay_ms=1000)
    fill(log, clock, 40, keys=5)
    last_mtime = {s.base_offset: os.stat(s.log.path).st_mtime_ns for s in log.segments}
    clean(log, clock)
    names = os.listdir(log.directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    assert [n for n in names if n.endswith(".deleted")]
    clock.advance(1000)
    log.delete_due_files()
    assert not [n for n in os.listdir(log.directory) if n.endswith(".deleted")]
    for segment in list(log.segments)[:-1]:  # each cleaned segment keeps its last old segment's mtime
        assert os.stat(segment.log.path).st_mtime_ns in last_mtime.values()


def test_a_reader_of_an_older_snapshot_finishes_its_read(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400)
    fill(log, clock, 40, keys=5)
    held = log.read(0, 1 << 20)
    before = held.read()
    clean(log, clock)
    assert held.read() == before
    held.release()


def test_segments_deleted_under_the_cleaner_abort_the_swap(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400)
    fill(log, clock, 40, keys=5)
    before = records(log)

    def retention_strikes(step):
        if step == "cleaned_written":
            log.increase_log_start_offset(log.segments.snapshot().segments[1].base_offset)
            log.delete_segments_below_log_start()

    with pytest.raises(SwapAborted):
        clean(log, clock, step=retention_strikes)
    assert not [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
    start = log.log_start_offset
    assert records(log) == [r for r in before if r.offset >= start]


def test_a_stopped_clean_discards_its_group_and_changes_nothing(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    fill(log, clock, 40, keys=5)
    log.roll()
    before = [(e.last_offset, raw) for e, raw in entries(log)]
    calls = []

    def check_done():
        calls.append(1)
        if len(calls) > 1:  # pass 1 done, stop in pass 2
            raise CleaningAborted("shutdown")

    with pytest.raises(CleaningAborted):
        Cleaner(OffsetMap(1 << 20), clock=clock).clean(log, 0, log.active_segment.base_offset,
                                                       check_done=check_done)
    assert [(e.last_offset, raw) for e, raw in entries(log)] == before
    assert not [n for n in os.listdir(log.directory) if ".cleaned" in n]


class Crash(BaseException):
    """A kill: nothing after it runs (BaseException: no `except Exception` cleans up)."""


SWAP_STEPS = ["cleaned_written", "renamed_to_swap", "swap_synced", "old_renamed_deleted", "swap_renamed",
              "dir_synced"]


def build_crash_log(path, clock):
    log = open_log(path, clock, segment_bytes=350)
    rng = random.Random(5)
    for i in range(60):
        recs = [(b"key-%d" % rng.randrange(8), b"v%d" % i, 1000 + i)]
        if i % 7 == 3:
            recs.append((b"key-%d" % rng.randrange(8), None, 1000 + i))
        log.append(build_batch(recs) if i % 3 else build_classic(recs[:1], magic=1))
    return log


@pytest.mark.parametrize("crash_at", SWAP_STEPS)
@pytest.mark.parametrize("group", [0, 1], ids=["first-group", "second-group"])
def test_a_crash_at_each_step_recovers_the_old_or_the_new_segments(tmp_path, clock, crash_at, group):
    # the clean that runs to the end, on a copy: what "new" means
    reference = build_crash_log(tmp_path / "ref" / "t-0", clock)
    original = records(reference)
    clean(reference, clock)
    cleaned = records(reference)
    reference.close()

    log = build_crash_log(tmp_path / "crash" / "t-0", clock)
    assert records(log) == original
    seen = []

    def crash(step):
        if step == crash_at:
            seen.append(step)
            if len(seen) == group + 1:
                raise Crash(step)

    with pytest.raises(Crash):
        clean(log, clock, step=crash)
    # the process dies here; the next start recovers the directory
    if crash_at == "swap_synced":  # ... and had renamed one old segment's `.log` only
        doomed = sorted(n for n in os.listdir(log.directory) if n.endswith(".log"))[group]
        os.rename(os.path.join(log.directory, doomed), os.path.join(log.directory, doomed + ".deleted"))
    if crash_at == "old_renamed_deleted":  # ... and had given the new index its final name
        swapped = [n for n in os.listdir(log.directory) if n.endswith(".index.swap")][0]
        os.rename(os.path.join(log.directory, swapped), os.path.join(log.directory, swapped[:-5]))
    recovered = open_log(tmp_path / "crash" / "t-0", clock, had_clean_shutdown=False, segment_bytes=350)
    got = records(recovered)
    assert latest_by_key(got) == latest_by_key(original)  # never a loss
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))
    assert set(offsets) <= {r.offset for r in original}
    assert {r.offset for r in cleaned} <= set(offsets)  # what survives a clean is all there
    # per segment: old content or new content, nothing else
    old_or_new = {r.offset: r for r in original}
    assert all(old_or_new[r.offset] == r for r in got)
    names = os.listdir(recovered.directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    if group == 0 and crash_at == "cleaned_written":
        assert got == original  # no `.swap` yet: the old segments
    if group == 0 and crash_at != "cleaned_written":  # a whole `.log.swap`: the new segment
        first_end = list(recovered.segments)[0].read_next_offset()
        assert [r for r in got if r.offset < first_end] == [r for r in cleaned if r.offset < first_end]
    # and it cleans on to the same result
    clean(recovered, clock)
    assert latest_by_key(records(recovered)) == latest_by_key(cleaned)
    recovered.close()


def test_a_leftover_cleaned_file_from_a_failed_clean_is_replaced(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=400)
    fill(log, clock, 30, keys=5)
    with open(os.path.join(log.directory, f"{0:020d}.log.cleaned"), "wb") as f:
        f.write(b"junk")
    before = records(log)
    clean(log, clock)
    assert_cleaned(before, records(log))


# ---- random logs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(int(os.environ.get("CLEANER_SEEDS", "8"))))
def test_random_logs_cleaned_in_random_rounds_keep_every_latest_value(tmp_path, clock, seed):
    """Formats, codecs, tombstones, duplicate keys in a batch, small maps, colliding
    digests, cleans between appends: the latest value of every key is always readable, and a key
    whose latest record is a tombstone is either absent or still a tombstone."""
    rng = random.Random(seed)
    log = open_log(tmp_path / "t-0", clock, segment_bytes=rng.choice([300, 700, 2000]),
                   delete_retention_ms=rng.choice([0, 50, 10_000]))
    expected: dict[bytes, bytes | None] = {}
    first_dirty = 0
    for step in range(rng.randrange(60, 120)):
        recs = []
        for _ in range(rng.randrange(1, 6)):
            key = b"k%d" % rng.randrange(15)
            value = None if rng.random() < 0.15 else b"v%d-%d" % (step, rng.randrange(100))
            recs.append((key, value, clock.time_ms()))
        kind = rng.randrange(6)
        if kind == 0:
            data = build_classic([recs[0]], magic=rng.choice([0, 1]))
            recs = recs[:1]
        elif kind == 1:
            data = build_classic(recs, magic=1, codec=rng.choice([Codec.GZIP, Codec.LZ4]))
        else:
            data = build_batch(recs, codec=rng.choice([Codec.NONE, Codec.NONE, Codec.ZSTD, Codec.SNAPPY]))
        log.append(data)
        for key, value, _ in recs:
            expected[key] = value
        clock.advance(rng.randrange(0, 30))
        if rng.random() < 0.1:
            budget = rng.choice([3000, 6000, 1 << 20])
            offset_map = OffsetMap(budget)
            if rng.random() < 0.3:  # every key through one colliding digest
                offset_map = OffsetMap(budget, inline_key_limit=0, digest=lambda key: b"\x07" * DIGEST_SIZE)
            end, _ = clean(log, clock, first_dirty=first_dirty, offset_map=offset_map)
            first_dirty = end if rng.random() < 0.7 else log.log_start_offset  # the checkpoint, or reset
            got = latest_by_key(records(log))
            for key, value in expected.items():
                if value is None:
                    assert key not in got or got[key][1] is None
                else:
                    assert got[key][1] == value, (key, got.get(key), value)
            offsets = [r.offset for r in records(log)]
            assert offsets == sorted(set(offsets))


def test_an_active_producers_last_batch_stays_even_when_all_its_records_go(tmp_path, clock):
    """Kafka's RETAIN_EMPTY: the batch carrying an idempotent producer's last sequence
    stays (as an empty batch with its producer fields) so the producer can go on."""
    log = open_log(tmp_path / "t-0", clock, segment_bytes=100_000)
    now = clock.time_ms()  # producers idle for producer.id.expiration.ms are forgotten
    log.append(build_batch([(b"k", b"1", now), (b"j", b"1", now)], producer_id=42, producer_epoch=0,
                           base_sequence=0))
    log.append(build_batch([(b"k", b"2", now), (b"j", b"2", now)]))  # supersedes both, no producer
    log.append(build_batch([(b"k", b"3", now)], producer_id=7, producer_epoch=0, base_sequence=0))
    log.append(build_batch([(b"k", b"4", now)], producer_id=7, producer_epoch=0, base_sequence=1))
    log.roll()
    clean(log, clock)
    got = [(e.base_offset, e.last_offset, e.record_count, e.producer_id, e.base_sequence)
           for e, _ in entries(log)]
    # 42's only batch stays empty; 7's first batch goes, its last one stays with its record
    assert got == [(0, 1, 0, 42, 0), (2, 3, 1, -1, -1), (5, 5, 1, 7, 1)]
    log.append(build_batch([(b"k", b"5", now)], producer_id=42, producer_epoch=0, base_sequence=2))
    log.close()
    reopened = open_log(tmp_path / "t-0", clock, had_clean_shutdown=False, segment_bytes=100_000)
    reopened.append(build_batch([(b"k", b"6", now)], producer_id=42, producer_epoch=0, base_sequence=3))
    assert latest_by_key(records(reopened))[b"k"][1] == b"6"
    reopened.close()
