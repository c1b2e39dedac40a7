"""Consumer-protocol groups as Kafka stores them in `__consumer_offsets`: the
coordinator records of Kafka's group coordinator (KIP-848), byte for byte.

    key   int16 record type | fields (non-flexible: int16-length strings)
    value int16 version 0   | fields (flexible: compact strings and arrays, uuid,
                              an empty tagged-field section after each struct)

    type 3 ConsumerGroupMetadata           (group)          Epoch:int32
    type 5 ConsumerGroupMemberMetadata     (group, member)  InstanceId?, RackId?, ClientId,
                                           ClientHost, SubscribedTopicNames:[string],
                                           SubscribedTopicRegex?, RebalanceTimeoutMs:int32,
                                           ServerAssignor?, tagged field 0: ClassicMemberMetadata
                                           (SessionTimeoutMs:int32, SupportedProtocols:
                                           [Name, Metadata:bytes]) of a classic-protocol member
    type 6 ConsumerGroupTargetAssignmentMetadata (group)    AssignmentEpoch:int32
    type 7 ConsumerGroupTargetAssignmentMember (group, member) TopicPartitions:[TopicId, [int32]]
    type 8 ConsumerGroupCurrentMemberAssignment (group, member) MemberEpoch:int32,
                                           PreviousMemberEpoch:int32, State:int8,
                                           AssignedPartitions, PartitionsPendingRevocation

`snapshot(group)` is every record of a group (key -> value); the coordinator
writes what differs from what it wrote last, tombstones for keys gone.
`load(records)` rebuilds the groups; topics that no longer exist are dropped
from assignments. Records of other kinds and unreadable ones are skipped.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping

from broker.state.internal_records import FieldReader, encode_uvarint

from .assignors import Partition
from .consumer_group import (
    MEMBER_STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)

GROUP_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 3, 5, 6, 7, 8
CLASSIC_MEMBER_TAG = 0
STATE_CODES = {MEMBER_STABLE: 0, UNREVOKED_PARTITIONS: 1, UNRELEASED_PARTITIONS: 2}
STATES = {code: name for name, code in STATE_CODES.items()}

I8, I16, I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")
VALUE_VERSION = I16.pack(0)
NO_TAGS = b"\x00"


# ---- encoding ---------------------------------------------------------------------------------


def _key(record_type: int, *fields: str) -> bytes:
    out = I16.pack(record_type)
    for text in fields:
        raw = text.encode("utf-8")
        out += I16.pack(len(raw)) + raw
    return out


def _compact_str(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode("utf-8")
    return encode_uvarint(len(raw) + 1) + raw


def _compact_bytes(raw: bytes) -> bytes:
    return encode_uvarint(len(raw) + 1) + raw


def _member_tags(classic: ClassicMetadata | None) -> bytes:
    """The tagged fields of a member record: ClassicMemberMetadata (tag 0) of a classic member."""
    if classic is None:
        return NO_TAGS
    body = I32.pack(classic.session_timeout_ms) + encode_uvarint(len(classic.protocols) + 1)
    body += b"".join(_compact_str(name) + _compact_bytes(metadata) + NO_TAGS for name, metadata in classic.protocols)
    body += NO_TAGS
    return encode_uvarint(1) + encode_uvarint(CLASSIC_MEMBER_TAG) + encode_uvarint(len(body)) + body


def _partitions(partitions: set[Partition], topic_id: Callable[[str], str | None]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    items = [(tid, sorted(indexes)) for topic, indexes in sorted(by_topic.items())
             if (tid := topic_id(topic))]
    out = encode_uvarint(len(items) + 1)
    for tid, indexes in items:
        out += uuid.UUID(tid).bytes + encode_uvarint(len(indexes) + 1)
        out += b"".join(I32.pack(i) for i in indexes) + NO_TAGS
    return out


def snapshot(group: ConsumerGroup, topic_id: Callable[[str], str | None]) -> dict[bytes, bytes]:
    gid = group.group_id
    out = {
        _key(GROUP_METADATA, gid): VALUE_VERSION + I32.pack(group.group_epoch) + NO_TAGS,
        _key(TARGET_METADATA, gid): VALUE_VERSION + I32.pack(group.assignment_epoch) + NO_TAGS,
    }
    for m in group.members.values():
        names = encode_uvarint(len(m.subscribed_names) + 1) + b"".join(_compact_str(n) for n in m.subscribed_names)
        out[_key(MEMBER_METADATA, gid, m.member_id)] = (
            VALUE_VERSION + _compact_str(m.instance_id) + _compact_str(m.rack_id) + _compact_str(m.client_id)
            + _compact_str(m.client_host) + names + _compact_str(m.subscribed_regex)
            + I32.pack(m.rebalance_timeout_ms) + _compact_str(m.server_assignor) + _member_tags(m.classic))
        out[_key(TARGET_MEMBER, gid, m.member_id)] = (
            VALUE_VERSION + _partitions(group.target.get(m.member_id, set()), topic_id) + NO_TAGS)
        out[_key(CURRENT_ASSIGNMENT, gid, m.member_id)] = (
            VALUE_VERSION + I32.pack(m.member_epoch) + I32.pack(m.previous_member_epoch)
            + I8.pack(STATE_CODES.get(m.state, 0)) + _partitions(m.assigned, topic_id)
            + _partitions(m.revoking, topic_id) + NO_TAGS)
    return out


# ---- decoding ---------------------------------------------------------------------------------


class _Reader(FieldReader):
    """A record field reader that also reads ConsumerGroup assignments."""

    def partitions(self, topic_name: Callable[[str], str | None]) -> set[Partition]:
        out: set[Partition] = set()
        for _ in range(self.uvarint() - 1):
            tid = str(uuid.UUID(bytes=self.take(16)))
            indexes = [self.fixed(I32) for _ in range(self.uvarint() - 1)]
            self.skip_tags()
            name = topic_name(tid)
            if name is not None:
                out.update((name, i) for i in indexes)
        return out

    def member_tags(self) -> ClassicMetadata | None:
        """A member record's tagged fields: its ClassicMemberMetadata, if any."""
        classic = None
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            field = _Reader(self.take(size))
            if tag == CLASSIC_MEMBER_TAG:
                session = field.fixed(I32)
                protocols = []
                for _ in range(field.uvarint() - 1):
                    name = field.compact_str() or ""
                    metadata = field.take(field.uvarint() - 1)
                    field.skip_tags()
                    protocols.append((name, metadata))
                classic = ClassicMetadata(session, tuple(protocols))
        return classic


def load(records: Mapping[bytes, bytes], topic_name: Callable[[str], str | None]) -> dict[str, ConsumerGroup]:
    groups: dict[str, ConsumerGroup] = {}
    members: dict[tuple[str, str], ConsumerMember] = {}

    def member(gid: str, mid: str) -> ConsumerMember:
        return members.setdefault((gid, mid), ConsumerMember(mid))

    for key, value in records.items():
        try:
            k = _Reader(key)
            kind = k.fixed(I16)
            gid = k.string()
            v = _Reader(value)
            if v.fixed(I16) != 0:
                continue
            group = groups.setdefault(gid, ConsumerGroup(gid))
            if kind == GROUP_METADATA:
                group.group_epoch = v.fixed(I32)
            elif kind == TARGET_METADATA:
                group.assignment_epoch = v.fixed(I32)
            elif kind == MEMBER_METADATA:
                m = member(gid, k.string())
                m.instance_id, m.rack_id = v.compact_str(), v.compact_str()
                m.client_id, m.client_host = v.compact_str() or "", v.compact_str() or ""
                m.subscribed_names = tuple(v.compact_str() or "" for _ in range(v.uvarint() - 1))
                m.subscribed_regex = v.compact_str()
                m.rebalance_timeout_ms = v.fixed(I32)
                m.server_assignor = v.compact_str()
                m.classic = v.member_tags()
            elif kind == TARGET_MEMBER:
                group.target[k.string()] = v.partitions(topic_name)
            elif kind == CURRENT_ASSIGNMENT:
                m = member(gid, k.string())
                m.member_epoch, m.previous_member_epoch = v.fixed(I32), v.fixed(I32)
                m.state = STATES.get(v.fixed(I8), MEMBER_STABLE)
                m.assigned = v.partitions(topic_name)
                m.revoking = v.partitions(topic_name)
        except (struct.error, IndexError, ValueError, UnicodeDecodeError):
            continue
    for (gid, _), m in sorted(members.items()):
        groups[gid].add(m)
    for group in groups.values():
        group.target = {mid: parts for mid, parts in group.target.items() if mid in group.members}
    return groups


__all__ = ["load", "snapshot"]
