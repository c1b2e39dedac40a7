"""Authorized operations (KIP-430): the bit sets that Metadata, DescribeCluster and
DescribeGroups answer when a client asks for them.

A bit set has bit `code` set for each allowed AclOperation (READ=3 ... bit 3).
Kafka computes it as the resource type's supported operations (AclEntry's
supportedOperations) filtered by the authorizer; without one, every supported
operation is allowed. With ACLs on, each is asked of the broker's authorizer
(broker/security/authorizer.py) for the request's connection.
"""

from __future__ import annotations

from typing import Any

from ..security.authorizer import CLUSTER_NAME, Op, Resource

# Kafka's AclOperation and ResourceType, as the authorizer defines them.
AclOperation = Op
ResourceType = Resource

_OP = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_OP.READ, _OP.WRITE, _OP.CREATE, _OP.DESCRIBE, _OP.DELETE, _OP.ALTER,
                                   _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_OP.READ, _OP.DESCRIBE, _OP.DELETE, _OP.DESCRIBE_CONFIGS,
                                   _OP.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({_OP.CREATE, _OP.CLUSTER_ACTION, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS,
                                     _OP.IDEMPOTENT_WRITE, _OP.ALTER, _OP.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_OP.DESCRIBE, _OP.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_OP.DESCRIBE}),
    ResourceType.USER: frozenset({_OP.CREATE_TOKENS, _OP.DESCRIBE_TOKENS}),
}

# The field's value when the client did not ask (Integer.MIN_VALUE in Kafka's schemas).
OMITTED = -2**31
__all__ = ["CLUSTER_NAME", "OMITTED", "SUPPORTED_OPERATIONS", "AclOperation", "ResourceType",
           "authorized_operations", "requested", "to_bits"]


def to_bits(operations) -> int:
    """Kafka's Utils.to32BitField."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def authorized_operations(resource_type: ResourceType, name: str, ctx: Any = None) -> int:
    """The bit set of the operations the request's connection may perform on the
    resource (every supported one when authorization is off)."""
    authorizer = ctx.apis.partitions.authorizer if ctx is not None else None
    if authorizer is None or not authorizer.enabled:
        return to_bits(SUPPORTED_OPERATIONS[resource_type])
    connection = ctx.connection
    return to_bits(op for op in SUPPORTED_OPERATIONS[resource_type]
                   if authorizer.authorize(connection, op, resource_type, name))


def requested(asked: bool, resource_type: ResourceType, name: str, ctx: Any = None) -> int:
    """The response field: the bit set when the request asked for it, else OMITTED."""
    return authorized_operations(resource_type, name, ctx) if asked else OMITTED
