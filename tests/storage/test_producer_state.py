"""Idempotent producers: sequence rules, duplicates, snapshots and recovery
(storage/producer_state.py behind Log.append)."""

import os
import struct

import crc32c
import pytest

from kafka_format import build_batch, iter_entries
from kafka_format.codecs import Codec
from kafka_format.errors import InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from storage.producer_state import (
    INT32_MAX,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    in_sequence,
    increment_sequence,
)

TS = 1_700_000_000_000  # the fixture clock's now: producers are not expired


def idem(seq, n=1, *, pid=7, epoch=0, codec=Codec.NONE, value=b"v"):
    return build_batch([(b"k%d" % i, value, TS + i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, codec=codec)


def offsets_in(log):
    data = log.read(log.log_start_offset, 1 << 20).read()
    return [(e.base_offset, e.last_offset, e.base_sequence) for e in iter_entries(data)]


def snapshots(log):
    return sorted(n for n in os.listdir(log.directory) if n.endswith(".snapshot"))


# ---- sequence rules ---------------------------------------------------------------------------

def test_sequence_helpers_wrap():
    assert in_sequence(4, 5) and not in_sequence(4, 6) and not in_sequence(4, 4)
    assert in_sequence(INT32_MAX, 0)
    assert increment_sequence(INT32_MAX - 1, 3) == 1


def test_in_order_batches_append(open_log):
    log = open_log()
    assert log.append(idem(0, 3)).first_offset == 0
    assert log.append(idem(3, 2)).first_offset == 3
    assert log.append(idem(5)).first_offset == 5
    assert log.log_end_offset == 6
    assert log.producer_state.producers[7].last_seq == 5


def test_duplicate_returns_original_offsets_and_appends_nothing(open_log):
    log = open_log()
    log.append(build_batch([(b"x", b"y", TS)]))  # a native batch first: offset 0
    first = log.append(idem(0, 3))
    log.append(idem(3, 2))
    size = log.size_in_bytes
    again = log.append(idem(0, 3))
    assert (again.first_offset, again.last_offset, again.record_count) == (first.first_offset, first.last_offset, 3)
    assert log.log_end_offset == 6 and log.size_in_bytes == size
    assert [o[0] for o in offsets_in(log)] == [0, 1, 4]
    # The last of the 5 cached batches is a duplicate too.
    assert log.append(idem(3, 2)).first_offset == 4


def test_only_last_five_batches_are_duplicates(open_log):
    log = open_log()
    for seq in range(7):
        log.append(idem(seq))
    for seq in range(2, 7):
        assert log.append(idem(seq)).first_offset == seq
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(1))  # too old to be recognized: out of order
    assert log.log_end_offset == 7


def test_gap_is_out_of_order(open_log):
    log = open_log()
    log.append(idem(0, 2))
    with pytest.raises(OutOfOrderSequenceError) as e:
        log.append(idem(3))
    assert e.value.code == 45
    assert log.log_end_offset == 2
    assert log.append(idem(2)).first_offset == 2  # the producer goes on once it resends in order


def test_unknown_producer_may_start_at_any_sequence(open_log):
    log = open_log()
    assert log.append(idem(42, pid=9)).first_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(44, pid=9))
    assert log.append(idem(43, pid=9)).first_offset == 1


def test_epoch_bump_and_fencing(open_log):
    log = open_log()
    log.append(idem(0, 3, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(3, epoch=2))  # a new epoch must start at 0
    assert log.append(idem(0, epoch=2)).first_offset == 3
    with pytest.raises(InvalidProducerEpochError) as e:
        log.append(idem(3, epoch=1))
    assert e.value.code == 47
    # The old epoch's batches are no duplicates any more.
    with pytest.raises(InvalidProducerEpochError):
        log.append(idem(0, 3, epoch=1))
    assert log.log_end_offset == 4


def test_sequence_wraps(open_log):
    log = open_log()
    log.append(idem(INT32_MAX - 1, 2))
    assert log.append(idem(0)).first_offset == 2


def test_negative_sequence_with_producer_id_is_invalid(open_log):
    log = open_log()
    with pytest.raises(InvalidRecordError):
        log.append(idem(-1))


def test_native_batches_are_not_tracked(open_log):
    log = open_log()
    log.append(build_batch([(b"k", b"v", TS)]))
    log.append(build_batch([(b"k", b"v", TS)]))
    assert log.log_end_offset == 2 and not log.producer_state.producers
    log.roll()
    log.close()
    # Still snapshotted (empty), so that no start rescans this log from offset 0.
    assert snapshots(log) == [f"{2:020d}.snapshot"]
    with open(os.path.join(log.directory, snapshots(log)[0]), "rb") as f:
        assert decode_snapshot(f.read()) == []


def test_compressed_set_of_two_producers(open_log):
    log = open_log()
    data = idem(0, 4, codec=Codec.LZ4) + idem(0, 2, pid=8, codec=Codec.LZ4)
    assert log.append(data).first_offset == 0
    assert log.log_end_offset == 6
    assert log.append(idem(0, 2, pid=8, codec=Codec.LZ4)).first_offset == 4
    assert log.log_end_offset == 6


# ---- snapshots ----------------------------------------------------------------------------------

def test_snapshot_round_trip_and_layout():
    entry = ProducerStateEntry(7, 3)
    entry.add_batch(3, 11, 100, 2, TS)
    empty = ProducerStateEntry(5, 0, TS)
    data = encode_snapshot([entry, empty])
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2)
    assert crc == crc32c.crc32c(data[6:])
    assert len(data) == 10 + 2 * 46
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (5, 0, -1, -1, 0, TS, -1, -1)
    assert struct.unpack_from(">qhiqiqiq", data, 56) == (7, 3, 11, 100, 2, TS, -1, -1)
    back = {e.producer_id: e for e in decode_snapshot(data)}
    assert back[7].epoch == 3 and list(back[7].batches) == list(entry.batches)
    assert back[7].batches[0].first_seq == 9 and back[7].batches[0].first_offset == 98
    assert not back[5].batches
    assert encode_snapshot([]) == struct.pack(">hI", 1, crc32c.crc32c(b"\0\0\0\0")) + b"\0\0\0\0"


def test_roll_and_clean_close_write_snapshots(open_log):
    log = open_log(segment_bytes=300)
    for seq in range(6):
        log.append(idem(seq, value=b"x" * 60))
    rolled = [s.base_offset for s in log.segments][1:]
    assert rolled
    assert snapshots(log) == [f"{b:020d}.snapshot" for b in rolled]
    log.close()
    assert snapshots(log)[-1] == f"{6:020d}.snapshot"
    with open(os.path.join(log.directory, snapshots(log)[-1]), "rb") as f:
        [entry] = decode_snapshot(f.read())
    assert (entry.producer_id, entry.last_seq, entry.last_offset) == (7, 5, 5)
    reopened = open_log(segment_bytes=300)
    assert reopened.producer_state.producers[7].last_seq == 5
    assert reopened.append(idem(5, value=b"x" * 60)).first_offset == 5  # duplicate after restart
    assert reopened.log_end_offset == 6


def test_crash_rebuilds_state_from_snapshot_and_log(open_log):
    log = open_log(segment_bytes=300)
    for seq in range(6):
        log.append(idem(seq, value=b"x" * 60))
    log.flush()
    # Abandon `log` (a crash): no close, no snapshot at the log end.
    assert f"{6:020d}.snapshot" not in snapshots(log)
    reopened = open_log(segment_bytes=300, had_clean_shutdown=False)
    assert reopened.log_end_offset == 6
    assert reopened.append(idem(5, value=b"x" * 60)).first_offset == 5  # retried duplicate
    assert reopened.append(idem(4, value=b"x" * 60)).first_offset == 4  # rebuilt from the log: 5 batches
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append(idem(7, value=b"x" * 60))
    assert reopened.append(idem(6, value=b"x" * 60)).first_offset == 6


def test_crash_without_any_snapshot_scans_the_whole_log(open_log):
    log = open_log()
    log.append(idem(0, 2))
    log.append(idem(2, 2))
    log.flush()
    assert snapshots(log) == []
    reopened = open_log(had_clean_shutdown=False)
    assert reopened.append(idem(2, 2)).first_offset == 2
    assert reopened.log_end_offset == 4


def test_corrupt_snapshot_rebuilds_from_the_log(open_log):
    log = open_log()
    log.append(idem(0, 2))
    log.append(idem(2, 2))
    log.close()
    [name] = snapshots(log)
    path = os.path.join(log.directory, name)
    with open(path, "r+b") as f:
        f.seek(20)
        f.write(b"\xff")
    reopened = open_log()
    assert snapshots(reopened) == []  # the corrupt one went
    assert reopened.append(idem(2, 2)).first_offset == 2
    assert reopened.log_end_offset == 4


def test_snapshots_past_the_log_end_go(open_log):
    log = open_log()
    log.append(idem(0, 2))
    log.close()
    stray = os.path.join(log.directory, f"{50:020d}.snapshot")
    with open(os.path.join(log.directory, f"{2:020d}.snapshot"), "rb") as f, open(stray, "wb") as g:
        g.write(f.read())
    reopened = open_log()
    assert f"{50:020d}.snapshot" not in snapshots(reopened)
    assert reopened.producer_state.producers[7].last_seq == 1


def test_retention_deletes_snapshots_below_log_start(open_log):
    log = open_log(segment_bytes=300)
    for seq in range(9):
        log.append(idem(seq, value=b"x" * 60))
    before = snapshots(log)
    assert len(before) >= 2
    second = [s.base_offset for s in log.segments][2]
    log.increase_log_start_offset(second)
    log.delete_segments_below_log_start()
    assert all(int(n[:20]) >= second for n in snapshots(log))
    assert log.append(idem(8, value=b"x" * 60)).first_offset == 8


def test_expired_producers_are_dropped_on_load(open_log):
    log = open_log()
    log.append(idem(0))
    log.close()
    manager = ProducerStateManager(log.directory)
    manager.load(log.segments, log_end=1, had_clean_shutdown=True, now_ms=TS + 86400000 + 10)
    assert manager.producers == {}
