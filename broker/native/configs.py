"""Topic configs: DESCRIBE_CONFIG and ALTER_CONFIG.

Contract: a topic's configs are the topic registry's (broker/state/topic_registry.py, which
persists them and checks every key and value with Kafka's rules); describing
answers from memory, altering runs in the executor.
"""

from __future__ import annotations

from broker.net.request_handlers import Reply
from protocol import (
    AlterConfigRequest,
    DescribeConfigRequest,
    DescribeConfigResponse,
    EmptyResponse,
    ErrorCode,
    encode_response,
)

from .base import NativeApiBase
from .session_state import NativeSession


class ConfigsApi(NativeApiBase):
    """DESCRIBE_CONFIG, ALTER_CONFIG."""

    async def describe_config(self, req: DescribeConfigRequest, session: NativeSession) -> Reply:
        configs = self.registry.describe(req.topic)
        return [encode_response(DescribeConfigResponse(ErrorCode.NONE, tuple(sorted(configs.items()))))]

    async def alter_config(self, req: AlterConfigRequest, session: NativeSession) -> Reply:
        await self.partitions.blocking(self.registry.alter, req.topic, req.configs)
        return [encode_response(EmptyResponse(ErrorCode.NONE))]
