"""Client quotas as both protocols charge them (the quotas themselves:
broker/core/quotas.py).

The charge rule, once for both protocols: a produce or fetch request is charged
once, after its handler ran, with its record bytes and its handler's time
(`throttle` kind produce or fetch): a produce (Kafka Produce, native PRODUCE and
MULTIPRODUCE) its record batches' bytes, a fetch (Kafka Fetch, native FETCH and
MULTIFETCH) the record bytes it answers. Kafka's KafkaApis counts the whole
request of a Produce and the whole response of a Fetch; the framing around the
records, a few dozen bytes a partition, is not counted here. Any other request
is charged its handler's time (kind request) while a request_percentage quota
is set.
A throttled fetch is answered empty (KIP-219) and its bytes are taken back
(Kafka's unrecordQuotaSensor). Mutations (CreateTopics, CreatePartitions,
DeleteTopics; native CREATE_TOPIC, DELETE_TOPIC) count partitions against
controller_mutation_rate (`mutation_quota`, `mutation_throttle`). A throttled
request's connection mutes itself that long once its reply is out (KIP-219).
"""

from __future__ import annotations

from broker.core.quotas import MUTATION, ClientQuotas, MutationQuota
from broker.net.listeners import ConnectionContext


def throttle(quotas: ClientQuotas, connection: ConnectionContext, kind: str, client_id: str | None,
             amount: float, handler_seconds: float = 0.0) -> int:
    """Charge one request (`kind` produce or fetch, `amount` its record bytes, with
    the time its handler ran; or `kind` request, `amount` its handler's seconds)
    against the client's quotas; the throttle time in ms (0: none), the larger of
    the byte-rate and the request-time throttle, as Kafka's KafkaApis."""
    principal = connection.principal
    ms = quotas.throttle_ms(kind, principal, client_id, amount)
    if kind != "request" and quotas.request_quotas:
        ms = max(ms, quotas.throttle_ms("request", principal, client_id, handler_seconds))
    if ms and kind == "fetch":
        quotas.unrecord(kind, principal, client_id, amount)
    if ms:
        connection.throttle_ms = max(connection.throttle_ms, ms)
    return ms


def mutation_throttle(quotas: ClientQuotas | None, connection: ConnectionContext, quota: MutationQuota) -> int:
    """The throttle time (ms) to answer a request whose mutations `quota` counted,
    whatever the request's version (Kafka's sendResponseMaybeThrottleWithControllerQuota)."""
    ms = quota.throttle_ms()
    if ms and quotas is not None:
        quotas.count_throttle(MUTATION, ms)
        connection.throttle_ms = max(connection.throttle_ms, ms)
    return ms


def fetch_budget(quotas: ClientQuotas, connection: ConnectionContext, client_id: str | None, budget: int) -> int:
    """A fetch's byte budget under the client's consumer quota: at most what the
    quota window allows (Kafka's getMaxValueInQuotaWindow)."""
    limit = quotas.max_fetch_bytes(connection.principal, client_id)
    return budget if limit is None else min(budget, limit)
