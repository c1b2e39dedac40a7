"""The core Kafka APIs over Strata's logs: one coroutine per API, every version.

Each handler takes the kio request of the version that arrived and builds the
response class of that version with `codec.make` (fields a version lacks are
dropped), so one body serves every supported version. See KAFKA.md for the
supported versions and the decisions.

Contract: `CoreHandlers(apis, producer_ids=..., transactions=...)` composes the
per-API modules, one job each; `register(apis, ...)` (called by broker/compose.py)
makes it and registers its handlers with KafkaApis, and returns it: the
transaction handlers answer a non-transactional InitProducerId with its
`init_producer_id`. `producer_ids` is the producer-id allocator
(producer_ids.py); `transactions` the TransactionCoordinator that checks a
transactional first write to a partition (None: no check).

    core_api.py      what they share: the state, `Target` (a partition resolved), quotas' throttle
    api_versions.py  ApiVersions
    metadata.py      Metadata, with topic auto-creation
    produce.py       Produce (and its fast path)
    fetch.py         Fetch (and its fast path), fetch sessions, isolation levels
    list_offsets.py  ListOffsets
    topic_admin.py   CreateTopics, DeleteTopics, DeleteRecords
    configs.py       DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
    producer_ids.py  InitProducerId (idempotent producers), the producer-id allocator
"""

from __future__ import annotations

from typing import Any

from . import produce_response
from .api_versions import ApiVersionsApi
from .configs import ConfigsApi
from .fetch import FetchApi
from .list_offsets import ListOffsetsApi
from .metadata import MetadataApi
from .produce import ProduceApi
from .producer_ids import ProducerIdAllocator, ProducerIdsApi
from .request_types import ApiKey
from .topic_admin import TopicAdminApi


class CoreHandlers(ApiVersionsApi, MetadataApi, ProduceApi, FetchApi, ListOffsetsApi, TopicAdminApi, ConfigsApi,
                   ProducerIdsApi):
    """The core APIs, registered as one."""

    def __init__(self, apis, *, producer_ids: ProducerIdAllocator, transactions: Any = None):
        self.producer_ids = producer_ids
        self.transactions = transactions
        super().__init__(apis)

    def register_all(self) -> None:
        r = self.apis.register
        r(ApiKey.API_VERSIONS, self.api_versions, 0, 4)
        r(ApiKey.METADATA, self.metadata, 0, 13)
        r(ApiKey.PRODUCE, self.produce, produce_response.MIN_VERSION, produce_response.MAX_VERSION,
          now=self.produce_now)  # every version the hand-written answer covers
        r(ApiKey.FETCH, self.fetch, 4, 18, now=self.fetch_now)
        r(ApiKey.LIST_OFFSETS, self.list_offsets, 1, 10)
        r(ApiKey.CREATE_TOPICS, self.create_topics, 2, 7)
        r(ApiKey.DELETE_TOPICS, self.delete_topics, 1, 6)
        r(ApiKey.DESCRIBE_CONFIGS, self.describe_configs, 1, 4)
        r(ApiKey.ALTER_CONFIGS, self.alter_configs, 0, 2)
        r(ApiKey.INCREMENTAL_ALTER_CONFIGS, self.incremental_alter_configs, 0, 1)
        r(ApiKey.DELETE_RECORDS, self.delete_records, 0, 2)
        r(ApiKey.INIT_PRODUCER_ID, self.init_producer_id, 0, 5)


def register(apis, *, producer_ids: ProducerIdAllocator, transactions: Any = None) -> CoreHandlers:
    core = CoreHandlers(apis, producer_ids=producer_ids, transactions=transactions)
    core.register_all()
    return core


__all__ = ["CoreHandlers", "register"]
