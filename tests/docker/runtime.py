"""The container runtime the image tests use: podman, with ../shared/tools/containers-setup's
state when it is there, and the base image the Dockerfile starts from.

`require()` is where an image test meets a machine without them: it skips there, saying
which is missing, and under CI (CI=true), where the image must be built on every change,
it fails instead. `python -m tests.docker.runtime` (the Makefile's `test-docker` runs it
before pytest) says the same in one line: exit 0 when nothing is missing, 2 (skip) when
something is, 1 (fail) when something is under CI.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BASE_IMAGE = "python:3.11-slim-bookworm"
SETUP = "../shared/tools/containers-setup"


def containers_env() -> dict[str, str]:
    """os.environ, plus containers-setup's env.sh when it has not been sourced."""
    env = dict(os.environ)
    if "CONTAINERS_STORAGE_CONF" in env:
        return env
    env_file = Path(os.environ.get("CTR", "/var/tmp/strata-containers")) / "env.sh"
    if env_file.is_file():
        for line in env_file.read_text().splitlines():
            words = shlex.split(line)
            if words[:1] == ["export"]:
                env.update(word.split("=", 1) for word in words[1:] if "=" in word)
    return env


ENV = containers_env()


def podman(*args: str, timeout: float = 120, check: bool = True, input: str | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["podman", *args], env=env or ENV, capture_output=True, text=True,
                            timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def say(config, line: str) -> None:
    """A timing line on the terminal, past pytest's output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write(f"\n[test_image] {line}\n")
        return
    with capture.global_and_fixture_disabled():
        reporter.write(f"\n[test_image] {line}\n")


def image_ids() -> dict[str, list[str]]:
    """Every image, intermediate ones included: id -> names."""
    return {i["Id"]: i.get("Names") or [] for i in json.loads(podman("images", "-a", "--format", "json").stdout)}


def missing() -> str | None:
    """What keeps the image from being built here, in one line; None when nothing does."""
    if shutil.which("podman", path=ENV.get("PATH")) is None:
        return f"podman is not installed ({SETUP} installs it)"
    if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
        return f"the base image {BASE_IMAGE} is not present ({SETUP} makes it, or podman pull {BASE_IMAGE})"
    return None


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def require() -> None:
    """Skip the calling test when the runtime or the base image is missing; fail under CI."""
    problem = missing()
    if problem is None:
        return
    if under_ci():
        pytest.fail(f"CI=true: the image must be built and tested, but {problem}", pytrace=False)
    pytest.skip(f"image tests skipped: {problem}")


if __name__ == "__main__":
    problem = missing()
    if problem is not None and under_ci():
        print(f"test-docker: FAILED: CI=true, and {problem}", file=sys.stderr)
        sys.exit(1)
    if problem is not None:
        print(f"test-docker: the image tests are skipped: {problem}")
        sys.exit(2)
