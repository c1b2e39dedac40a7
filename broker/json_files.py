"""The broker's own JSON state files (topic registry, Kafka state, group configs).

Contract:
- `read_document(path, version, what)` returns the JSON object stored in `path`,
  or None when the file does not exist. A file that cannot be read, is not JSON,
  is not an object or carries another `"version"` raises InvalidConfigError that
  names `what` and the path, so a start on a damaged file stops with one clear line.
- `encode_document(doc)` gives the bytes every such file is written with (indented
  JSON and a final newline); callers replace the file whole with
  storage.fileutil.atomic_write (write-temp, fsync, rename).
"""

from __future__ import annotations

import json
from typing import Any

from kafka_format.errors import InvalidConfigError


def read_document(path: str, version: int, what: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InvalidConfigError(f"cannot read {what} {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != version:
        raise InvalidConfigError(f"{what} {path}: unsupported format")
    return doc


def encode_document(doc: dict[str, Any], *, sort_keys: bool = False) -> bytes:
    return json.dumps(doc, indent=2, sort_keys=sort_keys).encode() + b"\n"
