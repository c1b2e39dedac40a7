"""The cleaner's key map, both twins (storage/_ccleaner.c and storage/_pycleaner.py,
one suite run on each): the same interface, an exact map under total hash
collision, the same memory figures and bound; whole cleans that write the same
bytes with either twin on random logs of every format; CorruptRecordError (never
a crash) on damaged records in the C walks."""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import struct

import pytest

from kafka_format import build_batch, build_classic
from kafka_format.codecs import Codec
from kafka_format.entries import EntryInfo
from kafka_format.errors import CorruptRecordError
from storage import _pycleaner
from storage import accel as storage_accel
from storage.cleaner import Cleaner
from storage.config import LogConfig
from storage.log import Log
from storage.offset_map import NATIVE_ENTRY_BOUND, NATIVE_INLINE_KEY, NATIVE_SLOT_BYTES, OffsetMap, native_entry_bound

_ccleaner = importlib.import_module("storage._ccleaner") if storage_accel.NATIVE else None
needs_c = pytest.mark.skipif(_ccleaner is None, reason="storage._ccleaner is not built (or STRATA_PURE_PYTHON is set)")


@pytest.fixture(params=["c", "python"])
def twin(request):
    """The key map's module, once each (C skipped when not built)."""
    if request.param == "c":
        if _ccleaner is None:
            pytest.skip("storage._ccleaner is not built (or STRATA_PURE_PYTHON is set)")
        return _ccleaner
    return _pycleaner

DAY = 86_400_000


@pytest.fixture
def all_keys_collide():
    """Every key hash is 0 in the C map while the test runs."""
    if _ccleaner is None:
        yield
        return
    _ccleaner.set_hash_mask(0)
    try:
        yield
    finally:
        _ccleaner.set_hash_mask((1 << 64) - 1)


# ---- one interface -------------------------------------------------------------------------------

def _public(names):
    return sorted(name for name in names if not name.startswith("_"))


@needs_c
def test_both_twins_have_the_same_names_and_constants():
    assert set(_public(dir(_ccleaner))) <= set(_public(dir(_pycleaner)))
    for name in ("SLOT_BYTES", "SLOT_INLINE_KEY", "DONE", "NEED_PYTHON", "FULL"):
        assert getattr(_ccleaner, name) == getattr(_pycleaner, name), name
    c_map, py_map = _ccleaner.KeyMap(1 << 20, 128), _pycleaner.KeyMap(1 << 20, 128)
    assert _public(dir(c_map)) == _public(dir(py_map))


@needs_c
def test_both_twins_keep_the_same_bits():
    """Pass 1's bits: begin, cover, mark_batch, supersede and dead_mask answer alike."""
    rng = random.Random(3)
    maps = [_ccleaner.KeyMap(1 << 20, 128), _pycleaner.KeyMap(1 << 20, 128)]
    for m in maps:
        m.begin(100)
    for step in range(2000):
        op = rng.randrange(4)
        a = rng.randrange(90, 2000)
        b = a + rng.randrange(-2, 40)
        if op == 0:
            for m in maps:
                m.cover(b)
        elif op == 1:
            eligible = rng.random() < 0.7
            for m in maps:
                m.mark_batch(a, eligible)
        elif op == 2:
            offsets = [rng.randrange(90, 2100) for _ in range(5)]
            for m in maps:
                m.supersede(offsets)
        answers = [m.dead_mask(a, b) for m in maps]
        assert answers[0] == answers[1], (step, a, b)
        assert maps[0].bits_bytes == maps[1].bits_bytes and maps[0].used_bytes == maps[1].used_bytes


def test_the_python_walks_leave_every_entry_to_python():
    m = _pycleaner.KeyMap(1 << 20, 128)
    m.begin(0)
    plain = bytes(_batch([(b"a", b"1", 1)]))
    assert m.map_entries(plain, 0, len(plain), 0, 0) == (0, _pycleaner.NEED_PYTHON, -1, -1, 0, 0)
    assert m.map_entries(plain, len(plain), len(plain), 0, 0)[:2] == (len(plain), _pycleaner.DONE)
    assert m.filter_entries(plain, 0, len(plain), 0, -1, 0, 0, DAY)[:4] == (0, _pycleaner.NEED_PYTHON, b"", [])
    with pytest.raises(ValueError):
        m.map_entries(plain, 0, len(plain) + 1, 0, 0)


def test_the_bound_key_map_is_the_twin_accel_chose():
    assert storage_accel.KeyMap is (_ccleaner.KeyMap if _ccleaner is not None else _pycleaner.KeyMap)
    assert storage_accel.is_native(OffsetMap(1 << 20).key_map) == storage_accel.NATIVE


# ---- the map -------------------------------------------------------------------------------------

def random_keys(rng, n):
    keys = set()
    while len(keys) < n:
        length = rng.choice([0, 1, 5, 11, 16, 17, 36, 100, 128])
        keys.add(bytes(rng.randrange(256) for _ in range(length)))
    return sorted(keys)


@pytest.mark.parametrize("collide", [False, True], ids=["hashed", "every-hash-equal"])
def test_the_map_is_exact_even_when_every_hash_is_equal(collide, request, twin):
    if collide:
        request.getfixturevalue("all_keys_collide")
    rng = random.Random(5)
    keys = random_keys(rng, 400)
    m = twin.KeyMap(1 << 30, 128)
    latest = {}
    for offset in range(3000):
        key = rng.choice(keys)
        superseded = m.put_keys([key], [offset])
        assert superseded == ([latest[key]] if key in latest else [])
        latest[key] = offset
    assert m.entries == len(latest)
    for key in keys:
        assert m.get(key) == latest.get(key, -1)
    assert m.get(b"not a key") == -1 and m.get(b"x" * 129) == -1


@pytest.mark.parametrize("collide,count", [(False, 100_000), (True, 1500)], ids=["hashed", "every-hash-equal"])
def test_the_table_stays_exact_as_it_grows_in_place(collide, count, request, twin):
    """Many doublings (each moves the entries within the grown block), with long
    probe runs when every hash is equal: every key keeps its own latest offset."""
    if collide:
        request.getfixturevalue("all_keys_collide")
    rng = random.Random(count)
    keys = [rng.randbytes(rng.choice([0, 3, 8, 15, 16, 17, 30, 64, 128])) for _ in range(count)]
    m = twin.KeyMap(1 << 32, 128)
    latest = {}
    for start in range(0, 3 * count, 500):
        batch = [rng.choice(keys) for _ in range(500)]
        offsets = list(range(start, start + 500))
        superseded = m.put_keys(batch, offsets)
        expected = []
        for key, offset in zip(batch, offsets, strict=True):
            if key in latest:
                expected.append(latest[key])
            latest[key] = offset
        assert superseded == expected
    assert m.entries == len(latest)
    assert all(m.get(key) == offset for key, offset in latest.items())
    assert m.table_bytes <= len(latest) * NATIVE_SLOT_BYTES * 8 // 3 + 16 * NATIVE_SLOT_BYTES


@needs_c
def test_offset_map_gives_the_same_answers_and_memory_figures_with_either_twin(all_keys_collide):
    rng = random.Random(8)
    keys = random_keys(rng, 200) + [b"L" * 300, b"M" * 300]  # and two long keys (the Python digest path)
    log = {}
    maps = [OffsetMap(1 << 24, key_map=_pycleaner.KeyMap), OffsetMap(1 << 24, key_map=_ccleaner.KeyMap)]
    for m in maps:
        m.clear(log.get)
    for offset in range(2000):
        batch = [rng.choice(keys) for _ in range(rng.randrange(1, 5))]
        offsets = list(range(offset * 5, offset * 5 + len(batch)))
        for k, o in zip(batch, offsets, strict=True):
            log[o] = k
        answers = [sorted(m.put_all(batch, offsets)) for m in maps]
        assert answers[0] == answers[1]
        assert maps[0].used_bytes == maps[1].used_bytes
    for key in keys:
        assert maps[0].get(key, -1) == maps[1].get(key, -1)
    assert maps[0].entries == maps[1].entries == len(keys)


@pytest.mark.parametrize("key_length", [0, 11, 16, 17, 36, 128])
def test_memory_per_key_stays_within_the_stated_bound(key_length, twin):
    """The C map counts every byte it allocates (the Python twin the same figures):
    past the fixed parts (the smallest table, one arena chunk) each key costs at most
    native_entry_bound bytes."""
    count = 50_000
    m = OffsetMap(1 << 30, key_map=twin.KeyMap)
    n = m.key_map
    keys = [i.to_bytes(8, "big").rjust(key_length, b"k")[-key_length:] if key_length else b""
            for i in range(count)]
    keys = list(dict.fromkeys(keys))
    peak = 0
    for i in range(0, len(keys), 100):
        m.put_all(keys[i:i + 100], list(range(i, i + len(keys[i:i + 100]))))
        peak = max(peak, m.used_bytes)
    assert m.entries == len(keys)
    assert m.used_bytes == n.table_bytes + n.arena_bytes + n.bits_bytes + 8 * (
        (n.arena_bytes // n.chunk_size + 15) // 16 * 16 if n.arena_bytes else 0)
    fixed = 16 * NATIVE_SLOT_BYTES + 2 * n.chunk_size
    assert n.table_bytes <= len(keys) * NATIVE_ENTRY_BOUND * 2 // 3 + fixed  # 86 a key between resizes
    assert m.used_bytes <= len(keys) * native_entry_bound(key_length) + fixed
    assert native_entry_bound(11) == NATIVE_ENTRY_BOUND == 128
    assert native_entry_bound(NATIVE_INLINE_KEY + 1) == 128 + NATIVE_INLINE_KEY + 1
    assert native_entry_bound(128) == 256


@pytest.mark.parametrize("key_length", [8, 40])
def test_the_map_reports_full_before_passing_its_budget(key_length, twin):
    m = OffsetMap(200_000, load_factor=1.0, key_map=twin.KeyMap)
    rng = random.Random(1)
    offset = 0
    while True:
        keys = [rng.randbytes(key_length) for _ in range(50)]
        if not m.fits_keys(keys, sum(map(len, keys)), offset + 50):
            break
        m.put_all(keys, list(range(offset, offset + 50)))
        offset += 50
    assert m.used_bytes <= m.capacity_bytes
    assert m.entries > 1000  # it did fill up


# ---- whole cleans: the C twin against the Python one ------------------------------------------------

def _open(path, clock, segment_bytes, retention):
    # the delete policy lets keyless records in; Cleaner.clean compacts whatever it is given
    config = LogConfig.from_props({"segment.bytes": segment_bytes, "delete.retention.ms": retention})
    return Log.open(str(path), "topic", 0, config, clock=clock, had_clean_shutdown=True)


def _files(log):
    out = {}
    for segment in log.segments.snapshot():
        out[segment.base_offset] = segment.log.read(0, segment.size)
    return out


def _random_records(rng, step, clock, keys):
    recs = []
    for _ in range(rng.randrange(1, 6)):
        r = rng.random()
        key = None if r < 0.05 else rng.choice(keys)
        value = None if r > 0.88 else b"v%d-%d" % (step, rng.randrange(1000))
        recs.append((key, value, clock.time_ms() + rng.randrange(-5, 5)))
    return recs


def _append_random(rng, logs, step, clock, keys, producers):
    recs = _random_records(rng, step, clock, keys)
    kind = rng.randrange(10)
    if kind == 0:
        data = build_classic([recs[0]], magic=rng.choice([0, 1]))
    elif kind == 1:
        data = build_classic(recs, magic=1, codec=rng.choice([Codec.GZIP, Codec.LZ4]))
    else:
        args = {"codec": Codec.NONE if kind > 3 else rng.choice([Codec.ZSTD, Codec.SNAPPY, Codec.GZIP])}
        if rng.random() < 0.2:
            args["timestamp_type"] = 1  # LogAppendTime
        if rng.random() < 0.2:
            pid = rng.randrange(3)
            args.update(producer_id=pid, producer_epoch=0, base_sequence=producers.get(pid, 0))
            producers[pid] = producers.get(pid, 0) + len(recs)
        data = build_batch(recs, **args)
    for log in logs:
        log.append(data)


@needs_c
@pytest.mark.parametrize("seed", range(int(os.environ.get("CCLEANER_SEEDS", "10"))))
def test_both_twins_clean_to_the_same_bytes(tmp_path, clock, seed):
    """Two copies of one random log (every magic and codec, tombstones, keyless records,
    keys inline, in the arena and past the inline limit, producers, LogAppendTime),
    cleaned in the same random rounds, one with each twin: every segment file stays
    byte for byte the same, and so do the clean's results, small maps that fill
    included (both charge the same bytes, so a round ends at the same offset)."""
    rng = random.Random(seed)
    segment_bytes = rng.choice([1500, 2500, 6000])
    retention = rng.choice([0, 50, DAY])
    logs = [_open(tmp_path / name / "t-0", clock, segment_bytes, retention) for name in ("python", "native")]
    keys = [b"k%d" % i for i in range(12)] + [b"key-of-some-length-%d" % i for i in range(4)]
    keys += [b"", b"L" * 200, b"M" * 129]
    producers = {}
    first_dirty = 0
    collide = seed % 3 == 2
    if collide:
        _ccleaner.set_hash_mask(0)
    try:
        for step in range(rng.randrange(80, 160)):
            _append_random(rng, logs, step, clock, keys, producers)
            clock.advance(rng.randrange(0, 30))
            if rng.random() < 0.12:
                budget = rng.choice([1 << 13, 1 << 16, 1 << 20])
                limit = rng.choice([128, 128, 0, 12])
                io_buffer = rng.choice([100, 700, 512 * 1024])  # entries larger than a read, too
                results = []
                for log, key_map in zip(logs, (_pycleaner.KeyMap, _ccleaner.KeyMap), strict=True):
                    offset_map = OffsetMap(budget, inline_key_limit=limit, key_map=key_map)
                    end, stats = Cleaner(offset_map, clock=clock, io_buffer_size=io_buffer).clean(
                        log, first_dirty, log.active_segment.base_offset)
                    f = stats.fields()
                    results.append((end, {k: f[k] for k in ("records_read", "records_kept", "keyless_dropped",
                                                            "tombstones_dropped", "map_records_read",
                                                            "map_bytes_read", "bytes_written", "entries_copied",
                                                            "entries_rebuilt", "entries_dropped",
                                                            "empty_batches", "map_entries")}))
                assert results[0] == results[1]
                assert _files(logs[0]) == _files(logs[1])
                first_dirty = results[0][0] if rng.random() < 0.7 else logs[0].log_start_offset
    finally:
        if collide:
            _ccleaner.set_hash_mask((1 << 64) - 1)
        for log in logs:
            log.close()


@needs_c
def test_maps_that_fill_clean_in_the_same_rounds_with_either_twin(tmp_path, clock):
    """A budget far below the keys: many rounds, each ending where the map filled, at
    the same offset with either twin, and the same bytes after every round."""
    logs = [_open(tmp_path / name / "t-0", clock, 20_000, DAY) for name in ("python", "c")]
    rng = random.Random(6)
    for i in range(300):
        data = build_batch([(b"key-%05d" % rng.randrange(2000), b"v%d" % i, clock.time_ms() + j)
                            for j in range(10)])
        for log in logs:
            log.append(data)
    for log in logs:
        log.roll()
    target = logs[0].active_segment.base_offset
    first_dirty, rounds = 0, 0
    while first_dirty < target:
        ends = []
        for log, key_map in zip(logs, (_pycleaner.KeyMap, _ccleaner.KeyMap), strict=True):
            offset_map = OffsetMap(20_000, key_map=key_map)
            end, stats = Cleaner(offset_map, clock=clock).clean(log, first_dirty, target)
            ends.append((end, stats.map["map_bytes"], stats.map["map_entries"]))
        assert ends[0] == ends[1]
        assert _files(logs[0]) == _files(logs[1])
        first_dirty, rounds = ends[0][0], rounds + 1
    assert rounds > 3
    for log in logs:
        log.close()


@needs_c
def test_plain_batches_take_the_c_walks(tmp_path, clock):
    """The bench's shape (uncompressed batches, short keys): both passes stay in C and
    give what Python gives."""
    logs = [_open(tmp_path / name / "t-0", clock, 20_000, DAY) for name in ("python", "native")]
    rng = random.Random(2)
    for i in range(200):
        data = build_batch([(b"key-%05d" % rng.randrange(300), b"v%d" % i, clock.time_ms() + j)
                            for j in range(10)])
        for log in logs:
            log.append(data)
    stats = []
    for log, key_map in zip(logs, (_pycleaner.KeyMap, _ccleaner.KeyMap), strict=True):
        log.roll()
        offset_map = OffsetMap(1 << 22, key_map=key_map)
        _, s = Cleaner(offset_map, clock=clock).clean(log, 0, log.active_segment.base_offset)
        stats.append(s)
    mapped, written = offset_map.key_map.native_entries
    assert mapped == 200 and written == 200 - stats[1].groups  # all but each group's last entry (Python's)
    assert _files(logs[0]) == _files(logs[1])
    assert stats[1].records.entries_rebuilt == stats[0].records.entries_rebuilt > 0
    assert stats[1].map["map_native"] and not stats[0].map["map_native"]
    for log in logs:
        log.close()


# ---- damaged records ---------------------------------------------------------------------------

def _batch(records, base_offset=0):
    data = bytearray(build_batch(records))
    data[0:8] = struct.pack(">q", base_offset)
    return data


def _records_start():
    return 61


def _corruptions():
    """(name, damaged batch) pairs: the records of a valid batch broken in each way."""
    good = _batch([(b"alpha", b"one", 1), (b"beta", b"two", 2)])
    first = _records_start()
    out = []
    # a record length varint that never ends (continuation bits to the batch's end)
    d = bytearray(good)
    d[first:] = b"\xff" * (len(d) - first)
    out.append(("endless varint", d))
    # a record length past the batch
    d = bytearray(good)
    d[first] = 0x7E  # zigzag 63
    out.append(("length overruns", d))
    # a zero record length
    d = bytearray(good)
    d[first] = 0
    out.append(("zero length", d))
    # a key length past its record (record: len, attrs, ts delta, offset delta, key length)
    d = bytearray(good)
    d[first + 4] = 0x7E
    out.append(("key overruns its record", d))
    # a key length of -2
    d = bytearray(good)
    d[first + 4] = 3
    out.append(("negative key length", d))
    # more records announced than there are
    d = bytearray(good)
    d[57:61] = struct.pack(">i", 3)
    out.append(("count too large", d))
    # fewer: bytes left over
    d = bytearray(good)
    d[57:61] = struct.pack(">i", 1)
    out.append(("bytes left", d))
    # the batch cut short (size field and all)
    d = bytearray(good[:-3])
    d[8:12] = struct.pack(">i", len(d) - 12)
    out.append(("truncated", d))
    # a varint cut by the record's end (one-byte record holding only attributes)
    d = bytearray(good)
    d[first] = 2  # zigzag 1: the record is its attributes byte only
    out.append(("fields overrun", d))
    return out


@needs_c
@pytest.mark.parametrize("name,damaged", _corruptions(), ids=[n for n, _ in _corruptions()])
def test_damaged_records_raise_corrupt_record_error_in_pass_1(name, damaged):
    m = _ccleaner.KeyMap(1 << 20, 128)
    m.begin(0)
    data = bytes(damaged)
    with pytest.raises(CorruptRecordError):
        m.map_entries(data, 0, len(data), 0, 0)
    assert m.entries == 0  # nothing of a damaged batch was put


@pytest.mark.parametrize("name,damaged", _corruptions(), ids=[n for n, _ in _corruptions()])
def test_the_python_pass_1_refuses_the_same_damage(name, damaged):
    """The fallback is as strict: a key length below -1 or past its record is refused
    too, not read as a keyless record or a short key."""
    from storage.cleaner_records import entry_keys

    data = bytes(damaged)
    with pytest.raises(CorruptRecordError):
        entry_keys(data, 0, len(data), 0)


@needs_c
@pytest.mark.parametrize("name,damaged", _corruptions(), ids=[n for n, _ in _corruptions()])
def test_damaged_records_raise_corrupt_record_error_in_pass_2(name, damaged):
    """Pass 1 saw the good batch (and a later one superseding a key); pass 2 reads a
    damaged one in its place."""
    good = bytes(_batch([(b"alpha", b"one", 1), (b"beta", b"two", 2)]))
    later = bytes(_batch([(b"alpha", b"three", 3)], base_offset=2))
    m = _ccleaner.KeyMap(1 << 20, 128)
    m.begin(0)
    m.map_entries(good + later, 0, len(good) + len(later), 0, 0)
    assert m.dead_mask(0, 1) == b"\x01"
    data = bytes(damaged)
    if len(data) != len(good):  # a different size: pass 2 sees a different batch at offset 0
        data = data + later
    with pytest.raises(CorruptRecordError):
        m.filter_entries(data, 0, len(data), 2, -1, 0, 0, DAY)


@needs_c
def test_a_damaged_crc_is_never_laundered_into_a_rebuilt_batch():
    good = bytearray(_batch([(b"alpha", b"one", 1), (b"beta", b"two", 2)]))
    later = bytes(_batch([(b"alpha", b"three", 3)], base_offset=2))
    m = _ccleaner.KeyMap(1 << 20, 128)
    m.begin(0)
    m.map_entries(bytes(good) + later, 0, len(good) + len(later), 0, 0)
    good[-1] ^= 0x01  # a value byte: the structure holds, the CRC fails
    with pytest.raises(CorruptRecordError, match="CRC"):
        m.filter_entries(bytes(good), 0, len(good), 2, -1, 0, 0, DAY)
    pos, status, data, infos, max_ts, counts = m.filter_entries(later, 0, len(later), 2, -1, 100, 0, DAY)
    assert (pos, status, data, counts[2]) == (len(later), 0, later, 1)  # untouched: copied
    assert infos == [EntryInfo(100, len(later), 2, 2, 3, 0)] and type(infos[0]) is EntryInfo
    assert max_ts == 3
    # the entry ending at keep_end is left to Python
    assert m.filter_entries(later, 0, len(later), 2, len(later), 0, 0, DAY)[:3] == (0, _ccleaner.NEED_PYTHON, b"")


@needs_c
def test_random_damage_raises_corrupt_record_error_or_nothing_never_crashes():
    rng = random.Random(11)
    base = [bytes(_batch([(b"k%d" % rng.randrange(5), b"v" * rng.randrange(40), i) for i in range(6)],
                         base_offset=6 * j)) for j in range(4)]
    clean = b"".join(base)
    for _ in range(3000):
        data = bytearray(clean)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(61, len(data))  # damage past the first header
            data[i] = rng.randrange(256)
        data = bytes(data)
        m = _ccleaner.KeyMap(1 << 20, 128)
        m.begin(0)
        with contextlib.suppress(CorruptRecordError):
            m.map_entries(data, 0, len(data), 0, 0)
        m2 = _ccleaner.KeyMap(1 << 20, 128)
        m2.begin(0)
        m2.map_entries(clean, 0, len(clean), 0, 0)
        with contextlib.suppress(CorruptRecordError):
            m2.filter_entries(data, 0, len(data), 23, -1, 0, 0, DAY)


@needs_c
def test_entries_left_to_python_stop_the_native_walk():
    classic = build_classic([(b"a", b"1", 1)], magic=1)
    compressed = build_batch([(b"a", b"1", 1)], codec=Codec.GZIP)
    long_key = build_batch([(b"x" * 200, b"1", 1)])
    plain = bytes(_batch([(b"a", b"1", 1)]))
    for other in (classic, compressed, long_key):
        m = _ccleaner.KeyMap(1 << 20, 128)
        m.begin(0)
        data = plain + bytes(other)
        pos, status, latest, first_put, records, nbytes = m.map_entries(data, 0, len(data), 0, 0)
        assert (pos, status, records, nbytes) == (len(plain), _ccleaner.NEED_PYTHON, 1, len(plain))


@needs_c
@pytest.mark.parametrize("seed", range(3))
def test_batches_of_many_records_match_python(tmp_path, clock, seed):
    """Batches around and past the C code's one-parse limit (512 records): the same
    bytes as Python, whether a batch is kept, rebuilt (timestamps as they are or
    rewritten: LogAppendTime, a delete horizon) or dropped."""
    rng = random.Random(seed)
    logs = [_open(tmp_path / name / "t-0", clock, 1 << 20, rng.choice([0, DAY]))
            for name in ("python", "native")]
    for _ in range(14):
        count = rng.choice([1, 2, 511, 512, 513, 1500])
        tombstones = 0.01 if rng.random() < 0.3 else 0  # (a batch with one is Python's)
        recs = [(b"key-%d" % rng.randrange(60), None if rng.random() < tombstones else b"v%d" % j,
                 clock.time_ms() + rng.randrange(100)) for j in range(count)]
        data = build_batch(recs, timestamp_type=1 if rng.random() < 0.3 else 0)
        for log in logs:
            log.append(data)
        clock.advance(10)
    for round_ in range(2):
        for log, key_map in zip(logs, (_pycleaner.KeyMap, _ccleaner.KeyMap), strict=True):
            log.roll()
            offset_map = OffsetMap(1 << 22, key_map=key_map)
            Cleaner(offset_map, clock=clock).clean(log, 0, log.active_segment.base_offset)
        assert _files(logs[0]) == _files(logs[1])
        if round_ == 0:
            assert offset_map.key_map.native_entries[1] > 0
        clock.advance(DAY + 1)  # the second round drops the tombstones
    for log in logs:
        log.close()


@needs_c
def test_batches_decided_by_key_take_the_native_path_too(tmp_path, clock):
    """Tombstones (stamped with a horizon, then dropped past it), keyless records, the
    clean part of the log (before the first dirty offset) and batches past the map's
    end: plain batches are filtered in C by looking their keys up, as Python does."""
    logs = [_open(tmp_path / name / "t-0", clock, 3000, 100) for name in ("python", "native")]
    rng = random.Random(4)

    def append(n):
        for i in range(n):
            recs = [(None if rng.random() < 0.05 else b"key-%d" % rng.randrange(40),
                     None if rng.random() < 0.1 else b"v%d" % i, clock.time_ms()) for _ in range(6)]
            data = build_batch(recs, timestamp_type=1 if i % 7 == 0 else 0)
            for log in logs:
                log.append(data)
            clock.advance(3)

    append(150)
    first_dirty = 0
    for round_ in range(4):
        results = []
        for log, key_map in zip(logs, (_pycleaner.KeyMap, _ccleaner.KeyMap), strict=True):
            log.roll()
            # a small map: the round ends before the log does (batches past its end)
            offset_map = OffsetMap(1 << 14 if round_ == 1 else 1 << 20, key_map=key_map)
            end, stats = Cleaner(offset_map, clock=clock).clean(log, first_dirty, log.active_segment.base_offset)
            results.append((end, stats.records))
            if key_map is _ccleaner.KeyMap:
                assert offset_map.key_map.native_entries[1] >= stats.records.entries_copied  # most in C
        assert results[0] == results[1]
        assert _files(logs[0]) == _files(logs[1])
        first_dirty = results[0][0]
        append(40)
        clock.advance(60)  # some horizons pass
    assert results[1][1].tombstones_dropped + results[1][1].keyless_dropped > 0
    for log in logs:
        log.close()
