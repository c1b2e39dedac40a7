"""kafka_format/format.h, the layouts the C accelerators share, agrees with the
Python constants of framing.py, classic.py and batch.py: every #define in the
header is named below and has the Python value."""

import re
from pathlib import Path

import kafka_format
from kafka_format import batch, classic, framing

HEADER = Path(kafka_format.__file__).with_name("format.h")

PYTHON_VALUES = {
    "LOG_OVERHEAD": framing.LOG_OVERHEAD,
    "SIZE_OFFSET": framing.SIZE_OFFSET,
    "MAGIC_OFFSET": framing.MAGIC_OFFSET,
    "MIN_ENTRY_SIZE_FIELD": framing.MIN_ENTRY_SIZE_FIELD,
    "MAGIC_V0": framing.MAGIC_V0,
    "MAGIC_V1": framing.MAGIC_V1,
    "MAGIC_V2": framing.MAGIC_V2,
    "NO_TIMESTAMP": framing.NO_TIMESTAMP,
    "CODEC_MASK": framing.CODEC_MASK,
    "TIMESTAMP_TYPE_BIT": framing.TIMESTAMP_TYPE_BIT,
    "TRANSACTIONAL_BIT": batch.TRANSACTIONAL_BIT,
    "CONTROL_BIT": batch.CONTROL_BIT,
    "DELETE_HORIZON_BIT": batch.DELETE_HORIZON_BIT,
    "CLASSIC_CRC_OFFSET": classic.CRC_OFFSET,
    "CLASSIC_CRC_START": classic.CRC_START,
    "CLASSIC_ATTRIBUTES_OFFSET": classic.ATTRIBUTES_OFFSET,
    "V1_TIMESTAMP_OFFSET": classic.TIMESTAMP_OFFSET,
    "V0_KEY_LENGTH_OFFSET": classic.KEY_LENGTH_OFFSET[0],
    "V1_KEY_LENGTH_OFFSET": classic.KEY_LENGTH_OFFSET[1],
    "V0_MIN_SIZE_FIELD": classic.MIN_SIZE_FIELD[0],
    "V1_MIN_SIZE_FIELD": classic.MIN_SIZE_FIELD[1],
    "CLASSIC_CODECS": classic.CLASSIC_CODECS,
    "BATCH_LENGTH_OFFSET": batch.FIELD_OFFSET["length"],
    "BATCH_LEADER_EPOCH_OFFSET": batch.LEADER_EPOCH_OFFSET,
    "BATCH_CRC_OFFSET": batch.CRC_OFFSET,
    "BATCH_ATTRIBUTES_OFFSET": batch.ATTRIBUTES_OFFSET,
    "BATCH_CRC_START": batch.CRC_START,
    "BATCH_LAST_DELTA_OFFSET": batch.FIELD_OFFSET["last_offset_delta"],
    "BATCH_BASE_TIMESTAMP_OFFSET": batch.FIELD_OFFSET["base_timestamp"],
    "BATCH_MAX_TIMESTAMP_OFFSET": batch.MAX_TIMESTAMP_OFFSET,
    "BATCH_PRODUCER_ID_OFFSET": batch.PRODUCER_ID_OFFSET,
    "BATCH_PRODUCER_EPOCH_OFFSET": batch.FIELD_OFFSET["producer_epoch"],
    "BATCH_BASE_SEQUENCE_OFFSET": batch.FIELD_OFFSET["base_sequence"],
    "BATCH_RECORD_COUNT_OFFSET": batch.FIELD_OFFSET["record_count"],
    "BATCH_OVERHEAD": batch.BATCH_OVERHEAD,
    "MIN_BATCH_LENGTH": batch.MIN_BATCH_LENGTH,
    "BATCH_CODECS": batch.BATCH_CODECS,
}

DEFINE = re.compile(r"^#define\s+([A-Z0-9_]+)\s+(\(?-?(?:0x[0-9A-Fa-f]+|\d+)\)?)\s*(?:/\*.*)?$")


def header_values() -> dict[str, int]:
    values = {}
    for line in HEADER.read_text().splitlines():
        if not line.startswith("#define") or line.split()[1] == "STRATA_KAFKA_FORMAT_H":
            continue
        match = DEFINE.match(line)
        assert match, f"format.h: not a plain numeric #define: {line!r}"
        values[match.group(1)] = int(match.group(2).strip("()"), 0)
    return values


def test_every_header_constant_has_the_python_value():
    assert header_values() == PYTHON_VALUES


def test_the_c_files_take_their_layouts_from_the_header():
    """Neither C file defines a layout constant of its own."""
    root = HEADER.parent.parent
    for source in ("kafka_format/_crecords.c", "storage/_ccleaner.c"):
        text = (root / source).read_text()
        assert '#include "format.h"' in text, source
        for name in PYTHON_VALUES:
            assert f"#define {name} " not in text, (source, name)
