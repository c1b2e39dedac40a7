import os

import pytest

from kafka_format.errors import KafkaStorageError
from storage.checkpoint import OffsetCheckpointFile


@pytest.fixture
def checkpoint(tmp_path):
    return OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")


def test_round_trip(checkpoint):
    offsets = {("orders", 0): 1234, ("orders", 1): 0, ("a.b_c-d", 17): 2**63 - 1}
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets


def test_file_format_is_kafkas(checkpoint):
    checkpoint.write({("topic-b", 1): 99, ("topic-a", 10): 7, ("topic-a", 2): 5})
    with open(checkpoint.path, "rb") as f:
        assert f.read() == b"0\n3\ntopic-a 2 5\ntopic-a 10 7\ntopic-b 1 99\n"


def test_empty_map(checkpoint):
    checkpoint.write({})
    with open(checkpoint.path, "rb") as f:
        assert f.read() == b"0\n0\n"
    assert checkpoint.read() == {}


def test_absent_file_reads_empty(checkpoint):
    assert checkpoint.read() == {}


def test_zero_byte_file_reads_empty(checkpoint):
    # Kafka creates its checkpoint files empty before the first write.
    open(checkpoint.path, "wb").close()
    assert checkpoint.read() == {}


def test_rewrite_replaces_everything(checkpoint):
    checkpoint.write({("t", 0): 1, ("t", 1): 2})
    checkpoint.write({("u", 0): 3})
    assert checkpoint.read() == {("u", 0): 3}


def test_reads_files_kafka_may_write(checkpoint):
    # Runs of whitespace separate fields; CRLF line ends are read like BufferedReader does.
    with open(checkpoint.path, "wb") as f:
        f.write(b"0\r\n2\r\nt  0\t5\r\nt 1 6 \r\n")
    assert checkpoint.read() == {("t", 0): 5, ("t", 1): 6}


def test_leftover_tmp_is_ignored_and_overwritten(checkpoint):
    checkpoint.write({("t", 0): 1})
    tmp = checkpoint.path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"0\n1\nt 0 999999\npartial garbage from a crash")
    assert checkpoint.read() == {("t", 0): 1}
    checkpoint.write({("t", 0): 2})
    assert checkpoint.read() == {("t", 0): 2}
    assert not os.path.exists(tmp)


def test_write_leaves_no_tmp(tmp_path, checkpoint):
    checkpoint.write({("t", 0): 1})
    assert os.listdir(tmp_path) == ["recovery-point-offset-checkpoint"]


def test_failed_write_keeps_the_old_checkpoint(tmp_path, checkpoint):
    checkpoint.write({("t", 0): 1})
    os.mkdir(checkpoint.path + ".tmp")  # in the way of the temporary file
    with pytest.raises(OSError):
        checkpoint.write({("t", 0): 2})
    assert checkpoint.read() == {("t", 0): 1}


def test_unwritable_topic_names_are_refused(checkpoint):
    with pytest.raises(ValueError):
        checkpoint.write({("has space", 0): 1})
    with pytest.raises(ValueError):
        checkpoint.write({("", 0): 1})
    assert not os.path.exists(checkpoint.path)


@pytest.mark.parametrize("content, line_in_message", [
    (b"1\n0\n", "line 1"),  # unknown version
    (b"x\n0\n", "line 1"),
    (b" 0\n0\n", "line 1"),
    (b"+0\n0\n", "line 1"),
    (b"\n", "line 1"),
    (b"0\n", "line 1"),  # count line missing
    (b"0\n", "count"),
    (b"0\nthree\n", "line 2"),
    (b"0\n-1\n", "line 2"),
    (b"0\n1_0\n", "line 2"),
    (b"0\n2\nt 0 5\n", "declares 2"),  # fewer entries than declared
    (b"0\n0\nt 0 5\n", "declares 0"),  # more entries than declared
    (b"0\n1\nt 0\n", "line 3"),  # too few fields
    (b"0\n1\nt 0 5 9\n", "line 3"),  # too many fields
    (b"0\n1\n t 0 5\n", "line 3"),  # leading whitespace (Kafka's split gives an empty field)
    (b"0\n1\nt zero 5\n", "line 3"),
    (b"0\n1\nt 0 five\n", "line 3"),
    (b"0\n1\nt 0 5.0\n", "line 3"),
    (b"0\n1\nt 2147483648 5\n", "line 3"),  # partition past int32
    (b"0\n1\nt 0 9223372036854775808\n", "line 3"),  # offset past int64
    (b"0\n2\nt 0 5\n\n", "line 4"),  # blank line
    (b"0\n2\nt 0 5\nt 0 6\n", "line 4"),  # the same partition twice
    (b"0\n1\n\xff 0 5\n", "UTF-8"),
])
def test_malformed_files_raise_with_path_and_line(checkpoint, content, line_in_message):
    with open(checkpoint.path, "wb") as f:
        f.write(content)
    with pytest.raises(KafkaStorageError) as raised:
        checkpoint.read()
    message = str(raised.value)
    assert checkpoint.path in message
    assert line_in_message in message
