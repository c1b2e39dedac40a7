"""A PartitionService over the in-memory store (memory_store.py), and the native
and Kafka adapters over it, on the test's loop: no files, no sockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest_asyncio
import structlog

from broker.config.broker_config import BrokerConfig
from broker.core import PartitionService
from broker.kafka import handlers as core_handlers
from broker.kafka.apis import KafkaApis
from broker.kafka.producer_ids import ProducerIdAllocator
from broker.native import Handlers, SessionHandlers
from broker.net.bad_request_log import BadRequestLog
from broker.net.listeners import ConnectionContext

from .memory_store import MemoryStore


@dataclass
class Core:
    store: MemoryStore
    service: PartitionService
    native: SessionHandlers
    kafka: KafkaApis
    connection: ConnectionContext


@pytest_asyncio.fixture
async def core() -> AsyncIterator[Core]:
    loop = asyncio.get_running_loop()
    store = MemoryStore()
    config = BrokerConfig.load(data_dir="memory", environ={})
    bad_requests = BadRequestLog(structlog.get_logger("tests"))
    with ThreadPoolExecutor(1) as executor:
        service = PartitionService(config, store, store, executor, loop)  # type: ignore[arg-type]
        connection = ConnectionContext(None)
        native = Handlers(service, bad_requests).for_connection(connection)
        kafka = KafkaApis(service, bad_requests)
        # the core APIs only; no test here allocates a producer id
        core_handlers.register(kafka, producer_ids=ProducerIdAllocator(None, service.blocking))  # type: ignore[arg-type]
        yield Core(store, service, native, kafka, connection)
