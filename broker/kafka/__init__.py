"""Apache Kafka's own wire protocol, served on a second listener over the same logs.

`strata serve --kafka-port P` (key `kafka.port`, default 9092; 0 = any free port;
-1 = no Kafka listener) listens next to the native port. It shares the one
LogManager, TopicRegistry, GroupOffsets and PartitionService with the native
server, so whatever one protocol writes the other reads at the same offsets.
Requests are decoded and responses encoded with kio (generated from Kafka's JSON
message schemas); record bytes are appended as they arrive (restamped) and
fetched bytes go to the socket with sendfile. KAFKA.md in this directory lists
the supported APIs and versions and the decisions.

INTERFACE FOR API MODULES (e.g. consumer groups: broker/kafka/groups/)
---------------------------------------------------------------------

Modules:
    broker/kafka/request_types.py  ApiKey, RequestContext, DECLINE: what every API module uses
    broker/kafka/allowed.py   allowed(ctx, ...): the ACL check of a request's connection
    broker/kafka/apis.py      KafkaApis (dispatch table + shared state)
    broker/kafka/codec.py     request-header parsing, kio decode/encode, fetch splicing
    broker/kafka/handlers.py  CoreHandlers: registers the core APIs (ApiVersions, Metadata, Produce,
                              Fetch, ...), one module each (its docstring lists them)
    broker/kafka/core_api.py  CoreApiBase: what those core API modules share
    broker/compose.py         builds KafkaApis and calls every module's `register`, in order

API modules import the small modules above, never apis.py (no import cycles:
tests/test_import_cycles.py).

1. Registration. `KafkaApis` starts with an empty table; the composition
   (broker/compose.py `build_kafka`) makes what the modules share (the group and
   transaction coordinators, the producer-id allocator) and calls each module's

        def register(apis: KafkaApis, ...) -> None

   once per broker, in order, passing what the module needs beside `apis` (the
   groups module its coordinators). It registers its handlers:

        apis.register(api_key, handler, min_version, max_version)

   e.g. `apis.register(ApiKey.JOIN_GROUP, coordinator.join_group, 0, 9)` (ApiKey:
   broker/kafka/request_types.py), and whole-request checks with
   `apis.guard(api_key, guard)`. Optional `now=handler_now`: a synchronous
   `handler_now(request, ctx)` that answers on the loop when nothing needs waiting
   (the connection's fast path: Produce appended inline, Fetch with data) or
   returns `DECLINE` having done nothing; the async handler answers then. Every version in the range
   must have kio schemas (ValueError otherwise). ApiVersions advertises exactly
   what is registered (plus ApiVersions itself); a request for an unregistered
   key or version is answered as Kafka does (see KAFKA.md). `apis.on_shutdown(cb)`
   registers a no-argument callback (sync or async) run when the broker begins
   its graceful shutdown (answer pending JoinGroups, ...), before connections drain.

2. Handlers. Signature:

        async def handler(request, ctx: RequestContext) -> response | None

   `request` is the kio request dataclass of the request's version (e.g.
   kio.schema.join_group.v9.request.JoinGroupRequest). Return an instance of the
   response class of the SAME version: `ctx.response_class` is that class
   (kio.index.load_response_schema(api_key, api_version)). The framework encodes
   the response header (correlation id; flexible header v1 or v0 per kio's
   `__header_schema__`, ApiVersions always v0), frames it, and writes it in
   request order. Returning None sends nothing (Produce with acks=0 only).
   `RequestContext` fields: header (kio RequestHeader), api_key, api_version,
   correlation_id, client_id, peer (the socket peer address), apis (the KafkaApis).
   A handler may await as long as it likes (JoinGroup waits for the rebalance);
   only its own connection waits (one request in flight per connection, as Kafka
   mutes a channel) -- other connections go on.

3. Errors. Handlers put per-topic/per-partition error codes into their response
   themselves (`int(e.code)` of a kafka_format.errors.StrataError is Kafka's code;
   `kio.schema.errors.ErrorCode(code)` makes the kio value). A StrataError that
   escapes the handler is answered with a response whose top-level `error_code`
   field(s) carry the code and whose arrays are empty, built generically by
   `codec.error_response` (so catch per-partition errors yourself when the
   response has no top-level error field); anything else escaping is logged and
   answered the same with UNKNOWN_SERVER_ERROR (-1). Raise
   broker.net.request_handlers.CloseConnection to close the connection without an answer.

4. Shared state, all on the KafkaApis passed to `register` (and `ctx.apis`), each
   given to KafkaApis when it is made:
        apis.config     broker.config.broker_config.BrokerConfig (group.* settings: keys in broker.config.keys)
        apis.manager    storage.manager.LogManager
        apis.registry   broker.state.topic_registry.TopicRegistry (topic ids: registry.topic_id(name))
        apis.offsets    broker.state.group_offsets.GroupOffsets: commit(group, topic, partition,
                        offset, metadata) [blocking: run through apis.blocking],
                        fetch(group, topic, partition) -> Committed | None [memory]
        apis.partitions broker.core.PartitionService (logs, appends, reads, long polls,
                        error codes; shared with the native listener)
        apis.waiters    broker.core.PartitionWaiters (long polls)
        apis.loop, apis.executor
        apis.node_id    this broker's node id (0), also the coordinator for every group
        apis.advertised (host, port) a connection without a listener is answered (a
                        listener's connections get its advertised address: ctx.advertised)
        apis.state      broker.kafka.state.KafkaState (cluster id, producer id blocks)
        apis.group_configs, apis.broker_configs   per-group and dynamic broker configs
        apis.authenticator                        the SASL authenticator (SCRAM credentials)
        apis.groups, apis.consumer_groups         the classic and KIP-848 group coordinators
        await apis.blocking(fn, *args)           run blocking storage work in the executor
        await apis.log_for(topic, partition)     the live Log or raises StrataError
        apis.shutting_down                       True once shutdown began
"""

from .apis import KafkaApis
from .request_types import RequestContext

__all__ = ["KafkaApis", "RequestContext"]
