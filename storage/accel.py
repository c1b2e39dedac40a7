"""storage's C accelerator (_ccleaner.c, the cleaner's key map and passes) or none, chosen once, here.

Contract: `KeyMap` is _ccleaner's class, or None when the C module is not built
or STRATA_PURE_PYTHON is set (kafka_format/native.py has the switches); every
caller takes it from here. `_ccleaner.pyi` states its interface. Without it the
Python twin does the work: OffsetMap keeps its keys in dicts (offset_map.py)
and the cleaner's Python passes (cleaner.py) take every entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka_format import native

if TYPE_CHECKING:
    from ._ccleaner import KeyMap as _KeyMap

KeyMap: type[_KeyMap] | None = None
if native.wanted():
    try:
        from ._ccleaner import KeyMap as _BuiltKeyMap
        KeyMap = _BuiltKeyMap
    except ImportError:
        if native.required():
            raise

NATIVE = KeyMap is not None

__all__ = ["NATIVE", "KeyMap"]
