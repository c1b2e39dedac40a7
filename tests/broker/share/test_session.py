"""The share session cache (broker/share/session.py): ShareFetch / ShareAcknowledge
session epochs and KIP-932's error codes."""

import uuid

import pytest

from broker.share.errors import (
    INVALID_REQUEST,
    INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    ShareError,
)
from broker.share.session import MAX_EPOCH, ShareSessionCache, TopicIdPartition, next_epoch

T = uuid.UUID(int=7)
P0, P1, P2 = (TopicIdPartition(T, i) for i in range(3))


def code_of(call):
    with pytest.raises(ShareError) as e:
        call()
    assert e.value.message
    return e.value.code


def test_initial_incremental_and_final_fetch():
    cache = ShareSessionCache()
    ctx = cache.fetch_context("g", "m", 0, [P0, P1], connection_id="c1")
    assert ctx.full and not ctx.final and ctx.session.epoch == 1 and ctx.session.partitions == {P0, P1}
    ctx = cache.fetch_context("g", "m", 1, [P2], forgotten=[P0], has_acknowledgements=True)
    assert not ctx.full and ctx.session.epoch == 2 and ctx.session.partitions == {P1, P2}
    ctx = cache.fetch_context("g", "m", -1, [], has_acknowledgements=True)
    assert ctx.final and ctx.session is None and ctx.replaced.partitions == {P1, P2}
    assert len(cache) == 0
    # A final fetch needs a session.
    assert code_of(lambda: cache.fetch_context("g", "m", -1, [])) == SHARE_SESSION_NOT_FOUND


def test_fetch_epoch_errors():
    cache = ShareSessionCache()
    assert code_of(lambda: cache.fetch_context("g", "m", 1, [P0])) == SHARE_SESSION_NOT_FOUND
    cache.fetch_context("g", "m", 0, [P0])
    assert code_of(lambda: cache.fetch_context("g", "m", 2, [P0])) == INVALID_SHARE_SESSION_EPOCH
    assert code_of(lambda: cache.fetch_context("g", "m", -5, [P0])) == INVALID_SHARE_SESSION_EPOCH
    assert code_of(lambda: cache.fetch_context("g", "m", 0, [P0], has_acknowledgements=True)) == INVALID_REQUEST
    assert code_of(lambda: cache.fetch_context("g", "m", -1, [P0])) == INVALID_REQUEST
    assert code_of(lambda: cache.fetch_context("g", "", 0, [P0])) == INVALID_REQUEST
    assert cache.get("g", "m").epoch == 1  # refused requests changed nothing
    # Another member's session is its own.
    assert code_of(lambda: cache.fetch_context("g", "other", 1, [P0])) == SHARE_SESSION_NOT_FOUND


def test_initial_fetch_replaces_the_members_session():
    cache = ShareSessionCache()
    cache.fetch_context("g", "m", 0, [P0])
    cache.fetch_context("g", "m", 1, [])
    ctx = cache.fetch_context("g", "m", 0, [P1])
    assert ctx.replaced.partitions == {P0} and ctx.session.epoch == 1 and len(cache) == 1


def test_session_limit():
    cache = ShareSessionCache(max_sessions=2)
    cache.fetch_context("g", "a", 0, [P0])
    cache.fetch_context("g", "b", 0, [P0])
    assert code_of(lambda: cache.fetch_context("g", "c", 0, [P0])) == SHARE_SESSION_LIMIT_REACHED
    cache.fetch_context("g", "a", 0, [P1])  # replacing one's own session fits
    assert cache.get("g", "a").partitions == {P1}


def test_acknowledge_epochs():
    cache = ShareSessionCache()
    assert code_of(lambda: cache.acknowledge_context("g", "m", 0)) == INVALID_SHARE_SESSION_EPOCH
    assert code_of(lambda: cache.acknowledge_context("g", "m", 1)) == SHARE_SESSION_NOT_FOUND
    assert code_of(lambda: cache.acknowledge_context("g", "m", -1)) == SHARE_SESSION_NOT_FOUND
    cache.fetch_context("g", "m", 0, [P0])
    assert cache.acknowledge_context("g", "m", 1).session.epoch == 2
    assert code_of(lambda: cache.acknowledge_context("g", "m", 1)) == INVALID_SHARE_SESSION_EPOCH
    assert cache.fetch_context("g", "m", 2, []).session.epoch == 3
    ctx = cache.acknowledge_context("g", "m", -1)
    assert ctx.final and ctx.replaced.partitions == {P0} and cache.get("g", "m") is None


def test_epoch_wraps_to_one():
    assert next_epoch(1) == 2 and next_epoch(MAX_EPOCH) == 1
    cache = ShareSessionCache()
    cache.fetch_context("g", "m", 0, [P0]).session.epoch = MAX_EPOCH
    assert cache.fetch_context("g", "m", MAX_EPOCH, []).session.epoch == 1


def test_connection_close_and_member_removal():
    cache = ShareSessionCache()
    cache.fetch_context("g", "a", 0, [P0], connection_id="c1")
    cache.fetch_context("g", "b", 0, [P0], connection_id="c2")
    cache.fetch_context("h", "a", 0, [P0], connection_id="c1")
    assert sorted((s.group_id, s.member_id) for s in cache.on_connection_closed("c1")) == [("g", "a"), ("h", "a")]
    assert cache.remove("g", "b").member_id == "b" and cache.remove("g", "b") is None
