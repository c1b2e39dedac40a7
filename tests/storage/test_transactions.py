"""Transactions in the log: markers, the last stable offset, `.txnindex` files,
producer-state snapshots with open transactions, recovery and reads."""

from __future__ import annotations

import os
import struct

import pytest

from kafka_format import build_batch, iter_entries
from kafka_format.errors import (
    CorruptIndexError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from storage.file_records import FileSlice
from storage.producer_state import decode_snapshot
from storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode_entries
from storage.txn_markers import TxnMarker, build_marker, decode_marker


def txn(pid, seq, n=1, *, epoch=0, value=b"v", transactional=True):
    return build_batch([(b"k%d" % (seq + i), value) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=transactional)


def plain(n=1):
    return build_batch([(b"p", b"v")] * n)


def txnindex_files(log):
    return sorted(n for n in os.listdir(log.directory) if n.endswith(".txnindex"))


# ---- formats ---------------------------------------------------------------------------


def test_aborted_txn_entry_is_kafkas_34_byte_layout(tmp_path):
    # Kafka's AbortedTxn: version int16 | producerId int64 | firstOffset int64 |
    # lastOffset int64 | lastStableOffset int64, big-endian.
    entry = AbortedTxn(producer_id=0x0102030405060708, first_offset=10, last_offset=20, last_stable_offset=21)
    data = entry.encode()
    assert len(data) == ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 0x0102030405060708, 10, 20, 21)
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    assert not os.path.exists(index.path)  # created on the first entry, as Kafka
    index.append(entry)
    index.append(AbortedTxn(5, 22, 30, 31))
    with open(index.path, "rb") as f:
        raw = f.read()
    assert raw == data + struct.pack(">hqqqq", 0, 5, 22, 30, 31)
    assert decode_entries(raw + b"\x00" * 10) == [entry, AbortedTxn(5, 22, 30, 31)]  # a torn tail is ignored
    with pytest.raises(ValueError):
        index.append(AbortedTxn(6, 1, 30, 31))  # last offsets ascend
    assert index.collect(0, 21) == ([entry], True)
    assert index.collect(21, 100) == ([AbortedTxn(5, 22, 30, 31)], False)


def test_marker_is_kafkas_control_record():
    marker = TxnMarker(producer_id=9, producer_epoch=3, coordinator_epoch=7, commit=True, timestamp=1234)
    batch = build_marker(marker, 42)
    (entry,) = list(iter_entries(batch))
    assert entry.is_control and entry.is_transactional
    (record,) = list(entry.records())
    assert record.key == struct.pack(">hh", 0, 1)  # version 0, COMMIT
    assert record.value == struct.pack(">hi", 0, 7)  # version 0, coordinator epoch
    assert entry.base_offset == 42 and entry.producer_id == 9 and entry.producer_epoch == 3
    assert entry.base_sequence == -1
    assert decode_marker(batch) == marker
    abort = build_marker(marker._replace(commit=False), 0)
    assert list(next(iter_entries(abort)).records())[0].key == struct.pack(">hh", 0, 0)


# ---- the log ----------------------------------------------------------------------------


def test_open_transactions_hold_the_last_stable_offset(open_log):
    log = open_log()
    log.append(plain(2))  # 0-1
    assert log.last_stable_offset == 2
    log.append(txn(1, 0, 2))  # 2-3: producer 1 opens at 2
    log.append(plain())  # 4
    log.append(txn(2, 0))  # 5: producer 2 opens at 5
    log.append(txn(1, 2))  # 6
    assert log.last_stable_offset == 2
    assert log.producer_state.ongoing == {1: 2, 2: 5}
    assert log.append_txn_marker(1, 0, 0, commit=True).first_offset == 7
    assert log.last_stable_offset == 5  # producer 2's transaction is still open
    log.append_txn_marker(2, 0, 0, commit=False)  # 8
    assert log.last_stable_offset == log.log_end_offset == 9
    # The abort is in the .txnindex of the segment holding its marker, with the LSO then.
    assert log.active_segment.txn_index.entries == (AbortedTxn(2, 5, 8, 9),)
    assert log.aborted_transactions(0, 9) == [AbortedTxn(2, 5, 8, 9)]
    assert log.aborted_transactions(0, 5) == []


def test_overlapping_aborts_record_the_lso_of_the_transaction_still_open(open_log):
    log = open_log()
    log.append(txn(1, 0))  # 0
    log.append(txn(2, 0))  # 1
    log.append_txn_marker(1, 0, 0, commit=False)  # 2: producer 2 still open at 1
    log.append_txn_marker(2, 0, 0, commit=False)  # 3
    assert log.active_segment.txn_index.entries == (AbortedTxn(1, 0, 2, 1), AbortedTxn(2, 1, 3, 4))


def test_read_committed_stops_before_the_first_open_transaction(open_log):
    log = open_log()
    log.append(plain())  # 0
    log.append(txn(1, 0))  # 1
    log.append(plain())  # 2
    lso = log.last_stable_offset
    assert lso == 1
    got = log.read(0, 1 << 20, max_offset=lso)
    assert [e.last_offset for e in iter_entries(got.read())] == [0]
    assert log.read(1, 1 << 20, max_offset=lso).length == 0
    assert log.fetch_upper_bound(0, got, lso) == 1
    log.append_txn_marker(1, 0, 0, commit=True)
    everything = log.read(0, 1 << 20, max_offset=log.last_stable_offset)
    assert [e.last_offset for e in iter_entries(everything.read())] == [0, 1, 2, 3]


def test_transaction_rules(open_log):
    log = open_log()
    log.append(txn(1, 0))
    with pytest.raises(InvalidTxnStateError):
        log.append(txn(1, 1, transactional=False))
    log.append_txn_marker(1, 0, 5, commit=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_txn_marker(1, 0, 4, commit=True)
    log.append(txn(1, 1, epoch=0))  # a new transaction
    log.append_txn_marker(1, 1, 5, commit=False)  # an epoch bump by the coordinator
    with pytest.raises(InvalidProducerEpochError):
        log.append_txn_marker(1, 0, 5, commit=False)
    end = log.log_end_offset
    log.append_txn_marker(1, 1, 5, commit=True)  # no open transaction: written, nothing closed
    assert log.log_end_offset == end + 1 and log.last_stable_offset == end + 1


def test_snapshot_carries_open_transactions(open_log):
    log = open_log()
    log.append(plain())
    log.append(txn(4, 0))  # 1
    log.close()
    snapshot = os.path.join(log.directory, f"{2:020d}.snapshot")
    with open(snapshot, "rb") as f:
        (entry,) = decode_snapshot(f.read())
    assert entry.current_txn_first_offset == 1
    reopened = open_log()
    assert reopened.producer_state.ongoing == {4: 1}
    assert reopened.last_stable_offset == 1
    reopened.append_txn_marker(4, 0, 0, commit=False)
    assert reopened.last_stable_offset == 3
    assert reopened.aborted_transactions(0, 3) == [AbortedTxn(4, 1, 2, 3)]


def test_recovery_rebuilds_txnindex_and_open_transactions(open_log):
    log = open_log(segment_bytes=400)
    for round_ in range(4):
        log.append(txn(1, round_ * 2, value=b"x" * 60))
        log.append(txn(2, round_, value=b"x" * 60))
        log.append(plain())
        log.append_txn_marker(1, 0, 0, commit=round_ % 2 == 0)
        if round_ < 3:
            log.append_txn_marker(2, 0, 0, commit=False)
        log.append(txn(1, round_ * 2 + 1, value=b"x" * 60))
        log.append_txn_marker(1, 0, 0, commit=False)
    assert len(log.segments) > 2
    before = {s.base_offset: s.txn_index.entries for s in log.segments}
    ongoing, lso, end = dict(log.producer_state.ongoing), log.last_stable_offset, log.log_end_offset
    assert ongoing and txnindex_files(log)
    log.flush()
    # A crash that lost the snapshots and the .txnindex files: recovery rebuilds both.
    for name in os.listdir(log.directory):
        if name.endswith((".snapshot", ".txnindex")):
            os.truncate(os.path.join(log.directory, name), 0)
    reopened = open_log(segment_bytes=400, had_clean_shutdown=False, recovery_point=0)
    assert reopened.log_end_offset == end
    assert {s.base_offset: s.txn_index.entries for s in reopened.segments} == before
    assert reopened.producer_state.ongoing == ongoing
    assert reopened.last_stable_offset == lso


def test_txnindex_goes_with_its_segment(open_log, clock):
    log = open_log(segment_bytes=300, file_delete_delay_ms=0)
    log.append(txn(1, 0, value=b"x" * 100))
    log.append_txn_marker(1, 0, 0, commit=False)
    log.append(plain())
    log.roll()
    log.append(plain())
    assert txnindex_files(log) == [f"{0:020d}.txnindex"]
    log.increase_log_start_offset(log.log_end_offset - 1)
    log.delete_segments_below_log_start()
    log.delete_due_files(clock.monotonic_ms() + 1)
    assert txnindex_files(log) == []
    assert not [n for n in os.listdir(log.directory) if ".txnindex" in n]


# ---- compaction ------------------------------------------------------------------------


def test_compaction_removes_aborted_data_and_keeps_committed_values(open_log, clock):
    from storage.cleaner import Cleaner
    from storage.offset_map import OffsetMap

    log = open_log(cleanup_policy="compact", segment_bytes=1000)
    log.append(build_batch([(b"k", b"committed-1")], producer_id=1, producer_epoch=0, base_sequence=0,
                           is_transactional=True))  # 0
    log.append_txn_marker(1, 0, 0, commit=True)  # 1
    log.append(build_batch([(b"k", b"aborted"), (b"j", b"aborted")], producer_id=2, producer_epoch=0,
                           base_sequence=0, is_transactional=True))  # 2-3
    log.append(build_batch([(b"x", b"plain")]))  # 4
    log.append_txn_marker(2, 0, 0, commit=False)  # 5
    log.roll()
    log.append(build_batch([(b"open", b"v")], producer_id=3, producer_epoch=0, base_sequence=0,
                           is_transactional=True))  # 6: open
    log.roll()
    log.append(build_batch([(b"z", b"z")]))  # 7
    assert log.first_unstable_offset() == 6
    aborted_entries = [s.txn_index.entries for s in log.segments]
    Cleaner(OffsetMap(1 << 20), clock=clock).clean(log, 0, log.active_segment.base_offset)
    records = []
    for segment in list(log.segments)[:-1]:
        for entry in iter_entries(segment.log.read(0, segment.size)):
            records += [(r.offset, r.key, r.value) for r in entry.records()]
    data = [(o, k, v) for o, k, v in records if not (k and k.startswith(b"\x00\x00"))]
    # The committed value of k stays (the aborted one never superseded it); the aborted
    # records went; markers and the open transaction stay.
    assert (0, b"k", b"committed-1") in data
    assert not [r for r in data if r[2] == b"aborted"]
    assert (4, b"x", b"plain") in data and (6, b"open", b"v") in data
    assert len(log.segments) == 3  # the open transaction's segment was not cleaned (nor merged)
    assert {o for o, k, _ in records if k and k.startswith(b"\x00\x00")} == {1, 5}  # both markers
    assert [s.txn_index.entries for s in log.segments] == aborted_entries


class Crash(BaseException):
    """A kill: nothing after it runs."""


@pytest.mark.parametrize("crash_at", ["cleaned_written", "renamed_to_swap", "swap_synced", "old_renamed_deleted",
                                      "swap_renamed"])
def test_a_crash_during_a_clean_keeps_the_txnindex(open_log, clock, crash_at):
    from storage.cleaner import Cleaner
    from storage.offset_map import OffsetMap

    log = open_log(cleanup_policy="compact", segment_bytes=400)
    for i in range(6):
        log.append(txn(10 + i, 0, 2, value=b"x" * 40))
        log.append(build_batch([(b"k%d" % i, b"y" * 40)]))
        log.append_txn_marker(10 + i, 0, 0, commit=i % 2 == 1)
    log.roll()
    log.append(plain())
    assert log.segments.snapshot().first.txn_index.entries  # the first group carries an abort
    expected = log.aborted_transactions(0, log.log_end_offset)
    assert len(expected) == 3 and len(log.segments) > 2
    log.flush()
    end = log.log_end_offset

    def crash(step):
        if step == crash_at:
            raise Crash(step)

    with pytest.raises(Crash):
        Cleaner(OffsetMap(1 << 20), clock=clock, step=crash).clean(log, 0, log.active_segment.base_offset)
    if crash_at == "old_renamed_deleted":  # ... and had given the new .txnindex its final name
        swapped = [n for n in os.listdir(log.directory) if n.endswith(".txnindex.swap")][0]
        os.rename(os.path.join(log.directory, swapped), os.path.join(log.directory, swapped[:-5]))
    reopened = open_log(cleanup_policy="compact", segment_bytes=400, had_clean_shutdown=False, recovery_point=end)
    assert reopened.aborted_transactions(0, end) == expected
    assert reopened.producer_state.loaded_from > expected[-1].last_offset  # from the files, not a replay
    assert not [n for n in os.listdir(reopened.directory) if n.endswith((".swap", ".cleaned"))]


def test_delete_records_past_an_open_transaction_keeps_the_lso_at_the_log_start(open_log):
    log = open_log()
    log.append(txn(1, 0))  # 0, open
    log.append(plain(3))  # 1-3
    assert log.last_stable_offset == 0
    log.increase_log_start_offset(2)
    assert log.last_stable_offset == 2
    assert log.read(2, 1 << 20, max_offset=log.last_stable_offset).length == 0
    log.append_txn_marker(1, 0, 0, commit=False)
    assert log.last_stable_offset == 5


def test_fetch_upper_bound_is_a_batch_boundary(open_log):
    log = open_log()
    for _ in range(4):
        log.append(build_batch([(b"k", b"x" * 100)] * 2))  # 0-1, 2-3, 4-5, 6-7
    size = log.active_segment.size // 4
    whole = log.read(0, 2 * size)
    assert log.fetch_upper_bound(0, whole, 100) == 4
    cut = FileSlice(log.active_segment.log, 0, 2 * size + 10)  # a batch cut short: its offsets count in
    assert log.fetch_upper_bound(0, cut, 100) == 6
    assert log.fetch_upper_bound(0, cut, 5) == 5
    assert log.fetch_upper_bound(0, log.read(0, 1 << 20), 100) == 100  # the end of the log: the limit
    cut.release()


def test_an_abort_marker_goes_after_delete_retention_once_its_data_is_gone(open_log, clock):
    from storage.cleaner import Cleaner
    from storage.offset_map import OffsetMap

    log = open_log(cleanup_policy="compact", segment_bytes=1000, delete_retention_ms=1000)
    log.append(build_batch([(b"k", b"aborted")], producer_id=2, producer_epoch=0, base_sequence=0,
                           is_transactional=True))  # 0
    log.append_txn_marker(2, 0, 0, commit=False)  # 1
    log.append(build_batch([(b"y", b"1")], producer_id=2, producer_epoch=0, base_sequence=1,
                           is_transactional=True))  # 2: the producer's last batch (kept, if only empty)
    log.append_txn_marker(2, 0, 0, commit=True)  # 3
    log.append(build_batch([(b"x", b"1")]))  # 4: the group's last entry
    log.roll()
    log.append(build_batch([(b"z", b"z")]))

    def clean(now):
        Cleaner(OffsetMap(1 << 20), clock=clock).clean(log, 0, log.active_segment.base_offset, now_ms=now)
        first = log.segments.snapshot().first
        return [(e.base_offset, e.is_control, e.attributes & 0x40 != 0, e.record_count)
                for e in iter_entries(first.log.read(0, first.size))], first.txn_index.entries

    now = clock.time_ms()
    entries, index = clean(now)  # the aborted data goes; its marker stays as it is
    rest = [(2, False, False, 1), (3, True, False, 1), (4, False, False, 1)]
    assert entries == [(1, True, False, 1), *rest] and index == (AbortedTxn(2, 0, 1, 2),)
    entries, index = clean(now)  # no data left: the marker gets its delete horizon
    assert entries == [(1, True, True, 1), *rest] and index == (AbortedTxn(2, 0, 1, 2),)
    first = log.segments.snapshot().first
    stamped = next(iter_entries(first.log.read(0, first.size)))
    marker = decode_marker(bytes(first.log.read(0, stamped.size)))  # still the ABORT marker, CRC valid
    stamped.ensure_valid()
    assert marker is not None and not marker.commit
    entries, index = clean(now + 500)  # before the horizon: stays
    assert entries[0] == (1, True, True, 1)
    entries, index = clean(now + 1001)  # past it: the marker and its .txnindex entry go
    assert entries == rest and index == ()
    assert log.aborted_transactions(0, log.log_end_offset) == []


def test_a_commit_marker_goes_after_delete_retention_once_its_data_is_gone(open_log, clock):
    from storage.cleaner import Cleaner
    from storage.offset_map import OffsetMap

    log = open_log(cleanup_policy="compact", segment_bytes=1000, delete_retention_ms=1000)
    log.append(build_batch([(b"k", b"1")], producer_id=2, producer_epoch=0, base_sequence=0,
                           is_transactional=True))  # 0: committed, superseded by 2
    log.append_txn_marker(2, 0, 0, commit=True)  # 1
    log.append(build_batch([(b"k", b"2")]))  # 2
    log.append(build_batch([(b"y", b"1")], producer_id=2, producer_epoch=0, base_sequence=1,
                           is_transactional=True))  # 3: the producer's last batch (kept)
    log.append_txn_marker(2, 0, 0, commit=True)  # 4: guards 3, stays
    log.append(build_batch([(b"x", b"1")]))  # 5: the group's last entry
    log.roll()
    log.append(build_batch([(b"z", b"z")]))

    def clean(now):
        Cleaner(OffsetMap(1 << 20), clock=clock).clean(log, 0, log.active_segment.base_offset, now_ms=now)
        first = log.segments.snapshot().first
        return [(e.base_offset, e.is_control, e.attributes & 0x40 != 0, e.record_count)
                for e in iter_entries(first.log.read(0, first.size))]

    rest = [(2, False, False, 1), (3, False, False, 1), (4, True, False, 1), (5, False, False, 1)]
    now = clock.time_ms()
    assert clean(now) == [(1, True, False, 1), *rest]  # its data went in this round: the marker stays as it is
    assert clean(now) == [(1, True, True, 1), *rest]  # no data left: the marker gets its delete horizon
    first = log.segments.snapshot().first
    stamped = next(iter_entries(first.log.read(0, first.size)))
    stamped.ensure_valid()
    marker = decode_marker(bytes(first.log.read(0, stamped.size)))
    assert marker is not None and marker.commit  # still the COMMIT marker
    assert clean(now + 500) == [(1, True, True, 1), *rest]  # before the horizon: stays
    assert clean(now + 1001) == rest  # past it: gone; the marker guarding data stays as it is
    assert log.last_stable_offset == log.log_end_offset
    reopened_view = log.read(0, 1 << 20)
    assert [e.base_offset for e in iter_entries(reopened_view.read())][:4] == [2, 3, 4, 5]
    reopened_view.release()


# ---- the .txnindex check at load ---------------------------------------------------------------


def test_txnindex_sanity_check(tmp_path):
    index = TransactionIndex(str(tmp_path / f"{100:020d}.txnindex"), 100)
    index.sanity_check(200)  # no file: nothing to check
    for txn in (AbortedTxn(1, 90, 110, 111), AbortedTxn(2, 105, 120, 90)):  # an LSO may lie below the marker
        index.append(txn)
    index.sanity_check(200)
    index.sanity_check()
    with pytest.raises(CorruptIndexError, match="past the segment's last offset 119"):
        index.sanity_check(120)
    for bad, problem in [
        ([AbortedTxn(1, 10, 99, 100)], "below the segment's base offset 100"),
        ([AbortedTxn(1, 130, 120, 131)], "starts at 130, after its abort marker at 120"),
        ([AbortedTxn(1, 100, 120, 121), AbortedTxn(2, 100, 110, 121)], "not after the entry before it"),
    ]:
        with open(index.path, "wb") as f:
            f.write(b"".join(t.encode() for t in bad))
        with pytest.raises(CorruptIndexError, match=problem):
            TransactionIndex(index.path, 100).sanity_check(200)
    index.reset()
    assert not os.path.exists(index.path) and index.entries == ()


def test_txnindex_file_exists_only_with_an_entry(tmp_path):
    """A truncation keeping no entry removes the file; an empty or torn file at
    load is damage (an aborted transaction was lost), not an empty index."""
    index = TransactionIndex(str(tmp_path / f"{100:020d}.txnindex"), 100)
    index.append(AbortedTxn(1, 100, 110, 111))
    index.append(AbortedTxn(2, 112, 120, 121))
    index.truncate_to(115)
    assert os.path.getsize(index.path) == ENTRY_SIZE
    index.truncate_to(100)
    assert not os.path.exists(index.path) and index.entries == ()
    index.flush()  # nothing to sync, no error
    index.sanity_check(200)
    open(index.path, "wb").close()
    with pytest.raises(CorruptIndexError, match="empty"):
        TransactionIndex(index.path, 100).sanity_check(200)
    with open(index.path, "wb") as f:
        f.write(AbortedTxn(1, 100, 110, 111).encode()[:20])
    with pytest.raises(CorruptIndexError, match="20 bytes, not a whole number of 34-byte entries"):
        TransactionIndex(index.path, 100).sanity_check(200)


@pytest.mark.parametrize("damage", ["past the segment", "below the segment", "out of order", "bad version"])
def test_a_bad_txnindex_is_rebuilt_at_load(open_log, damage):
    log = open_log(segment_bytes=400)
    for round_ in range(4):
        log.append(txn(1, round_ * 2, value=b"x" * 60))
        log.append(txn(2, round_, value=b"x" * 60))
        log.append_txn_marker(1, 0, 0, commit=False)
        log.append_txn_marker(2, 0, 0, commit=False)
        log.append(txn(1, round_ * 2 + 1, value=b"x" * 60))
        log.append_txn_marker(1, 0, 0, commit=round_ % 2 == 0)
    before = {s.base_offset: s.txn_index.entries for s in log.segments}
    aborted = log.aborted_transactions(0, log.log_end_offset)
    indexed = [s for s in log.segments if s.txn_index.entries and s is not log.active_segment]
    assert len(indexed) >= 2
    victim = indexed[1]
    path, entries = victim.txn_index.path, list(victim.txn_index.entries)
    log.close()  # a clean shutdown, snapshots at the segments' bases
    if damage == "past the segment":
        entries.append(AbortedTxn(7, entries[-1].last_offset + 1, 10**6, 10**6 + 1))
    elif damage == "below the segment":
        entries.insert(0, AbortedTxn(7, 0, victim.base_offset - 1, victim.base_offset))
    elif damage == "out of order":
        entries = [entries[0]._replace(last_offset=entries[0].last_offset + 1000), *entries[1:]]
    raw = b"".join(t.encode() for t in entries)
    if damage == "bad version":
        raw = b"\x00\x07" + raw[2:]
    with open(path, "wb") as f:
        f.write(raw)
    reopened = open_log(segment_bytes=400)
    assert {s.base_offset: s.txn_index.entries for s in reopened.segments} == before
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == aborted
    with open(path, "rb") as f:
        assert decode_entries(f.read()) == list(before[victim.base_offset])
