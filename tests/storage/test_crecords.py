"""kafka_format/_crecords.c against its pure-Python twins.

The C module only speeds up runs of good entries; whatever it is given, the
functions that use it must give exactly what the Python code alone gives:
the same entries and offsets, the same patched bytes, the same error with the
same message, the same index entries. Each test runs both ways on the same
random (and randomly damaged) input. Each set is bound by pointing
kafka_format.accel at it (conftest.bind_twin), as accel.py does once at import.
"""

from __future__ import annotations

import random
import struct
from functools import partial

import pytest

from kafka_format import _pyrecords as pyrecords
from kafka_format import build_batch, build_classic, scan_entries
from kafka_format.codecs import Codec
from kafka_format.entries import EntryInfo, EntryTable
from kafka_format.errors import StrataError
from storage.config import LogConfig
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex
from storage.validator import validate_and_assign

from .conftest import bind_twin, c_records

crecords = c_records()
pytestmark = pytest.mark.skipif(crecords is None, reason="the C accelerator is not built here")

CONFIGS = [
    LogConfig(),
    LogConfig(message_timestamp_type="LogAppendTime"),
    LogConfig(cleanup_policy=("compact",)),
    LogConfig(max_message_bytes=300),
]


def random_entry(rng: random.Random, offset: int) -> tuple[bytes, int]:
    """One random entry (mostly plain classic messages, the C path's case) and its record count."""
    kind = rng.random()
    count = rng.randint(1, 4)
    records = [(None if rng.random() < 0.1 else b"k%d" % rng.randrange(50),
                None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200))),
                1_700_000_000_000 + rng.randrange(-5, 1000))
               for _ in range(count)]
    if kind < 0.6:
        magic = rng.choice((0, 1))
        timestamp_type = 1 if magic == 1 and rng.random() < 0.1 else 0
        return build_classic(records[:1], magic=magic, base_offset=offset, timestamp_type=timestamp_type), 1
    if kind < 0.8:
        return build_classic(records, magic=rng.choice((0, 1)), codec=Codec.GZIP, base_offset=offset), count
    # Mostly plain batches (the C path's other case), with each header field the
    # C loop checks or stops at set now and then.
    options = {}
    odd = rng.random()
    if odd < 0.1:
        options = {"producer_id": rng.randrange(1000), "producer_epoch": 0,
                   "base_sequence": rng.choice((0, 7, -1))}
    elif odd < 0.15:
        options = {"timestamp_type": 1}
    elif odd < 0.2:
        options = {"is_control": True}
    elif odd < 0.25:
        options = {"is_transactional": True, "producer_id": 5, "producer_epoch": 0, "base_sequence": 0}
    elif odd < 0.3:
        options = {"last_offset_delta": count + rng.choice((-1, 1))}
    elif odd < 0.35:
        options = {"partition_leader_epoch": rng.randrange(1, 100)}
    return build_batch(records, base_offset=offset, codec=rng.choice((Codec.NONE, Codec.NONE, Codec.LZ4)),
                       **options), count


def random_set(rng: random.Random, entries: int = 30) -> bytes:
    parts, offset = [], rng.randrange(0, 1000)
    for _ in range(entries):
        data, count = random_entry(rng, offset)
        parts.append(data)
        offset += count + (rng.randrange(3) if rng.random() < 0.05 else 0)
    return b"".join(parts)


def damage(rng: random.Random, data: bytes) -> bytes:
    """Nothing, a cut, a flipped byte or a patched size/length field."""
    buf = bytearray(data)
    choice = rng.randrange(5)
    if choice == 1:
        del buf[rng.randrange(len(buf)):]
    elif choice == 2:
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif choice == 3:
        at = rng.randrange(max(1, len(buf) - 4))
        struct.pack_into(">i", buf, at, rng.choice((-2, -1, 0, 13, 14, 48, 2**31 - 1)))
    elif choice == 4 and len(buf) > 20:
        buf[16] = rng.choice((0, 1, 2, 3, 200))  # the first entry's magic
    return bytes(buf)


# Every CRC path this CPU runs: the walks call the Python CRC functions below the
# AVX-512 path (for CRC32C) or the SSE one (for both), as on a CPU without them.
CRC_PATHS = list(range(crecords.CRC_PATH + 1)) if crecords is not None else [0]


@pytest.fixture(params=CRC_PATHS)
def crc_path(request):
    previous = crecords.set_crc_path(request.param)
    yield request.param
    crecords.set_crc_path(previous)


def both_ways(monkeypatch, call):
    """(result or error) with the C twins, then with the Python twins."""
    outcomes = []
    for implementation in (crecords, pyrecords):
        bind_twin(monkeypatch, implementation)
        try:
            outcomes.append(("ok", call()))
        except StrataError as error:
            outcomes.append(("error", type(error), str(error)))
    return outcomes


@pytest.mark.parametrize("seed", range(60))
def test_scan_matches_python(monkeypatch, seed, crc_path):
    rng = random.Random(seed)
    data = damage(rng, random_set(rng))
    for check_crc, check_lengths in ((True, True), (True, False), (False, True)):
        min_offset = rng.choice((-1, 0, 500))
        with_c, python = both_ways(monkeypatch, partial(
            scan_entries, data, 0, len(data), min_offset=min_offset, check_crc=check_crc,
            check_lengths=check_lengths))
        assert with_c == python


@pytest.mark.parametrize("seed", range(160))
def test_validate_matches_python(monkeypatch, seed, crc_path):
    rng = random.Random(1000 + seed)
    data = damage(rng, random_set(rng, entries=rng.randint(1, 40)))
    config = rng.choice(CONFIGS)
    next_offset = rng.randrange(0, 10**6)

    def run():
        buf = bytearray(data)  # in place: the patched bytes are part of the result
        result = validate_and_assign(buf, next_offset=next_offset, now_ms=1_800_000_000_000, config=config,
                                     in_place=True)
        return bytes(result.buffer), result._replace(buffer=None)

    with_c, python = both_ways(monkeypatch, run)
    assert with_c == python


def test_validate_patches_every_plain_message_in_c():
    """The whole set goes through the C loop: offsets restamped, entries listed."""
    data = b"".join(build_classic([(b"k", b"v%d" % i, 1000 + i)], magic=1, base_offset=0) for i in range(100))
    result = validate_and_assign(bytearray(data), next_offset=77, now_ms=0, config=LogConfig(), in_place=True)
    scanned = scan_entries(result.buffer)
    assert scanned.problem is None
    assert [e.last_offset for e in scanned.entries] == list(range(77, 177))
    assert result.entries == scanned.entries
    assert (result.max_timestamp, result.offset_of_max_timestamp, result.record_count) == (1099, 176, 100)


def test_plain_batches_are_assigned_in_one_c_call():
    """Uncompressed batches, one with an idempotent producer: all restamped
    (baseOffset, leader epoch 0) by the C loop, which stops only at the end."""
    batches = [build_batch([(b"k", b"v%d" % i, 1000 + i), (b"k", b"w", 999)], base_offset=0,
                           partition_leader_epoch=9) for i in range(10)]
    batches.append(build_batch([(b"k", b"p", 5)], producer_id=42, producer_epoch=0, base_sequence=0))
    data = bytearray(b"".join(batches))
    rows = bytearray()
    pos, next_offset, max_ts, offset_of_max, records, has_ids = crecords.assign_plain_run(
        data, 0, len(data), 500, 1 << 20, False, False, 0, 0, -1, -1, rows, None, None)
    assert (pos, next_offset, max_ts, offset_of_max, records, has_ids) == (len(data), 521, 1009, 519, 21, True)
    scanned = scan_entries(data)
    assert scanned.problem is None
    table = EntryTable(rows)
    assert table == scanned.entries
    assert all(struct.unpack_from(">i", data, e.position + 12)[0] == 0 for e in scanned.entries)


def test_rows_are_exact_after_growing_and_after_an_error():
    """The C walks grow the rows bytearray by doubling while they write and cut
    it to the rows written on the way out, an error included: a table that
    already holds rows keeps them, and no spare row is ever left at the end."""
    data = bytearray(b"".join(build_classic([(b"k", b"v%d" % i, 1000 + i)], magic=1, base_offset=0)
                              for i in range(3000)))
    earlier = EntryTable.of([(0, 1, 1, 5, -1, 0)] * 7)
    rows = bytearray(earlier.rows)
    pos, next_offset, *_ = crecords.assign_plain_run(data, 0, len(data), 10, 1 << 20, False, False, 0, 0, -1, -1,
                                                     rows, None, None)
    assert (pos, next_offset) == (len(data), 3010)
    assert len(rows) == (7 + 3000) * EntryTable.ROW.size
    table = EntryTable(rows)
    assert table[:7] == earlier and [e.last_offset for e in table[7:]] == list(range(10, 3010))
    rows = bytearray(earlier.rows)
    assert crecords.scan_run(bytes(data), 0, len(data), -1, True, True, rows, None, None) == (len(data), 3009)
    assert EntryTable(rows)[7:] == table[7:]

    calls = []

    def failing_crc(view):  # the Python CRC path, failing on the 1000th message
        calls.append(1)
        if len(calls) == 1000:
            raise RuntimeError("crc callable failed")
        return crecords.crc32(view)

    previous = crecords.set_crc_path(0)
    try:
        for walk in ("assign", "scan"):
            calls.clear()
            rows = bytearray()
            with pytest.raises(RuntimeError, match="crc callable failed"):
                if walk == "assign":
                    crecords.assign_plain_run(bytearray(data), 0, len(data), 0, 1 << 20, False, False, 0, 0, -1, -1,
                                              rows, failing_crc, None)
                else:
                    crecords.scan_run(bytes(data), 0, len(data), -1, True, True, rows, failing_crc, None)
            assert len(rows) == 999 * EntryTable.ROW.size
    finally:
        crecords.set_crc_path(previous)


def test_run_functions_refuse_bad_arguments():
    with pytest.raises(ValueError):
        crecords.scan_run(b"x" * 20, 0, 40, -1, True, True, bytearray(), None, None)
    with pytest.raises(TypeError):
        crecords.scan_run(b"x" * 20, 0, 20, -1, True, True, (), None, None)
    with pytest.raises(TypeError):  # the buffer is patched: read-only bytes will not do
        crecords.assign_plain_run(b"x" * 20, 0, 20, 0, 100, False, False, 0, 0, -1, -1, bytearray(), None, None)
    with pytest.raises(TypeError):  # rows are an EntryTable's bytearray
        crecords.assign_plain_run(bytearray(20), 0, 20, 0, 100, False, False, 0, 0, -1, -1, [], None, None)
    with pytest.raises(TypeError):
        crecords.index_entries((), 4096, 0, -1, -1, 0, 0, -1)
    with pytest.raises(ValueError):  # not whole rows
        crecords.index_entries(bytearray(47), 4096, 0, -1, -1, 0, 0, -1)


def random_entries(rng: random.Random) -> list[EntryInfo]:
    out, position, offset = [], rng.randrange(0, 100), rng.randrange(0, 10**6)
    for _ in range(rng.randrange(1, 300)):
        size = rng.choice((40, 1036, 5000, rng.randrange(14, 20000)))
        offset += rng.randint(1, 3)
        timestamp = rng.choice((-1, 1_700_000_000_000 + rng.randrange(-100, 100)))
        out.append(EntryInfo(position, size, rng.randrange(3), offset, timestamp, 0))
        position += size
    return out


@pytest.mark.parametrize("seed", range(60))
def test_index_entries_match_python(seed):
    rng = random.Random(seed)
    entries = random_entries(rng)
    interval = rng.choice((1, 4096, 10_000, 1 << 20))
    since = rng.randrange(0, interval + 1)
    base = entries[0].last_offset - rng.randrange(0, 10)
    best = rng.choice(((-1, -1), (1_700_000_000_000, base)))  # from an earlier append to the segment
    placed = (base, rng.choice((0, 777)), rng.choice((-1, 1_700_000_000_000)))  # base offset, position, newest
    expected = pyrecords.index_entries(entries, interval, since, *best, *placed)
    assert crecords.index_entries(entries, interval, since, *best, *placed) == expected
    table = EntryTable.of(entries)
    assert crecords.index_entries(table.rows, interval, since, *best, *placed) == expected
    assert pyrecords.index_entries(table.rows, interval, since, *best, *placed) == expected
    empty = pyrecords.index_entries([], interval, since, *best, *placed)
    assert empty[:2] == (b"", b"")
    assert crecords.index_entries([], interval, since, *best, *placed) == empty
    assert crecords.index_entries(bytearray(), interval, since, *best, *placed) == empty


def kafka_index_points(entries, interval: int) -> list[tuple[int, int, int, int]]:
    """Kafka's rule, entry by entry: once more than `interval` bytes were written
    since the last index entry, index this one. A point (last offset, position,
    running largest timestamp, the first entry's offset holding it) for each."""
    points, last_indexed, best = [], entries[0].position, (-1, -1)
    for entry in entries:
        if entry.max_timestamp > best[0]:
            best = (entry.max_timestamp, entry.last_offset)
        if entry.position - last_indexed > interval:
            points.append((entry.last_offset, entry.position, *best))
            last_indexed = entry.position
    return points


@pytest.mark.parametrize("implementation", ["c", "python"])
def test_index_entries_unpack_to_the_points(implementation):
    """The packed entries say what Kafka's rule's points say: each point's
    offset and position, and the time index's strictly rising timestamps."""
    walk = (crecords if implementation == "c" else pyrecords).index_entries
    entries = random_entries(random.Random(3))
    base = entries[0].last_offset
    points = kafka_index_points(entries, 4096)
    offset_entries, time_entries, *_ = walk(entries, 4096, 0, -1, -1, base, 100, -1)
    assert list(OffsetIndex.ENTRY.iter_unpack(offset_entries)) == [
        (point[0] - base, 100 + point[1]) for point in points]
    rising, newest = [], -1
    for point in points:
        if point[2] > newest:
            newest = point[2]
            rising.append((point[2], point[3] - base))
    assert list(TimeIndex.ENTRY.iter_unpack(time_entries)) == rising and rising


@pytest.mark.parametrize("placed", [(10**6, 0), (0, 2**31 - 100), (2**40, 0)])
def test_index_entries_refuse_what_does_not_fit_an_entry(placed):
    """A relative offset below 0 or past an int32, or a position past one."""
    entries = random_entries(random.Random(5))
    base_offset, base_position = placed
    with pytest.raises(OverflowError):
        crecords.index_entries(entries, 1, 0, -1, -1, base_offset, base_position, -1)
    with pytest.raises(OverflowError):
        pyrecords.index_entries(entries, 1, 0, -1, -1, base_offset, base_position, -1)


def test_entry_table_reads_as_a_sequence_of_entry_info():
    entries = random_entries(random.Random(7))
    table = EntryTable.of(entries)
    assert len(table) == len(entries) and list(table) == entries and table == entries
    assert table[0] == entries[0] and table[-1] == entries[-1] and table[2:5] == entries[2:5]
    with pytest.raises(IndexError):
        table[len(entries)]
    assert EntryTable() == [] and not EntryTable()


def test_bulk_index_appends_equal_one_by_one(tmp_path):
    """append_entries writes what append / maybe_append would, one entry at a time."""
    rng = random.Random(7)
    entries = random_entries(rng)
    points = kafka_index_points(entries, 4096)
    bulk_offsets, single_offsets = OffsetIndex(tmp_path / "a.index", 0), OffsetIndex(tmp_path / "b.index", 0)
    bulk_times, single_times = TimeIndex(tmp_path / "a.timeindex", 0), TimeIndex(tmp_path / "b.timeindex", 0)
    half = len(entries) // 2
    since, best = 0, (-1, -1)
    for chunk in (entries[:half], entries[half:]):
        offset_entries, time_entries, since, *best = crecords.index_entries(
            chunk, 4096, since, *best, 0, 100, bulk_times.last_entry.timestamp)
        bulk_offsets.append_entries(offset_entries)
        bulk_times.append_entries(time_entries)
    for offset, position, timestamp, timestamp_offset in points:
        single_offsets.append(offset, 100 + position)
        single_times.maybe_append(timestamp, timestamp_offset)
    assert bulk_offsets.entries == single_offsets.entries > 0
    assert [bulk_offsets.entry(i) for i in range(bulk_offsets.entries)] == \
        [single_offsets.entry(i) for i in range(single_offsets.entries)]
    assert bulk_times.entries == single_times.entries > 0
    assert [bulk_times.entry(i) for i in range(bulk_times.entries)] == \
        [single_times.entry(i) for i in range(single_times.entries)]
    assert bulk_times.last_entry == single_times.last_entry
    assert bulk_offsets.last_offset == single_offsets.last_offset
    for index in (bulk_offsets, single_offsets, bulk_times, single_times):
        index.close()


@pytest.mark.parametrize("name", ["crc32", "crc32c"])
def test_crcs_in_c_match_the_libraries_on_every_path_length_and_alignment(name):
    """Each folding path this CPU runs (byte table, SSE, AVX-512), for CRC32
    against ISA-L's and for CRC32C against the crc32c package: every length
    around the paths' block sizes (16, 64, 256 bytes) and random longer ones."""
    import crc32c
    from isal.isal_zlib import crc32

    reference = crc32 if name == "crc32" else crc32c.crc32c
    ours = getattr(crecords, name)
    rng = random.Random(3)
    data = bytes(rng.randrange(256) for _ in range(70_000))
    lengths = list(range(0, 600)) + [rng.randrange(600, 9000) for _ in range(100)] + [65_535, 65_536, 69_000]
    for length in lengths:
        for start in (0, 1, 5, 15, 63):
            piece = data[start:start + length]
            expected = reference(piece)
            for path in range(crecords.CRC_PATH + 1):
                assert ours(piece, path) == expected, (length, start, path)
            assert ours(memoryview(piece)) == expected, (length, start)


def test_set_crc_path_is_clamped_to_what_the_cpu_has():
    best = crecords.CRC_PATH
    assert crecords.set_crc_path(99) == best
    assert crecords.set_crc_path(-3) == best  # 99 was clamped to the CPU's best
    assert crecords.set_crc_path(best) == 0
    assert (best >= 2) == crecords.CRC32C_IN_C and (best >= 1) == crecords.CLMUL


def test_crc_functions_refuse_bad_arguments():
    with pytest.raises(TypeError):
        crecords.crc32c()
    with pytest.raises(TypeError):
        crecords.crc32c(b"x", 1, 2)
    with pytest.raises(TypeError):
        crecords.crc32c("not bytes")
    assert crecords.crc32c(b"123456789", 99) == 0xE3069283  # a path above the CPU's: the best one
    assert crecords.crc32(b"123456789", -5) == 0xCBF43926


def test_crc32c_is_chosen_once_for_every_caller():
    """The validator, the scan and the cleaner share accel's CRC32C: no other
    module of theirs names a CRC32C function."""
    from kafka_format import accel, batch, entries, framing
    from storage import cleaner_records, validator

    for module in (batch, entries, framing, cleaner_records, validator):
        assert not hasattr(module, "crc32c"), module
    if crecords.CRC32C_IN_C:
        assert accel.crc32c is crecords.crc32c


def random_records(rng: random.Random, count: int) -> list[tuple]:
    return [(None if rng.random() < 0.2 else b"k%d" % rng.randrange(100),
             None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))),
             1_700_000_000_000 + rng.randrange(-10_000, 10_000),
             [(f"h{i}", None if rng.random() < 0.3 else b"v") for i in range(rng.randrange(3))])
            for _ in range(count)]


@pytest.mark.parametrize("seed", range(120))
def test_summarize_records_matches_python(monkeypatch, seed):
    import kafka_format.batch as batch_module

    rng = random.Random(seed)
    count = rng.randrange(0, 40)
    offset_deltas = None
    if count and rng.random() < 0.2:
        offset_deltas = sorted(rng.sample(range(count * 2), count))
    data = bytearray(build_batch(random_records(rng, count), offset_deltas=offset_deltas))
    payload_at = 61
    if rng.random() < 0.6 and len(data) > payload_at:  # damage only the records
        at = rng.randrange(payload_at, len(data))
        data[at] = rng.randrange(256) if rng.random() < 0.7 else 0xFF
        if rng.random() < 0.3:
            del data[rng.randrange(payload_at, len(data)):]
    declared = count if rng.random() < 0.8 else count + rng.choice((-1, 1))

    def outcome(function):
        try:
            return "ok", function(bytes(data), payload_at, len(data), declared)
        except StrataError as error:
            return "error", type(error), str(error)

    outcomes = []
    for implementation in (crecords, pyrecords):
        bind_twin(monkeypatch, implementation)
        outcomes.append(outcome(batch_module.summarize_records))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("seed", range(60))
def test_first_record_at_matches_python(monkeypatch, seed):
    from kafka_format import iter_entries

    rng = random.Random(seed)
    records = random_records(rng, rng.randrange(1, 50))
    codec = rng.choice((Codec.NONE, Codec.NONE, Codec.GZIP, Codec.ZSTD))
    data = build_batch(records, base_offset=rng.randrange(0, 1000), codec=codec,
                       timestamp_type=1 if rng.random() < 0.2 else 0)
    entry = next(iter_entries(data))
    timestamps = sorted(r[2] for r in records)
    for _ in range(10):
        timestamp = rng.choice(timestamps) + rng.choice((-1, 0, 1, 10**9)) if rng.random() < 0.9 else -(1 << 62)
        starting = entry.base_offset + rng.randrange(-5, len(records) + 5)
        found = []
        for implementation in (crecords, pyrecords):
            bind_twin(monkeypatch, implementation)
            found.append(entry.first_record_at(timestamp, starting))
        assert found[0] == found[1]


@pytest.mark.parametrize("log_append", [True, False])
def test_v1_timestamps_are_set_in_the_c_run(log_append):
    """Under LogAppendTime every v1 message gets now_ms and the type bit; under
    CreateTime a client-set bit is cleared: one C call, CRCs recomputed, the
    scan then finds every CRC good (test_validate_matches_python compares the
    bytes with the Python twin's)."""
    attributes = 0 if log_append else 0x08
    data = bytearray(b"".join(build_classic([(b"k", b"v%d" % i, 1000 + i)], magic=1, base_offset=0,
                                            timestamp_type=attributes >> 3) for i in range(50)))
    rows = bytearray()
    pos, next_offset, max_ts, offset_of_max, records, _ = crecords.assign_plain_run(
        data, 0, len(data), 7, 1 << 20, False, log_append, 5000, 0, -1, -1, rows, None, None)
    assert (pos, next_offset, records) == (len(data), 57, 50)
    assert (max_ts, offset_of_max) == ((5000, 7) if log_append else (1049, 56))
    scanned = scan_entries(data)
    assert scanned.problem is None and EntryTable(rows) == scanned.entries
    for entry in scanned.entries:
        assert entry.max_timestamp == (5000 if log_append else 1000 + entry.last_offset - 7)
    assert all((data[e.position + 17] & 0x08) == (0x08 if log_append else 0) for e in scanned.entries)
