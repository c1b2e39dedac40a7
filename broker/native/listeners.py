"""DESCRIBE_LISTENERS (type 160, a project extension, NATIVE.md "Listeners"): where the
broker's listeners of both protocols are, so a client that reached one finds the other.

Contract: `ListenersApi.listeners` is every listener of the broker, Kafka's first,
bound (`Handlers` is given them by broker/compose.py). `describe_listeners` answers each as
(protocol "kafka" or "native", name, security protocol, host, port): the address its
`[native.]advertised.listeners` entry gives (port 0 = the bound port), else the bound
address; a host of "" stands for the host the client reached the broker at (a
listener on every address, or an advertised entry without a host). It needs no ACL,
as Kafka's DescribeCluster and Metadata's broker list need none; on a SASL listener
it is answered after authentication, as every request.
"""

from __future__ import annotations

from broker.net.listeners import Listener
from broker.net.request_handlers import Reply
from protocol import DescribeListenersRequest, DescribeListenersResponse, ErrorCode, ListenerInfo, encode_response

from .base import NativeApiBase
from .session_state import NativeSession


class ListenersApi(NativeApiBase):
    """DESCRIBE_LISTENERS."""

    listeners: list[Listener]  # given to Handlers

    async def describe_listeners(self, req: DescribeListenersRequest, session: NativeSession) -> Reply:
        infos = tuple(ListenerInfo(listener.spec.protocol, listener.name, listener.security_protocol,
                                   *listener.described)
                      for listener in self.listeners if listener.address is not None)
        return [encode_response(DescribeListenersResponse(ErrorCode.NONE, infos), session.version)]
