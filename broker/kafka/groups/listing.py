"""The classic groups as the admin APIs read them: ListGroups, DescribeGroups, and
the checks of DeleteGroups and OffsetDelete.

Contract: `ClassicGroupListing` is the read-only part of GroupCoordinator
(coordinator.py), which owns `groups` and every change to them (DeleteGroups'
`delete` included); these methods run on the loop and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from .group import (
    CLASSIC,
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP,
    NONE,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    GroupDescription,
    MemberDescription,
)


class ClassicGroupListing:
    """ListGroups, DescribeGroups and the DeleteGroups/OffsetDelete checks over `groups`."""

    groups: dict[str, Group]

    def list_groups(self, offsets_groups: Iterable[str] = (), states: Iterable[str] = (),
                    types: Iterable[str] = ()) -> list[tuple[str, str, str, str]]:
        """(group id, protocol type, state, type) of every group; groups that only have
        committed offsets are Empty with protocol type "" (as Kafka lists them)."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and CLASSIC not in wanted_types:
            return []
        found = {}
        for group_id in offsets_groups:
            found[group_id] = (group_id, "", EMPTY, CLASSIC)
        for group in self.groups.values():
            if group.is_(DEAD):
                continue
            found[group.group_id] = (group.group_id, group.protocol_type or "", group.state, CLASSIC)
        return [row for _, row in sorted(found.items())
                if not wanted_states or row[2].lower() in wanted_states]

    def describe(self, group_id: str, has_offsets: bool = False) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            if has_offsets:
                return GroupDescription(NONE, group_id, EMPTY, "", "")
            return GroupDescription(GROUP_ID_NOT_FOUND, group_id, DEAD, "", "")
        stable = group.is_(STABLE)
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.metadata(group.protocol_name) if stable else b"",
                              m.assignment if stable else b"")
            for m in group.members.values())
        return GroupDescription(NONE, group_id, group.state, group.protocol_type or "",
                                (group.protocol_name or "") if stable else "", members)

    def validate_delete(self, group_id: str, has_offsets: bool) -> int:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return NONE if has_offsets else GROUP_ID_NOT_FOUND
        if group.state in (STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE):
            return NON_EMPTY_GROUP
        return NONE

    def is_active(self, group_id: str) -> bool:
        """True while the group has members (OffsetDelete refuses those of a classic group)."""
        group = self.groups.get(group_id)
        return group is not None and group.state in (STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE)
