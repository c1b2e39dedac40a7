"""The share session cache of ShareFetch (78) and ShareAcknowledge (79), as
Kafka 4.2's ShareSessionCache / SharePartitionManager.newContext.

A share session belongs to one (group, member): the share partitions the member
fetches from, and an epoch the client counts.

ShareFetch ShareSessionEpoch
- 0 (initial): a new session with the request's partitions, replacing any session
  of the member. Acknowledgements in it are INVALID_REQUEST (nothing can be
  acquired yet). A full cache (group.share.max.share.sessions) is
  SHARE_SESSION_LIMIT_REACHED. The session's epoch becomes 1.
- -1 (final): the member's session (SHARE_SESSION_NOT_FOUND without one) ends:
  the acknowledgements are applied, the session is removed and the records the
  member still holds are released; partitions to fetch are INVALID_REQUEST.
- n > 0: the member's session (SHARE_SESSION_NOT_FOUND without one) must be at
  epoch n (INVALID_SHARE_SESSION_EPOCH otherwise); the request's partitions are
  added, the forgotten ones removed, and the epoch moves to n + 1 (after
  2147483647 comes 1).
ShareAcknowledge ShareSessionEpoch
- 0: INVALID_SHARE_SESSION_EPOCH (acknowledging needs a session).
- -1: the session is removed (SHARE_SESSION_NOT_FOUND without one) after its
  acknowledgements are applied.
- n > 0: as ShareFetch, without changing the partitions.

A removed session (final epoch, replaced, its member gone, its connection
closed) is returned to the caller, which releases the records the member holds
in the session's share partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import (
    INVALID_REQUEST,
    INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    ShareError,
)

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
DEFAULT_MAX_SESSIONS = 2000  # group.share.max.share.sessions


class TopicIdPartition(NamedTuple):
    topic_id: uuid.UUID
    partition: int


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH or epoch < 0 else epoch + 1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1
    partitions: set[TopicIdPartition] = field(default_factory=set)
    connection_id: str | None = None
    created_ms: int = 0
    last_used_ms: int = 0


class FetchContext(NamedTuple):
    """What one ShareFetch works with: the session (None for a final fetch), whether
    the request was full (initial or final: every session partition is answered),
    and whether the session ends with it."""

    session: ShareSession | None
    full: bool
    final: bool
    replaced: ShareSession | None = None  # a previous session of the member, now removed


class ShareSessionCache:
    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS):
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def fetch_context(self, group_id: str, member_id: str, epoch: int, partitions: Iterable[TopicIdPartition],
                      forgotten: Iterable[TopicIdPartition] = (), has_acknowledgements: bool = False,
                      connection_id: str | None = None, now_ms: int = 0) -> FetchContext:
        """The session of one ShareFetch; ShareError when the epoch does not fit."""
        if not member_id:
            raise ShareError(INVALID_REQUEST, "ShareFetch without a member id")
        key = (group_id, member_id)
        wanted = set(partitions)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                raise ShareError(INVALID_REQUEST, "acknowledgements in the initial ShareFetch of a share session")
            replaced = self._sessions.pop(key, None)
            if len(self._sessions) >= self.max_sessions:
                if replaced is not None:
                    self._sessions[key] = replaced
                raise ShareError(SHARE_SESSION_LIMIT_REACHED,
                                 f"the broker has {self.max_sessions} share sessions (group.share.max.share.sessions)")
            session = self._sessions[key] = ShareSession(group_id, member_id, 1, wanted, connection_id, now_ms, now_ms)
            return FetchContext(session, True, False, replaced)
        if epoch == FINAL_EPOCH:
            if wanted:
                raise ShareError(INVALID_REQUEST, "a final ShareFetch (epoch -1) cannot fetch partitions")
            removed = self._sessions.pop(key, None)
            if removed is None:
                raise ShareError(SHARE_SESSION_NOT_FOUND, f"no share session of member {member_id} in group "
                                                          f"{group_id}")
            return FetchContext(None, True, True, removed)
        if epoch < FINAL_EPOCH:
            raise ShareError(INVALID_SHARE_SESSION_EPOCH, f"share session epoch {epoch} is invalid")
        session = self._current(key, epoch)
        session.partitions -= set(forgotten)
        session.partitions |= wanted
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return FetchContext(session, False, False)

    def acknowledge_context(self, group_id: str, member_id: str, epoch: int, now_ms: int = 0) -> FetchContext:
        """The session of one ShareAcknowledge; a final one is removed (the caller
        applies the acknowledgements, then releases what the member still holds)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            raise ShareError(INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session (epoch 0)")
        if epoch == FINAL_EPOCH:
            removed = self._sessions.pop(key, None)
            if removed is None:
                raise ShareError(SHARE_SESSION_NOT_FOUND, f"no share session of member {member_id} in group "
                                                          f"{group_id}")
            return FetchContext(None, True, True, removed)
        if epoch < FINAL_EPOCH:
            raise ShareError(INVALID_SHARE_SESSION_EPOCH, f"share session epoch {epoch} is invalid")
        session = self._current(key, epoch)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return FetchContext(session, False, False)

    def _current(self, key: tuple[str, str], epoch: int) -> ShareSession:
        session = self._sessions.get(key)
        if session is None:
            raise ShareError(SHARE_SESSION_NOT_FOUND, f"no share session of member {key[1]} in group {key[0]}")
        if session.epoch != epoch:
            raise ShareError(INVALID_SHARE_SESSION_EPOCH, f"share session epoch {epoch} of member {key[1]} is not "
                                                          f"the expected {session.epoch}")
        return session

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        """Forget the member's session (it left its group); the removed session."""
        return self._sessions.pop((group_id, member_id), None)

    def remove_group(self, group_id: str) -> list[ShareSession]:
        gone = [k for k in self._sessions if k[0] == group_id]
        return [self._sessions.pop(k) for k in gone]

    def on_connection_closed(self, connection_id: str) -> list[ShareSession]:
        """Remove the sessions opened on a closed connection; the removed sessions."""
        gone = [k for k, s in self._sessions.items() if s.connection_id == connection_id]
        return [self._sessions.pop(k) for k in gone]


__all__ = ["DEFAULT_MAX_SESSIONS", "FINAL_EPOCH", "INITIAL_EPOCH", "FetchContext", "ShareSession",
           "ShareSessionCache", "TopicIdPartition", "next_epoch"]
