"""The Kafka listener's request types, shared by the dispatcher (apis.py) and every API module.

`ApiKey` names the API keys Strata serves; `RequestContext` is what a handler gets
beside its request; `DECLINE` is what a `now` handler returns when the request
needs waiting (broker/kafka/__init__.py describes the interface).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from broker.net.handler_clock import HandlerClock
from broker.net.listeners import ConnectionContext


class ApiKey(IntEnum):
    """Kafka's API keys (org.apache.kafka.common.protocol.ApiKeys) that Strata serves."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


API_VERSIONS = ApiKey.API_VERSIONS
# What a connection on a SASL listener may send before it has authenticated (Kafka's
# SaslServerAuthenticator); anything else closes the connection.
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
NODE_ID = 0
Handler = Callable[[Any, "RequestContext"], Awaitable[Any]]
HandlerNow = Callable[[Any, "RequestContext"], Any]


class _Decline:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DECLINE"


# What a `now` handler returns when the request needs waiting (the executor, a long
# poll): it has done nothing, and the request goes to the async handler.
DECLINE = _Decline()


@dataclass(slots=True)
class RequestContext:
    header: Any  # kio RequestHeader (v1 or v2)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: Any
    apis: Any  # the KafkaApis serving it (broker/kafka/apis.py)
    response_class: type = field(repr=False)
    connection: ConnectionContext  # listener, security protocol, client certificate
    # request_percentage quotas (broker/net/handler_clock.py): the handler's time on the loop,
    # None while no such quota is set; `charged` once a handler (Produce, Fetch) charged it.
    clock: HandlerClock | None = None
    charged: bool = False

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) Metadata and FindCoordinator answer: the advertised address of
        the listener the client connected to, as Kafka does."""
        listener = self.connection.listener
        return listener.advertised if listener is not None else self.apis.advertised


__all__ = ["API_VERSIONS", "BEFORE_AUTHENTICATION", "DECLINE", "NODE_ID", "ApiKey", "Handler", "HandlerNow",
           "RequestContext"]
