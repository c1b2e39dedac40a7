import bisect
import os
import random
import sys
import threading

import pytest

from kafka_format.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from storage.offset_index import OffsetIndex, OffsetPosition

BASE_OFFSET = 45
ENTRY_SIZE = 8


@pytest.fixture
def index(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000045.index", BASE_OFFSET, 30 * ENTRY_SIZE)
    yield idx
    idx.close()


@pytest.fixture
def fine_grained_thread_switching():
    # Switch threads every few microseconds so that a reader is often interrupted mid-search.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(previous)


def oracle_lookup(offsets, positions, base, target):
    """The answer of a plain sorted list: the last entry with offset <= target."""
    i = bisect.bisect_right(offsets, target)
    return (offsets[i - 1], positions[i - 1]) if i else (base, 0)


# -- creation and layout ----------------------------------------------------------


def test_new_file_is_preallocated_sparse_and_empty(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 1003)  # rounded down to 125 entries
    assert os.path.getsize(path) == 1000
    assert (idx.entries, idx.max_entries, idx.size_in_bytes) == (0, 125, 0)
    assert idx.path == str(path) and idx.base_offset == 0 and idx.last_offset == 0
    assert not idx.is_full()
    idx.close()
    assert os.path.getsize(path) == 0


def test_default_max_index_size_is_segment_index_bytes(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0)
    assert idx.max_entries == 10485760 // 8
    assert os.stat(tmp_path / "0.index").st_blocks == 0  # sparse: nothing allocated yet
    idx.close()


def test_max_index_size_below_one_entry_is_refused(tmp_path):
    with pytest.raises(ValueError):
        OffsetIndex(tmp_path / "0.index", 0, 7)
    assert not (tmp_path / "0.index").exists()


def test_entries_are_big_endian_relative_offset_then_position(tmp_path):
    path = tmp_path / "100.index"
    idx = OffsetIndex(path, 100, 64)
    idx.append(100, 0)
    idx.append(105, 0x01020304)
    idx.close()
    assert path.read_bytes() == bytes.fromhex("00000000 00000000 00000005 01020304")


def test_read_only_index_of_a_missing_file_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)
    assert not (tmp_path / "missing.index").exists()


# -- lookups -----------------------------------------------------------------------


def test_random_lookups_match_a_sorted_list(tmp_path):
    for seed in range(8):
        rng = random.Random(seed)
        base = rng.choice([0, 45, 2**40])
        count = rng.choice([1, 2, 3, 100, 1024, 5000])  # 5000 > the 1024-entry warm section
        idx = OffsetIndex(tmp_path / f"{seed}.index", base, count * ENTRY_SIZE)
        offsets, positions = [], []
        offset, position = base + rng.randrange(0, 3), 0
        for _ in range(count):
            idx.append(offset, position)
            offsets.append(offset)
            positions.append(position)
            offset += rng.randrange(1, 20)
            position += rng.randrange(0, 5000)
        assert idx.is_full()
        assert idx.last_offset == offsets[-1]
        targets = [base - 1, base, offsets[0] - 1, offsets[-1], offsets[-1] + 1, offsets[-1] + 10**6, -(2**63)]
        targets += offsets[:50] + offsets[-50:]
        targets += [rng.randrange(base - 5, offsets[-1] + 5) for _ in range(1000)]
        for target in targets:
            assert idx.lookup(target) == oracle_lookup(offsets, positions, base, target), (seed, target)
        for n in rng.sample(range(count), min(count, 50)):
            assert idx.entry(n) == (offsets[n], positions[n])
        idx.close()


def test_kafka_random_lookup(index):
    assert index.lookup(92) == OffsetPosition(BASE_OFFSET, 0)
    rng = random.Random(7)
    offset, position, offsets, positions = BASE_OFFSET + 1, 0, [], []
    for _ in range(index.max_entries):
        offset += rng.randrange(1, 16)
        position += rng.randrange(1, 16)
        index.append(offset, position)
        offsets.append(offset)
        positions.append(position)
    for o, p in zip(offsets, positions, strict=True):
        assert index.lookup(o) == OffsetPosition(o, p)
    for target in range(BASE_OFFSET, offsets[-1]):
        assert index.lookup(target) == oracle_lookup(offsets, positions, BASE_OFFSET, target)


def test_lookup_extreme_cases(index):
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)  # empty file
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    last = BASE_OFFSET + index.max_entries
    assert index.lookup(last) == (last, index.max_entries - 1)
    assert index.lookup(last + 1000) == (last, index.max_entries - 1)


def test_entry(index):
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == (BASE_OFFSET + i, i)


def test_entry_overflow(index):
    with pytest.raises(IndexError):
        index.entry(0)
    index.append(BASE_OFFSET, 0)
    with pytest.raises(IndexError):
        index.entry(1)
    with pytest.raises(IndexError):
        index.entry(-1)


# -- appends -------------------------------------------------------------------------


def test_append_too_many(index):
    for i in range(index.max_entries):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.is_full()
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET + index.max_entries + 1, 1)


def test_append_out_of_order(index):
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        index.append(51, 1)  # equal is refused too
    assert index.entries == 1 and index.last_offset == 51


def test_first_append_may_be_the_base_offset(index):
    index.append(BASE_OFFSET, 0)
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    index.sanity_check()


def test_append_outside_the_relative_offset_range(index):
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET - 1, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET + 2**31, 0)
    assert index.can_append_offset(BASE_OFFSET + 2**31 - 1)
    assert not index.can_append_offset(BASE_OFFSET + 2**31)
    assert not index.can_append_offset(BASE_OFFSET - 1)
    index.append(BASE_OFFSET + 2**31 - 1, 7)
    assert index.lookup(2**62) == (BASE_OFFSET + 2**31 - 1, 7)
    assert index.entries == 1


def test_append_refuses_a_position_outside_int32(index):
    with pytest.raises(ValueError):
        index.append(BASE_OFFSET, 2**31)
    with pytest.raises(ValueError):
        index.append(BASE_OFFSET, -1)
    assert index.entries == 0


# -- truncation ---------------------------------------------------------------------


def test_truncate_kafka_cases(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 10 * ENTRY_SIZE)
    idx.truncate()
    for i in range(1, 10):
        idx.append(i, i)

    idx.truncate_to(12)
    assert idx.lookup(10) == (9, 9), "unchanged by a truncate past the end"
    assert idx.last_offset == 9

    idx.append(10, 10)
    idx.truncate_to(10)
    assert idx.lookup(10) == (9, 9), "the entry at the truncation offset goes"
    assert idx.last_offset == 9
    idx.append(10, 10)

    idx.truncate_to(9)
    assert idx.lookup(10) == (8, 8)
    assert idx.last_offset == 8
    idx.append(9, 9)

    idx.truncate_to(5)
    assert idx.lookup(10) == (4, 4)
    assert idx.last_offset == 4
    idx.append(5, 5)

    idx.truncate()
    assert idx.entries == 0 and idx.last_offset == 0
    idx.append(0, 0)
    idx.close()


def test_truncate_to_between_sparse_entries(index):
    for offset in (50, 60, 70, 80):
        index.append(offset, offset * 10)
    index.truncate_to(65)  # 70 and 80 go; 60 stays
    assert index.entries == 2 and index.last_offset == 60
    index.truncate_to(BASE_OFFSET)  # below every entry
    assert index.entries == 0 and index.last_offset == BASE_OFFSET
    assert index.lookup(100) == (BASE_OFFSET, 0)


def test_random_truncations_match_a_sorted_list(tmp_path):
    rng = random.Random(3)
    idx = OffsetIndex(tmp_path / "0.index", 1000, 4000 * ENTRY_SIZE)
    offsets, positions = [], []
    for _ in range(40):
        for _ in range(rng.randrange(0, 100)):
            if idx.is_full():
                break
            offset = (offsets[-1] if offsets else 1000) + rng.randrange(1, 9)
            idx.append(offset, offset * 3)
            offsets.append(offset)
            positions.append(offset * 3)
        cut = rng.randrange(990, (offsets[-1] if offsets else 1000) + 10)
        idx.truncate_to(cut)
        keep = bisect.bisect_left(offsets, cut)
        del offsets[keep:], positions[keep:]
        assert idx.entries == len(offsets)
        assert idx.last_offset == (offsets[-1] if offsets else 1000)
        for target in rng.sample(range(990, cut + 20), 20):
            assert idx.lookup(target) == oracle_lookup(offsets, positions, 1000, target)
    idx.close()


# -- resize, reopen, close ------------------------------------------------------------


def test_reopen_after_close_keeps_entries_and_is_full(tmp_path):
    path = tmp_path / "00000000000000000045.index"
    idx = OffsetIndex(path, BASE_OFFSET, 30 * ENTRY_SIZE)
    idx.append(51, 0)
    idx.append(52, 1)
    idx.close()
    assert os.path.getsize(path) == 2 * ENTRY_SIZE

    reopened = OffsetIndex(path, BASE_OFFSET)
    assert reopened.lookup(51) == (51, 0)
    assert reopened.lookup(52) == (52, 1)
    assert reopened.last_offset == 52
    assert reopened.entries == 2 and reopened.max_entries == 2
    assert reopened.is_full()
    with pytest.raises(InvalidOffsetError):
        reopened.append(53, 1)

    # Growing it back (as the log does for the active segment) makes room again.
    assert reopened.resize(30 * ENTRY_SIZE) is True
    assert (reopened.entries, reopened.max_entries) == (2, 30)
    for offset in range(53, 81):
        reopened.append(offset, offset)
    assert reopened.is_full()
    assert reopened.lookup(1000) == (80, 80)
    assert reopened.lookup(52) == (52, 1)
    reopened.close()

    again = OffsetIndex(path, BASE_OFFSET, writable=False)
    assert again.entries == 30 and again.lookup(60) == (60, 60)
    with pytest.raises(KafkaStorageError):
        again.append(81, 0)
    again.close()


def test_reopen_of_an_untrimmed_file_takes_every_slot_as_valid(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 10 * ENTRY_SIZE)
    idx.append(3, 30)
    idx.flush()
    # Crash: no close, so the preallocated zero slots stay in the file.
    reopened = OffsetIndex(path, 0)
    assert reopened.entries == 10 and reopened.is_full()
    assert reopened.entry(0) == (3, 30) and reopened.entry(9) == (0, 0)
    reopened.close()
    idx.close()


def test_resize(index):
    assert index.resize(30 * ENTRY_SIZE) is False
    assert index.resize(15 * ENTRY_SIZE) is True
    assert index.max_entries == 15 and os.path.getsize(index.path) == 15 * ENTRY_SIZE
    assert index.resize(60 * ENTRY_SIZE + 7) is True  # rounded down
    assert index.max_entries == 60 and os.path.getsize(index.path) == 60 * ENTRY_SIZE
    for i in range(60):
        index.append(BASE_OFFSET + i, i)
    assert index.lookup(BASE_OFFSET + 59) == (BASE_OFFSET + 59, 59)


def test_shrinking_below_the_entries_drops_the_tail(index):
    for i in range(10):
        index.append(BASE_OFFSET + i, i)
    index.resize(4 * ENTRY_SIZE)
    assert index.entries == 4 and index.last_offset == BASE_OFFSET + 3
    assert index.lookup(BASE_OFFSET + 9) == (BASE_OFFSET + 3, 3)


def test_trim_then_grow_keeps_working_through_the_kept_mapping(index):
    for i in range(5):
        index.append(BASE_OFFSET + i, i)
    index.trim_to_valid_size()
    assert os.path.getsize(index.path) == 5 * ENTRY_SIZE and index.is_full()
    index.resize(20 * ENTRY_SIZE)  # within the original mapping
    for i in range(5, 20):
        index.append(BASE_OFFSET + i, i)
    index.resize(100 * ENTRY_SIZE)  # past it: a new mapping
    for i in range(20, 100):
        index.append(BASE_OFFSET + i, i)
    for i in range(100):
        assert index.lookup(BASE_OFFSET + i) == (BASE_OFFSET + i, i)


def test_zero_length_file(tmp_path):
    path = tmp_path / "0.index"
    path.write_bytes(b"")
    idx = OffsetIndex(path, 0)
    assert (idx.entries, idx.max_entries) == (0, 0)
    assert idx.is_full()
    assert idx.lookup(5) == (0, 0)
    idx.sanity_check()
    idx.trim_to_valid_size()
    idx.flush()
    idx.resize(4 * ENTRY_SIZE)
    idx.append(1, 10)
    assert idx.lookup(5) == (1, 10)
    idx.truncate()
    idx.trim_to_valid_size()  # back to zero bytes, mapping kept
    assert os.path.getsize(path) == 0
    idx.resize(2 * ENTRY_SIZE)
    idx.append(2, 20)
    assert idx.lookup(5) == (2, 20)
    idx.close()
    assert os.path.getsize(path) == ENTRY_SIZE


def test_reset_empties_and_regrows(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 10 * ENTRY_SIZE)
    idx.append(1, 1)
    idx.trim_to_valid_size()
    idx.reset()
    assert (idx.entries, idx.max_entries) == (0, 10)
    idx.close()


def test_close_is_idempotent_and_closed_index_refuses_use(index):
    index.append(50, 5)
    index.close()
    index.close()
    with pytest.raises(KafkaStorageError):
        index.lookup(50)
    with pytest.raises(KafkaStorageError):
        index.entry(0)
    with pytest.raises(KafkaStorageError):
        index.append(60, 6)
    with pytest.raises(KafkaStorageError):
        index.truncate_to(0)
    index.flush()  # nothing left to write: harmless


def test_rename_keeps_the_index_usable(tmp_path, index):
    index.append(50, 5)
    new_path = tmp_path / "00000000000000000045.index.deleted"
    index.rename(new_path)
    assert index.path == str(new_path)
    assert not (tmp_path / "00000000000000000045.index").exists()
    index.append(60, 6)
    assert index.lookup(70) == (60, 6)
    index.flush()
    index.close()
    assert os.path.getsize(new_path) == 2 * ENTRY_SIZE


def test_delete_if_exists(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    idx.append(1, 1)
    assert idx.delete_if_exists() is True
    assert not (tmp_path / "0.index").exists()
    assert idx.delete_if_exists() is False
    with pytest.raises(KafkaStorageError):
        idx.lookup(1)
    idx.close()  # after delete: harmless


def test_flush_persists_entries_for_another_reader(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 80)
    idx.append(7, 70)
    idx.flush()
    assert path.read_bytes()[:8] == bytes.fromhex("00000007 00000046")
    idx.close()


# -- sanity check -----------------------------------------------------------------------


def test_sanity_check_passes_on_good_indexes(index):
    index.sanity_check()
    index.append(50, 0)
    index.sanity_check()


def test_sanity_check_corrupt_length(tmp_path):
    path = tmp_path / "0.index"
    path.write_bytes(bytes.fromhex("00000001 00000000 00000002 00000010") + b"\x00\x00\x00")
    idx = OffsetIndex(path, 0)
    assert idx.entries == 2  # the partial entry is not counted
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        idx.sanity_check()
    idx.close()  # trims the partial entry away
    assert os.path.getsize(path) == 16
    reopened = OffsetIndex(path, 0)
    reopened.sanity_check()
    reopened.close()


def test_sanity_check_last_offset_below_base(tmp_path):
    path = tmp_path / "0.index"
    path.write_bytes(bytes.fromhex("00000001 00000000 ffffffff 00000010"))  # relative -1
    idx = OffsetIndex(path, 100)
    assert idx.last_offset == 99
    with pytest.raises(CorruptIndexError, match="below the base offset"):
        idx.sanity_check()
    idx.close()


# -- concurrency ------------------------------------------------------------------------


def position_of(offset):
    return (offset * 7) % 2**31


def test_lookups_stay_consistent_while_a_writer_appends_grows_and_trims(
        tmp_path, fine_grained_thread_switching):
    base = 1000
    idx = OffsetIndex(tmp_path / "0.index", base, 64 * ENTRY_SIZE)
    total = 6000
    writer_done = threading.Event()
    failures = []
    seen_while_writing = set()  # entry counts readers saw mid-write: proof the threads overlapped

    readers_started = threading.Barrier(3)

    def writer():
        try:
            readers_started.wait(timeout=30)  # overlap is certain, not left to timing
            for i in range(total):
                if idx.is_full():
                    idx.resize(idx.max_entries * 2 * ENTRY_SIZE)  # a new, larger mapping
                offset = base + 2 * i + 1
                idx.append(offset, position_of(offset))
            idx.trim_to_valid_size()
        except BaseException as e:  # pragma: no cover - reported below
            failures.append(("writer", repr(e)))
        finally:
            writer_done.set()

    def reader():
        rng = random.Random(11)
        trailing = 200  # a few rounds after the trim as well
        seen_while_writing.add(idx.entries)
        readers_started.wait(timeout=30)
        while trailing > 0:
            if writer_done.is_set():
                trailing -= 1
            visible = idx.entries  # everything below this was published before the lookup
            if not writer_done.is_set():
                seen_while_writing.add(visible)
            target = rng.randrange(base - 3, base + 2 * total + 5)
            offset, position = idx.lookup(target)
            if offset == base:
                ok = position == 0 and (visible == 0 or target < base + 1)
            else:
                slot = (offset - base - 1) // 2
                expected_at_least = min(visible - 1, (target - base - 1) // 2)
                ok = ((offset - base - 1) % 2 == 0 and position == position_of(offset)
                      and offset <= target and slot >= expected_at_least)
            if not ok:
                failures.append(("reader", target, visible, offset, position))
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


def test_lookups_survive_truncation_followed_by_trim(tmp_path, fine_grained_thread_switching):
    # Truncate-then-shrink while readers search is where a kept mapping could touch
    # pages past the end of the file; lookups must neither crash nor return torn entries.
    base = 0
    idx = OffsetIndex(tmp_path / "0.index", base, 4096 * ENTRY_SIZE)
    stop = threading.Event()
    failures = []

    def writer():
        rng = random.Random(5)
        try:
            for _ in range(150):
                idx.resize(4096 * ENTRY_SIZE)
                start = idx.last_offset + 1 if idx.entries else 1
                for offset in range(start, start + rng.randrange(1, 400)):
                    if idx.is_full():
                        break
                    idx.append(offset, position_of(offset))
                idx.truncate_to(rng.randrange(0, idx.last_offset + 1))
                idx.trim_to_valid_size()
        except BaseException as e:  # pragma: no cover - reported below
            failures.append(("writer", repr(e)))
        finally:
            stop.set()

    def reader():
        rng = random.Random(6)
        while not stop.is_set():
            target = rng.randrange(0, 5000)
            offset, position = idx.lookup(target)
            if not (offset <= target and position == (0 if offset == base else position_of(offset))):
                failures.append(("reader", target, offset, position))
                return

    threads = [threading.Thread(target=writer), threading.Thread(target=reader), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures, failures[:5]
    idx.close()


# -- bulk appends (LogSegment's path) -------------------------------------------------


def packed(*entries):
    return b"".join(OffsetIndex.ENTRY.pack(*entry) for entry in entries)


def test_append_entries_writes_packed_entries_in_one_go(index):
    index.append(BASE_OFFSET + 1, 10)
    index.append_entries(packed((5, 100), (9, 200), (12, 300)))
    assert index.entries == 4 and index.last_offset == BASE_OFFSET + 12
    assert index.entry(3) == OffsetPosition(BASE_OFFSET + 12, 300)
    assert index.lookup(BASE_OFFSET + 10) == OffsetPosition(BASE_OFFSET + 9, 200)
    index.append_entries(b"")
    assert index.entries == 4


def test_append_entries_that_do_not_follow_raise_as_append_does(index):
    index.append(BASE_OFFSET + 10, 10)
    with pytest.raises(InvalidOffsetError):
        index.append_entries(packed((10, 100)))
    assert index.entries == 1
    with pytest.raises(ValueError):  # not whole entries
        index.append_entries(packed((11, 100))[:7])
    assert index.entries == 1


def test_append_entries_past_the_last_slot_fill_it_and_raise(index):
    index.append_entries(packed(*[(i, i) for i in range(index.max_entries - 1)]))
    with pytest.raises(InvalidOffsetError):
        index.append_entries(packed((100, 100), (101, 101)))
    assert index.is_full() and index.last_offset == BASE_OFFSET + 100
