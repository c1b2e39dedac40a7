# Strata broker image.
#
#   docker build -t strata .                (podman: add --format docker, or HEALTHCHECK is dropped)
#   docker run -d -p 9000:9000 -v strata-data:/var/lib/strata strata
#
# Configuration, lowest to highest precedence:
#   /etc/strata/server.properties   the defaults (docker/server.properties); mount your own over it
#   STRATA_<KEY>                    environment, one variable per broker key: `.` -> `_`, upper case
#                                   (STRATA_NUM_PARTITIONS=3, STRATA_LOG_SEGMENT_BYTES=104857600)
#   trailing arguments              `docker run ... strata --set num.partitions=3`
# The entry point's own variables: STRATA_DATA_DIR, STRATA_CONFIG, STRATA_PORT (docker/entrypoint.sh).
# Any other first argument runs as a command: `docker run --rm -it strata strata topics list ...`.

# ---- build: a virtualenv holding the project and its pinned dependencies ---------------------
FROM python:3.11-slim-bookworm AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

# A C compiler for the optional accelerators in setup.py (build stage only; the runtime image
# gets the built extension, not the compiler). Python's headers come with the official image;
# where python is Debian's own (a local stand-in base), python3.11-dev brings them.
RUN apt-get update \
    && apt-get install -y --no-install-recommends 'gcc=4:12.2.0-*' 'libc6-dev=2.36-9+deb12u*' \
    && if [ ! -f "$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then \
        apt-get install -y --no-install-recommends 'python3.11-dev=3.11.2-6+deb12u*'; fi \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/strata

WORKDIR /src
# The dependencies first, in their own layer: they change far less often than the code.
# pyproject.toml pins every one of them with ==; the list is read from it, not repeated here.
COPY pyproject.toml ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > requirements.txt \
    && /opt/strata/bin/pip install --no-cache-dir --require-virtualenv -r requirements.txt

COPY . .
# --no-deps: exactly the pinned set above, nothing resolved again. pip and setuptools are build
# tools: out of the runtime venv (about 25 MB). `strata --help` imports every subcommand, so a
# package missing from the wheel fails here rather than in a user's container.
# STRATA_REQUIRE_NATIVE: the C accelerators must have built and must import, so the binding
# modules (kafka_format/accel.py, storage/accel.py) raise instead of falling back to the
# pure-Python twins, and both report NATIVE (-I: no current directory on the path, so the
# sources in /src cannot stand in for the installed package).
RUN /opt/strata/bin/pip install --no-cache-dir --require-virtualenv --no-deps . \
    && /opt/strata/bin/python -m pip uninstall --yes --quiet pip setuptools \
    && /opt/strata/bin/strata --help > /dev/null \
    && STRATA_REQUIRE_NATIVE=1 /opt/strata/bin/python -I -c 'import sys, kafka_format.accel as k, storage.accel as s; sys.exit(None if k.NATIVE and s.NATIVE else "C accelerators not in use")'

# ---- runtime ---------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm

# tini as PID 1: forwards SIGTERM/SIGINT to the broker and reaps zombies. The entry point then
# `exec`s the broker, so `docker stop` is a graceful shutdown (clean-shutdown marker, checkpoints).
# Pinned to bookworm's 0.19.0-1 (the glob takes the per-architecture rebuild suffix, +bN).
RUN apt-get update \
    && apt-get install -y --no-install-recommends 'tini=0.19.0-1*' \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

# An unprivileged user with a fixed uid/gid, so the owner of a bind-mounted data dir is predictable.
RUN groupadd --gid 10001 strata \
    && useradd --no-log-init --uid 10001 --gid strata \
        --home-dir /var/lib/strata --no-create-home --shell /usr/sbin/nologin strata \
    && mkdir -p /var/lib/strata /etc/strata \
    && chown strata:strata /var/lib/strata \
    && chmod 0750 /var/lib/strata

COPY --from=build /opt/strata /opt/strata
COPY docker/server.properties /etc/strata/server.properties
COPY docker/entrypoint.sh /usr/local/bin/strata-entrypoint
COPY docker/healthcheck.py /usr/local/lib/strata/healthcheck.py

# Logs as JSON lines (one object per line) for the container's log driver.
ENV PATH=/opt/strata/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    STRATA_LOG_FORMAT=json

# Numeric, so `runAsNonRoot` checks (Kubernetes) can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/strata
VOLUME ["/var/lib/strata"]

# The native protocol, Apache Kafka's (kafka.port) and the HTTP admin port (admin.port: /metrics,
# /health/live, /health/ready). Kafka clients outside the container need
# STRATA_ADVERTISED_LISTENERS=PLAINTEXT://<the address they use>:9092.
EXPOSE 9000 9092 9644

# Healthy = the admin port's /health/ready answers 200: recovery done, listeners serving (with
# STRATA_ADMIN_PORT=-1: the broker answers a METADATA request on the native port).
# start-period: recovery of a large, uncleanly stopped log can take a while before it is ready.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/opt/strata/bin/python", "/usr/local/lib/strata/healthcheck.py"]

ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/strata-entrypoint"]
CMD []
