"""`allowed(ctx, ...)`: the ACL check every Kafka handler makes for its request's
connection, over the broker's one authorizer (broker/security/authorizer.py);
with authorization off everything is allowed."""

from __future__ import annotations

from typing import Any

from ..security.authorizer import CLUSTER_NAME, Resource


def allowed(ctx: Any, operation: int, resource_type: int, name: str) -> bool:
    """Whether the request's connection may perform `operation` on the resource."""
    authorizer = ctx.apis.partitions.authorizer
    return not authorizer.enabled or authorizer.authorize(ctx.connection, operation, resource_type, name)


def allowed_cluster(ctx: Any, operation: int) -> bool:
    return allowed(ctx, operation, Resource.CLUSTER, CLUSTER_NAME)


__all__ = ["allowed", "allowed_cluster"]
