"""kafka_format/native.py's switches and the binding modules that obey them
(kafka_format/accel.py, storage/accel.py): which implementation a hot path gets."""

import subprocess
import sys

import pytest

from kafka_format import native

PROBE = ("from kafka_format import accel; from storage import accel as s; "
         "print(accel.NATIVE, s.NATIVE, accel.scan_run.__module__, s.KeyMap.__module__)")


def probe(monkeypatch, **env) -> str:
    for name in ("STRATA_PURE_PYTHON", "STRATA_REQUIRE_NATIVE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.strip()


def test_switches_read_the_environment(monkeypatch):
    monkeypatch.setenv("STRATA_PURE_PYTHON", "1")
    assert native.pure_python() and not native.wanted()
    monkeypatch.setenv("STRATA_PURE_PYTHON", "0")
    assert native.wanted()
    monkeypatch.setenv("STRATA_REQUIRE_NATIVE", "1")
    assert native.required()


def test_pure_python_binds_every_twin(monkeypatch):
    assert probe(monkeypatch, STRATA_PURE_PYTHON="1") == "False False kafka_format._pyrecords storage._pycleaner"


def test_built_accelerators_are_bound_when_present(monkeypatch):
    from kafka_format import accel

    if not accel.NATIVE:
        pytest.skip("the C accelerators are not built here (or STRATA_PURE_PYTHON is set)")
    assert probe(monkeypatch, STRATA_REQUIRE_NATIVE="1") == "True True kafka_format._crecords storage._ccleaner"
