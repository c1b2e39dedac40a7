"""Named authorization rules both protocols ask (the ACLs themselves live in
broker/security/authorizer.py): a rule that takes more than one ACL check is
written once here.
"""

from __future__ import annotations

from broker.net.listeners import ConnectionContext

from ..security.authorizer import CLUSTER_NAME, Authorizer, Op, Resource


def may_create_topic(authorizer: Authorizer, context: ConnectionContext, topic: str) -> bool:
    """Whether the connection may create `topic` (CreateTopics, Metadata's
    auto-creation, native CREATE_TOPIC and METADATA): CREATE on the cluster or on
    the topic, as Kafka's AuthHelper for CreateTopics."""
    return (authorizer.authorize(context, Op.CREATE, Resource.CLUSTER, CLUSTER_NAME)
            or authorizer.authorize(context, Op.CREATE, Resource.TOPIC, topic))
