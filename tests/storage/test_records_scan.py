"""scan_entries: the shallow walk recovery runs over segment files."""

import os
import struct

import pytest

from kafka_format import EntryInfo, build_batch, build_classic, scan_entries
from kafka_format.batch import batch_crc
from kafka_format.classic import message_crc
from kafka_format.codecs import Codec

# Each test runs on the C hot paths and on their Python twins (conftest.twin).
pytestmark = pytest.mark.usefixtures("twin")


def fix_crc(buf: bytearray, pos: int) -> None:
    """Recompute the CRC of the entry at `pos` after a test patched it."""
    size = struct.unpack_from(">i", buf, pos + 8)[0]
    end = pos + 12 + size
    if buf[pos + 16] == 2:
        struct.pack_into(">I", buf, pos + 17, batch_crc(buf, pos, end))
    else:
        struct.pack_into(">I", buf, pos + 12, message_crc(buf, pos, end))


def mixed_set() -> tuple[bytes, list[EntryInfo]]:
    """Six entries of every kind, offsets 0..11, and the EntryInfos they should scan to."""
    parts = [
        build_classic([(b"a", b"1")], magic=0, base_offset=0),
        build_classic([(b"b", b"2", 1000)], magic=1, base_offset=1),
        build_classic([(b"c", b"3", 1001), (None, b"4", 1005)], magic=1, codec=Codec.GZIP,
                      base_offset=2),
        build_classic([(b"d", b"5"), (b"e", b"6")], magic=0, codec=Codec.SNAPPY, base_offset=4),
        build_batch([(b"f", b"7", 2000), (b"g", None, 1990)], base_offset=6),
        build_batch([(b"h", b"8", 3000)] * 4, base_offset=8, codec=Codec.ZSTD),
    ]
    expected, pos = [], 0
    for part, (magic, last, max_ts, codec) in zip(parts, [
            (0, 0, -1, 0), (1, 1, 1000, 0), (1, 3, 1005, 1), (0, 5, -1, 2), (2, 7, 2000, 0),
            (2, 11, 3000, 4)], strict=True):
        expected.append(EntryInfo(pos, len(part), magic, last, max_ts, codec))
        pos += len(part)
    return b"".join(parts), expected


def test_whole_set():
    data, expected = mixed_set()
    result = scan_entries(data)
    assert result.entries == expected
    assert (result.stop, result.problem, result.partial) == (len(data), None, False)
    assert scan_entries(memoryview(data)).entries == expected
    assert scan_entries(bytearray(data), min_offset=0).problem is None


def test_sub_range_with_start_and_end():
    data, expected = mixed_set()
    start, end = expected[2].position, expected[4].position
    result = scan_entries(data, start, end, min_offset=2)
    assert result.entries == expected[2:4]
    assert (result.stop, result.problem, result.partial) == (end, None, False)


def test_empty_range():
    assert scan_entries(b"") == ([], 0, None, False)
    data, _ = mixed_set()
    assert scan_entries(data, len(data)) == ([], len(data), None, False)


def test_truncated_at_every_byte():
    data, expected = mixed_set()
    boundaries = [e.position for e in expected] + [len(data)]
    for cut in range(len(data) + 1):
        result = scan_entries(data, end=cut)
        whole = [e for e in expected if e.position + e.size <= cut]
        assert result.entries == whole, cut
        if cut in boundaries:
            assert (result.stop, result.problem, result.partial) == (cut, None, False), cut
        else:
            assert result.stop == (whole[-1].position + whole[-1].size if whole else 0), cut
            assert result.partial and result.problem, cut


@pytest.mark.parametrize("tail", [b"\x00" * 100, b"\xff" * 30, b"\x00" * 5,
                                  os.urandom(200), os.urandom(7)])
def test_garbage_tail_stops_at_the_last_good_entry(tail):
    data, expected = mixed_set()
    result = scan_entries(data + tail)
    assert result.entries == expected
    assert result.stop == len(data)
    assert result.problem is not None


def test_zeroed_tail_is_corrupt_not_partial():
    data, _ = mixed_set()
    result = scan_entries(data + bytes(4096))  # a preallocated file's tail
    assert (result.stop, result.partial) == (len(data), False)
    assert "size 0" in result.problem


def test_crc_flip_at_every_byte():
    """Any flipped bit that a CRC, the size or the magic covers stops the scan at that entry."""
    data, expected = mixed_set()
    for entry in expected:
        outside_crc = (range(0, 8) if entry.magic < 2 else range(0, 16))  # offsets (and leader epoch)
        for i in range(entry.size):
            if i in outside_crc:
                continue
            flipped = bytearray(data)
            flipped[entry.position + i] ^= 0x10
            result = scan_entries(flipped)
            assert result.stop == entry.position, (entry, i)
            assert result.entries == expected[:expected.index(entry)]
            assert result.problem


def test_check_crc_false_skips_only_the_crc():
    data, expected = mixed_set()
    flipped = bytearray(data)
    flipped[expected[1].position + expected[1].size - 1] ^= 0xFF  # last byte of the v1 value
    flipped[expected[4].position + expected[4].size - 1] ^= 0xFF  # last byte of the v2 batch
    assert scan_entries(flipped).stop == expected[1].position
    assert scan_entries(flipped, check_crc=False).entries == expected


def test_leader_epoch_is_outside_the_crc():
    batch = bytearray(build_batch([(b"k", b"v", 5)]))
    struct.pack_into(">i", batch, 12, 42)
    assert scan_entries(batch).problem is None


def test_offsets_going_backwards():
    first = build_batch([(b"k", b"v", 1)] * 3, base_offset=10)
    for second in (build_batch([(b"k", b"v", 1)], base_offset=12),
                   build_batch([(b"k", b"v", 1)], base_offset=5),
                   build_classic([(b"k", b"v")], magic=1, base_offset=11)):
        result = scan_entries(first + second)
        assert len(result.entries) == 1
        assert (result.stop, result.partial) == (len(first), False)
        assert "does not follow offset 12" in result.problem
    assert scan_entries(first + build_batch([(b"k", b"v", 1)], base_offset=13)).problem is None


def test_min_offset():
    batch = build_batch([(b"k", b"v", 1)], base_offset=10)
    assert scan_entries(batch, min_offset=10).problem is None
    assert scan_entries(batch, min_offset=11).stop == 0
    message = build_classic([(b"k", b"v")], magic=0, base_offset=10)
    assert scan_entries(message, min_offset=11).stop == 0
    assert scan_entries(message, min_offset=10).problem is None


def test_size_below_14_is_corrupt():
    message = bytearray(build_classic([(b"k", b"v")], magic=0))
    struct.pack_into(">i", message, 8, 13)
    result = scan_entries(message)
    assert (result.stop, result.partial) == (0, False)
    assert "below 14" in result.problem
    assert scan_entries(message[:12]).partial is False  # the size alone tells


def test_batch_shorter_than_its_header_is_corrupt():
    batch = bytearray(build_batch([(b"k", b"v", 1)]))
    struct.pack_into(">i", batch, 8, 48)
    result = scan_entries(batch)
    assert (result.stop, result.partial) == (0, False)
    assert "below 49" in result.problem


def test_v1_message_shorter_than_its_header_is_corrupt():
    message = bytearray(build_classic([(None, None, 1)], magic=1))
    struct.pack_into(">i", message, 8, 21)
    assert "below 22" in scan_entries(message).problem


@pytest.mark.parametrize("magic", [3, 0xFF, 0x80])
def test_unknown_magic(magic):
    batch = bytearray(build_batch([(b"k", b"v", 1)]))
    batch[16] = magic
    result = scan_entries(batch)
    assert (result.stop, result.partial) == (0, False)
    assert "unknown magic" in result.problem


def test_classic_lengths_must_fill_the_size():
    message = bytearray(build_classic([(b"key", b"value")], magic=1))
    struct.pack_into(">i", message, 26, 4)  # key length 4 instead of 3
    fix_crc(message, 0)
    assert "disagrees" in scan_entries(message).problem
    message = bytearray(build_classic([(b"key", b"value")], magic=0))
    struct.pack_into(">i", message, 18, -2)
    fix_crc(message, 0)
    assert "disagrees" in scan_entries(message).problem


def test_batch_codec_and_counts():
    for field, value, reason in [(21, struct.pack(">h", 5), "unknown codec"),
                                 (23, struct.pack(">i", -1), "lastOffsetDelta"),
                                 (57, struct.pack(">i", -1), "recordCount")]:
        batch = bytearray(build_batch([(b"k", b"v", 1)]))
        batch[field:field + len(value)] = value
        fix_crc(batch, 0)
        result = scan_entries(batch)
        assert result.stop == 0 and reason in result.problem


def test_empty_batch_with_offset_range_is_legal():
    empty = build_batch([], base_offset=3, last_offset_delta=4)
    after = build_batch([(b"k", b"v", 1)], base_offset=8)
    result = scan_entries(empty + after, min_offset=0)
    assert result.problem is None
    assert [e.last_offset for e in result.entries] == [7, 8]


def test_zstd_is_refused_before_magic_2():
    message = bytearray(build_classic([(b"k", b"v")], magic=1))
    message[17] = 4
    fix_crc(message, 0)
    assert "codec 4 is not allowed with magic 1" in scan_entries(message).problem
