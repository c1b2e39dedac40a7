"""The switches that choose between the C accelerators and their pure-Python twins.

Contract: kafka_format/accel.py and storage/accel.py, the one binding module of
each package, ask here whether to import their C module:

- `STRATA_PURE_PYTHON=1` makes `wanted()` False: every package takes its
  Python twins (to run the tests on them, or to measure them).
- `STRATA_REQUIRE_NATIVE=1` makes `required()` True: a C module that does not
  import is an ImportError instead of a quiet fallback (`make test` sets it: a
  build that failed on a machine with a compiler must not pass as the slow path).
"""

from __future__ import annotations

import os


def _set(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def pure_python() -> bool:
    return _set("STRATA_PURE_PYTHON")


def wanted() -> bool:
    """Whether the binding modules should try their C module."""
    return not pure_python()


def required() -> bool:
    """Whether a C module that does not import is an error."""
    return _set("STRATA_REQUIRE_NATIVE")
