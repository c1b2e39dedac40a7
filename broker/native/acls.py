"""ACLs: DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS (types 129-131, project extensions,
NATIVE.md "ACLs").

Contract: the broker's authorizer (broker/security/authorizer.py) keeps the ACLs,
shared with the Kafka listener's DescribeAcls/CreateAcls/DeleteAcls; describing
answers from memory, changes run in the executor. Without an authorizer every
one answers SECURITY_DISABLED. Who may call them (DESCRIBE / ALTER on the
cluster) is `Handlers`' check, as for every request.
"""

from __future__ import annotations

from broker.net.request_handlers import Reply
from protocol import (
    AclBinding,
    CreateAclsRequest,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeletedAcls,
    DescribeAclsRequest,
    DescribeAclsResponse,
    EmptyResponse,
    ErrorCode,
    encode_response,
)

from ..security.authorizer import Acl, AclFilter, SecurityDisabledError
from .base import NativeApiBase
from .session_state import NativeSession


class AclsApi(NativeApiBase):
    """DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS."""

    def _acls_enabled(self) -> None:
        if not self.authorizer.enabled:
            raise SecurityDisabledError("no authorizer is configured on the broker (authorizer.class.name)")

    async def describe_acls(self, req: DescribeAclsRequest, session: NativeSession) -> Reply:
        self._acls_enabled()
        found = self.authorizer.describe(AclFilter(*req.filter))
        acls = tuple(_binding(a) for a in found)
        return [encode_response(DescribeAclsResponse(ErrorCode.NONE, acls), session.version)]

    async def create_acls(self, req: CreateAclsRequest, session: NativeSession) -> Reply:
        self._acls_enabled()
        acls = [Acl(*binding) for binding in req.acls]
        for acl in acls:
            acl.check()  # one bad binding: INVALID_REQUEST naming it, nothing created
        await self.partitions.blocking(self.authorizer.create, acls)
        return [encode_response(EmptyResponse(ErrorCode.NONE), session.version)]

    async def delete_acls(self, req: DeleteAclsRequest, session: NativeSession) -> Reply:
        self._acls_enabled()
        removed = await self.partitions.blocking(self.authorizer.delete, [AclFilter(*f) for f in req.filters])
        return [encode_response(DeleteAclsResponse(ErrorCode.NONE, tuple(
            DeletedAcls(tuple(_binding(a) for a in acls)) for acls in removed)), session.version)]


def _binding(acl: Acl) -> AclBinding:
    return AclBinding(acl.resource_type, acl.name, acl.pattern_type, acl.principal, acl.host, acl.operation,
                      acl.permission)

