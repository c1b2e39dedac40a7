"""The broker's tiered-storage settings, with Kafka's names, defaults and validation.

Kafka's RemoteLogManagerConfig names: `remote.log.storage.system.enable` (false),
`remote.log.manager.task.interval.ms` (30000, at least 1), and its internal retry
settings `remote.log.manager.task.retry.backoff.ms` (500),
`remote.log.manager.task.retry.backoff.max.ms` (30000) and
`remote.log.manager.task.retry.jitter` (0.2, between 0 and 0.5). The remote
storage manager's own settings go under Kafka's default prefix `rsm.config.`:

- `rsm.config.url`: where the store is, `s3://bucket/prefix` or `file:///path`;
- `rsm.config.s3.endpoint`: an S3-compatible server's URL (http or https);
- `rsm.config.s3.region`: the bucket's region (else AWS_REGION, AWS_DEFAULT_REGION,
  else us-east-1);
- `rsm.config.fetch.chunk.bytes` and `rsm.config.cache.bytes`: the remote reader's
  chunk size (the size of each ranged read of a segment, 8 MiB) and the bound of
  its cache of index and data chunks (64 MiB);
- `rsm.config.fetch.readahead.bytes` (32 MiB, at most half the cache is used) and
  `rsm.config.fetch.threads` (4): how far past each remote read the reader
  reads ahead, and how many ranged reads it makes at once.

S3 credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
AWS_SESSION_TOKEN. `RemoteLogConfig.from_props(props, environ)` is the one call the
broker makes; a bad value raises InvalidConfigError naming the setting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kafka_format.errors import InvalidConfigError

SYSTEM_ENABLE = "remote.log.storage.system.enable"
TASK_INTERVAL_MS = "remote.log.manager.task.interval.ms"
RETRY_BACKOFF_MS = "remote.log.manager.task.retry.backoff.ms"
RETRY_BACKOFF_MAX_MS = "remote.log.manager.task.retry.backoff.max.ms"
RETRY_JITTER = "remote.log.manager.task.retry.jitter"
RSM_PREFIX = "rsm.config."
URL = RSM_PREFIX + "url"
S3_ENDPOINT = RSM_PREFIX + "s3.endpoint"
S3_REGION = RSM_PREFIX + "s3.region"
FETCH_CHUNK_BYTES = RSM_PREFIX + "fetch.chunk.bytes"
CACHE_BYTES = RSM_PREFIX + "cache.bytes"
FETCH_READAHEAD_BYTES = RSM_PREFIX + "fetch.readahead.bytes"
FETCH_THREADS = RSM_PREFIX + "fetch.threads"

DEFAULTS: dict[str, Any] = {
    SYSTEM_ENABLE: False,
    TASK_INTERVAL_MS: 30_000,
    RETRY_BACKOFF_MS: 500,
    RETRY_BACKOFF_MAX_MS: 30_000,
    RETRY_JITTER: 0.2,
    URL: "",
    S3_ENDPOINT: "",
    S3_REGION: "",
    FETCH_CHUNK_BYTES: 8 * 1024 * 1024,
    CACHE_BYTES: 64 * 1024 * 1024,
    FETCH_READAHEAD_BYTES: 32 * 1024 * 1024,
    FETCH_THREADS: 4,
}
NAMES = frozenset(DEFAULTS)


@dataclass(frozen=True)
class StoreLocation:
    """Where the remote store is: `scheme` file or s3; for s3 the bucket; the key
    prefix (s3) or directory (file) under which every object goes."""

    scheme: str
    bucket: str
    prefix: str  # s3: key prefix without slashes at its ends; file: the absolute directory

    @classmethod
    def parse(cls, url: str) -> StoreLocation:
        parts = urlsplit(url)
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise InvalidConfigError(f"{URL}: {url!r} must be file:///absolute/path")
            return cls("file", "", os.path.normpath(parts.path))
        if parts.scheme == "s3":
            if not parts.netloc:
                raise InvalidConfigError(f"{URL}: {url!r} names no bucket (s3://bucket/prefix)")
            return cls("s3", parts.netloc, parts.path.strip("/"))
        raise InvalidConfigError(f"{URL}: {url!r} must start with s3:// or file://")

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file://{self.prefix}"
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


@dataclass(frozen=True)
class S3Credentials:
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    def __repr__(self) -> str:  # never print secrets
        return f"S3Credentials(access_key_id={self.access_key_id!r}, secret_access_key=***)"


@dataclass(frozen=True)
class RemoteLogConfig:
    system_enable: bool = False
    task_interval_ms: int = 30_000
    retry_backoff_ms: int = 500
    retry_backoff_max_ms: int = 30_000
    retry_jitter: float = 0.2
    location: StoreLocation | None = None
    s3_endpoint: str = ""
    s3_region: str = "us-east-1"
    fetch_chunk_bytes: int = 8 * 1024 * 1024
    cache_bytes: int = 64 * 1024 * 1024
    credentials: S3Credentials = field(default_factory=S3Credentials)
    fetch_readahead_bytes: int = 32 * 1024 * 1024
    fetch_threads: int = 4

    @classmethod
    def from_props(cls, props: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> RemoteLogConfig:
        """The settings among `props` (other names are ignored: they are the broker's),
        credentials and region defaults from `environ` (os.environ when None)."""
        env = os.environ if environ is None else environ
        values = {name: props.get(name, default) for name, default in DEFAULTS.items()}
        system_enable = _boolean(SYSTEM_ENABLE, values[SYSTEM_ENABLE])
        interval = _long(TASK_INTERVAL_MS, values[TASK_INTERVAL_MS], 1)
        backoff = _long(RETRY_BACKOFF_MS, values[RETRY_BACKOFF_MS], 1)
        backoff_max = _long(RETRY_BACKOFF_MAX_MS, values[RETRY_BACKOFF_MAX_MS], 1)
        jitter = _double(RETRY_JITTER, values[RETRY_JITTER])
        if not 0.0 <= jitter <= 0.5:
            raise InvalidConfigError(f"{RETRY_JITTER}: {jitter} must be between 0.0 and 0.5")
        chunk = _long(FETCH_CHUNK_BYTES, values[FETCH_CHUNK_BYTES], 4096)
        cache = _long(CACHE_BYTES, values[CACHE_BYTES], chunk)
        readahead = _long(FETCH_READAHEAD_BYTES, values[FETCH_READAHEAD_BYTES], 0)
        threads = _long(FETCH_THREADS, values[FETCH_THREADS], 1)
        url = str(values[URL]).strip()
        location = StoreLocation.parse(url) if url else None
        if system_enable and location is None:
            raise InvalidConfigError(f"{URL} must be set when {SYSTEM_ENABLE} is true "
                                     "(s3://bucket/prefix or file:///path)")
        endpoint = str(values[S3_ENDPOINT]).strip()
        if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
            raise InvalidConfigError(f"{S3_ENDPOINT}: {endpoint!r} must be an http:// or https:// URL")
        region = (str(values[S3_REGION]).strip() or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
                  or "us-east-1")
        credentials = S3Credentials(env.get("AWS_ACCESS_KEY_ID") or None, env.get("AWS_SECRET_ACCESS_KEY") or None,
                                    env.get("AWS_SESSION_TOKEN") or None)
        return cls(system_enable, interval, backoff, backoff_max, jitter, location, endpoint, region,
                   chunk, cache, credentials, readahead, threads)


def _boolean(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"{name}: {raw!r} is not a valid boolean")
    return text == "true"


def _long(name: str, raw: Any, low: int) -> int:
    try:
        if isinstance(raw, (bool, float)):
            raise ValueError
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"{name}: {raw!r} is not a valid long") from None
    if value < low:
        raise InvalidConfigError(f"{name}: {value} must be at least {low}")
    return value


def _double(name: str, raw: Any) -> float:
    try:
        if isinstance(raw, bool):
            raise ValueError
        return float(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"{name}: {raw!r} is not a valid double") from None
