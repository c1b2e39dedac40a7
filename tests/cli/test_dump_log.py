"""`strata dump-log` on segments written by storage.log.Log, healthy and damaged."""

import os
import re
import struct
import subprocess
import sys
import time

import pytest

from broker.cli import main
from kafka_format import build_batch, build_classic
from kafka_format.codecs import Codec
from storage.config import LogConfig
from storage.log import Log

BASE = "00000000000000000000"
T0 = 1_700_000_000_000


@pytest.fixture
def segment_dir(tmp_path):
    """A closed log: 10 batches (some gzip) with keys and headers, then classic messages."""
    config = LogConfig.from_props({"index.interval.bytes": "100"})
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config)
    for i in range(10):
        log.append(build_batch([(b"key-%d" % i, b"value-%d" % i, T0 + i, [("h1", b"x"), ("h2", None)]),
                                (None, b"second-%d" % i, T0 + i)],
                               codec=Codec.GZIP if i % 3 == 0 else Codec.NONE))
    log.append(build_classic([(b"ck", b"cv", T0 + 20), (None, b"cv2", T0 + 21)], magic=1,
                             codec=Codec.SNAPPY))
    log.append(build_classic([(b"old", b"v0")], magic=0))
    log.close()
    return tmp_path / "t-0"


def dump(capsys, *args):
    code = main(["dump-log", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


ENTRY_LINE = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) position: (\d+) size: (\d+) "
    r"magic: (\d) compresscodec: (\w+) crc: (\d+) isValid: (true|false) "
    r"(CreateTime|LogAppendTime|NoTimestampType): (-?\d+)")


def test_log_lists_every_entry(segment_dir, capsys):
    path = segment_dir / f"{BASE}.log"
    code, out, err = dump(capsys, path)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"Dumping {path}"
    entries = [ENTRY_LINE.match(line) for line in lines[1:]]
    assert all(entries), lines
    fields = [m.groups() for m in entries]
    assert [(int(f[0]), int(f[1]), int(f[2])) for f in fields] == \
        [(2 * i, 2 * i + 1, 2) for i in range(10)] + [(20, 21, 2), (22, 22, 1)]
    assert [f[6] for f in fields][:4] == ["GZIP", "NONE", "NONE", "GZIP"]
    assert fields[10][6] == "SNAPPY" and fields[10][5] == "1"
    assert fields[11][9] == "NoTimestampType" and fields[11][10] == "-1"
    assert fields[0][9:] == ("CreateTime", str(T0))
    # Positions and sizes tile the file exactly.
    positions = [int(f[3]) for f in fields]
    sizes = [int(f[4]) for f in fields]
    assert positions == [sum(sizes[:i]) for i in range(len(sizes))]
    assert sum(sizes) == os.path.getsize(path)
    assert "baseSequence: -1 lastSequence: -1 producerId: -1" in lines[1]
    assert "isTransactional: false isControl: false" in lines[1]


def test_print_data_log_shows_each_record(segment_dir, capsys):
    code, out, _ = dump(capsys, segment_dir / f"{BASE}.log", "--print-data-log")
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(records) == 23
    assert records[0] == (f"| offset: 0 CreateTime: {T0} keySize: 5 valueSize: 7 sequence: -1 "
                          f"headerKeys: [h1,h2] key: key-0 payload: value-0")
    # A null key is left out, as Kafka does.
    assert records[1] == (f"| offset: 1 CreateTime: {T0} keySize: -1 valueSize: 8 sequence: -1 "
                          f"headerKeys: [] payload: second-0")
    assert re.fullmatch(r"\| offset: 22 NoTimestampType: -1 keySize: 3 valueSize: 2 "
                        r"key: old payload: v0", records[-1])


def test_offset_and_time_indexes(segment_dir, capsys):
    code, out, err = dump(capsys, segment_dir / f"{BASE}.index", segment_dir / f"{BASE}.timeindex")
    assert code == 0 and err == ""
    sections = out.split("Dumping ")[1:]
    index_lines = sections[0].splitlines()[1:]
    time_lines = sections[1].splitlines()[1:]
    assert index_lines and all(re.fullmatch(r"offset: \d+ position: \d+", line) for line in index_lines)
    assert time_lines and all(re.fullmatch(r"timestamp: \d+ offset: \d+", line) for line in time_lines)
    offsets = [int(line.split()[1]) for line in index_lines]
    assert offsets == sorted(set(offsets))


def test_bad_crc_is_reported_and_the_walk_goes_on(segment_dir, capsys):
    path = segment_dir / f"{BASE}.log"
    data = bytearray(path.read_bytes())
    data[100] ^= 0x55  # inside the first batch's records
    path.write_bytes(bytes(data))
    code, out, err = dump(capsys, path)
    assert code == 1
    entry_lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert len(entry_lines) == 12  # still every entry
    assert "isValid: false" in entry_lines[0] and "isValid: true" in entry_lines[1]
    assert err.count("\n") == 1 and "CRC" in err and str(path) in err
    assert "Traceback" not in err


def test_torn_tail_is_reported(segment_dir, capsys):
    path = segment_dir / f"{BASE}.log"
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 7)
    code, out, err = dump(capsys, path)
    assert code == 1
    assert len([line for line in out.splitlines() if line.startswith("baseOffset")]) == 11
    assert re.search(rf"Found \d+ invalid bytes at the end of {BASE}.log", out)
    assert "torn tail" in err


def test_garbage_size_stops_the_walk(segment_dir, capsys):
    path = segment_dir / f"{BASE}.log"
    with open(path, "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x00\x02" + b"\x00" * 20)  # a size of 2 cannot be
    code, out, err = dump(capsys, path)
    assert code == 1 and "size 2 is too small" in err
    assert "Found 32 invalid bytes" in out


def test_index_problems_out_of_order_and_past_the_log(segment_dir, capsys):
    index = segment_dir / f"{BASE}.index"
    entries = index.read_bytes()
    assert len(entries) >= 16
    # Swap the first two entries (out of order) and add one pointing far past the log.
    bad = entries[8:16] + entries[0:8] + entries[16:] + (30).to_bytes(4, "big") + (10**6).to_bytes(4, "big")
    index.write_bytes(bad)
    code, out, err = dump(capsys, index)
    assert code == 1
    assert "is not above the previous entry's offset" in err
    assert "past the end of the log" in err


def test_index_entry_that_misses_an_entry_boundary(segment_dir, capsys):
    index = segment_dir / f"{BASE}.index"
    data = bytearray(index.read_bytes())
    data[4:8] = (int.from_bytes(data[4:8], "big") + 3).to_bytes(4, "big")
    index.write_bytes(bytes(data))
    code, _, err = dump(capsys, index)
    assert code == 1 and "where no entry of the log starts" in err


def test_time_index_out_of_order(segment_dir, capsys):
    index = segment_dir / f"{BASE}.timeindex"
    data = index.read_bytes()
    assert len(data) >= 24
    index.write_bytes(data[12:24] + data[0:12] + data[24:])
    code, _, err = dump(capsys, index)
    assert code == 1 and "is not above the previous entry's timestamp" in err


def test_index_with_a_partial_entry(segment_dir, capsys):
    index = segment_dir / f"{BASE}.index"
    index.write_bytes(index.read_bytes() + b"\x01\x02\x03")
    code, _, err = dump(capsys, index)
    assert code == 1 and "not a whole number of 8-byte entries" in err


@pytest.mark.parametrize("name, message", [
    ("missing.log", "no such file"),
    ("notes.txt", "unknown file type"),
    ("abc.index", "must be the segment's base offset"),
])
def test_bad_file_arguments_are_one_line(tmp_path, capsys, name, message):
    path = tmp_path / name
    if name != "missing.log":
        path.write_bytes(b"x")
    code, out, err = dump(capsys, path)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("strata: ") and message in err


def test_empty_segment_is_fine(tmp_path, capsys):
    path = tmp_path / f"{BASE}.log"
    path.write_bytes(b"")
    assert dump(capsys, path) == (0, f"Dumping {path}\n", "")


def test_through_the_command_line(segment_dir):
    result = subprocess.run([sys.executable, "-m", "broker", "dump-log",
                             str(segment_dir / f"{BASE}.log"), "--print-data-log"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "payload: value-9" in result.stdout
    result = subprocess.run([sys.executable, "-m", "broker", "dump-log", str(segment_dir / "nope.log")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_live_preallocated_indexes_of_a_young_segment_dump_as_empty(tmp_path, capsys):
    """An open segment's indexes are preallocated zeros: no entries, no problems."""
    log = Log.open(str(tmp_path / "t-0"), "t", 0, LogConfig.from_props({}))
    try:
        log.append(build_batch([(b"k", b"v", T0), (b"k", b"w", T0)]))
        index, time_index = (tmp_path / "t-0" / f"{BASE}{s}" for s in (".index", ".timeindex"))
        assert index.stat().st_size > 1000  # still preallocated
        capsys.readouterr()  # what opening the log itself logged is not the command's output
        code, out, err = dump(capsys, index, time_index)
        assert (code, err) == (0, "")
        assert out == f"Dumping {index}\nDumping {time_index}\n"
    finally:
        log.close()


def test_markers_and_txnindex_print_as_kafka_dump_log(tmp_path, capsys):
    log = Log.open(str(tmp_path / "x-0"), "x", 0, LogConfig.from_props({}))
    for pid in (7, 8):
        log.append(build_batch([(b"k", b"v")], producer_id=pid, producer_epoch=0, base_sequence=0,
                               is_transactional=True))
    log.append_txn_marker(7, 0, 3, commit=True)  # 2
    log.append_txn_marker(8, 0, 4, commit=False)  # 3
    log.close()
    code, out, err = dump(capsys, "--deep-iteration", tmp_path / "x-0" / f"{BASE}.log")
    assert code == 0 and err == ""
    lines = out.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("Dumping")):]  # after any log line
    assert "isTransactional: true isControl: true" in lines[5]
    assert lines[6].startswith("| offset: 2 ") and lines[6].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 3")
    assert lines[8].endswith(" endTxnMarker: ABORT coordinatorEpoch: 4")
    code, out, err = dump(capsys, tmp_path / "x-0" / f"{BASE}.txnindex")
    assert code == 0 and err == ""
    assert out.splitlines()[1:] == ["version: 0 producerId: 8 firstOffset: 1 lastOffset: 3 lastStableOffset: 4"]


def test_control_records_under_print_data_log_are_kafkas_lines(tmp_path, capsys):
    """kafka-dump-log --print-data-log: a control record gets its metadata and the
    marker, never `key:` or `payload:`; other control types by Kafka's names."""
    now = int(time.time() * 1000)  # (an old timestamp would roll the segment for the marker: segment.ms)
    log = Log.open(str(tmp_path / "x-0"), "x", 0, LogConfig.from_props({}))
    log.append(build_batch([(b"k", b"v", now)], producer_id=7, producer_epoch=0, base_sequence=0,
                           is_transactional=True))
    log.append_txn_marker(7, 0, 3, commit=True)  # 1
    log.close()
    leader_change = build_batch([(struct.pack(">hh", 0, 2), b"\0\0", now)], base_offset=2, is_control=True)
    with open(tmp_path / "x-0" / f"{BASE}.log", "ab") as f:
        f.write(leader_change)
    code, out, err = dump(capsys, "--print-data-log", tmp_path / "x-0" / f"{BASE}.log")
    assert code == 0 and err == ""
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert records[0] == (f"| offset: 0 CreateTime: {now} keySize: 1 valueSize: 1 sequence: 0 headerKeys: [] "
                          f"key: k payload: v")
    assert records[1].startswith("| offset: 1 CreateTime: ")
    assert records[1].split(" keySize:")[1] == (" 4 valueSize: 6 sequence: -1 headerKeys: [] "
                                                "endTxnMarker: COMMIT coordinatorEpoch: 3")
    assert records[2] == (f"| offset: 2 CreateTime: {now} keySize: 4 valueSize: 2 sequence: -1 headerKeys: [] "
                          f"controlType: LEADER_CHANGE(2)")
