"""The broker's own JSON state files (topic registry, Kafka state, group configs, dynamic
broker configs, ACLs, SCRAM credentials, client quotas).

Contract:
- `read_document(path, version, what, remedy)` returns the JSON object stored in
  `path`, or None when the file does not exist. A file that is not JSON (empty,
  torn, garbage), is not an object or carries another `"version"` raises
  InvalidConfigError that names `what`, the path, the problem and `remedy` (what
  the operator can do), so a start on a damaged file stops with one clear line
  and changes nothing. A file that cannot be opened raises its OSError, which
  names it (the start's one line adds what to do: a directory in the file's
  place, or who owns the data directory on EACCES). These
  files hold what an operator or a client set and no log can rebuild: starting
  without one would silently drop it (ACLs, users, quotas, topic configs).
- `read_string_maps(path, version, what, remedy, field)`: a document whose `field`
  maps names to {key: value} settings (group configs, dynamic broker configs).
- `damaged(path, what, detail, remedy)` is the same error for a document whose
  content does not decode (a caller's own checks).
- `encode_document(doc)` gives the bytes every such file is written with (indented
  JSON and a final newline); `write_document(path, what, doc)` replaces the file whole
  with them (storage.fileutil.atomic_write: write-temp, fsync, rename), a failed write
  (a full disk) being KafkaStorageError naming `what` and the path, the old file intact.
  Every state file above is written through it. Two options, each fixed per file:
  `reserve` (a change that frees space: the topic registry's deletions) gives up the
  data directory's space reserve (storage/space_reserve.py) on a full disk and tries
  once more; `error` makes a failed write raise what the file's caller answers with
  instead (the Kafka state's first write fails the start with InvalidConfigError;
  the SCRAM credentials raise the OSError, which their callers word).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kafka_format.errors import InvalidConfigError, KafkaStorageError
from storage.fileutil import atomic_write
from storage.space_reserve import SpaceReserve


def read_document(path: str, version: int, what: str, remedy: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise InvalidConfigError(f"cannot read {what} {path}: not JSON ({e}); {remedy}") from None
    if not isinstance(doc, dict) or doc.get("version") != version:
        raise InvalidConfigError(f"{what} {path}: unsupported format (expected a JSON object of version "
                                 f"{version}); {remedy}")
    return doc


def read_string_maps(path: str, version: int, what: str, remedy: str, field: str) -> dict[str, dict[str, str]]:
    """The document's `field` as {name: {key: value}} strings (`read_document`'s checks;
    {} when the file does not exist); a field of another shape is `damaged`."""
    doc = read_document(path, version, what, remedy)
    try:
        return {} if doc is None else {str(name): {str(k): str(v) for k, v in props.items()}
                                       for name, props in doc[field].items()}
    except (KeyError, TypeError, AttributeError) as e:
        raise damaged(path, what, e, remedy) from None


def damaged(path: str, what: str, detail: object, remedy: str) -> InvalidConfigError:
    return InvalidConfigError(f"{what} {path} is damaged: {detail}; {remedy}")


def encode_document(doc: dict[str, Any], *, sort_keys: bool = False) -> bytes:
    return json.dumps(doc, indent=2, sort_keys=sort_keys).encode() + b"\n"


def write_document(path: str, what: str, doc: dict[str, Any], *, sort_keys: bool = False,
                   reserve: SpaceReserve | None = None,
                   error: Callable[[OSError], BaseException] | None = None) -> None:
    data = encode_document(doc, sort_keys=sort_keys)
    try:
        if reserve is not None:
            reserve.run(f"{what} write", lambda: atomic_write(path, data))
        else:
            atomic_write(path, data)
    except OSError as e:
        if error is not None:
            raise error(e) from None
        raise KafkaStorageError(f"cannot write the {what} {path}: {e.strerror or e}") from None
