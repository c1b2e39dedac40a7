"""kafka_format's hot paths: the C module (_crecords.c) or its pure-Python twins
(_pyrecords.py), chosen once, here, for the whole process.

Contract: every caller in kafka_format/ and storage/ reaches these functions as
`accel.<name>` and never imports `_crecords` or `_pyrecords` itself, so one
choice holds everywhere and a test can swap the set in one place
(tests/storage/conftest.py's `twin` fixture). `_crecords.pyi` states the
interface; the imports below make mypy check the Python twins against it.
`NATIVE` says which set was taken (native.py has the environment switches).

`crc32c` is the CRC32C of record batches: the C folding of crc_fold.h where the
CPU has AVX-512 carry-less multiply (`CRC32C_IN_C`), else the crc32c package;
one choice, so the validator, the scan and the cleaner always agree.
"""

from __future__ import annotations

from collections.abc import Callable

from . import native
from ._pyrecords import Buffer
from ._pyrecords import crc32c as _library_crc32c

NATIVE = False
if native.wanted():
    try:
        from ._crecords import (
            CRC32C_IN_C,
            assign_plain_run,
            find_timestamp,
            index_entries,
            scan_run,
            summarize_records,
        )
        NATIVE = True
    except ImportError:
        if native.required():
            raise
if not NATIVE:
    from ._pyrecords import (  # the twins, checked by mypy against the stub's types above
        CRC32C_IN_C,
        assign_plain_run,
        find_timestamp,
        index_entries,
        scan_run,
        summarize_records,
    )
crc32c: Callable[[Buffer], int] = _library_crc32c
if CRC32C_IN_C:
    from ._crecords import crc32c as _folded_crc32c
    crc32c = _folded_crc32c

__all__ = ["NATIVE", "assign_plain_run", "crc32c", "find_timestamp", "index_entries", "scan_run",
           "summarize_records"]
