"""Apache Kafka's own wire protocol, served on a second listener over the same logs.

The Kafka listener shares the one LogManager, TopicRegistry, GroupOffsets and
PartitionService with the native server, so whatever one protocol writes the other
reads at the same offsets. Requests are decoded and responses encoded with kio;
record bytes are appended as they arrive and fetched bytes go to the socket with
sendfile. KAFKA.md in this directory lists the supported APIs, versions and
decisions, and ("Writing an API module") how an API module registers its handlers,
answers errors and reaches the shared state.
"""


from .apis import KafkaApis
from .request_types import RequestContext

__all__ = ["KafkaApis", "RequestContext"]
