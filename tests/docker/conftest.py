"""The Docker checks.

test_dockerfile.py (hadolint, shellcheck, the entry point, the healthcheck) runs with every
`make test`. The image tests (`@pytest.mark.docker`, test_image.py) build and run the real
image with podman: they run only when STRATA_IMAGE_TESTS=1, which `make test-docker` sets,
and skip there too when podman or the base image is missing.
"""

import os

import pytest

IMAGE_TESTS_ENV = "STRATA_IMAGE_TESTS"


def pytest_configure(config):
    config.addinivalue_line("markers", "docker: builds and runs the container image (make test-docker)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get(IMAGE_TESTS_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"image tests: run `make test-docker` (sets {IMAGE_TESTS_ENV}=1)")
    for item in items:
        if item.get_closest_marker("docker") is not None:
            item.add_marker(skip)
