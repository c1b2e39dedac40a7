"""The Kafka listener's own durable state: the cluster id and producer id blocks.

`<data-dir>/strata-kafka.json`, replaced whole through broker/state/json_files.py
`write_document`:

    {"version": 1, "cluster_id": "q1Sh-9_ISia_zwGINzRvyQ", "producer_id_block_end": 2000}

Contract:
- `KafkaState.open(data_dir)` (blocking; after the data directory is locked)
  is `read(data_dir)` (the file's state, None without one; reads only, so the
  broker checks it before locking) or `create(data_dir)`: the file with a new
  cluster id (Kafka's form: a random
  UUID in URL-safe base64 without padding, 22 characters).
- Producer ids are handed out from blocks of PRODUCER_ID_BLOCK_SIZE, as Kafka's
  ProducerIdManager takes blocks from the controller: the end of a block is
  written (and fsynced) before any id in it is used, so after a crash or a
  restart ids only ever grow and are never handed out twice (the rest of an
  unfinished block is skipped). `next_producer_id()` is called on the event loop;
  it returns None when the block is used up, and `claim_block()` (blocking, run in
  the executor) takes the next one; a failed write (a full disk) raises
  KafkaStorageError and leaves the block and the file as they were.
- A file that cannot be read or decoded fails `open` with one line naming it and
  what to do: a new cluster id, or producer ids handed out again, would be silent
  harm.
- Epochs: every InitProducerId without a transactional id gets a new producer id
  with epoch 0 (Kafka's coordinator does the same for idempotent producers), so
  epochs never need to be stored.
- Sequence numbers (idempotent producers) are checked by the storage engine,
  inside `Log.append` under the log's lock, so check and append are atomic per
  partition and both protocols get them (storage/producer_state.py, with the
  `.snapshot` files).
"""

from __future__ import annotations

import base64
import os
import threading
import uuid
from collections.abc import Callable

from broker.state.json_files import damaged, read_document, write_document
from kafka_format.errors import InvalidConfigError

STATE_FILE = "strata-kafka.json"
WHAT = "Kafka listener state"
# Without it the cluster id would change and producer ids already in the logs be handed out again.
REMEDY = "restore it from a backup (the cluster id and the producer ids given out cannot be rebuilt)"
FORMAT_VERSION = 1
PRODUCER_ID_BLOCK_SIZE = 1000


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaState:
    def __init__(self, path: str, cluster_id: str, block_end: int):
        self.path = path
        self.cluster_id = cluster_id
        self._block_end = block_end  # persisted: ids below it may have been handed out
        self._next = block_end  # the current block is empty until claimed
        self._lock = threading.Lock()

    @classmethod
    def open(cls, data_dir: str) -> KafkaState:
        return cls.read(data_dir) or cls.create(data_dir)

    @classmethod
    def read(cls, data_dir: str) -> KafkaState | None:
        """The stored state, or None when there is no file (reads only)."""
        path = os.path.join(data_dir, STATE_FILE)
        doc = read_document(path, FORMAT_VERSION, WHAT, REMEDY)
        if doc is None:
            return None
        try:
            return cls(path, str(doc["cluster_id"]), int(doc["producer_id_block_end"]))
        except (KeyError, TypeError, ValueError) as e:
            raise damaged(path, WHAT, e, REMEDY) from None

    @classmethod
    def create(cls, data_dir: str) -> KafkaState:
        """A new cluster id, written (after the data directory is locked)."""
        path = os.path.join(data_dir, STATE_FILE)
        state = cls(path, new_cluster_id(), 0)
        state._write(error=lambda e: InvalidConfigError(f"cannot write Kafka listener state {path}: {e}"))
        return state

    def _write(self, error: Callable[[OSError], BaseException] | None = None) -> None:
        """Replace the file; a failed write raises KafkaStorageError naming it (the
        producer id allocator answers COORDINATOR_LOAD_IN_PROGRESS), or `error(e)`."""
        doc = {"version": FORMAT_VERSION, "cluster_id": self.cluster_id,
               "producer_id_block_end": self._block_end}
        write_document(self.path, WHAT, doc, error=error)

    def next_producer_id(self) -> int | None:
        """The next id of the current block, or None when a block must be claimed."""
        with self._lock:
            if self._next >= self._block_end:
                return None
            value = self._next
            self._next += 1
            return value

    def claim_block(self) -> None:
        """Persist the end of a new block, then make it current (blocking)."""
        with self._lock:
            if self._next < self._block_end:
                return  # another request claimed one meanwhile
            start = self._block_end
            self._block_end = start + PRODUCER_ID_BLOCK_SIZE
            try:
                self._write()  # KafkaStorageError on a failed write
            except BaseException:
                self._block_end = start
                raise
            self._next = start


__all__ = ["KafkaState", "PRODUCER_ID_BLOCK_SIZE", "STATE_FILE",
           "new_cluster_id"]
