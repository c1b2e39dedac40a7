# `make serve` and `make test` each set up .venv on their own from pinned dependencies:
# serve installs what the broker needs (SERVE_STAMP), test adds the test, bench and
# Spark extras (STAMP). Separate stamps, so `make test` after `make serve` installs the extras.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SERVE_STAMP := $(VENV)/.installed-serve
PACKAGE_SOURCES := pyproject.toml setup.py $(wildcard storage/*.c kafka_format/*.c kafka_format/*.h)

.PHONY: serve test test-pure venv bench clean lint

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# setup.py builds the optional C accelerators; a change to their sources rebuilds them.
$(STAMP): $(PACKAGE_SOURCES) | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test,bench,spark]'
	touch $(STAMP)

# A venv that `make test` keeps current already has everything serving needs.
$(SERVE_STAMP): $(PACKAGE_SOURCES) | $(VENV)/bin/python
	@if [ -f $(STAMP) ] && [ -z "$$(find $(PACKAGE_SOURCES) -newer $(STAMP))" ]; then :; \
	else echo "$(PY) -m pip install --quiet -e ."; $(PY) -m pip install --quiet -e .; fi
	touch $(SERVE_STAMP)

venv: $(STAMP)

serve: $(SERVE_STAMP)
	@echo "make serve: the strata command is $(VENV)/bin/strata; 'source $(VENV)/bin/activate' puts it on the PATH"
	$(VENV)/bin/strata serve --data-dir ./data

# STRATA_REQUIRE_NATIVE: the C accelerators must have built (kafka_format/native.py).
test: $(STAMP)
	STRATA_REQUIRE_NATIVE=1 $(PY) -m pytest -q

# The storage and protocol tests once more on the pure-Python twins of the C
# accelerators (kafka_format/accel.py, storage/accel.py bind them once).
test-pure: $(STAMP)
	STRATA_PURE_PYTHON=1 $(PY) -m pytest -q tests/storage tests/protocol

bench: $(STAMP)
	$(PY) bench/storage.py

clean:
	rm -rf $(VENV) .pytest_cache

# ---- Gates ---------------------------------------------------------------------------------------
# The gates, each over every package: ruff's full rule set (over tests/ and bench/ as well), mypy
# with no errors (its settings and the packages it checks are pyproject's [tool.mypy]), the
# import-layer contracts (pyproject's [tool.importlinter]) and no import cycles, lazy imports
# counted (tests/test_import_cycles.py).
PACKAGES := kafka_format/ protocol/ storage/ broker/ client/ pipeline/
LINT_STAMP := $(VENV)/.lint-installed
$(LINT_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[lint]'
	touch $(LINT_STAMP)

lint: $(LINT_STAMP)
	$(VENV)/bin/ruff check $(PACKAGES) tests/ bench/
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider tests/test_import_cycles.py

# ---- Docker ------------------------------------------------------------------------------------
# Podman's state and the local stand-in base image come from ../shared/tools/containers-setup
# (no registry needed); a machine with a normal podman or docker install works without it.
CTR ?= /var/tmp/strata-containers
IMAGE ?= strata:latest
CONTAINERS_ENV = if [ -f $(CTR)/env.sh ]; then . $(CTR)/env.sh; fi

.PHONY: test-docker docker-build

# The image tests (marked docker: tests/docker/test_image.py and the README's Docker section in
# tests/test_readme.py), with STRATA_IMAGE_TESTS=1: they build the image once and run it with
# podman. Where podman or the base image is missing, one line says so and they are skipped;
# under CI (CI=true) that line fails the run instead (tests/docker/runtime.py).
test-docker: $(STAMP)
	@$(CONTAINERS_ENV); \
	$(PY) -m tests.docker.runtime; rc=$$?; \
	if [ $$rc -eq 2 ]; then exit 0; elif [ $$rc -ne 0 ]; then exit $$rc; fi; \
	STRATA_IMAGE_TESTS=1 $(PY) -m pytest -q -m docker tests/docker tests/test_readme.py

# `--format docker` keeps the HEALTHCHECK (podman's default OCI format has no healthcheck).
docker-build:
	@$(CONTAINERS_ENV); \
	if command -v podman >/dev/null; then podman build --format docker -t $(IMAGE) .; \
	else docker build -t $(IMAGE) .; fi
