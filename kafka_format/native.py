"""Pick the C accelerator of a hot path, or its pure-Python twin.

Contract: `load(name)` returns the compiled module of that full dotted name
(`kafka_format._crecords`, `storage._ccleaner`; built by setup.py, optional)
or None, and callers keep a pure-Python implementation of every function they
take from it: both give the same results and raise the
same errors, and the tests check one against the other.

- `STRATA_PURE_PYTHON=1` makes every `load` return None (to run or measure the
  fallbacks).
- `STRATA_REQUIRE_NATIVE=1` turns a missing module into an ImportError instead
  of a quiet fallback (`make test` sets it: a build that failed on a machine
  with a compiler must not pass as the slow path).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def pure_python() -> bool:
    return os.environ.get("STRATA_PURE_PYTHON", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    if pure_python():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("STRATA_REQUIRE_NATIVE", "") not in ("", "0"):
            raise
        return None
