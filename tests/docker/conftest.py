"""The Docker checks.

test_dockerfile.py and test_first_run.py (hadolint, shellcheck, the entry point, the
healthcheck, the README's and compose's settings) run with every `make test`. The image
tests (`@pytest.mark.docker`, test_image.py) build and run the real image with podman:
they run only when STRATA_IMAGE_TESTS=1, which `make test-docker` sets (tests/conftest.py),
and skip where podman or the base image is missing, or fail there under CI
(tests/docker/runtime.py). One image is built per session, by the `image` fixture here.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.docker.runtime import image_ids, podman, require, say

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1800


@pytest.fixture(scope="session")
def image(request):
    """The image built from this checkout, once per session, under a tag of its own."""
    require()
    tag = f"localhost/strata-test:{uuid.uuid4().hex[:12]}"
    before = set(image_ids())
    started = time.monotonic()
    try:
        # --format docker: the OCI format has no HEALTHCHECK. --pull=never: no registry here.
        podman("build", "--pull=never", "--format", "docker", "-t", tag, str(ROOT), timeout=BUILD_TIMEOUT_S)
        say(request.config, f"podman build: {time.monotonic() - started:.0f} s")
        yield tag
    finally:
        # The image and the layers this build added (the builder stage, cache entries); layers
        # that were there before are a cache this build reused, and stay.
        # The tag goes in any case (a build that was all cache hits tags an image that was there).
        ours = [i for i, names in image_ids().items() if i not in before and set(names) <= {tag}]
        if ours:
            podman("rmi", "-f", *ours, check=False, timeout=300)
        podman("rmi", tag, check=False)
