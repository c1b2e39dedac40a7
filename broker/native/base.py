"""What the native request modules share: `NativeApiBase`, the state every one of
them reads (the partition service and what it holds: config, topic registry,
authorizer, committed offsets, loop) and the ACL question `_may`.

Contract: the per-job modules (produce.py, fetch.py, offsets.py, topics.py,
configs.py, handshake.py, acls.py) subclass `NativeApiBase`; handlers.py composes
them into `Handlers`, which the native listener serves. Every partition-level
policy is the partition service's (broker/core/service.py); these modules parse,
call it and encode.
"""

from __future__ import annotations

import structlog

from broker.net.bad_request_log import BadRequestLog
from broker.net.listeners import ConnectionContext
from broker.state.group_offsets import GroupOffsets

from ..core import PartitionService
from ..security.authorizer import Op, Resource

log = structlog.get_logger("strata.handlers")


class NativeApiBase:
    """The state and the ACL question the native request modules share."""

    def __init__(self, partitions: PartitionService, bad_requests: BadRequestLog):
        self.partitions = partitions
        self.authorizer = partitions.authorizer  # ACLs (broker/security/authorizer.py)
        self.config = partitions.config
        self.registry = partitions.registry
        self.loop = partitions.loop
        # Bad requests of both listeners, logged rate-limited (broker/net/bad_request_log.py).
        self.bad_requests = bad_requests

    @property
    def offsets(self) -> GroupOffsets:
        return self.partitions.offsets

    def _may(self, conn: ConnectionContext, operation: Op, resource_type: Resource, name: str) -> bool:
        return self.authorizer.authorize(conn, operation, resource_type, name)


__all__ = ["NativeApiBase", "log"]
