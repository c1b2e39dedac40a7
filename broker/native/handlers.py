"""The native protocol's request handlers: parse, call the partition service, encode.

Contract:
- `Handlers` composes the per-job modules, one job each, and is what the native
  listener serves (broker/app.py):

      base.py       what they share: the partition service's state, the ACL question
      session_state.py  one connection's session (the version in force): `NativeSession`
      session.py    one connection's dispatch (SASL gate, quotas, fast path): `SessionHandlers`
      produce.py    PRODUCE, MULTIPRODUCE, the PRODUCE fast path and streamed executor appends
      fetch.py      FETCH (long polls, isolation levels), MULTIFETCH, the FETCH fast path
      offsets.py    OFFSETS, COMMIT_OFFSET, FETCH_OFFSET
      topics.py     CREATE_TOPIC, DELETE_TOPIC, DELETE_RECORDS, METADATA (auto-creation)
      configs.py    DESCRIBE_CONFIG, ALTER_CONFIG
      handshake.py  HANDSHAKE, SASL_AUTHENTICATE (version 2)
      acls.py       DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS
      listeners.py  DESCRIBE_LISTENERS (where both protocols' listeners are)

- Each connection serves its own `SessionHandlers` (`for_connection(context)`,
  broker/native/session.py), which hands every frame to these shared handlers with
  the connection's `NativeSession`: its ConnectionContext (`session.context`) and
  the version in force (1 until a HANDSHAKE), which picks the request and response
  layouts and how errors are answered.
- `Handlers.handle(frame, session)` takes one frame (type + body, as
  FrameReader yields it) and returns the reply as a list of parts, in order:
  `bytes`, or a `FileSlice` of a segment file that the server sends with sendfile.
  The server releases every slice once sent (or when the connection dies).
  `handle` never raises (except CancelledError): a malformed request answers its
  ProtocolError code, a storage error its code and reason
  (`PartitionService.error_answer`, the Kafka listener's words), anything
  unexpected UNKNOWN_SERVER_ERROR (-1) with a `request_failed` error log; the
  connection always survives. From version 2 on every error answer carries its
  reason (`session.error`).
- With ACLs on (`PartitionService.authorizer`, broker/security/authorizer.py),
  every request is checked for its connection before it runs, as its Kafka
  counterpart (`_authorize`; NATIVE.md "ACLs"), the fast paths included; the
  ACL types 129-131 manage the ACLs.
- Every partition-level policy (finding logs, inline versus executor appends and
  the slow-disk back-off, on-loop reads, long polls, error codes) is the
  partition service's (broker/core/service.py), shared with the Kafka listener.
  Blocking work (timestamp lookups, topic changes, commits) runs in the executor
  through it; answers from memory (log end, log start, metadata, committed
  offsets) run inline.
- The server's fast path (`FastPath`, broker/net/connection.py):
  `SessionHandlers.handle_now(frame)` is `handle` for what needs no waiting (a
  PRODUCE appended inline, `produce_now`; a FETCH with data or nothing to wait
  for, `fetch_now`), called straight from the socket callback when the
  connection is idle; `run_key` / `begin` (produce.py) stream pipelined
  PRODUCEs that go to the executor into the partition's appender, so consecutive
  PRODUCEs to one partition cost one executor hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from broker.net.bad_request_log import BadRequestLog
from broker.net.listeners import ConnectionContext, Listener
from broker.net.request_handlers import CloseConnection, PerConnection, Reply
from kafka_format.errors import StrataError
from protocol import (
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateAclsRequest,
    CreateTopicRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    DescribeAclsRequest,
    DescribeConfigRequest,
    DescribeListenersRequest,
    ErrorCode,
    FetchOffsetRequest,
    FetchRequest,
    HandshakeRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    ProtocolError,
    SaslAuthenticateRequest,
    parse_request,
)

from ..core import PartitionService
from ..core.authorization import may_create_topic
from ..security.authorizer import (
    CLUSTER_NAME,
    ClusterAuthorizationError,
    GroupAuthorizationError,
    Op,
    Resource,
    TopicAuthorizationError,
)
from .acls import AclsApi
from .base import log
from .configs import ConfigsApi
from .fetch import FetchApi
from .handshake import HandshakeApi
from .listeners import ListenersApi
from .offsets import OffsetsApi
from .produce import ProduceApi
from .session import SessionHandlers
from .session_state import NativeSession
from .topics import TopicsApi

# The topic operation each one-topic request needs (the Kafka request's).
TOPIC_OPERATIONS: dict[type, Op] = {
    ProduceRequest: Op.WRITE,
    FetchRequest: Op.READ,
    OffsetsRequest: Op.DESCRIBE,
    DeleteTopicRequest: Op.DELETE,
    DescribeConfigRequest: Op.DESCRIBE_CONFIGS,
    AlterConfigRequest: Op.ALTER_CONFIGS,
    DeleteRecordsRequest: Op.DELETE,
}


class Handlers(ProduceApi, FetchApi, OffsetsApi, TopicsApi, ConfigsApi, HandshakeApi, AclsApi, ListenersApi,
               PerConnection):
    """The native protocol's request handlers, shared by the connections of its
    listener; each connection serves a `SessionHandlers` view (`for_connection`)."""

    def __init__(self, partitions: PartitionService, bad_requests: BadRequestLog,
                 listeners: Sequence[Listener] = ()):
        super().__init__(partitions, bad_requests)
        self.listeners = list(listeners)  # every listener of the broker, bound (DESCRIBE_LISTENERS)
        self._dispatch: dict[type, Callable[[Any, NativeSession], Awaitable[Reply]]] = {
            ProduceRequest: self.produce,
            FetchRequest: self.fetch,
            MultiFetchRequest: self.multifetch,
            MultiProduceRequest: self.multiproduce,
            OffsetsRequest: self.offsets_request,
            CreateTopicRequest: self.create_topic,
            DeleteTopicRequest: self.delete_topic,
            MetadataRequest: self.metadata,
            DescribeConfigRequest: self.describe_config,
            AlterConfigRequest: self.alter_config,
            DeleteRecordsRequest: self.delete_records,
            CommitOffsetRequest: self.commit_offset,
            FetchOffsetRequest: self.fetch_offset,
            HandshakeRequest: self.handshake,
            SaslAuthenticateRequest: self.sasl_authenticate,
            DescribeAclsRequest: self.describe_acls,
            CreateAclsRequest: self.create_acls,
            DeleteAclsRequest: self.delete_acls,
            DescribeListenersRequest: self.describe_listeners,
        }

    # ---- entry point (SessionHandlers, per connection) -------------------------------------------

    def for_connection(self, context: ConnectionContext) -> SessionHandlers:
        return SessionHandlers(self, context)

    async def handle(self, frame, session: NativeSession) -> Reply:
        conn = session.context
        try:
            request = parse_request(frame, session.version)
        except ProtocolError as e:
            self.bad_requests.record(conn.peer, "bad_request", error=str(e), peer=conn.peer)
            return session.error(e.code, e.message)
        try:
            if self.authorizer.enabled:
                denied = self._authorize(request, conn)
                if denied:
                    return await self._dispatch_checked(request, session, denied)
            return await self._dispatch[type(request)](request, session)
        except StrataError as e:
            return session.error(*self.partitions.error_answer(e))
        except (asyncio.CancelledError, CloseConnection):
            raise
        except Exception:
            log.exception("request_failed", request=type(request).__name__)
            return session.error(ErrorCode.UNKNOWN_SERVER_ERROR)

    # ---- authorization --------------------------------------------------------------------------

    def _authorize(self, request, conn: ConnectionContext) -> frozenset[int]:
        """The ACL check of a request, as the Kafka listener checks the matching Kafka
        request: raises the authorization error of a one-resource request; returns
        the indexes of a MULTIFETCH's or MULTIPRODUCE's items the connection may not
        READ / WRITE (each is answered TOPIC_AUTHORIZATION_FAILED)."""
        may = self._may
        if isinstance(request, MultiFetchRequest):
            return frozenset(i for i, fetched in enumerate(request.items)
                             if not may(conn, Op.READ, Resource.TOPIC, fetched.topic))
        if isinstance(request, MultiProduceRequest):
            return frozenset(i for i, produced in enumerate(request.items)
                             if not may(conn, Op.WRITE, Resource.TOPIC, produced.topic))
        if isinstance(request, CommitOffsetRequest | FetchOffsetRequest):
            operation = Op.READ if isinstance(request, CommitOffsetRequest) else Op.DESCRIBE
            if not may(conn, operation, Resource.GROUP, request.group):
                raise GroupAuthorizationError(f"not authorized to use group {request.group!r}")
            if not may(conn, operation, Resource.TOPIC, request.topic):
                raise TopicAuthorizationError(f"not authorized to access topic {request.topic!r}")
            return frozenset()
        if isinstance(request, DescribeAclsRequest | CreateAclsRequest | DeleteAclsRequest):
            operation = Op.DESCRIBE if isinstance(request, DescribeAclsRequest) else Op.ALTER
            if not may(conn, operation, Resource.CLUSTER, CLUSTER_NAME):
                raise ClusterAuthorizationError(f"not authorized to {operation.name} the cluster's ACLs")
            return frozenset()
        if isinstance(request, CreateTopicRequest):
            if not may_create_topic(self.authorizer, conn, request.topic):
                raise TopicAuthorizationError(f"not authorized to create topic {request.topic!r}")
            return frozenset()
        needed = TOPIC_OPERATIONS.get(type(request))
        topic = getattr(request, "topic", "")
        if needed is not None and not may(conn, needed, Resource.TOPIC, topic):
            raise TopicAuthorizationError(f"not authorized to {needed.name} topic {topic!r}")
        return frozenset()

    async def _dispatch_checked(self, request, session: NativeSession, denied: frozenset[int]) -> Reply:
        """A MULTIFETCH or MULTIPRODUCE with items the ACLs refuse."""
        if isinstance(request, MultiFetchRequest):
            return await self.multifetch(request, session, denied)
        return await self.multiproduce(request, session, denied)

    def begin_shutdown(self) -> None:
        """Answer every long-poll FETCH now and make new ones answer at once."""
        self.partitions.begin_shutdown()


__all__ = ["TOPIC_OPERATIONS", "Handlers"]
