"""The SCRAM credential store: `<data-dir>/scram-credentials.json`.

Contract:
- `ScramCredentialStore.open(data_dir)` reads the file (none: no users); one
  that cannot be read or decoded raises InvalidConfigError naming it and what to
  do (the start fails in one line: without it every SCRAM login would fail).
  `lookup(mechanism, user)` is the user's ScramCredential for that mechanism
  (memory, on the loop); `describe()` is {user: [(mechanism name, iterations)]}.
- `apply(upsertions, deletions)` changes several credentials as one: it builds
  the new document, replaces the file whole (write-temp, fsync, rename:
  broker/state/json_files.py `write_document`), and only then swaps it into memory, so a disk
  error changes nothing. It is blocking: callers run it in the executor, one at a
  time (the Kafka handler serializes them with a lock).
- The file holds, per user and mechanism, salt, StoredKey, ServerKey (base64) and
  iterations (RFC 5802): never a password or a salted password.
- `apply_offline(data_dir, upsertions, deletions)` is `apply` without a broker
  (users seeded before the first start, as kafka-storage format --add-scram): it
  creates the directory if needed and holds the data directory's lock (the one
  the broker takes, storage.manager.LOCK_FILE) while it reads and replaces the
  file; a broker holding it raises DataDirectoryInUse and nothing changes.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import os
from collections.abc import Iterable

from broker.state.json_files import damaged, read_document, write_document
from kafka_format.errors import KafkaStorageError
from storage.manager import LOCK_FILE

from .scram import MECHANISMS, ScramCredential

CREDENTIALS_FILE = "scram-credentials.json"
REMEDY = ("restore it from a backup, or move it away and set every user again "
          "(strata users set): starting without it would refuse every SCRAM login")
VERSION = 1
WHAT = "SCRAM credentials"

Credentials = dict[str, dict[str, ScramCredential]]  # user -> mechanism name -> credential


def _document(credentials: Credentials) -> dict:
    users = {user: {name: {"salt": base64.b64encode(c.salt).decode(),
                           "stored_key": base64.b64encode(c.stored_key).decode(),
                           "server_key": base64.b64encode(c.server_key).decode(),
                           "iterations": c.iterations}
                    for name, c in sorted(by_mechanism.items())}
             for user, by_mechanism in sorted(credentials.items())}
    return {"version": VERSION, "users": users}


def _decode(doc: dict, path: str) -> Credentials:
    out: Credentials = {}
    try:
        for user, by_mechanism in doc.get("users", {}).items():
            out[user] = {}
            for name, c in by_mechanism.items():
                if name not in MECHANISMS:
                    continue
                out[user][name] = ScramCredential(
                    base64.b64decode(c["salt"], validate=True), base64.b64decode(c["stored_key"], validate=True),
                    base64.b64decode(c["server_key"], validate=True), int(c["iterations"]))
    except (AttributeError, KeyError, TypeError, ValueError, binascii.Error) as e:
        raise damaged(path, WHAT, repr(e), REMEDY) from None
    return out


class ScramCredentialStore:
    def __init__(self, path: str, credentials: Credentials):
        self.path = path
        self.credentials = credentials

    @classmethod
    def open(cls, data_dir: str) -> ScramCredentialStore:
        path = os.path.join(data_dir, CREDENTIALS_FILE)
        doc = read_document(path, VERSION, WHAT, REMEDY)
        return cls(path, _decode(doc, path) if doc is not None else {})

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        by_mechanism = self.credentials.get(user)
        return by_mechanism.get(mechanism) if by_mechanism is not None else None

    def describe(self) -> dict[str, list[tuple[str, int]]]:
        return {user: [(name, c.iterations) for name, c in sorted(by_mechanism.items())]
                for user, by_mechanism in self.credentials.items() if by_mechanism}

    def apply(self, upsertions: Iterable[tuple[str, str, ScramCredential]],
              deletions: Iterable[tuple[str, str]]) -> None:
        new = {user: dict(by_mechanism) for user, by_mechanism in self.credentials.items()}
        for user, mechanism in deletions:
            new.get(user, {}).pop(mechanism, None)
        for user, mechanism, credential in upsertions:
            new.setdefault(user, {})[mechanism] = credential
        new = {user: by_mechanism for user, by_mechanism in new.items() if by_mechanism}
        # A failed write raises its OSError: the Kafka handler answers KAFKA_STORAGE_ERROR
        # with its words, `strata users` prints them.
        write_document(self.path, WHAT, _document(new), error=lambda e: e)
        self.credentials = new


class DataDirectoryInUse(KafkaStorageError):
    """A running broker holds the data directory: offline changes would be lost."""


def apply_offline(data_dir: str, upsertions: Iterable[tuple[str, str, ScramCredential]],
                  deletions: Iterable[tuple[str, str]] = ()) -> ScramCredentialStore:
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirectoryInUse(f"data directory {data_dir} is in use by a running broker: change its "
                                     "users over the Kafka listener (--kafka-bootstrap-server)") from None
        store = ScramCredentialStore.open(data_dir)
        store.apply(upsertions, deletions)
        return store
    finally:
        os.close(fd)  # releases the lock
