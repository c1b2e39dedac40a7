"""What the consumer makes of fetched bytes, and the buffer-doubling rule."""

import pytest

from client.errors import StrataClientError
from client.fetch import MessageTooLargeForFetch, grow_fetch_size, read_fetched
from kafka_format import build_batch, build_classic
from kafka_format.codecs import Codec
from protocol import ErrorCode


def batch(base, n, codec=Codec.NONE, value_size=3):
    return build_batch([(b"k%d" % i, bytes([65 + i % 26]) * value_size, 1000 + i)
                        for i in range(n)], base_offset=base, codec=codec)


def test_whole_entries_give_records_and_the_next_offset():
    data = batch(0, 3) + batch(3, 2)
    fetched = read_fetched(data, 0)
    assert [r.offset for r in fetched.records] == [0, 1, 2, 3, 4]
    assert fetched.next_offset == 5 and not fetched.too_small


def test_records_below_the_fetch_offset_are_skipped_inside_an_entry():
    data = batch(10, 5, codec=Codec.GZIP) + batch(15, 2)
    fetched = read_fetched(data, 12)
    assert [r.offset for r in fetched.records] == [12, 13, 14, 15, 16]
    assert fetched.next_offset == 17


def test_compacted_entry_with_gaps_moves_past_its_last_offset():
    # A compacted batch keeps its offset range (20..29) but holds only 2 records.
    compacted = build_batch([(b"a", b"1", 5), (b"b", b"2", 6)], base_offset=20,
                            offset_deltas=[3, 7], last_offset_delta=9)
    fetched = read_fetched(compacted, 26)
    assert [r.offset for r in fetched.records] == [27]
    assert fetched.next_offset == 30
    # Every record below the offset: nothing to return, but the position still moves on.
    fetched = read_fetched(compacted, 28)
    assert fetched.records == [] and fetched.next_offset == 30 and not fetched.too_small


def test_classic_compressed_wrapper_is_read_with_absolute_offsets():
    data = build_classic([(b"k", b"v1"), (None, b"v2"), (b"k", b"v3")], magic=1,
                         codec=Codec.SNAPPY, base_offset=7)
    fetched = read_fetched(data, 8)
    assert [(r.offset, r.value) for r in fetched.records] == [(8, b"v2"), (9, b"v3")]
    assert fetched.next_offset == 10


def test_a_cut_short_trailing_entry_waits_for_the_next_fetch():
    data = batch(0, 2) + batch(2, 2)
    fetched = read_fetched(data[:-5], 0)
    assert [r.offset for r in fetched.records] == [0, 1]
    assert fetched.next_offset == 2 and not fetched.too_small


@pytest.mark.parametrize("keep", [1, 11, 12, 30, 60])
def test_only_a_cut_short_first_entry_means_the_buffer_is_too_small(keep):
    fetched = read_fetched(batch(0, 1, value_size=500)[:keep], 0)
    assert fetched.records == [] and fetched.too_small and fetched.next_offset == 0


def test_empty_answer_is_neither_progress_nor_too_small():
    fetched = read_fetched(b"", 42)
    assert fetched == ([], 42, False)


def test_control_and_empty_batches_are_passed_over():
    control = build_batch([(b"\x00\x00\x00\x00", b"marker", 1)], base_offset=0, is_control=True,
                          is_transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
    empty = build_batch([], base_offset=1, last_offset_delta=1, base_timestamp=1)
    fetched = read_fetched(control + empty + batch(3, 1), 0)
    assert [r.offset for r in fetched.records] == [3]
    assert fetched.next_offset == 4


def test_a_bad_crc_is_a_corrupt_message():
    data = bytearray(batch(0, 2))
    data[-1] ^= 0xFF
    with pytest.raises(StrataClientError) as e:
        read_fetched(bytes(data), 0)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert e.value.name == "CORRUPT_MESSAGE"


def test_grow_doubles_up_to_the_cap_then_refuses():
    sizes = [100]
    while sizes[-1] < 1000:
        sizes.append(grow_fetch_size(sizes[-1], 1000))
    assert sizes == [100, 200, 400, 800, 1000]
    with pytest.raises(MessageTooLargeForFetch) as e:
        grow_fetch_size(1000, 1000, "offset 5 of t-0")
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert "offset 5 of t-0" in str(e.value)


def test_doubling_sequence_reaches_a_large_entry():
    """The loop a consumer runs: fetch, too small, double, until the entry is whole."""
    entry = batch(0, 1, value_size=5000)
    size, attempts = 64, 0
    while True:
        attempts += 1
        fetched = read_fetched(entry[:size], 0)
        if not fetched.too_small:
            break
        size = grow_fetch_size(size, 1 << 20)
    assert [r.offset for r in fetched.records] == [0]
    assert size >= len(entry) > size // 2
    assert attempts == 1 + (size // 64).bit_length() - 1
