"""Property tests: random mixes of magics and codecs, validated one set after another."""

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_format import build_batch, build_classic, iter_entries, iter_records, scan_entries
from kafka_format.codecs import Codec
from kafka_format.errors import StrataError
from storage.config import LogConfig
from storage.validator import validate_and_assign

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000_000

small_bytes = st.binary(max_size=40)
timestamps = st.integers(min_value=0, max_value=2**41)
header = st.tuples(st.text(max_size=5), st.none() | small_bytes)


@st.composite
def entries(draw, keyed: bool):
    """(magic, codec, builder, [(key, value, timestamp, headers)])"""
    magic = draw(st.sampled_from([0, 1, 2]))
    codecs = list(Codec) if magic == 2 else [c for c in Codec if c is not Codec.ZSTD]
    codec = draw(st.sampled_from(codecs))
    key = small_bytes if keyed else st.none() | small_bytes
    headers = st.lists(header, max_size=2) if magic == 2 else st.just([])
    rows = draw(st.lists(st.tuples(key, st.none() | small_bytes, timestamps, headers),
                         min_size=1, max_size=5))
    builder = draw(st.sampled_from(["strata", "kafka-python"]))
    return magic, codec, builder, rows


def build(magic, codec, builder, rows) -> bytes:
    if builder == "kafka-python":
        from kafka.record.memory_records import MemoryRecordsBuilder
        out = MemoryRecordsBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
        for key, value, ts, headers in rows:
            out.append(timestamp=ts, key=key, value=value, headers=headers)
        out.close()
        return bytes(out.buffer())
    if magic == 2:
        return build_batch(rows, codec=codec, base_offset=12345)
    return build_classic([r[:3] for r in rows], magic=magic, codec=codec, base_offset=777)


@st.composite
def scenarios(draw):
    log_append = draw(st.booleans())
    compact = draw(st.booleans())
    config = LogConfig(message_timestamp_type="LogAppendTime" if log_append else "CreateTime",
                       cleanup_policy=("compact",) if compact else ("delete",))
    sets = draw(st.lists(st.lists(entries(keyed=compact), min_size=1, max_size=3),
                         min_size=1, max_size=4))
    return config, sets, draw(st.integers(min_value=0, max_value=2**40))


@SETTINGS
@given(scenarios())
def test_sets_validated_in_a_row_read_back_with_contiguous_offsets(kafka_codec, scenario):
    config, sets, start = scenario
    log = bytearray()
    next_offset = start
    expected = []
    for entry_specs in sets:
        data = b"".join(build(*spec) for spec in entry_specs)
        result = validate_and_assign(data, next_offset=next_offset, now_ms=NOW, config=config)
        assert result.first_offset == next_offset
        assert result.record_count == sum(len(spec[3]) for spec in entry_specs)
        assert result.last_offset == next_offset + result.record_count - 1
        assert result.log_append_time == (NOW if config.log_append_time else -1)
        assert result.entries == scan_entries(result.buffer, min_offset=next_offset).entries
        log += result.buffer
        next_offset = result.last_offset + 1
        for magic, _, _, rows in entry_specs:
            for key, value, ts, headers in rows:
                expected.append((magic, key, value, ts, tuple(headers)))

    scan = scan_entries(log, min_offset=start)
    assert (scan.problem, scan.stop) == (None, len(log))
    records = list(iter_records(log))
    assert [r.offset for r in records] == list(range(start, next_offset))
    for record, (magic, key, value, ts, headers) in zip(records, expected, strict=True):
        assert (record.key, record.value, record.headers) == (key, value, headers)
        if magic == 0:
            assert record.timestamp == -1
        elif config.log_append_time:
            assert (record.timestamp, record.timestamp_type) == (NOW, 1)
        else:
            assert (record.timestamp, record.timestamp_type) == (ts, 0)
    for entry in iter_entries(log):
        entry.ensure_valid()
    assert [e.last_offset for e in scan.entries][-1] == next_offset - 1


@SETTINGS
@given(st.binary(max_size=300), st.integers(min_value=-1, max_value=5))
def test_arbitrary_bytes_never_crash_the_scanner_or_validator(data, min_offset):
    result = scan_entries(data, min_offset=min_offset)
    assert 0 <= result.stop <= len(data)
    assert (result.problem is None) == (result.stop == len(data))
    pos = 0
    for entry in result.entries:
        assert entry.position == pos
        pos += entry.size
    assert pos == result.stop
    with contextlib.suppress(StrataError):
        validate_and_assign(data, next_offset=0, now_ms=NOW, config=LogConfig())
    try:
        for entry in iter_entries(data):
            entry.is_valid()
    except StrataError:
        pass


@SETTINGS
@given(st.lists(entries(keyed=False), min_size=1, max_size=3), st.data())
def test_a_flipped_byte_is_refused_or_harmless(kafka_codec, specs, data):
    original = b"".join(build(*spec) for spec in specs)
    index = data.draw(st.integers(min_value=0, max_value=len(original) - 1))
    flipped = bytearray(original)
    flipped[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    try:
        result = validate_and_assign(flipped, next_offset=0, now_ms=NOW, config=LogConfig())
    except StrataError:
        return
    # Accepted: the byte was outside every CRC (an offset or leader epoch field).
    assert scan_entries(result.buffer).problem is None
    reference = validate_and_assign(original, next_offset=0, now_ms=NOW, config=LogConfig())
    assert list(iter_records(result.buffer)) == list(iter_records(reference.buffer))
