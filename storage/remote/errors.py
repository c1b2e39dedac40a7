"""Errors of the remote store, as Kafka's RemoteStorageException and
RemoteResourceNotFoundException: both reach a fetch as KAFKA_STORAGE_ERROR (56),
with a message naming the object and what is wrong with it."""

from __future__ import annotations

from kafka_format.errors import KafkaStorageError


class RemoteStorageError(KafkaStorageError):
    """The remote store failed, or holds something that does not check out."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """An object the metadata names is missing from the remote store."""
