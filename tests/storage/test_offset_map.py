"""The cleaner's offset map: latest offset per key, exact under hash collisions
(an injected digest makes every long key collide), and its long keys' memory
bound. The behaviour tests run on both twins of the key map (storage/_ccleaner.c
when built, storage/_pycleaner.py); tests/storage/test_ccleaner.py has the key
map's own collision and memory tests."""

import os
import tracemalloc

import pytest

from storage import _pycleaner, accel
from storage.offset_map import DIGEST_SIZE, ENTRY_OVERHEAD, LONG_KEY_ENTRY, OffsetMap, stored_size


@pytest.fixture(params=["c", "python"])
def key_map(request):
    """The key map class of each twin (C skipped when not built)."""
    if request.param == "python":
        return _pycleaner.KeyMap
    if not accel.NATIVE:
        pytest.skip("storage._ccleaner is not built (or STRATA_PURE_PYTHON is set)")
    return accel.KeyMap


def test_put_and_get_keep_the_latest_offset_per_key(key_map):
    m = OffsetMap(1 << 20, key_map=key_map)
    assert m.put(b"a", 0) is None
    assert m.put(b"b", 1) is None
    assert m.put(b"a", 2) == 0  # the superseded offset comes back
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c")) == (2, 1, -1)
    assert m.entries == 2
    m.clear()
    assert (m.get(b"a"), m.entries, m.used_bytes, m.latest_offset) == (-1, 0, 0, -1)


def test_put_all_returns_superseded_offsets_in_order(key_map):
    m = OffsetMap(1 << 20, key_map=key_map)
    assert m.put_all([b"x", b"y", b"x", b"x"], [5, 6, 7, 8]) == [5, 7]
    assert m.start_offset == 5 and m.get(b"x") == 8


def test_the_key_map_accel_binds_is_the_default():
    assert type(OffsetMap(1 << 20).key_map) is accel.KeyMap
    assert type(OffsetMap(1 << 20, key_map=_pycleaner.KeyMap).key_map) is _pycleaner.KeyMap


def test_empty_key_and_long_keys_are_keys_like_any_other(key_map):
    log = {}
    m = OffsetMap(1 << 20, inline_key_limit=8, key_map=key_map)
    m.clear(log.get)
    for offset, key in enumerate([b"", b"short", b"L" * 100, b"M" * 100, b"L" * 100]):
        log[offset] = key
        m.put(key, offset)
    assert (m.get(b""), m.get(b"short"), m.get(b"L" * 100), m.get(b"M" * 100)) == (0, 1, 4, 3)
    assert m.get(b"N" * 100) == -1


class CollidingLog:
    """Keys by offset, as the log would give them back; counts the reads."""

    def __init__(self):
        self.keys = {}
        self.reads = 0

    def __call__(self, offset):
        self.reads += 1
        return self.keys.get(offset)


def every_key_collides(key: bytes) -> bytes:
    return b"\x00" * DIGEST_SIZE


@pytest.mark.parametrize("cache", [True, False], ids=["cached-keys", "keys-read-from-the-log"])
def test_colliding_digests_never_merge_two_keys(cache, monkeypatch, key_map):
    """Kafka's SkimpyOffsetMap would answer the last colliding key's offset for
    every key: here each key keeps its own latest offset."""
    if not cache:
        monkeypatch.setattr("storage.offset_map.RECENT_LONG_KEYS_BYTES", 0)
    log = CollidingLog()
    m = OffsetMap(1 << 20, inline_key_limit=0, digest=every_key_collides, key_map=key_map)
    m.clear(log)
    latest = {}
    keys = [b"alpha", b"beta", b"gamma", b"beta", b"alpha", b"delta", b"beta"]
    for offset, key in enumerate(keys):
        log.keys[offset] = key
        m.put(key, offset)
        latest[key] = offset
    m.update_latest_offset(len(keys) - 1)
    for key, offset in latest.items():
        assert m.get(key, offset) == offset
        assert m.get(key, -1) == offset  # asked from outside the mapped range: compared too
    assert m.get(b"epsilon") == -1
    assert m.entries == 4 and m.collisions == 3
    assert (log.reads > 0) == (not cache)  # without the cache, comparisons read the log


def test_a_key_outside_the_mapped_range_is_compared_before_it_counts_as_superseded(key_map):
    """A clean-section record whose long key shares a one-key slot's digest must not
    be taken for that key."""
    log = CollidingLog()
    m = OffsetMap(1 << 20, inline_key_limit=0, digest=every_key_collides, key_map=key_map)
    m.clear(log)
    log.keys[10] = b"dirty-key"
    m.put(b"dirty-key", 10)
    m.update_latest_offset(10)
    assert m.get(b"clean-key", 3) == -1  # record at offset 3: not mapped, compared, different
    assert m.get(b"dirty-key", 3) == 10


def test_the_recent_key_cache_spares_log_reads_for_hot_long_keys(key_map):
    log = CollidingLog()
    m = OffsetMap(1 << 20, inline_key_limit=4, key_map=key_map)
    m.clear(log)
    key = b"a-long-key-" * 3
    for offset in range(100):
        log.keys[offset] = key
        m.put(key, offset)
    assert m.get(key, 99) == 99 and log.reads == 0


def test_a_long_key_is_charged_its_stated_cost(key_map):
    m = OffsetMap(1 << 20, inline_key_limit=4, key_map=key_map)
    m.clear(lambda offset: b"k" * 10)
    m.put(b"k" * 10, 0)
    assert m.used_bytes - m.key_map.used_bytes == LONG_KEY_ENTRY == ENTRY_OVERHEAD + stored_size(DIGEST_SIZE) == 200
    m.put(b"k" * 10, 1)
    assert m.used_bytes - m.key_map.used_bytes == 200  # an update costs nothing


def test_fits_says_when_a_batch_of_keys_might_not_fit(key_map):
    m = OffsetMap(100_000, load_factor=1.0, key_map=key_map)
    assert m.fits(10 * 10, 10)
    while m.fits(10, 1):
        m.put(os.urandom(10), m.entries)
    assert m.used_bytes <= m.capacity_bytes
    assert not m.fits(10, 1)


def test_real_memory_of_long_keys_stays_under_what_the_map_charges():
    """The long keys' bound in the module doc, measured: Python's allocations for 60K
    entries (keys cut from a buffer, as the cleaner does) never pass the charged
    bytes. (The C key map's bound: test_ccleaner.py.)"""
    count, key_length = 60_000, 200
    buf = os.urandom(count * key_length)
    m = OffsetMap(1 << 30, key_map=_pycleaner.KeyMap)
    m.clear(lambda offset: None)
    tracemalloc.start()
    try:
        for i in range(0, count, 100):
            keys = [buf[j * key_length:(j + 1) * key_length] for j in range(i, i + 100)]
            m.put_all(keys, list(range(10**12 + i, 10**12 + i + 100)))
            del keys
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert m.entries == count
    assert peak <= m.used_bytes + (2 << 20), (peak, m.used_bytes)  # + the long-key cache (1 MiB)
