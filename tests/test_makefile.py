"""`make serve` installs only what serving needs; `make test` after it adds the extras.

Checked with `make -n` (what make would run) against a stand-in venv directory, so no
package is installed here."""

import shutil
import subprocess

import pytest

from tests.broker_process import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make missing")


def dry_run(target: str, venv) -> str:
    return subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_serve_installs_the_base_package_and_says_where_strata_is(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    out = dry_run("serve", venv)
    assert "pip install --quiet -e ." in out
    assert "[test" not in out and "spark" not in out
    assert f"{venv}/bin/strata" in out and f"source {venv}/bin/activate" in out


def test_test_after_serve_installs_the_extras(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / ".installed-serve").touch()
    assert "pip install --quiet -e '.[test,bench,spark]'" in dry_run("test", venv)
