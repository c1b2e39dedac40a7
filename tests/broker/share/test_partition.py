"""SharePartition (broker/share/partition.py): acquisition, locks, acknowledgement,
delivery counts, SPSO movement, read_committed, auto offset reset, persisted state."""

import pytest

from broker.share.config import AutoOffsetReset, resolve
from broker.share.errors import INVALID_RECORD_STATE, INVALID_REQUEST, ShareError
from broker.share.log_view import AbortedTxn, BatchInfo, LogRead, batches_of, batches_until
from broker.share.partition import AckBatch, AckType, AcquiredRecords, RecordState, SharePartition, StateBatch
from kafka_format import build_batch

NOW = 1_700_000_000_000
LOCK = 30_000


def sp(**kw):
    kw.setdefault("record_lock_duration_ms", LOCK)
    return SharePartition("g", "t", 0, **kw)


def read(*ranges, aborted=(), fetch_offset=-1):
    """A LogRead of plain batches, each (first, last) or a BatchInfo."""
    return LogRead([r if isinstance(r, BatchInfo) else BatchInfo(*r) for r in ranges], aborted, fetch_offset)


def ack(p, member, first, last, *types, now=NOW):
    p.acknowledge(member, [AckBatch(first, last, list(types))], now)


def states(p):
    return {o: p.state_of(o) for o in range(p.start_offset, p.next_offset)}


def test_acquire_new_batches_and_spso_speo():
    p = sp()
    assert p.acquire("m1", read((0, 4), (5, 9)), NOW) == [AcquiredRecords(0, 9, 1)]
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (0, 9, 10)
    assert all(s == (RecordState.ACQUIRED, 1) for s in states(p).values())
    # Acquired records are not acquired again by another member.
    assert p.acquire("m2", read((0, 4), (5, 9)), NOW) == []


def test_accept_moves_spso_past_the_acknowledged_prefix():
    p = sp()
    p.acquire("m1", read((0, 9)), NOW)
    ack(p, "m1", 3, 5, AckType.ACCEPT)
    assert p.start_offset == 0  # 0..2 still acquired
    ack(p, "m1", 0, 2, AckType.ACCEPT)
    assert (p.start_offset, p.end_offset) == (6, 9)
    ack(p, "m1", 6, 9, AckType.REJECT)
    assert (p.start_offset, p.end_offset, p.in_flight()) == (10, 9, 0)
    assert p.counters.acknowledged == 6 and p.counters.rejected == 4 and p.counters.archived == 4


def test_release_makes_records_available_to_another_member_with_a_higher_delivery_count():
    p = sp()
    p.acquire("m1", read((0, 4)), NOW)
    ack(p, "m1", 1, 2, AckType.RELEASE)
    assert p.next_fetch_offset() == 1
    assert p.state_of(1) == (RecordState.AVAILABLE, 1)
    assert p.acquire("m2", read((0, 4)), NOW) == [AcquiredRecords(1, 2, 2)]
    ack(p, "m2", 1, 2, AckType.ACCEPT)
    with pytest.raises(ShareError) as e:  # m2 cannot acknowledge what m1 holds
        ack(p, "m2", 3, 3, AckType.ACCEPT)
    assert e.value.code == INVALID_RECORD_STATE


def test_per_offset_acknowledge_types():
    p = sp()
    p.acquire("m1", read((0, 3)), NOW)
    ack(p, "m1", 0, 3, AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP)
    assert states(p) == {1: (RecordState.AVAILABLE, 1), 2: (RecordState.ARCHIVED, 1),
                         3: (RecordState.ARCHIVED, 1)}
    assert p.start_offset == 1


@pytest.mark.parametrize("batches, code", [
    ([AckBatch(3, 2, [1])], INVALID_REQUEST),                       # first after last
    ([AckBatch(0, 3, [1, 1])], INVALID_REQUEST),                    # types neither 1 nor 4
    ([AckBatch(0, 0, [9])], INVALID_REQUEST),                       # unknown type
    ([AckBatch(0, 1, [1]), AckBatch(1, 2, [1])], INVALID_REQUEST),  # overlap
    ([AckBatch(0, 5, [1])], INVALID_RECORD_STATE),                  # 4, 5 not acquired
    ([AckBatch(0, 1, [1]), AckBatch(10, 10, [1])], INVALID_RECORD_STATE),  # past SPEO
])
def test_bad_acknowledgements_change_nothing(batches, code):
    p = sp()
    p.acquire("m1", read((0, 3)), NOW)
    before = states(p)
    with pytest.raises(ShareError) as e:
        p.acknowledge("m1", batches, NOW)
    assert e.value.code == code and e.value.message
    assert states(p) == before


def test_acknowledging_twice_is_invalid_record_state():
    p = sp()
    p.acquire("m1", read((0, 3)), NOW)
    ack(p, "m1", 2, 2, AckType.ACCEPT)
    with pytest.raises(ShareError) as e:
        ack(p, "m1", 2, 2, AckType.ACCEPT)
    assert e.value.code == INVALID_RECORD_STATE


def test_lock_timeout_returns_records_to_available():
    p = sp()
    p.acquire("m1", read((0, 4)), NOW)
    assert p.next_lock_deadline() == NOW + LOCK
    assert p.expire(NOW + LOCK - 1) == 0
    assert p.expire(NOW + LOCK) == 5
    assert all(s == (RecordState.AVAILABLE, 1) for s in states(p).values())
    assert p.counters.lock_timeouts == 5
    # Acknowledging after the lock expired is refused.
    with pytest.raises(ShareError) as e:
        ack(p, "m1", 0, 0, AckType.ACCEPT, now=NOW + LOCK)
    assert e.value.code == INVALID_RECORD_STATE
    assert p.acquire("m2", read((0, 4)), NOW + LOCK) == [AcquiredRecords(0, 4, 2)]


def test_renew_extends_the_lock():
    p = sp()
    p.acquire("m1", read((0, 1)), NOW)
    ack(p, "m1", 0, 0, AckType.RENEW, now=NOW + 20_000)
    assert p.expire(NOW + LOCK) == 1  # offset 1 only
    assert p.state_of(0) == (RecordState.ACQUIRED, 1)
    assert p.expire(NOW + 20_000 + LOCK) == 1
    assert p.state_of(0) == (RecordState.AVAILABLE, 1)


def test_delivery_count_limit_archives_a_poison_record():
    p = sp(delivery_count_limit=3)
    assert p.acquire("m", read((0, 0), (1, 1)), NOW) == [AcquiredRecords(0, 1, 1)]
    ack(p, "m", 1, 1, AckType.ACCEPT)
    now = NOW
    for attempt in (2, 3):
        now += LOCK
        assert p.expire(now) == 1
        assert p.acquire("m", read((0, 0), (1, 1)), now) == [AcquiredRecords(0, 0, attempt)]
    # The third lock timeout reached the limit: archived, and SPSO moves past it.
    assert p.expire(now + LOCK) == 1
    assert p.state_of(0) is None and p.start_offset == 2 and p.in_flight() == 0
    assert p.counters.archived == 1 and p.counters.lock_timeouts == 3


def test_release_at_the_delivery_limit_archives():
    p = sp(delivery_count_limit=2)
    p.acquire("m", read((0, 0)), NOW)
    ack(p, "m", 0, 0, AckType.RELEASE)
    p.acquire("m", read((0, 0)), NOW)
    ack(p, "m", 0, 0, AckType.RELEASE)
    assert p.start_offset == 1 and p.in_flight() == 0


def test_release_member_returns_its_records():
    p = sp()
    p.acquire("m1", read((0, 1)), NOW)
    p.acquire("m2", read((2, 3)), NOW)
    assert p.release_member("m1") == 2
    assert p.state_of(0) == (RecordState.AVAILABLE, 1) and p.state_of(2) == (RecordState.ACQUIRED, 1)


def test_max_in_flight_stops_new_acquisition_at_a_batch_boundary():
    p = sp(max_in_flight=10)
    got = p.acquire("m", read((0, 5), (6, 11), (12, 15)), NOW)
    assert got == [AcquiredRecords(0, 11, 1)]  # the batch crossing the limit is taken whole
    assert not p.can_acquire()
    assert p.acquire("m", read((12, 15)), NOW) == []
    ack(p, "m", 0, 0, AckType.RELEASE)
    assert p.can_acquire()  # an available record can be acquired again
    ack(p, "m", 1, 11, AckType.ACCEPT)
    assert p.start_offset == 0 and p.can_acquire()


def test_max_records_soft_and_strict():
    p = sp()
    assert p.acquire("m", read((0, 3), (4, 7)), NOW, max_records=2) == [AcquiredRecords(0, 3, 1)]
    q = sp()
    assert q.acquire("m", read((0, 3), (4, 7)), NOW, max_records=2, strict_max_records=True) == \
        [AcquiredRecords(0, 1, 1)]
    assert q.next_fetch_offset() == 2


def test_read_committed_archives_aborted_transactions_and_control_batches():
    p = sp(read_committed=True)
    got = p.acquire("m", read(BatchInfo(0, 1),
                              BatchInfo(2, 3, producer_id=7, is_transactional=True),
                              BatchInfo(4, 5, producer_id=8, is_transactional=True),
                              BatchInfo(6, 6, producer_id=7, is_transactional=True, is_control=True),
                              BatchInfo(7, 7, producer_id=8, is_transactional=True, is_control=True),
                              aborted=[AbortedTxn(7, 2)]), NOW)
    assert got == [AcquiredRecords(0, 1, 1), AcquiredRecords(4, 5, 1)]
    assert p.state_of(2) == (RecordState.ARCHIVED, 1) and p.state_of(6) == (RecordState.ARCHIVED, 1)
    ack(p, "m", 0, 1, AckType.ACCEPT)
    ack(p, "m", 4, 5, AckType.ACCEPT)
    assert p.start_offset == 8


def test_offsets_missing_from_the_read_are_archived():
    p = sp()
    # The read started at 0 but the log holds 3..4 and 8..9 (compacted).
    assert p.acquire("m", read((3, 4), (8, 9), fetch_offset=0), NOW) == \
        [AcquiredRecords(3, 4, 1), AcquiredRecords(8, 9, 1)]
    assert p.state_of(0) is None and p.start_offset == 3  # 0..2 archived and passed
    assert p.state_of(5) == (RecordState.ARCHIVED, 0)


def test_batches_of_reads_real_batches():
    data = build_batch([(b"k", b"v", NOW)] * 3) + build_batch([(b"k", b"v", NOW)], base_offset=3)
    assert batches_of(data) == [BatchInfo(0, 2, -1, False, False), BatchInfo(3, 3, -1, False, False)]
    first = build_batch([(b"k", b"v", NOW)] * 3)
    # batches_until: those starting before the offset, and the bytes they fill
    assert batches_until(data, 3) == ([BatchInfo(0, 2, -1, False, False)], len(first))
    assert batches_until(data, 1) == ([BatchInfo(0, 2, -1, False, False)], len(first))
    assert batches_until(data, 4) == (batches_of(data), len(data))


def test_read_end_covers_max_records_acquirable_offsets():
    p = sp()
    assert p.read_end(10) == 10
    p.acquire("m", read((0, 9)), NOW)
    ack(p, "m", 2, 3, AckType.RELEASE)
    ack(p, "m", 6, 6, AckType.RELEASE)
    assert p.read_end(2) == 4  # 2-3 available
    assert p.read_end(3) == 7  # 2-3 and 6
    assert p.read_end(5) == 12  # then 10 and 11, new


class FakeLog:
    def __init__(self, start=5, hw=50, lso=40, by_ts=None):
        self.start, self.hw, self.lso, self.by_ts = start, hw, lso, by_ts

    def log_start_offset(self):
        return self.start

    def high_watermark(self):
        return self.hw

    def last_stable_offset(self):
        return self.lso

    def offset_for_timestamp(self, ts):
        self.asked = ts
        return self.by_ts


def test_initial_start_offset_by_auto_offset_reset():
    log = FakeLog(by_ts=20)
    first = SharePartition.initial_start_offset
    assert first(AutoOffsetReset.parse("earliest"), log, NOW) == 5
    assert first(AutoOffsetReset.parse("latest"), log, NOW) == 50
    assert first(AutoOffsetReset.parse("latest"), log, NOW, read_committed=True) == 40
    assert first(AutoOffsetReset.parse("by_duration:PT1H"), log, NOW) == 20
    assert log.asked == NOW - 3_600_000
    assert first(AutoOffsetReset.parse("by_duration:PT1H"), FakeLog(by_ts=None), NOW) == 50


def test_log_start_offset_past_spso_drops_deleted_records():
    p = sp()
    p.acquire("m", read((0, 9)), NOW)
    p.on_log_start_offset(6)
    assert (p.start_offset, p.state_of(5), p.state_of(6)) == (6, None, (RecordState.ACQUIRED, 1))


def test_persisted_state_round_trip_and_gaps_are_redelivered():
    p = sp()
    p.acquire("m", read((0, 9)), NOW)
    ack(p, "m", 0, 1, AckType.ACCEPT)
    ack(p, "m", 3, 3, AckType.RELEASE)
    ack(p, "m", 5, 5, AckType.REJECT)
    start, batches = p.take_dirty()
    assert start == 2
    assert batches == [StateBatch(3, 3, 0, 1), StateBatch(5, 5, 4, 1)]
    assert p.take_dirty() is None
    # A new share partition (a restart) from that state: 2 and 4 were acquired and not
    # acknowledged, so they are fetched again; 3 keeps its delivery count.
    q = sp()
    q.load(start, batches)
    assert (q.start_offset, q.next_offset) == (2, 6)
    assert q.acquire("m2", read((0, 9)), NOW) == [
        AcquiredRecords(2, 2, 1), AcquiredRecords(3, 3, 2), AcquiredRecords(4, 4, 1), AcquiredRecords(6, 9, 1)]


def test_settings_resolve_group_over_broker_defaults():
    s = resolve({"group.share.record.lock.duration.ms": 20_000}, {"share.delivery.count.limit": "3"})
    assert (s.record_lock_duration_ms, s.delivery_count_limit, s.max_record_locks) == (20_000, 3, 2000)
    assert resolve().auto_offset_reset == AutoOffsetReset("latest")
    for bad in ({"share.delivery.count.limit": "11"}, {"share.record.lock.duration.ms": "1000"},
                {"share.auto.offset.reset": "by_duration:1h"}, {"share.isolation.level": "x"},
                {"share.unknown": "1"}):
        with pytest.raises(ShareError) as e:
            resolve({}, bad)
        assert e.value.code == 40 and next(iter(bad)) in e.value.message
    assert AutoOffsetReset.parse("by_duration:P1DT0.5S").duration_ms == 86_400_500


def test_in_flight_state_is_one_run_per_acquisition_split_only_where_acknowledgements_differ():
    p = sp()
    assert p.acquire("m1", read(*[(o, o) for o in range(100)]), NOW) == [AcquiredRecords(0, 99, 1)]
    assert p.runs() == 1  # a hundred batches, one acquisition
    ack(p, "m1", 40, 49, AckType.RELEASE)
    assert p.runs() == 3
    ack(p, "m1", 50, 99, AckType.ACCEPT)
    ack(p, "m1", 0, 39, AckType.ACCEPT)
    assert (p.start_offset, p.runs()) == (40, 2)  # 40-49 available, 50-99 acknowledged
    assert p.acquire("m2", read((40, 49)), NOW) == [AcquiredRecords(40, 49, 2)]
    ack(p, "m2", 40, 49, AckType.ACCEPT)
    assert (p.start_offset, p.runs()) == (100, 0)
