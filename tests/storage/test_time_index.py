import bisect
import os
import random
import sys
import threading

import pytest

from kafka_format.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from storage.time_index import TimeIndex, TimestampOffset

BASE_OFFSET = 45
MAX_ENTRIES = 30
ENTRY_SIZE = 12


@pytest.fixture
def index(tmp_path):
    idx = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE_OFFSET, MAX_ENTRIES * ENTRY_SIZE)
    yield idx
    idx.close()


def append_entries(idx, count):
    """Kafka's TimeIndexTest helper: entry i is (10*i, base + 10*i) for i in 1..count."""
    for i in range(1, count + 1):
        idx.maybe_append(i * 10, i * 10 + BASE_OFFSET)


def oracle_lookup(timestamps, offsets, base, target):
    i = bisect.bisect_right(timestamps, target)
    return (timestamps[i - 1], offsets[i - 1]) if i else (-1, base)


# -- Kafka's TimeIndexTest cases -----------------------------------------------------


def test_lookup(index):
    assert index.lookup(100) == TimestampOffset(-1, BASE_OFFSET)  # empty
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == (-1, BASE_OFFSET)  # below the earliest entry
    assert index.lookup(25) == (20, 65)  # between two entries
    assert index.lookup(30) == (30, 75)  # exactly an entry
    assert index.lookup(10**15) == (290, 335)  # past the last


def test_timestamps_ten_times_offset(tmp_path):
    # Entries (10*o, o): a lookup gives the entry at or below the timestamp.
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 100 * ENTRY_SIZE)
    for offset in range(1, 50):
        idx.maybe_append(offset * 10, offset)
    assert idx.lookup(420) == (420, 42)
    assert idx.lookup(421) == (420, 42)
    assert idx.lookup(431) == (430, 43)
    assert idx.lookup(491) == (490, 49)
    assert idx.lookup(9) == (-1, 0)
    idx.close()


def test_entry(index):
    append_entries(index, MAX_ENTRIES - 1)
    assert index.entry(0) == (10, 55)
    assert index.entry(1) == (20, 65)
    assert index.entry(2) == (30, 75)
    assert index.entry(3) == (40, 85)


def test_entry_overflow(index):
    with pytest.raises(IndexError):
        index.entry(0)


def test_truncate(index):
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate()
    assert index.entries == 0
    assert index.last_entry == (-1, BASE_OFFSET)

    append_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE_OFFSET)
    assert index.entries == 0


def test_truncate_to_keeps_entries_below_the_offset(index):
    append_entries(index, 10)  # offsets 55, 65, ..., 145
    index.truncate_to(100)  # removes offsets >= 100: 105..145
    assert index.entries == 5
    assert index.last_entry == (50, 95)
    index.truncate_to(95)
    assert index.last_entry == (40, 85)
    index.truncate_to(10**9)  # past the end: no effect
    assert index.entries == 4
    index.maybe_append(41, 90)
    assert index.last_entry == (41, 90)


def test_truncate_to_removes_every_entry_with_that_offset(index):
    # Two entries may share an offset (a larger timestamp for the same offset).
    index.maybe_append(10, 50)
    index.maybe_append(20, 60)
    index.maybe_append(30, 60)
    index.maybe_append(40, 70)
    index.truncate_to(60)
    assert index.entries == 1 and index.last_entry == (10, 50)


def test_append(index):
    append_entries(index, MAX_ENTRIES - 1)
    with pytest.raises(InvalidOffsetError):  # full: the last slot is kept for a roll
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):  # offset below the last entry's
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.entries == MAX_ENTRIES
    assert index.last_entry == (10000, 1000)
    with pytest.raises(InvalidOffsetError):  # truly no slot left
        index.maybe_append(10001, 1001, skip_full_check=True)
    # Re-adding the last entry on a second roll/close is a no-op, even when every slot is used.
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.entries == MAX_ENTRIES


def test_is_full(index):
    assert not index.is_full()
    append_entries(index, MAX_ENTRIES - 2)
    assert not index.is_full()
    index.maybe_append(10_000, 10_000)
    assert index.is_full()
    assert index.entries == index.max_entries - 1


def test_last_entry(index):
    assert index.last_entry == TimestampOffset(-1, BASE_OFFSET)
    index.maybe_append(1, 1 + BASE_OFFSET)
    assert index.last_entry == TimestampOffset(1, BASE_OFFSET + 1)


def test_resize(index):
    assert index.resize(MAX_ENTRIES * ENTRY_SIZE) is False
    assert index.resize(MAX_ENTRIES // 2 * ENTRY_SIZE) is True
    assert index.resize(MAX_ENTRIES * 2 * ENTRY_SIZE) is True
    assert index.max_entries == MAX_ENTRIES * 2


def test_only_larger_timestamps_are_appended(index):
    index.maybe_append(-1, BASE_OFFSET)  # NO_TIMESTAMP (magic v0) never makes an entry
    assert index.entries == 0
    index.maybe_append(100, 50)
    index.maybe_append(100, 51)  # equal timestamp: skipped
    index.maybe_append(90, 52)  # smaller timestamp: skipped
    assert index.entries == 1 and index.last_entry == (100, 50)
    index.maybe_append(101, 50)  # same offset, larger timestamp: taken
    assert index.entries == 2 and index.last_entry == (101, 50)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(200, 49)


def test_offsets_outside_the_relative_range(index):
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(5, BASE_OFFSET - 1)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(5, BASE_OFFSET + 2**31)
    index.maybe_append(5, BASE_OFFSET + 2**31 - 1)
    assert index.lookup(5) == (5, BASE_OFFSET + 2**31 - 1)


def test_layout_is_big_endian_timestamp_then_relative_offset(tmp_path):
    path = tmp_path / "100.timeindex"
    idx = TimeIndex(path, 100, 10 * ENTRY_SIZE)
    idx.maybe_append(0x0102030405060708, 103)
    idx.close()
    assert path.read_bytes() == bytes.fromhex("0102030405060708 00000003")


# -- oracle ---------------------------------------------------------------------------


def test_random_lookups_match_a_sorted_list(tmp_path):
    for seed in range(8):
        rng = random.Random(seed)
        base = rng.choice([0, 45, 2**40])
        count = rng.choice([1, 2, 10, 500, 3000])  # 3000 > the 682-entry warm section
        idx = TimeIndex(tmp_path / f"{seed}.timeindex", base, (count + 1) * ENTRY_SIZE)
        timestamps, offsets = [], []
        offset = base
        for _ in range(count):
            timestamp = rng.randrange(-5, 20 * count)  # many are not larger: skipped
            idx.maybe_append(timestamp, offset)
            if timestamp > (timestamps[-1] if timestamps else -1):
                timestamps.append(timestamp)
                offsets.append(offset)
            offset += rng.randrange(0, 4)
        assert idx.entries == len(timestamps)
        assert idx.last_entry == ((timestamps[-1], offsets[-1]) if timestamps else (-1, base))
        targets = [-(2**63), -2, -1, 0, 1, 20 * count, 2**62] + timestamps[:30] + timestamps[-30:]
        targets += [rng.randrange(-3, 20 * count + 3) for _ in range(1000)]
        for target in targets:
            assert idx.lookup(target) == oracle_lookup(timestamps, offsets, base, target), (seed, target)
        idx.close()


# -- files ---------------------------------------------------------------------------


def test_reopen_after_close_keeps_entries_and_is_full(tmp_path):
    path = tmp_path / "00000000000000000045.timeindex"
    idx = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_SIZE)
    append_entries(idx, 5)
    idx.close()
    assert os.path.getsize(path) == 5 * ENTRY_SIZE

    reopened = TimeIndex(path, BASE_OFFSET)
    assert reopened.entries == 5 and reopened.max_entries == 5 and reopened.is_full()
    assert reopened.last_entry == (50, 95)
    assert reopened.lookup(35) == (30, 75)
    reopened.sanity_check()
    with pytest.raises(InvalidOffsetError):
        reopened.maybe_append(60, 105)
    reopened.resize(MAX_ENTRIES * ENTRY_SIZE)
    assert not reopened.is_full()
    reopened.maybe_append(60, 105)
    assert reopened.lookup(10**6) == (60, 105)
    reopened.close()
    assert os.path.getsize(path) == 6 * ENTRY_SIZE


def test_sanity_check(index):
    index.sanity_check()
    append_entries(index, 5)
    index.sanity_check()
    index.trim_to_valid_size()
    index.sanity_check()


def test_sanity_check_on_good_and_corrupt_files(tmp_path):
    def write(name, entries, extra=b""):
        path = tmp_path / name
        path.write_bytes(b"".join(ts.to_bytes(8, "big", signed=True) + rel.to_bytes(4, "big", signed=True)
                                  for ts, rel in entries) + extra)
        return TimeIndex(path, 100)

    good = write("good", [(10, 0), (20, 5)])
    good.sanity_check()
    good.close()

    last_timestamp_below_first = write("ts", [(30, 0), (20, 5)])
    with pytest.raises(CorruptIndexError, match="timestamp"):
        last_timestamp_below_first.sanity_check()
    last_timestamp_below_first.close()

    last_offset_below_base = write("offset", [(10, 0), (20, -1)])
    with pytest.raises(CorruptIndexError, match="base offset"):
        last_offset_below_base.sanity_check()
    last_offset_below_base.close()

    bad_length = write("length", [(10, 0), (20, 5)], extra=b"\x00")
    assert bad_length.entries == 2
    with pytest.raises(CorruptIndexError, match="multiple of 12"):
        bad_length.sanity_check()
    bad_length.close()

    empty = write("empty", [])
    empty.sanity_check()
    assert empty.is_full() and empty.lookup(5) == (-1, 100)
    empty.close()


def test_closed_index_refuses_use(index):
    append_entries(index, 3)
    index.close()
    for call in (lambda: index.lookup(10), lambda: index.entry(0), lambda: index.maybe_append(1000, 1000),
                 index.sanity_check, lambda: index.truncate_to(0)):
        with pytest.raises(KafkaStorageError):
            call()


def test_rename_and_delete(tmp_path, index):
    append_entries(index, 2)
    index.rename(tmp_path / "moved.timeindex.swap")
    index.maybe_append(1000, 1000)
    assert index.lookup(2000) == (1000, 1000)
    assert index.delete_if_exists() is True
    assert not (tmp_path / "moved.timeindex.swap").exists()
    assert index.delete_if_exists() is False


# -- concurrency ------------------------------------------------------------------------


def test_lookups_stay_consistent_while_a_writer_appends_and_rolls(tmp_path):
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        base = 500
        idx = TimeIndex(tmp_path / "0.timeindex", base, 32 * ENTRY_SIZE)
        total = 4000
        done = threading.Event()
        failures = []
        seen_while_writing = set()  # entry counts readers saw mid-write: proof the threads overlapped

        # Entry i is (1000 + 3*i, base + 2*i): every answer must be one of these pairs.
        readers_started = threading.Barrier(3)

        def writer():
            try:
                readers_started.wait(timeout=30)  # overlap is certain, not left to timing
                for i in range(total - 1):
                    if idx.is_full():
                        idx.resize(idx.max_entries * 2 * ENTRY_SIZE)
                    idx.maybe_append(1000 + 3 * i, base + 2 * i)
                i = total - 1
                idx.maybe_append(1000 + 3 * i, base + 2 * i, skip_full_check=True)  # the roll
                idx.trim_to_valid_size()
            except BaseException as e:  # pragma: no cover - reported below
                failures.append(("writer", repr(e)))
            finally:
                done.set()

        def reader():
            rng = random.Random(4)
            trailing = 200
            seen_while_writing.add(idx.entries)
            readers_started.wait(timeout=30)
            while trailing > 0:
                if done.is_set():
                    trailing -= 1
                visible = idx.entries
                if not done.is_set():
                    seen_while_writing.add(visible)
                target = rng.randrange(990, 1000 + 3 * total + 5)
                timestamp, offset = idx.lookup(target)
                if timestamp == -1:
                    ok = offset == base and (visible == 0 or target < 1000)
                else:
                    i = (timestamp - 1000) // 3
                    ok = ((timestamp - 1000) % 3 == 0 and offset == base + 2 * i and timestamp <= target
                          and i >= min(visible - 1, (target - 1000) // 3))
                if not ok:
                    failures.append(("reader", target, visible, timestamp, offset))
                    return

        threads = [threading.Thread(target=writer), threading.Thread(target=reader), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not failures, failures[:5]
        assert seen_while_writing
        assert idx.entries == total and os.path.getsize(idx.path) == total * ENTRY_SIZE
        idx.close()
    finally:
        sys.setswitchinterval(previous)


# -- bulk appends (LogSegment's path) -------------------------------------------------


def packed(*entries):
    return b"".join(TimeIndex.ENTRY.pack(*entry) for entry in entries)


def test_append_entries_writes_packed_entries_in_one_go(index):
    index.maybe_append(10, BASE_OFFSET + 1)
    index.append_entries(packed((20, 5), (30, 9), (40, 9)))
    assert index.entries == 4 and index.last_entry == TimestampOffset(40, BASE_OFFSET + 9)
    assert index.lookup(35) == TimestampOffset(30, BASE_OFFSET + 9)


def test_append_entries_that_do_not_follow_go_one_by_one(index):
    index.maybe_append(50, BASE_OFFSET + 10)
    index.append_entries(packed((50, 11), (60, 12)))  # 50 is no larger: skipped, as maybe_append does
    assert index.entries == 2 and index.last_entry == TimestampOffset(60, BASE_OFFSET + 12)
    with pytest.raises(InvalidOffsetError):  # an offset below the last entry's
        index.append_entries(packed((70, 11)))
    assert index.entries == 2


def test_append_entries_keep_the_slot_for_the_roll(index):
    index.append_entries(packed(*[(10 * i, i) for i in range(1, MAX_ENTRIES - 1)]))
    assert index.entries == MAX_ENTRIES - 2 and not index.is_full()
    with pytest.raises(InvalidOffsetError):
        index.append_entries(packed((10_000, 100), (10_001, 101)))
    assert index.entries == MAX_ENTRIES - 1 and index.is_full()
    index.maybe_append(20_000, 200, skip_full_check=True)  # the roll's final entry
    assert index.entries == MAX_ENTRIES
