"""storage's hot paths: the C module (_ccleaner.c, the cleaner's key map and its walks)
or its plain-Python twin (_pycleaner.py), chosen once, here, for the whole process.

Contract: every caller takes `KeyMap` from here and never imports `_ccleaner` or
`_pycleaner` itself, so one choice holds everywhere. `_ccleaner.pyi` states the
interface both implement (tests/storage/test_ccleaner.py runs one suite on each,
and checks that they expose the same names and write the same cleaned bytes).
`NATIVE` says which was taken (kafka_format/native.py has the environment switches).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kafka_format import native

from . import _pycleaner
from ._pycleaner import DONE, FULL, NEED_PYTHON  # the walks' statuses, the same in both twins

if TYPE_CHECKING:
    from . import _ccleaner

    KeyMapType: TypeAlias = _ccleaner.KeyMap | _pycleaner.KeyMap  # a key map of either twin

KeyMap: type[_ccleaner.KeyMap] | type[_pycleaner.KeyMap] = _pycleaner.KeyMap
NATIVE = False
if native.wanted():
    try:
        from ._ccleaner import KeyMap as _BuiltKeyMap
        KeyMap = _BuiltKeyMap
        NATIVE = True
    except ImportError:
        if native.required():
            raise



def is_native(key_map: object) -> bool:
    """Whether `key_map` is the C twin's (the cleaner's stats say which one ran)."""
    return not isinstance(key_map, _pycleaner.KeyMap)


__all__ = ["DONE", "FULL", "NATIVE", "NEED_PYTHON", "KeyMap", "is_native"]
