"""Log: append, read, roll, flush and offset lookups on real files."""

import os

import pytest

from kafka_format import build_batch, build_classic, iter_entries, iter_records
from kafka_format.errors import (
    CorruptRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordValidationError,
)


def batch(n, start=0, ts=None, size=10):
    return build_batch([(b"k%d" % i, b"v" * size, ts if ts is not None else 1000 + i)
                        for i in range(start, start + n)])


def read_all(log, offset=0, max_bytes=1 << 20):
    out = []
    while offset < log.log_end_offset:
        with log.read(offset, max_bytes) as got:
            data = got.read()
        records = list(iter_records(data))
        assert records, "a read below the log end returned nothing"
        out.extend(r for r in records if r.offset >= offset)
        offset = list(iter_entries(data))[-1].last_offset + 1
    return out


def test_append_assigns_contiguous_offsets_and_reads_back(open_log):
    log = open_log()
    first = log.append(batch(3))
    second = log.append(batch(2))
    third = log.append(build_classic([(b"a", b"1", 5), (b"b", b"2", 6)], magic=1))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert (third.first_offset, third.last_offset) == (5, 6)
    assert log.log_end_offset == 7
    records = read_all(log)
    assert [r.offset for r in records] == list(range(7))
    assert records[5].key == b"a" and records[6].value == b"2"


def test_bad_set_changes_nothing(open_log):
    log = open_log()
    log.append(batch(2))
    good = bytearray(batch(2))
    good[-1] ^= 0xFF  # breaks the CRC
    with pytest.raises(CorruptRecordError):
        log.append(bytes(good) )
    with pytest.raises(CorruptRecordError):
        log.append(batch(1) + batch(1)[:20])  # a partial trailing entry
    assert log.log_end_offset == 2
    assert log.active_segment.size == len(batch(2))


def test_entry_over_max_message_bytes_is_refused(open_log):
    log = open_log(max_message_bytes=100)
    with pytest.raises(MessageTooLargeError):
        log.append(batch(1, size=200))
    assert log.log_end_offset == 0


def test_keyless_records_on_a_compacted_log_are_refused_with_their_partition(open_log):
    log = open_log(cleanup_policy="compact")
    with pytest.raises(RecordValidationError) as raised:
        log.append(build_batch([(b"k", b"v"), (None, b"v")]))
    assert raised.value.record_errors == ((1, "Compacted topic cannot accept message without key "
                                              "in topic partition topic-0"),)
    assert log.log_end_offset == 0


def test_set_over_segment_bytes_is_refused(open_log):
    log = open_log(segment_bytes=200)
    with pytest.raises(RecordListTooLargeError):
        log.append(batch(5, size=100))


def test_read_edges(open_log):
    log = open_log()
    log.append(batch(3))
    with log.read(3, 1000) as at_end:
        assert at_end.length == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)


def test_read_returns_whole_entries_or_a_cut_short_first_entry(open_log):
    log = open_log()
    sizes = [len(batch(1)) for _ in range(3)]
    for _ in range(3):
        log.append(batch(1))
    # max_bytes between one and two entries: exactly one whole entry
    with log.read(0, sizes[0] + sizes[1] - 1) as got:
        assert got.length == sizes[0]
    # smaller than the first entry: the entry cut short to max_bytes
    with log.read(1, 20) as got:
        assert got.length == 20
        assert got.position == sizes[0]
    # unless min_one_message asks for the whole first entry
    with log.read(1, 20, min_one_message=True) as got:
        assert got.length == sizes[1]
    # reading from an offset inside a batch starts at that batch
    log.append(batch(5))
    with log.read(5, 10_000) as got:
        entries = list(iter_entries(got.read()))
        assert entries[0].base_offset == 3 and entries[0].last_offset == 7


def test_rolls_on_segment_bytes_with_kafka_file_names(open_log, tmp_path):
    one = len(batch(1))
    log = open_log(segment_bytes=one * 2)
    for _ in range(5):
        log.append(batch(1))
    names = sorted(os.listdir(tmp_path / "topic-0"))
    assert [n for n in names if n.endswith(".log")] == [
        "00000000000000000000.log", "00000000000000000002.log", "00000000000000000004.log"]
    assert "00000000000000000002.index" in names and "00000000000000000002.timeindex" in names
    assert [r.offset for r in read_all(log)] == list(range(5))


def test_rolls_on_segment_ms_by_record_timestamps(open_log):
    log = open_log(segment_ms=100)
    log.append(batch(1, ts=1000))
    log.append(batch(1, ts=1100))  # exactly segment.ms later: not more than it
    assert len(log.segments) == 1
    log.append(batch(1, ts=1101))
    assert len(log.segments) == 2
    assert log.active_segment.base_offset == 2


def test_rolls_on_segment_ms_by_wall_clock_without_timestamps(open_log, clock):
    log = open_log(segment_ms=100)
    log.append(build_classic([(b"k", b"v")], magic=0))  # magic 0: no timestamp
    clock.advance(101)
    log.append(build_classic([(b"k", b"v")], magic=0))
    assert len(log.segments) == 2


def test_segment_jitter_is_subtracted(open_log):
    log = open_log(segment_ms=100, segment_jitter_ms=50)
    jitter = log.active_segment.roll_jitter_ms
    assert 0 <= jitter < 50
    log.append(batch(1, ts=1000))
    log.append(batch(1, ts=1000 + 100 - jitter + 1))
    assert len(log.segments) == 2


def test_rolls_when_the_offset_index_is_full(open_log):
    log = open_log(segment_index_bytes=24, index_interval_bytes=0)  # 3 offset entries, 2 time entries
    for _ in range(10):
        log.append(batch(1))
    assert len(log.segments) > 1
    for segment in list(log.segments)[:-1]:
        assert segment.offset_index.entries <= 3
    assert [r.offset for r in read_all(log)] == list(range(10))


def test_sparse_index_follows_index_interval_bytes(open_log):
    one = len(batch(1))
    log = open_log(index_interval_bytes=one * 3)
    for _ in range(20):
        log.append(batch(1))
    index = log.active_segment.offset_index
    # an entry once more than 3 entries' bytes were written since the last
    assert [index.entry(n)[0] for n in range(index.entries)] == [4, 8, 12, 16]
    for n in range(index.entries):
        offset, position = index.entry(n)
        assert position == offset * one


def test_log_append_time_is_stamped(open_log, clock):
    log = open_log(message_timestamp_type="LogAppendTime")
    result = log.append(batch(2, ts=5))
    assert result.log_append_time == clock.time_ms()
    records = read_all(log)
    assert all(r.timestamp == clock.time_ms() and r.timestamp_type == 1 for r in records)


def test_offset_for_timestamp_matches_kafkas_example(open_log):
    # Kafka's LogSegmentTest: timestamps are 10 x offset.
    log = open_log(index_interval_bytes=1, segment_bytes=600)
    for offset in range(50):
        log.append(build_batch([(b"k", b"v", offset * 10)]))
    assert len(log.segments) > 1
    assert log.offset_for_timestamp(420).offset == 42
    assert log.offset_for_timestamp(421).offset == 43
    assert log.offset_for_timestamp(431).offset == 44
    assert log.offset_for_timestamp(491) is None
    assert log.offset_for_timestamp(0).offset == 0
    assert log.offset_for_timestamp(-2).offset == 0
    assert log.offset_for_timestamp(-1).offset == 50


def test_offset_for_timestamp_inside_a_batch(open_log):
    log = open_log()
    log.append(build_batch([(b"k", b"v", t) for t in (10, 30, 20, 40)]))
    assert log.offset_for_timestamp(25).offset == 1
    assert log.offset_for_timestamp(35).offset == 3


def test_flush_messages_moves_the_recovery_point(open_log):
    log = open_log(flush_messages=3)
    log.append(batch(2))
    assert log.recovery_point == 0
    log.append(batch(1))
    assert log.recovery_point == 3


def test_flush_ms(open_log, clock):
    log = open_log(flush_ms=1000)
    log.append(batch(2))
    assert not log.maybe_flush()
    clock.advance(1000)
    assert log.maybe_flush()
    assert log.recovery_point == 2


def test_close_trims_indexes_and_reopen_keeps_everything(open_log, tmp_path):
    log = open_log(index_interval_bytes=1)
    for _ in range(10):
        log.append(batch(2))
    log.close()
    index_path = tmp_path / "topic-0" / "00000000000000000000.index"
    assert os.path.getsize(index_path) == 9 * 8  # a segment's first entry is never indexed
    assert os.path.getsize(tmp_path / "topic-0" / "00000000000000000000.timeindex") % 12 == 0
    again = open_log(index_interval_bytes=1)
    assert again.log_end_offset == 20
    assert [r.offset for r in read_all(again)] == list(range(20))
    again.append(batch(1))  # the active index was grown again
    assert again.log_end_offset == 21


def test_reopen_with_data_after_the_last_index_entry(open_log):
    log = open_log(index_interval_bytes=10_000)
    for _ in range(7):
        log.append(batch(3))
    log.close()
    assert open_log().log_end_offset == 21


def test_explicit_roll_and_empty_active_segment(open_log):
    log = open_log()
    log.append(batch(2))
    segment = log.roll()
    assert segment.base_offset == 2
    assert log.roll() is segment  # rolling an empty active segment is a no-op
    with log.read(2, 100) as got:
        assert got.length == 0
    log.append(batch(1))
    assert [r.offset for r in read_all(log)] == [0, 1, 2]


def test_mixed_magics_in_one_log(open_log):
    log = open_log()
    log.append(build_classic([(b"a", b"0")], magic=0))
    log.append(build_classic([(b"b", b"1", 7)], magic=1, codec=1))
    log.append(build_batch([(b"c", b"2", 8)], codec=3))
    log.append(build_classic([(b"d", b"3", 9), (b"e", b"4", 9)], magic=1, codec=2))
    assert [(r.offset, r.key) for r in read_all(log)] == [
        (0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]


def test_in_place_append_patches_the_given_frame_and_writes_the_same_bytes(open_log, tmp_path):
    log = open_log()
    log.append(batch(2))
    frame = bytearray(b"\x00" * 6 + batch(3))  # a message set inside a request frame
    result = log.append(memoryview(frame)[6:], in_place=True)
    assert (result.first_offset, result.last_offset) == (2, 4)
    assert int.from_bytes(frame[6:14], "big") == 2  # restamped where it lay
    log.append(batch(1), in_place=True)  # read-only bytes are copied, not refused
    assert [r.offset for r in read_all(log)] == list(range(6))
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(bad, in_place=True)
    assert log.log_end_offset == 6


def test_log_start_offset_moves_forward_only_and_hides_records(open_log):
    log = open_log()
    log.append(batch(5))
    assert log.increase_log_start_offset(3) == 3
    assert log.increase_log_start_offset(1) == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.increase_log_start_offset(6)
    assert log.increase_log_start_offset(5) == 5  # the log end: everything hidden
    assert log.offset_for_timestamp(-2).offset == 5


@pytest.mark.parametrize("max_bytes", [150, 200, 333, 1000])
def test_a_consumer_reading_on_in_small_steps_sees_every_record_once(open_log, max_bytes):
    # Each read continues where the last one stopped (the segment's read cursor);
    # interleaved reads elsewhere must not confuse it.
    log = open_log(index_interval_bytes=64, segment_bytes=2000)
    for i in range(40):
        log.append(batch(1 + i % 3, size=5 + i % 7))
    assert [r.offset for r in read_all(log, max_bytes=max_bytes)] == list(range(log.log_end_offset))
    offsets, offset = [], 0
    while offset < log.log_end_offset:
        with log.read(offset, max_bytes) as got:
            entries = list(iter_entries(got.read()))
        with log.read(log.log_end_offset // 2, 60):  # someone else reads elsewhere
            pass
        offsets.extend(r.offset for e in entries for r in e.records() if r.offset >= offset)
        offset = entries[-1].last_offset + 1
    assert offsets == list(range(log.log_end_offset))


def test_index_entries_do_not_depend_on_how_entries_are_grouped_into_appends(tmp_path, clock):
    """Kafka's sparse-index rule is per entry: the same entries appended one set at a
    time (mostly too small to reach an index point: the append's shortcut) or all in
    one set give the same .index, .timeindex and largest timestamp."""
    import random

    rng = random.Random(5)
    entries = [batch(rng.randint(1, 4), ts=1_700_000_000_000 + rng.randrange(-50, 500), size=rng.randrange(10, 900))
               for _ in range(400)]
    from storage.config import LogConfig
    from storage.log import Log

    apart, together = (Log.open(str(tmp_path / f"{name}-0"), name, 0, LogConfig(), clock=clock)
                       for name in ("apart", "together"))
    for entry in entries:
        apart.append(entry)
    together.append(b"".join(entries))
    one, other = apart.active_segment, together.active_segment
    assert one.offset_index.entries > 10
    assert [one.offset_index.entry(i) for i in range(one.offset_index.entries)] == \
        [other.offset_index.entry(i) for i in range(other.offset_index.entries)]
    assert [one.time_index.entry(i) for i in range(one.time_index.entries)] == \
        [other.time_index.entry(i) for i in range(other.time_index.entries)]
    assert (one.max_timestamp_so_far, one.offset_of_max_timestamp_so_far) == \
        (other.max_timestamp_so_far, other.offset_of_max_timestamp_so_far)
    apart.close()
    together.close()


def test_a_read_where_a_recent_append_began_needs_no_search(open_log, monkeypatch):
    """A consumer at the log end asks next for where the following append began:
    the segment remembers the first entry of its recent appends, so that read finds
    it without the offset index or a scan of the file, and returns the same."""
    log = open_log(index_interval_bytes=64)
    starts = [log.append(batch(1 + i % 3)).first_offset for i in range(20)][-8:]
    expected = {offset: log.read(offset, 1 << 20).read() for offset in range(log.log_end_offset)}
    from storage.segment import LogSegment

    def no_search(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(LogSegment, "translate_offset", no_search)
    for offset in starts:
        with log.read(offset, 1 << 20) as got:
            assert got.read() == expected[offset]
    with pytest.raises(AssertionError, match="searched"):
        inside_an_append = next(a + 1 for a, b in zip(starts, starts[1:], strict=False) if b - a > 1)
        log.read(inside_an_append, 1 << 20)
    with pytest.raises(AssertionError, match="searched"):
        log.read(starts[0] - 1, 1 << 20)  # an older append: searched
    monkeypatch.undo()
    segment = log.active_segment
    segment.truncate_to(starts[-1])  # (recovery) forgets them
    monkeypatch.setattr(LogSegment, "translate_offset", no_search)
    with pytest.raises(AssertionError, match="searched"):
        segment.read(starts[-2], 1 << 20)
