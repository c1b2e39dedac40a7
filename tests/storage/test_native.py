"""kafka_format/native.py: which implementation a hot path gets."""

import pytest

from kafka_format import native


def test_pure_python_switch_turns_every_accelerator_off(monkeypatch):
    monkeypatch.setenv("STRATA_PURE_PYTHON", "1")
    assert native.load("kafka_format._crecords") is None
    monkeypatch.setenv("STRATA_PURE_PYTHON", "0")
    assert native.pure_python() is False


def test_missing_module_falls_back_unless_required(monkeypatch):
    monkeypatch.delenv("STRATA_PURE_PYTHON", raising=False)
    monkeypatch.delenv("STRATA_REQUIRE_NATIVE", raising=False)
    assert native.load("_no_such_accelerator") is None
    monkeypatch.setenv("STRATA_REQUIRE_NATIVE", "1")
    with pytest.raises(ImportError):
        native.load("_no_such_accelerator")


def test_built_accelerators_load_when_present(monkeypatch):
    monkeypatch.delenv("STRATA_PURE_PYTHON", raising=False)
    module = native.load("kafka_format._crecords")
    if module is None:
        pytest.skip("the C accelerators are not built here")
    assert callable(module.scan_run) and callable(module.index_entries)
