"""ListOffsets MAX_TIMESTAMP: the record holding the largest timestamp, read from its one batch."""

from kafka_format import build_batch
from kafka_format.codecs import Codec
from storage.max_timestamp import max_timestamp_offset


def test_the_record_inside_its_batch_not_the_batch_end(open_log):
    log = open_log()
    log.append(build_batch([(b"k", b"v", t) for t in (10, 50, 20)]))
    log.append(build_batch([(b"k", b"v", t) for t in (30, 90, 40, 90, 60)], codec=Codec.GZIP))
    log.append(build_batch([(b"k", b"v", t) for t in (70, 80)]))
    found = max_timestamp_offset(log)
    assert (found.timestamp, found.offset) == (90, 4)  # the first record holding 90, not the batch's 7


def test_across_segments_and_after_reopen(open_log):
    log = open_log(segment_bytes=300, index_interval_bytes=1)
    for n in range(30):
        ts = 1000 if n == 11 else n
        log.append(build_batch([(b"k", b"v", ts - 1), (b"k", b"v", ts), (b"k", b"v", 0)]))
    assert len(log.segments) > 2
    assert max_timestamp_offset(log).offset == 11 * 3 + 1
    log.close()
    again = open_log()
    assert max_timestamp_offset(again) == (1000, 34)


def test_only_the_one_batch_is_read(open_log, monkeypatch):
    log = open_log(index_interval_bytes=1)
    for n in range(200):
        log.append(build_batch([(b"k", b"v" * 100, 5 if n == 150 else 1), (b"k", b"v", 3)]))
    segment = log.active_segment
    reads: list[int] = []
    real = segment.log.read

    def counting(position, size):
        reads.append(size)
        return real(position, size)

    monkeypatch.setattr(segment.log, "read", counting)
    assert max_timestamp_offset(log) == (5, 300)
    batch_size = len(build_batch([(b"k", b"v" * 100, 5), (b"k", b"v", 3)]))
    assert reads[-1] == batch_size and sum(reads[:-1]) <= 8192  # headers near the index entry, one batch


def test_log_append_time_and_no_timestamps(open_log):
    stamped = open_log(message_timestamp_type="LogAppendTime")
    stamped.append(build_batch([(b"k", b"v", 5), (b"k", b"v", 7)]))
    found = max_timestamp_offset(stamped)
    assert found.offset == 0  # every record of the batch carries the append time: the first one
    stamped.close()


def test_empty_log(open_log):
    assert max_timestamp_offset(open_log()) is None


def test_fetch_offset_by_timestamp_answers_every_special_timestamp(open_log):
    log = open_log()
    log.append(build_batch([(b"k", b"v", t) for t in (10, 50, 20)]))
    log.append(build_batch([(b"k", b"v", 70)], producer_id=9, producer_epoch=0, base_sequence=0,
                           is_transactional=True))  # open: the last stable offset stays at 3
    assert log.fetch_offset_by_timestamp(-1) == (-1, 4)  # latest: the log end
    assert log.fetch_offset_by_timestamp(-1, True) == (-1, 3)  # read_committed: the last stable offset
    assert log.fetch_offset_by_timestamp(-2) == log.fetch_offset_by_timestamp(-4) == (-1, 0)
    assert log.fetch_offset_by_timestamp(-3) == max_timestamp_offset(log) == (70, 3)
    assert log.fetch_offset_by_timestamp(-5) == (-1, -1)  # latest tiered: nothing is tiered
    assert log.fetch_offset_by_timestamp(30) == log.offset_for_timestamp(30)
    assert log.fetch_offset_by_timestamp(100) is None
