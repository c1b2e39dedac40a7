"""The consumer coordinator's epochs and target assignment (a part of
ConsumerGroupCoordinator, consumer_coordinator.py): the topics each member's
subscription resolves to (names, and a regex's matches the member may describe), the
group epoch bumped when they change, and the target assignment computed with the
assignor the members ask for most (assignors.py)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import structlog

from . import assignors
from .assignors import Partition
from .consumer_errors import INVALID_REGULAR_EXPRESSION, HeartbeatError
from .consumer_group import ConsumerGroup, ConsumerMember
from .consumer_heartbeat import not_re2

log = structlog.get_logger("strata.kafka.consumer_groups")


class TargetAssignment:
    """Subscribed topics, group epochs and target assignments of consumer groups."""

    topics: Callable[[], Mapping[str, int]]
    _topic_id: Callable[[str], str | None]
    _regexes: dict[str, re.Pattern]

    if TYPE_CHECKING:  # what ConsumerGroupCoordinator supplies
        @property
        def assignor_names(self) -> list[str]: ...
        def partition_racks(self, partition: Partition) -> frozenset[str]: ...

    def _regex(self, text: str) -> re.Pattern:
        pattern = self._regexes.get(text)
        if pattern is None:
            problem = not_re2(text)
            try:
                pattern = re.compile(text)
            except re.error as e:
                problem = str(e)
            if problem is not None or pattern is None:
                raise HeartbeatError(INVALID_REGULAR_EXPRESSION,
                                     f"SubscribedTopicRegex `{text}` is not a valid regular expression: {problem}.")
            self._regexes[text] = pattern
        return pattern

    @staticmethod
    def _bump(group: ConsumerGroup, reason: str) -> None:
        group.group_epoch += 1
        log.debug("consumer_group_epoch", group=group.group_id, epoch=group.group_epoch, reason=reason)

    def subscribed_topics(self, member: ConsumerMember, counts: Mapping[str, int]) -> set[str]:
        """The existing topics of the member's subscription: its names, and the
        topics its regex matches that it may describe."""
        topics = {t for t in member.subscribed_names if t in counts}
        if member.subscribed_regex:
            pattern = self._regex(member.subscribed_regex)
            may_describe = member.may_describe
            topics.update(t for t in counts if pattern.fullmatch(t) and (may_describe is None or may_describe(t)))
        return topics

    def _refresh_topics(self, group: ConsumerGroup) -> bool:
        """Note the subscribed topics' partition counts and ids, and each member's
        topics; True when any of them changed. A topic deleted and created again (a
        new id) is new: its partitions leave every assignment, to be assigned
        afresh, and every member is sent its assignment."""
        counts = self.topics()
        wanted: set[str] = set()
        members_changed = False
        for m in group.members.values():
            resolved = frozenset(self.subscribed_topics(m, counts))
            if resolved != m.resolved_topics:
                members_changed = members_changed or m.resolved_topics is not None
                m.resolved_topics = resolved
            wanted |= resolved
        current = {t: counts[t] for t in sorted(wanted)}
        ids = {t: self._topic_id(t) for t in current}
        recreated = {t for t, tid in ids.items() if group.topic_ids.get(t) not in (None, tid)}
        if recreated:
            for m in group.members.values():
                m.assigned = {p for p in m.assigned if p[0] not in recreated}
                m.revoking = {p for p in m.revoking if p[0] not in recreated}
                m.resend = True
            group.target = {mid: {p for p in parts if p[0] not in recreated} for mid, parts in group.target.items()}
            log.info("consumer_group_topics_recreated", group=group.group_id, topics=sorted(recreated))
        group.topic_ids = ids
        if current == group.topic_partitions and not recreated and not members_changed:
            return False
        group.topic_partitions = current
        return True

    def _compute_target(self, group: ConsumerGroup) -> None:
        counts = group.topic_partitions
        subscriptions = {m.member_id: self.subscribed_topics(m, counts) for m in group.members.values()}
        asked = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        name = asked.most_common(1)[0][0] if asked else self.assignor_names[0]
        group.target = assignors.assign(name, subscriptions, group.target, counts,
                                        {m.member_id: m.rack_id for m in group.members.values()},
                                        self.partition_racks)
        group.assignor_name = name
        group.assignment_epoch = group.group_epoch
        log.info("consumer_group_target_assignment", group=group.group_id, epoch=group.assignment_epoch,
                 assignor=name, members=len(group.members))
