"""Optional C accelerators for the per-entry and per-record hot paths.

Everything else is in pyproject.toml. Each extension is `optional`: where no C
compiler is found the install still succeeds and Strata runs on the pure-Python
implementations of the same functions (kafka_format/accel.py and storage/accel.py
pick once at import;
`STRATA_PURE_PYTHON=1` forces the Python ones). `make test` sets
`STRATA_REQUIRE_NATIVE=1`, so a build that silently failed there fails the tests
instead of quietly measuring the fallback.
"""

from setuptools import Extension, setup

# Plain C99; the one platform-specific part (x86-64 carry-less multiply for the CRCs,
# kafka_format/crc_fold.h: PCLMULQDQ, and AVX-512 VPCLMULQDQ) is compiled with
# function-level target attributes and chosen at run time by a CPU check.
COMPILE_ARGS = ["-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter",
                "-Wno-missing-field-initializers"]

setup(
    ext_modules=[
        Extension("kafka_format._crecords", ["kafka_format/_crecords.c"],
                  depends=["kafka_format/crc_fold.h", "kafka_format/format.h"], extra_compile_args=COMPILE_ARGS,
                  optional=True),
        Extension("storage._ccleaner", ["storage/_ccleaner.c"], include_dirs=["kafka_format"],
                  depends=["kafka_format/format.h"], extra_compile_args=COMPILE_ARGS, optional=True),
    ],
)
